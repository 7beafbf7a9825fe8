"""The paired Othello comparison (experiments/othello_report.py): hand-made per-seed values with a known
answer, and the stored runs in docs/results/othello.json."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from experiments import othello_report as rep

STORED = Path(__file__).resolve().parent.parent / "docs/results/othello.json"


def runs(values: dict[int, float]) -> dict[int, dict]:
    return {s: {"acc_3x": v} for s, v in values.items()}


def test_known_answer():
    """Differences 1, 2, 3: mean 2, sd 1, t = 2 sqrt(3) on 2 df, interval 2 ± 4.303 / sqrt(3)."""
    p = rep.paired(runs({1: 11.0, 2: 12.0, 3: 13.0}), runs({1: 10.0, 2: 10.0, 3: 10.0}), "acc_3x")
    assert p["seeds"] == [1, 2, 3] and p["diffs"] == [1.0, 2.0, 3.0]
    assert p["mean"] == 2.0 and p["sd"] == 1.0 and p["df"] == 2 and p["ahead"] == 3
    assert p["t"] == pytest.approx(2 * math.sqrt(3))
    half = 4.302653 / math.sqrt(3)  # t(0.975, 2 df) = 4.303: the interval is [-0.484, 4.484]
    assert p["ci"] == pytest.approx((2 - half, 2 + half))
    assert rep.verdict(p) == "no effect detected: rules out a gain larger than 4.484 and a loss larger than 0.484"


def test_verdicts():
    """An effect either way once the interval excludes 0."""
    up = rep.paired(runs({1: 1.0, 2: 1.1, 3: 0.9}), runs({1: 0.0, 2: 0.0, 3: 0.0}), "acc_3x")
    down = rep.paired(runs({1: 0.0, 2: 0.0, 3: 0.0}), runs({1: 1.0, 2: 1.1, 3: 0.9}), "acc_3x")
    assert rep.verdict(up) == "effect: a better" and rep.verdict(down) == "effect: b better"


def test_only_shared_seeds_are_paired():
    a = runs({1: 0.5, 2: 0.7, 3: 0.4, 9: 100.0})
    b = runs({1: 0.6, 2: 0.6, 3: 0.6, 4: -100.0})
    p = rep.paired(a, b, "acc_3x")
    assert p["seeds"] == [1, 2, 3] and p["df"] == 2 and p["ahead"] == 1
    assert p["diffs"] == pytest.approx([-0.1, 0.1, -0.2])
    assert rep.verdict(p).startswith("no effect detected: rules out a gain larger than")


def test_stored_5000_step_ema():
    rec = json.loads(STORED.read_text())
    p = rep.paired(*(rep.groups(rec)[g] for g in ("long_gpt_ema0.999_drop0.0", "long_gpt_ema0.0_drop0.0")), "acc_3x")
    direct = [rec[f"long_gpt_ema0.999_drop0.0_s{s}"]["final"]["acc_3x"] - rec[f"long_gpt_ema0.0_drop0.0_s{s}"]["final"]["acc_3x"]
              for s in range(7101, 7106)]
    assert len(p["seeds"]) == 5 and p["df"] == 4
    assert p["mean"] == pytest.approx(sum(direct) / 5)
    assert rep.read([STORED]) == rec
