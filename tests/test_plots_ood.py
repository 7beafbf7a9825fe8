"""A sweep scored by a metric that exists only beyond the training range (ood_acc_3x: 2x-4x) still plots."""

from __future__ import annotations

import matplotlib.axes

from sweeper import plots
from sweeper.records import TrialRecord


def test_top_lengths_draws_a_beyond_range_metric_from_2x_on(tmp_path, monkeypatch):
    drawn = []
    real = matplotlib.axes.Axes.plot
    monkeypatch.setattr(matplotlib.axes.Axes, "plot", lambda ax, *a, **k: drawn.append(a) or real(ax, *a, **k))
    metrics = {"ood_acc_2x": 0.9, "ood_acc_3x": 0.8, "ood_acc_4x": 0.7, "acc_1x": 1.0}
    records = [TrialRecord("t1", {}, "completed", 100, metrics)]
    path = plots.top_lengths(records, "ood_acc_3x", "max", 25, tmp_path / "top.png")
    assert path is not None and path.exists()
    assert [tuple(a) for a in drawn] == [((50, 75, 100), (0.9, 0.8, 0.7))]  # no 1x point: nothing is beyond the range there
