"""Every shipped search-space file runs end to end through `sweeper launch`, shrunk to a tiny budget.

The shrink keeps each file's question (parameters, conditionals, baselines, scheduler) and
scales every step-valued number by the same factor, so ranges, grids and baselines stay valid.
"""

import json
import os
import subprocess

import pytest
import yaml

from conftest import ROOT, sweeper_cmd

pytestmark = pytest.mark.integration
SPACES = sorted(p for p in (ROOT / "search_spaces").glob("*.yaml") if p.stem != "smoke")
STEP_PATHS = {"steps", "dat.switch_step", "dat.min_step", "dat.max_step", "dat.ramp_steps", "dat.patience",
              "dat.rewarmup_steps", "optim.warmup_steps", "curriculum.state_only_steps"}
TINY_STEPS = 120
TINY_FIXED = {"model.d_model": 16, "model.n_layers": 1, "model.n_heads": 2, "eval.n_sequences": 16,
              "eval.batch_size": 16, "optim.batch_size": 16}


def _scale(x: int, f: float) -> int:
    return int(round(x * f))


def _shrink_params(space: dict, f: float) -> None:
    for path, p in space.items():
        if path in STEP_PATHS and p.get("type") == "int":
            for key in ("low", "high"):
                p[key] = _scale(p[key], f)
            if "step" in p:
                p["step"] = max(1, _scale(p["step"], f))
        if path in STEP_PATHS and p.get("type") == "categorical":
            p["choices"] = [_scale(c, f) for c in p["choices"]]
        for sub in (p.get("when") or {}).values():
            _shrink_params(sub, f)


def _searched(space: dict) -> set[str]:
    out = set(space)
    for p in space.values():
        for sub in (p.get("when") or {}).values():
            out |= _searched(sub)
    return out


def shrink(spec: dict, steps: int = TINY_STEPS) -> dict:
    f = steps / spec["budget"]["max_steps"]
    spec["name"] = spec["name"] + "_tiny"
    budget = spec["budget"]
    budget["eval_every"] = steps // 4  # few reports: each one is an evaluation, a checkpoint and a log
    budget["max_steps"] = steps
    budget["num_samples"] = max(2, len(spec.get("searcher", {}).get("baseline", [])))
    for key in ("grace_period", "max_t"):
        if key in spec.get("scheduler", {}):
            spec["scheduler"][key] = _scale(spec["scheduler"][key], f)
    if "grace_period" in spec.get("scheduler", {}):  # a rung comes at a report at the earliest
        spec["scheduler"]["grace_period"] = max(spec["scheduler"]["grace_period"], budget["eval_every"])
    _shrink_params(spec["space"], f)
    for point in spec.get("searcher", {}).get("baseline", []):
        for path in point:
            if path in STEP_PATHS:
                point[path] = _scale(point[path], f)
    fixed = spec.setdefault("fixed", {})
    for section, values in fixed.items():
        for key, value in list(values.items()) if isinstance(values, dict) else []:
            if f"{section}.{key}" in STEP_PATHS:
                values[key] = _scale(value, f)
    searched = _searched(spec["space"])
    for path, value in TINY_FIXED.items():
        section, key = path.split(".")
        if path not in searched and not (section == "model" and key == "n_heads" and "model.d_model" in searched):
            fixed.setdefault(section, {})[key] = value
    return spec


# the flagship in `make test`; every other shipped file in `make test-long`
END_TO_END = [p if p.stem == "switch_time" else pytest.param(p, marks=pytest.mark.long) for p in SPACES]


@pytest.mark.parametrize("space_file", END_TO_END, ids=lambda p: p.stem)
def test_shipped_space_runs_end_to_end_on_a_shrunk_budget(space_file, tmp_path):
    spec = shrink(yaml.safe_load(space_file.read_text()))
    path = tmp_path / space_file.name
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run(sweeper_cmd("launch", path), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    summary = json.loads((tmp_path / "sweeps" / spec["name"] / "summary.json").read_text())
    trials = summary["trials"]
    assert len(trials) == spec["budget"]["num_samples"]
    assert all(t["status"] in ("completed", "stopped") for t in trials), [t["status"] for t in trials]
    metric = spec.get("metric", "acc_3x")
    assert all(metric in t["metrics"] for t in trials)
    for point in spec["searcher"].get("baseline", []):  # the controls ran, with their own values
        assert any(all(t["params"].get(k) == v for k, v in point.items()) for t in trials), point
