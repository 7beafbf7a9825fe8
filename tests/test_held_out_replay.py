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
    results = b.compare(grid, 3, 52, [], b.Chunks(None, ""), 1, held_out=True, names=(b.REFERENCE, b.SHIPPED_BEFORE, b.shipped_method()))
    for r in results.values():  # 52 draws of 52 points by every method: none fell outside the record
        assert r["not_reached"] <= 3 and len(r["to_best"]) == 3
    line = b.summary_line(results, b.shipped_method())
    assert re.fullmatch(re.escape(f"held-out: {b.shipped_method()}") + r" speed-up \d+\.\d\dx \[\d+\.\d\d, (\d+\.\d\d|inf)\] "
                        r"vs random \+ FIFO, top-3 stopped \d+\.\d%", line), line
    random_draws = b.replays(b.REFERENCE, range(2), grid, 52, [], held_out=True)
    assert all(row["top_stopped"] == 0 and row["top_trials"] <= 52 for row in random_draws)  # FIFO stops nothing
    held = {"grid": grid, "results": results, "selected_on_switch_grid": b.SHIPPED_BEFORE, "shipped": b.shipped_method()}
    section = "\n".join(b.held_out_lines(held, 3, 52))
    confirmed = results[b.SHIPPED_BEFORE]["speedup"]["low"] > 1.0
    assert ("**confirmed**" in section) == confirmed and ("**not confirmed**" in section) != confirmed
    assert f"Targets, for the shipped default ({b.shipped_method()}" in section


def test_the_shipped_default_is_read_from_the_space_file_and_a_layout_the_bench_lacks_is_refused(tmp_path, monkeypatch):
    b = bench()
    text = (ROOT / "search_spaces" / "switch_time.yaml").read_text()
    assert b.shipped_method() == "TPE + phase-aware (grace 500)" or "phase_aware: false" in text
    plain = tmp_path / "plain.yaml"
    plain.write_text(text.replace("  type: asha\n", "  type: asha\n  phase_aware: false\n", 1)
                     .replace("grace_period: 500", "grace_period: 3000"))
    monkeypatch.setattr(b, "SHIPPED_SPACE", plain)
    assert b.shipped_method() == "TPE + ASHA (grace 3000)"
    plain.write_text(plain.read_text().replace("grace_period: 3000", "grace_period: 1000"))
    try:
        b.shipped_method()
    except SystemExit as err:
        assert "none of this benchmark's methods" in str(err)
    else:
        raise AssertionError("a layout no method replays was taken for one")
