"""Complete random Othello games per second from the vectorised generator, on one thread.

    python bench/othello_speed.py [--threads 1] [--games 2048] [--repeats 10]

Each repeat generates `--games` complete games (60 moves or an earlier end, with every legal
set, flip and pass) in one call of trainables.othello_game.generate_games. Prints the median
games/s over the repeats, in CPU time of this process (on a shared machine wall time also counts
other processes; it is printed beside) and its ratio to the target of 20,000 games/s; then the
cost of one training batch of the `othello` preset (64 games, 20 moves, soft targets).
"""

from __future__ import annotations

import statistics
import time

import torch

from trainables.othello import games_to_batch
from trainables.othello_game import generate_games
from core.tool_cli import Parser, run_tool
from sweeper.cli_types import cpus, positive_int

TARGET = 20_000  # complete games per second on one core


def timed(fn) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - cpu, time.perf_counter() - wall


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=cpus, default=1)
    parser.add_argument("--games", type=positive_int, default=2048, help="games per generator call (default 2048)")
    parser.add_argument("--repeats", type=positive_int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    generate_games(args.games, gen)  # warm-up
    times = [timed(lambda: generate_games(args.games, gen)) for _ in range(args.repeats)]
    cpu = statistics.median(args.games / c for c, _ in times)
    wall = statistics.median(args.games / w for _, w in times)
    print(f"generator: {args.games} games per call, {args.threads} thread(s), median of {args.repeats}: "
          f"{cpu:,.0f} games/s in CPU time ({wall:,.0f} in wall time); target {TARGET:,}: ratio {cpu / TARGET:.2f}")
    batch = [timed(lambda: games_to_batch(generate_games(64, gen, 20), 20))[0] for _ in range(50)]
    print(f"one training batch of the othello preset (64 games x 20 moves, with targets): {statistics.median(batch) * 1e3:.1f} ms")


if __name__ == "__main__":
    run_tool(main)
