"""A replay's nearest recorded point: one search over every point at once (numpy) against the
plain `min` it replaces, side by side on one grid, with the same answers checked.

    python bench/replay_nearest.py [--points 5000] [--draws 300]

A grid of `--points` recorded points on three axes (a switch step, a log learning rate, a mixer)
and `--draws` points drawn off it; prints the time of each search per draw and their ratio.
"""

from __future__ import annotations

import random
import time

from core.tool_cli import Parser, run_tool
from sweeper.cli_types import positive_int
from sweeper.nearest import Nearest, distance

SCALES = (("num", 0, 6000, False), ("num", 1e-4, 1e-2, True), ("cat",))


def point(rng: random.Random) -> tuple:
    return rng.randrange(0, 6001), 10 ** rng.uniform(-4, -2), rng.choice(["lstm", "ssm"])


def main() -> int:
    parser = Parser(prog="bench/replay_nearest.py", description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=positive_int, default=5000, help="recorded points")
    parser.add_argument("--draws", type=positive_int, default=300, help="points drawn off the grid")
    args = parser.parse_args()
    rng = random.Random(0)
    keys = list(dict.fromkeys(point(rng) for _ in range(args.points)))
    draws = [point(rng) for _ in range(args.draws)]
    start = time.perf_counter()
    plain = [min(keys, key=lambda k, d=d: (distance(d, k, SCALES), repr(k))) for d in draws]
    plain_s = time.perf_counter() - start
    start = time.perf_counter()
    nearest = Nearest(keys, SCALES)
    found = [nearest.point(d) for d in draws]
    fast_s = time.perf_counter() - start
    if found != plain:
        raise RuntimeError("the two searches disagree")
    print(f"{len(keys):,} recorded points, {len(draws)} draws, the same answers")
    print(f"plain min  {plain_s / len(draws) * 1e3:8.3f} ms per draw")
    print(f"Nearest    {fast_s / len(draws) * 1e3:8.3f} ms per draw (its index built once included)")
    print(f"ratio      {plain_s / fast_s:8.1f}x")
    return 0


if __name__ == "__main__":
    run_tool(main)
