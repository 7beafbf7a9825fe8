"""Othello games: a vectorised random-game generator on bitboards, and a plain reference.

How the pieces nest::

    square i = 8 * row + col        a1 = 0, b1 = 1, ..., h1 = 7, a2 = 8, ..., h8 = 63
                                    (columns a-h, rows 1-8; `square_name`, `square_index`)
    a board = two bitboards         black, white: int64, bit i set = a disc on square i
    a batch = (G,) int64 tensors    every game of the batch advances one move per loop step
    generate_games(G, gen)          -> Games: moves, the legal set before each move, flips, passes

Start position: d5 and e4 black, d4 and e5 white; black moves first. At every move the player
to move picks a uniformly random legal move. A player with no legal move passes (the other
player moves again); when neither can move, or the board is full, the game is over.

Legal moves and flips are found for every game at once by ray casting along the 8 directions
on bitboards (`shift` moves every disc one step in one direction; a run of up to 6 opponent
discs is followed step by step), the 8 directions side by side as the columns of a (G, 8)
tensor. Randomness comes only from the torch.Generator passed in: one uniform number per game
and move.

`ReferenceGame` is the oracle of the tests: one board as a list of 64 cells, one move at a
time, every direction walked square by square. Nothing in it is shared with the fast path.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

N_SQUARES = 64
MAX_MOVES = 60  # 64 squares minus the 4 occupied at the start
COLUMNS = "abcdefgh"
BLACK, WHITE, EMPTY = 1, -1, 0
START_BLACK = (35, 28)  # d5, e4
START_WHITE = (27, 36)  # d4, e5
DIRECTIONS = ((0, 1), (0, -1), (1, 0), (-1, 0), (1, 1), (1, -1), (-1, 1), (-1, -1))  # (drow, dcol)


def square_name(i: int) -> str:
    return f"{COLUMNS[i % 8]}{i // 8 + 1}"


def square_index(name: str) -> int:
    """`d5` -> 35; a ValueError for anything that is not a square."""
    if len(name) != 2 or name[0] not in COLUMNS or name[1] not in "12345678":
        raise ValueError(f"not a square (columns a-h, rows 1-8): {name!r}")
    return 8 * (int(name[1]) - 1) + COLUMNS.index(name[0])


def _signed(u: int) -> int:
    """A 64-bit pattern as the int64 value with the same bits."""
    return u - (1 << 64) if u >= 1 << 63 else u


def _bits(squares) -> int:
    return _signed(sum(1 << i for i in squares))


def _direction_tables() -> tuple[Tensor, Tensor, Tensor]:
    """Per direction: left shift, right shift (one of them 0) and the mask of squares whose source
    square (one step back) is on the board: it clears discs that wrapped around a row end and the
    sign bits an arithmetic right shift fills in."""
    left, right, mask = [], [], []
    for dr, dc in DIRECTIONS:
        delta = 8 * dr + dc
        left.append(max(delta, 0))
        right.append(max(-delta, 0))
        mask.append(_bits(8 * r + c for r in range(8) for c in range(8) if 0 <= r - dr < 8 and 0 <= c - dc < 8))
    return torch.tensor(left), torch.tensor(right), torch.tensor(mask)


_LEFT, _RIGHT, _MASK = _direction_tables()  # (8,) each
_BIT = torch.arange(N_SQUARES)  # (64,) bit positions


def shift(x: Tensor) -> Tensor:
    """Every disc one step along each direction: (G, 1) or (G, 8) -> (G, 8), column d = direction d."""
    return ((x << _LEFT) >> _RIGHT) & _MASK


def _or_columns(x: Tensor) -> Tensor:
    """Bitwise OR over the 8 direction columns: (G, 8) -> (G,)."""
    x = x[:, :4] | x[:, 4:]
    x = x[:, :2] | x[:, 2:]
    return x[:, 0] | x[:, 1]


def legal_moves(own: Tensor, opp: Tensor) -> Tensor:
    """(G,) bitboards of the player to move and the opponent -> (G,) bitboard of legal squares:
    empty squares from which a line of >= 1 opponent discs ends at one of the mover's discs."""
    own8, opp8 = own[:, None], opp[:, None]
    empty = ~(own | opp)
    run = shift(own8) & opp8  # (G, 8): opponent discs next to one of ours, per direction
    for _ in range(5):  # a run is at most 6 discs long
        run = run | (shift(run) & opp8)
    return _or_columns(shift(run) & empty[:, None])


def flips(own: Tensor, opp: Tensor, move: Tensor) -> Tensor:
    """(G,) bitboards and the (G,) one-bit move (0: no move) -> (G,) bitboard of the discs it turns:
    in each direction, the run of opponent discs from the move that a disc of the mover closes."""
    opp8 = opp[:, None]
    run = shift(move[:, None]) & opp8  # (G, 8)
    for _ in range(5):
        run = run | (shift(run) & opp8)
    closed = (shift(run) & own[:, None]) != 0  # (G, 8): the square after the run is ours
    return _or_columns(torch.where(closed, run, 0))


def unpack(bitboards: Tensor) -> Tensor:
    """(...) int64 bitboards -> (..., 64) bool, square i at index i."""
    return ((bitboards[..., None] >> _BIT) & 1).bool()


def _pick(legal: Tensor, gen: torch.Generator) -> Tensor:
    """A uniformly random set bit of each (G,) bitboard -> (G,) square index, -1 where none is set."""
    u = torch.rand(legal.shape[0], generator=gen, dtype=torch.float64)  # drawn for every game: a fixed stream
    counts = unpack(legal).cumsum(1)  # (G, 64): set bits up to and including square i
    r = (u * counts[:, -1]).long()  # rank of the chosen bit, in [0, count)
    square = (counts <= r[:, None]).sum(1)  # first square whose running count exceeds r
    return torch.where(counts[:, -1] > 0, square, -1)


@dataclass(frozen=True)
class Games:
    """G random games; move t is the (t+1)-th disc placed (passes are not moves).

    moves[g, t] is the square of move t, -1 once game g is over. legal[g, t] is the legal set of
    the player making move t, after any pass (so it is never empty while the game goes on, and
    0 once it is over); legal[g, n_moves] is the set after the last generated move (0 at the end of
    the game). passed[g, t]: the player due to make move t had no legal move and passed, so the
    player of move t - 1 moves again. colour[g, t] is the mover's colour (1 black, -1 white, 0 after
    the end). length[g]: the number of moves of game g (60 unless both players got stuck first).
    """

    moves: Tensor  # (G, T) int64
    legal: Tensor  # (G, T + 1) int64 bitboards
    flips: Tensor  # (G, T) int64 bitboards: the discs move t turned
    passed: Tensor  # (G, T) bool
    colour: Tensor  # (G, T) int8
    length: Tensor  # (G,) int64: moves played (counts only the first T moves when truncated)
    over: Tensor  # (G,) bool: the game ended within the T generated moves


def generate_games(n_games: int, gen: torch.Generator, max_moves: int = MAX_MOVES) -> Games:
    """`n_games` random games from the start position, each cut after `max_moves` moves."""
    if not 0 <= max_moves <= MAX_MOVES:
        raise ValueError(f"max_moves: `0 <= max_moves <= {MAX_MOVES}` must hold, got {max_moves}")
    G = n_games
    black = torch.full((G,), _bits(START_BLACK))
    white = torch.full((G,), _bits(START_WHITE))
    black_to_move = torch.ones(G, dtype=torch.bool)
    legal = legal_moves(black, white)  # black's first move: d3, c4, f5, e6
    passed = torch.zeros(G, dtype=torch.bool)
    out_moves, out_legal, out_flips, out_passed, out_colour = [], [legal], [], [], []
    for _ in range(max_moves):
        square = _pick(legal, gen)  # (G,), -1 where the game is over
        playing = square >= 0
        move = torch.where(playing, torch.ones_like(square) << square.clamp(min=0), 0)  # one bit, or 0
        own = torch.where(black_to_move, black, white)
        opp = torch.where(black_to_move, white, black)
        turned = flips(own, opp, move)
        own, opp = own | move | turned, opp & ~turned
        out_moves.append(square)
        out_flips.append(turned)
        out_passed.append(passed)
        out_colour.append(torch.where(playing, torch.where(black_to_move, BLACK, WHITE), EMPTY).to(torch.int8))
        # the opponent moves next, unless it has no legal move: then a pass, and the mover again
        legal = legal_moves(opp, own)
        stuck = playing & (legal == 0)
        passed = torch.zeros(G, dtype=torch.bool)
        if stuck.any():
            again = legal_moves(own, opp)
            passed = stuck & (again != 0)  # both stuck: the game is over (legal stays 0)
            legal = torch.where(stuck, again, legal)
        black, white = torch.where(black_to_move, own, opp), torch.where(black_to_move, opp, own)
        black_to_move = black_to_move ^ (playing & ~passed)
        out_legal.append(legal)
    moves = torch.stack(out_moves, 1) if out_moves else torch.zeros(G, 0, dtype=torch.long)
    empty = lambda dtype: torch.zeros(G, 0, dtype=dtype)  # noqa: E731
    return Games(
        moves=moves,
        legal=torch.stack(out_legal, 1),
        flips=torch.stack(out_flips, 1) if out_flips else empty(torch.long),
        passed=torch.stack(out_passed, 1) if out_passed else empty(torch.bool),
        colour=torch.stack(out_colour, 1) if out_colour else empty(torch.int8),
        length=(moves >= 0).sum(1),
        over=legal == 0,
    )


def game_notation(moves: list[int], passed: list[bool]) -> str:
    """One game as text: squares in standard notation, `pass` before a move whose player's
    opponent had to pass. `moves` stops at the game's end (no -1)."""
    words = []
    for square, p in zip(moves, passed):
        if p:
            words.append("pass")
        words.append(square_name(square))
    return " ".join(words)


# --------------------------------------------------------------------------- the reference


class ReferenceGame:
    """One Othello board, one move at a time, in plain Python: the oracle of the tests."""

    def __init__(self) -> None:
        self.cells = [EMPTY] * N_SQUARES  # cells[8 * row + col]
        for i in START_BLACK:
            self.cells[i] = BLACK
        for i in START_WHITE:
            self.cells[i] = WHITE
        self.to_move = BLACK

    def _line(self, square: int, dr: int, dc: int, player: int) -> list[int]:
        """The opponent discs that `player` would turn in direction (dr, dc) by playing `square`."""
        row, col = divmod(square, 8)
        run = []
        row, col = row + dr, col + dc
        while 0 <= row < 8 and 0 <= col < 8 and self.cells[8 * row + col] == -player:
            run.append(8 * row + col)
            row, col = row + dr, col + dc
        closed = 0 <= row < 8 and 0 <= col < 8 and self.cells[8 * row + col] == player
        return run if closed else []

    def flips_of(self, square: int, player: int | None = None) -> list[int]:
        player = self.to_move if player is None else player
        if self.cells[square] != EMPTY:
            return []
        return sorted(i for dr, dc in DIRECTIONS for i in self._line(square, dr, dc, player))

    def legal(self, player: int | None = None) -> list[int]:
        player = self.to_move if player is None else player
        return [s for s in range(N_SQUARES) if self.flips_of(s, player)]

    def must_pass(self) -> bool:
        """The player to move has no legal move but the opponent has one."""
        return not self.legal() and bool(self.legal(-self.to_move))

    def over(self) -> bool:
        return not self.legal(BLACK) and not self.legal(WHITE)

    def pass_turn(self) -> None:
        if not self.must_pass():
            raise ValueError("pass: only a player with no legal move (whose opponent has one) passes")
        self.to_move = -self.to_move

    def play(self, square: int) -> list[int]:
        """Play `square` for the player to move; returns the turned discs. Illegal: ValueError."""
        turned = self.flips_of(square)
        if not turned:
            raise ValueError(f"{square_name(square)} is not legal for {'black' if self.to_move == BLACK else 'white'}")
        for i in [square, *turned]:
            self.cells[i] = self.to_move
        self.to_move = -self.to_move
        return turned

    def board(self) -> list[int]:
        return list(self.cells)
