"""The held-out set of the search benchmark (experiments/adaptive_grid.py) replayed as a search space:
every point its space draws is a recorded one, and the summary line reads as the benchmark promises.
Synthetic curves on the real grid's cells; the benchmark's own functions."""

from __future__ import annotations

import gzip
import importlib.util
import json
import re

from experiments import adaptive_grid
from tests.conftest import ROOT


def bench():
    spec = importlib.util.spec_from_file_location("search_replay", ROOT / "bench" / "search_replay.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def curve(cell: dict, index: int) -> list[dict]:
    """Flat until the cell's switch, then rising to a value set by the cell; the seed shifts it."""
    switch = {"none": 0, "fixed": 1500}.get(cell["dat.mode"], 250 * (index % 12 + 2))
    final = 0.3 + 0.04 * (index % 13) + (0.05 if cell["optim.lr"] == 3e-3 else 0) + 0.001 * (cell["seed"] % 2)
    return [{"step": step, "acc_3x": 0.2 if step <= switch else 0.2 + (final - 0.2) * (step - switch) / (6000 - switch),
             "switch_step": float(switch if step > switch else -1), "state_acc_1x": 0.5}
            for step in range(250, 6001, 250)]


def test_every_point_the_held_out_space_draws_was_recorded_and_the_summary_line_reads(tmp_path):
    b = bench()
    cells = adaptive_grid.cells()
    path = tmp_path / "adaptive.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"runs": [{"params": c, "reports": curve(c, i % 52)} for i, c in enumerate(cells)]}, f)
    grid, recorded = b.load_held_out(path)
    assert recorded == len(cells) == 104 and len(grid.runs) == 52 and all(len(r) == 2 for r in grid.runs.values())
    results = b.compare(grid, 3, 52, [], 1, held_out=True, names=(b.REFERENCE, b.SHIPPED_BEFORE, b.SHIPPED))
    for r in results.values():  # 52 draws of 52 points by every method: none fell outside the record
        assert r["not_reached"] <= 3 and len(r["to_best"]) == 3
    line = b.summary_line(results, b.SHIPPED)
    assert re.fullmatch(r"held-out: TPE \+ phase-aware \(grace 500\) speed-up \d+\.\d\dx \[\d+\.\d\d, (\d+\.\d\d|inf)\] "
                        r"vs random \+ FIFO, top-3 stopped \d+\.\d%", line), line
    random_draws = b.replays(b.REFERENCE, range(2), grid, 52, [], held_out=True)
    assert all(row["top_stopped"] == 0 and row["top_trials"] <= 52 for row in random_draws)  # FIFO stops nothing
