"""The switch grid's record: finished runs of its sweeps are copied into the data file once, and
what the file holds is never trained again."""

import json

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
