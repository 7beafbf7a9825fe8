"""The nearest recorded point of a replay's grid, found among every recorded point at once.

A point a space draws that no curve holds trains on the nearest one that does (sweeper/replay.py):
each axis in the space's own scale, a numeric one as the share of its range (of its log for a
log range), a categorical one (or an absent value) 0 when equal, else 1.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

Scale = tuple  # of one axis: ("num", low, high, log) or ("cat",)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float))


def along(scale: Scale, value: float) -> float:
    """A number's place on a numeric axis: itself, or its log on a log range."""
    return math.log(max(value, 1e-300)) if scale[3] else float(value)


def span(scale: Scale) -> float:
    return max(along(scale, scale[2]) - along(scale, scale[1]), 1e-12)


def distance(a: tuple, b: tuple, scales: tuple[Scale, ...]) -> float:
    """Between two points, one axis after another (module docstring)."""
    total = 0.0
    for x, y, scale in zip(a, b, scales):
        if x == y:
            continue
        if scale[0] == "num" and is_number(x) and is_number(y):
            total += abs(along(scale, x) - along(scale, y)) / span(scale)
        else:
            total += 1.0
    return total


class Nearest:
    """The recorded point nearest a key: `min(keys, key=lambda k: (distance(key, k, scales), repr(k)))`,
    to the same bits, over every key at once (numpy): each axis's places are computed as `distance`
    computes them and added in its order; a tie goes to the smallest `repr`."""

    def __init__(self, keys: list[tuple], scales: tuple[Scale, ...]):
        self.keys, self.scales = keys, scales
        self.reprs = [repr(k) for k in keys]
        self.columns = []  # per axis: (value -> class of equal values, each key's class, numeric?, place)
        for i, scale in enumerate(scales):
            classes: dict = {}
            codes = np.array([classes.setdefault(k[i], len(classes)) for k in keys])
            numeric = np.array([scale[0] == "num" and is_number(k[i]) for k in keys], dtype=bool)
            places = np.array([along(scale, k[i]) if n else np.nan for k, n in zip(keys, numeric)], dtype=float)
            self.columns.append((classes, codes, numeric, places))

    def point(self, key: tuple) -> tuple:
        total = np.zeros(len(self.keys))
        for x, scale, (classes, codes, numeric, places) in zip(key, self.scales, self.columns):
            equal = codes == classes.get(x, -1)
            if scale[0] == "num" and is_number(x):
                part = np.where(numeric, np.abs(along(scale, x) - places) / span(scale), 1.0)
            else:
                part = np.ones(len(self.keys))
            total = total + np.where(equal, 0.0, part)
        ties = np.flatnonzero(total == total.min())
        return self.keys[min(ties, key=lambda i: self.reprs[i])]
