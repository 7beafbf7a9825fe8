"""The switch grid's record: finished runs of its sweeps are copied into the data file once, and
what the file holds is never trained again."""

import json
import re

import pytest

import yaml

from experiments import switch_grid
from trainables.run_dir import RunDir


def fake_run(sweep, name, cell, last_step, steps=switch_grid.MAX_STEPS):
    run = RunDir(sweep / "trials" / name)
    for step in range(250, last_step + 1, 250):
        run.append({"step": step, "acc_3x": 0.5})
    ckpt = sweep / "ckpt-src"
    ckpt.mkdir(parents=True, exist_ok=True)
    (ckpt / "config.yaml").write_text(yaml.safe_dump({
        "steps": steps, "seed": cell["seed"], "dat": {"switch_step": cell["dat.switch_step"]},
        "curriculum": {"state_only_steps": cell["curriculum.state_only_steps"]}, "optim": {"lr": cell["optim.lr"]}}))
    run.keep_checkpoint(ckpt, last_step)


def test_finished_runs_are_recorded_once_and_not_trained_again(tmp_path, monkeypatch):
    monkeypatch.setattr(switch_grid, "DATA", tmp_path / "grid.json.gz")
    cells = switch_grid.cells()
    sweep = tmp_path / "sweeps" / "switch_grid_x"
    fake_run(sweep, "t0000", cells[0], switch_grid.MAX_STEPS)
    fake_run(sweep, "t0001", cells[1], 3000)  # not finished: left out
    fake_run(sweep, "t0002", cells[2], 3000, steps=3000)  # all its steps, but not the grid's: left out
    assert switch_grid.export([sweep]) == 1
    assert switch_grid.export([sweep]) == 0  # already there
    data = switch_grid.load()
    assert [r["params"] for r in data["runs"]] == [cells[0]] and len(data["runs"][0]["reports"]) == 24
    todo = switch_grid.missing(data)
    assert len(todo) == len(cells) - 1 and cells[0] not in todo
    name, space = switch_grid.space_for(todo, 2)
    assert space["searcher"]["baseline"] == todo and space["budget"]["num_samples"] == len(todo)
    assert name == switch_grid.space_for(list(todo), 1)[0]  # the same cells: the same sweep, resumed
    assert json.loads(json.dumps(data["grid"]))["axes"]["seed"] == list(switch_grid.SEEDS)


def _run(cell, **report) -> dict:
    return {"params": dict(cell), "reports": [{"step": s, "acc_3x": 0.5, **report} for s in range(250, switch_grid.MAX_STEPS + 1, 250)]}


@pytest.mark.parametrize("damage, expect", [
    (lambda runs, cells: runs.append({}), "`params` must give exactly the grid's axes"),
    (lambda runs, cells: runs.append({**_run(cells[1]), "params": [1]}), "`params` must give exactly"),
    (lambda runs, cells: runs.append(_run({**cells[1], "seed": 99})), "is no cell of the grid"),
    (lambda runs, cells: runs.append(_run({**cells[1], "seed": [1]})), "is no cell of the grid"),
    (lambda runs, cells: runs.append(_run(cells[0])), "recorded twice"),
    (lambda runs, cells: runs.append({**_run(cells[1]), "reports": []}), "`reports` must be a list"),
    (lambda runs, cells: runs.append({**_run(cells[1]), "reports": _run(cells[1])["reports"][:3]}), "not the budget"),
    (lambda runs, cells: runs.append(_run(cells[1], acc_3x="high")), "acc_3x is 'high', not a number"),
    (lambda runs, cells: runs.append(_run(cells[1], acc_3x=7.0)), "acc_3x 7.0 at step"),
], ids=["empty", "params-a-list", "off-grid", "unhashable", "twice", "no-reports", "cut", "text", "not-an-accuracy"])
def test_a_damaged_grid_record_is_one_line_for_every_verb(tmp_path, monkeypatch, damage, expect):
    # each was a KeyError/TypeError traceback in `report`, or published as it stood (7.0 at 3x), `status` 105 of 104
    import gzip

    from core.errors import ConfigError

    monkeypatch.setattr(switch_grid, "DATA", tmp_path / "grid.json.gz")
    cells = switch_grid.cells()
    data = {"grid": {"max_steps": switch_grid.MAX_STEPS}, "runs": [_run(cells[0])]}
    damage(data["runs"], cells)
    switch_grid.DATA.write_bytes(gzip.compress(json.dumps(data).encode()))
    for verb in ("status", "report", "export"):
        with pytest.raises(ConfigError, match=re.escape(expect)) as err:
            switch_grid.main([verb])
        assert "\n" not in str(err.value) and "git checkout" in str(err.value), verb
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grid.json.gz"]
