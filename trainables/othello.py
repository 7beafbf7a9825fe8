"""OthelloGPT (seed 002's second benchmark): predict the legal moves of random Othello games.

Games are sequences of uniformly random legal moves from the standard start
(trainables/othello_game.py). The model reads the moves and, after each one, must spread its
prediction evenly over the legal moves of the player who moves next: the target is the uniform
distribution over that legal set (soft targets, as in set_complement), so a low loss means the
model knows the board well enough to tell legal moves from illegal ones.

Vocabulary, V = 61: tokens 0..59 are the 60 playable squares in board order a1, b1, ..., h1,
a2, ..., h8, skipping d4 e4 d5 e5 (occupied from the start): token = square for a1..c4, square - 2
for f4..c5, square - 4 for f5..h8. PAD = 60 fills a row after its game's end and never gets mass.

Passes are not in the sequence, as in OthelloGPT (Li et al. 2023): after a pass the same colour
simply moves again. Whose turn it is follows from the board, which the model has to track
anyway, and a pass token would be a rare target with no legal-move content. The target after a
move is therefore the legal set of the player who actually moves next, after any forced pass;
after the last move of a finished game there is none and the position is not asked.

Worked example, the opening f5 d6 c3 (a prefix of 3 moves, cut from a longer game)::

    position   0                   1                         2
    move       f5 (black)          d6 (white)                c3 (black)
    token      33                  39                        18
    target     1/3 on f4 d6 f6     1/5 on c3 c4 c5 c6 c7     1/4 on d3 f3 f4 g5
               (white to move)     (black to move)           (white to move)
    mask       1                   1                         1

With `task.othello_targets: played` training asks instead for the move the game actually played
next (one-hot; the games are uniformly random, so it is a sample of the legal-move distribution:
the same expectation, with sampling noise, as next-token prediction on real game records);
evaluation always scores against the legal set.

Training uses the first `task.max_len` = N moves of each game (`task.train_plies` overrides it,
e.g. 60 for the full-game reference); a causal model sees every shorter prefix inside that one,
so `task.min_len` is not used. Evaluation: one fixed set of `eval.n_sequences` games from
`eval.seed`; for each multiplier k the model reads the first k * N moves and is scored on the
positions after moves (k - 1) * N + 1 .. k * N (the ply range of kx). The metrics at kx are set
complement's, computed by the same code:

    acc_{k}x           legal top-1: share of positions whose most likely token is a legal move
    tv_{k}x            total-variation distance to the target, 0.5 * sum |p - target|
    illegal_mass_{k}x  probability on squares that are not legal moves (PAD's share, ~0, is in tv)
    loss_{k}x          soft cross-entropy minus the target's entropy: the KL to the target

Length and game phase go together: later plies have fewer empty squares and fewer legal moves,
so a drop from 1x to 3x is not all failure to generalise. docs/results/othello.md compares
with a model trained on full games, scored on the same ranges.

`python -m trainables.othello sample --n N --seed S` prints N games, one a line, the moves in
standard notation with `pass` where a player had to pass.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn

from trainables.config import MAX_SEED, TaskConfig
from core.errors import brief
from trainables.othello_game import MAX_MOVES, START_BLACK, START_WHITE, Games, game_notation, generate_games, unpack
from trainables.set_complement import SetBatch, evaluate_set_complement
from core.tool_cli import Parser, run_tool

CENTRE = sorted(START_BLACK + START_WHITE)  # d4 e4 d5 e5: never played
TOKEN_TO_SQUARE = torch.tensor([s for s in range(64) if s not in CENTRE])  # (60,)
SQUARE_TO_TOKEN = torch.full((64,), -1).index_put_((TOKEN_TO_SQUARE,), torch.arange(60))  # (64,), -1 at the centre
PAD = 60
VOCAB_SIZE = 61


def games_to_batch(games: Games, n_moves: int) -> SetBatch:
    """The first `n_moves` moves of each game as tokens, with the legal set after each move as target."""
    moves = games.moves[:, :n_moves]  # (B, T) squares, -1 after the end
    tokens = torch.where(moves >= 0, SQUARE_TO_TOKEN[moves.clamp(min=0)], PAD)
    legal_next = games.legal[:, 1 : n_moves + 1]  # (B, T): the next mover's legal squares, 0 when none
    legal = unpack(legal_next)[..., TOKEN_TO_SQUARE].float()  # (B, T, 60)
    target = F.pad(legal / legal.sum(-1, keepdim=True).clamp(min=1.0), (0, 1))  # (B, T, V): PAD gets nothing
    mask = (moves >= 0) & (legal_next != 0)
    return SetBatch(tokens, target, mask)


class OthelloTask:
    """Samples training batches of random game prefixes; builds the evaluation ranges."""

    vocab_size = VOCAB_SIZE

    def __init__(self, cfg: TaskConfig):
        self.cfg = cfg
        self.train_plies = cfg.train_plies or cfg.max_len

    def sample_train(self, batch_size: int, gen: torch.Generator) -> SetBatch:
        if self.cfg.othello_targets == "played":  # one move more: the one played after the last
            return played_next(generate_games(batch_size, gen, self.train_plies + 1), self.train_plies)
        return games_to_batch(generate_games(batch_size, gen, self.train_plies), self.train_plies)


def played_next(games: Games, n_moves: int) -> SetBatch:
    """The first `n_moves` moves as tokens, each asked for the move played after it (one-hot)."""
    legal = games_to_batch(games, n_moves)
    following = games.moves[:, 1 : n_moves + 1]  # (B, T): the next move played, -1 after the game's end
    if following.shape[1] < n_moves:  # the game generator stopped at its last move
        following = F.pad(following, (0, n_moves - following.shape[1]), value=-1)
    target = F.one_hot(torch.where(following >= 0, SQUARE_TO_TOKEN[following.clamp(min=0)], PAD), VOCAB_SIZE).float()
    return SetBatch(legal.tokens, target, legal.mask & (following >= 0))


def make_othello_eval_sets(cfg: TaskConfig, multipliers: tuple[int, ...], n_games: int, seed: int) -> dict[int, SetBatch]:
    """For each k: the same `n_games` games read up to move k * N, asked only at moves (k-1)N+1 .. kN."""
    N = cfg.max_len
    longest = N * max(multipliers)
    games = generate_games(n_games, torch.Generator().manual_seed(seed), longest)
    full = games_to_batch(games, longest)
    sets = {}
    for k in multipliers:
        in_range = (torch.arange(k * N) >= (k - 1) * N)[None, :]  # (1, kN)
        sets[k] = SetBatch(full.tokens[:, : k * N], full.target[:, : k * N], full.mask[:, : k * N] & in_range)
    return sets


@torch.no_grad()
def evaluate_othello(model: nn.Module, eval_sets: dict[int, SetBatch], batch_size: int) -> dict[str, float]:
    """acc/tv/illegal_mass/loss_{k}x (see the module docstring), each a mean over the asked positions."""
    metrics = evaluate_set_complement(model, eval_sets, batch_size)
    return {k.replace("seen_mass_", "illegal_mass_"): v for k, v in metrics.items()}


# --------------------------------------------------------------------------- the sample command


MAX_SAMPLE = 10_000  # games `sample` prints: ~10 s on one loaded core; more is a typo (or a job for a script)


def _bounded(low: int, high: int):
    """An argparse type: a whole number in [low, high]."""

    def parse(text: str) -> int:
        if not (text.isascii() and text.isdigit() and len(text) <= 100):  # int() would take ' 5', '5_0', '٣'
            raise argparse.ArgumentTypeError(f"must be a whole number, got {brief(text, 40)}")
        value = int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be in [{low}, {high:,}], got {brief(value, 40)}")
        return value

    return parse


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m trainables.othello", description="Print random Othello games.")
    sub = parser.add_subparsers(dest="command", required=True)
    sample = sub.add_parser("sample", help="print N random games, one a line")
    sample.add_argument("--n", type=_bounded(1, MAX_SAMPLE), default=10, help=f"games to print (default 10, at most {MAX_SAMPLE:,})")
    sample.add_argument("--seed", type=_bounded(0, MAX_SEED), default=0, help="seed of the torch.Generator (default 0)")
    args = parser.parse_args(argv)
    games = generate_games(args.n, torch.Generator().manual_seed(args.seed), MAX_MOVES)
    try:
        for moves, passed, n in zip(games.moves.tolist(), games.passed.tolist(), games.length.tolist()):
            print(game_notation(moves[:n], passed[:n]))
        sys.stdout.flush()
    except BrokenPipeError:  # `... | head -1`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
    return 0


if __name__ == "__main__":
    run_tool(main)
