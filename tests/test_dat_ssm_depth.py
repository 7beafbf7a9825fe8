"""The SSM experiment's rules (experiments/dat_ssm_depth.py) on hand-made records: the premise in
the budget rule, the premise gate, what its sweeps train, and the report; then, shrunk, every phase
through a real `sweeper launch` (`make test-long`)."""

from __future__ import annotations

import os

import pytest

from experiments import dat_paper_depth as dpd
from experiments import dat_ssm_depth as ssm
from trainables.metrics import CURVE

B1, B2 = ssm.BUDGETS


def final(state1=1.0, recall1=0.99, ood3=0.8) -> dict:
    curve = {f"{CURVE}{e:03d}": (1.0 if e <= 25 else ood3) for e in range(5, 105, 5)}
    m = {"acc_1x": 0.99, "state_acc_1x": state1, "recall_acc_1x": recall1, "seq_acc_1x": 0.9,
         "ood_state_acc_3x": ood3, "ood_recall_acc_3x": ood3, **curve}
    for k in (2, 3, 4):
        m.update({f"acc_{k}x": ood3, f"ood_acc_{k}x": ood3, f"last_acc_{k}x": ood3, f"seq_acc_{k}x": ood3 / 2})
    return m


def record(budget: int, arm: str, seed: int, switch: int, best_state: float = 1.0, counts_from: int = 3000,
           **final_kw) -> dict:
    """A run whose state accuracy is `best_state` from step `counts_from` on, 0.3 lower before."""
    reports = [{**final(state1=best_state if step >= counts_from else best_state - 0.3, **final_kw), "step": step}
               for step in range(dpd.EVAL_EVERY, budget + 1, dpd.EVAL_EVERY)]
    return {"budget": budget, "params": dpd.cell(arm, seed, budget, switch), "reports": reports}


def explored(budget: int, off_best: float, second: bool = True) -> list[dict]:
    """The exploration at `budget` (its second phase too if `second`), every arm in range; the
    attention-off runs' best state accuracy `off_best`."""
    runs = [record(budget, dpd.OFF, s, 0, off_best) for s in ssm.EXPLORE_SEEDS]
    runs += [record(budget, "joint", s, 0) for s in ssm.EXPLORE_SEEDS]
    if not second:
        return runs
    switch = dpd.switch_rule([r for r in dpd.runs_of({"runs": runs}) if r.arm == dpd.OFF], budget)
    runs += [record(budget, arm, s, switch) for s in ssm.EXPLORE_SEEDS for arm in ("DAT", "DAT + curriculum")]
    return runs


def test_the_first_sweep_trains_the_rotating_ssm_on_the_exploration_seeds_only():
    p = ssm.plan({"runs": []})
    assert p.phase == "explore-1" and p.budget == B1
    assert {c["seed"] for c in p.todo} == set(ssm.EXPLORE_SEEDS)
    from sweeper.space import SearchSpace, trial_config_for

    name, space = ssm.chunks().space_for(p.phase, p.budget, dpd.chunk(p))
    spec = SearchSpace.model_validate(space)
    configs = [trial_config_for(spec, c) for c in p.todo]
    assert name.startswith("dat_ssm_")
    assert {(t.model.mixer, t.model.ssm_transition, t.model.n_layers, t.eval.seed, t.steps) for t in configs} == {
        ("ssm", "rotation", 4, ssm.EVAL_SEED, B1)}
    assert not set(ssm.SEEDS) & set(dpd.SEEDS) and not set(ssm.EXPLORE_SEEDS) & set(dpd.EXPLORE_SEEDS)


def test_a_budget_whose_ssm_path_does_not_count_alone_is_not_kept_even_when_every_arm_is_in_range():
    p = ssm.plan({"runs": explored(B1, off_best=0.90)})
    assert p.phase == "explore-1" and p.budget == B2
    assert p.notes == [f"budget {B1}: the premise fails (attention off seed 8: best state_acc_1x 0.900 < 0.95; "
                       f"attention off seed 9: best state_acc_1x 0.900 < 0.95): next budget"]
    # the paper-depth experiment's rule, without the premise, keeps the same budget
    assert dpd.explore(dpd.runs_of({"runs": explored(B1, off_best=0.90)}), ssm.BUDGETS, ssm.EXPLORE_SEEDS).phase == "kept"


def test_a_budget_that_misses_the_premise_trains_no_dat_arm():
    p = ssm.plan({"runs": explored(B1, off_best=0.90, second=False)})
    assert p.phase == "explore-1" and p.budget == B2  # not explore-2 at B1: that budget cannot be kept
    one_short = explored(B1, off_best=0.99, second=False)
    one_short[0] = record(B1, dpd.OFF, ssm.EXPLORE_SEEDS[0], 0, 0.94)
    assert ssm.plan({"runs": one_short}).budget == B2


def test_the_premise_gate_at_the_last_budget_stops_before_any_confirmation_run():
    p = ssm.plan({"runs": explored(B1, 0.90, second=False) + explored(B2, 0.93, second=False)})
    assert p.phase == "done" and p.todo == [] and p.budget == B2
    assert "the premise gate fails" in p.notes[-1] and "0.930 < 0.95" in p.notes[-1]
    passing = ssm.plan({"runs": explored(B1, 0.90, second=False) + explored(B2, 0.96, second=False)})
    assert passing.phase == "explore-2" and passing.budget == B2


def test_when_the_ssm_counts_the_three_arms_train_on_the_fresh_seeds_at_the_rule_s_switch():
    runs = explored(B1, 0.99)
    p = ssm.plan({"runs": runs})
    assert p.phase == "confirm" and p.budget == B1 and "the premise gate passes" in p.notes[-1]
    assert p.switch == dpd.switch_rule([r for r in dpd.runs_of({"runs": runs}) if r.arm == dpd.OFF], B1)
    assert len(p.todo) == 3 * len(ssm.SEEDS) and {c["seed"] for c in p.todo} == set(ssm.SEEDS)
    assert {dpd.arm_of(c, B1) for c in p.todo} == set(dpd.ARMS)
    assert {c["dat.switch_step"] for c in p.todo if c["dat.mode"] == "fixed"} == {p.switch}
    assert len(dpd.chunk(p)) == 6  # two seeds' three arms per sweep


def test_the_report_answers_only_once_every_seed_is_paired_and_says_so_when_the_gate_fails(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(f"# t\n\n{ssm.BEGIN}\n{ssm.END}\n")
    gated = {"runs": explored(B1, 0.90, second=False) + explored(B2, 0.93, second=False)}
    section = ssm.report(gated, ssm.plan(gated), page)
    assert "DAT's premise is not met by the rotating SSM at this depth and budget (24000 steps)" in section
    assert "attention off seed 9: best state_acc_1x 0.930 < 0.95" in section
    kept = {"runs": explored(B1, 0.99)}
    assert "No confirmation run has finished yet" in ssm.report(kept, ssm.plan(kept), page)

    runs = explored(B1, 0.99)
    switch = ssm.plan({"runs": runs}).switch
    gains = {"joint": 0.70, "DAT": 0.70, "DAT + curriculum": 0.85}
    conf = [record(B1, arm, s, switch, counts_from=1000, ood3=gains[arm] + 0.01 * (i % 3)) for i, s in enumerate(ssm.SEEDS) for arm in dpd.ARMS]
    half = {"runs": runs + conf[:9]}
    assert "pending (3 of 15 paired seeds)" in ssm.report(half, ssm.plan(half), page)
    full = {"runs": runs + conf}
    section = ssm.report(full, ssm.plan(full), page)
    assert "DAT + curriculum - joint on `ood_acc_3x`: DAT carries over: DAT + curriculum beats joint by +0.150" in section
    assert "DAT - joint on `ood_acc_3x`: no difference detected" in section
    assert "before the switch (attention off) is >= 0.95 on 15 of 15 seeds" in section
    lstm = dpd.plan(dpd.load())
    assert f"| DAT + curriculum | SSM `rotation` | {B1} | 15 | " in section
    assert f"| DAT + curriculum | LSTM | {lstm.budget} | 15 | " in section
    assert (tmp_path / "page_ood_acc.png").exists()


@pytest.mark.parametrize("where, plant, expect", [
    ("page", lambda p, victim: p.symlink_to(victim), "not a regular file"),
    ("page", lambda p, victim: os.mkfifo(p), "not a regular file"),  # read, it blocked for ever
    ("page", lambda p, victim: p.write_bytes(f"# t\n\n{ssm.BEGIN}\n{ssm.END}\n\xff\n".encode("latin-1")), "not UTF-8"),
    ("picture", lambda p, victim: p.symlink_to(victim), "not a regular file"),
], ids=["page-a-link", "page-a-fifo", "page-not-utf8", "picture-a-link"])
def test_a_page_or_picture_that_is_no_file_of_its_own_is_one_line_and_nothing_is_written(tmp_path, where, plant, expect):
    # a link at the page or a picture: the report wrote through it, outside the repository; a FIFO hung it
    from core.errors import ConfigError

    page, victim = tmp_path / "page.md", tmp_path / "victim"
    victim.write_bytes(b"keep")
    if where == "page":
        plant(page, victim)
    else:
        page.write_text(f"# t\n\n{ssm.BEGIN}\n{ssm.END}\n")
        plant(tmp_path / "page_ood_acc.png", victim)
    runs = explored(B1, 0.99)
    switch = ssm.plan({"runs": runs}).switch
    full = {"runs": runs + [record(B1, arm, s, switch, counts_from=1000, ood3=0.7) for s in ssm.SEEDS for arm in dpd.ARMS]}
    before = {p.name: (p.is_symlink(), p.read_bytes() if p.is_file() and not p.is_symlink() else None) for p in tmp_path.iterdir()}
    with pytest.raises(ConfigError, match=expect) as err:
        ssm.report(full, ssm.plan(full), page)
    assert "\n" not in str(err.value) and victim.read_bytes() == b"keep"
    assert {p.name: (p.is_symlink(), p.read_bytes() if p.is_file() and not p.is_symlink() else None) for p in tmp_path.iterdir()} == before


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.long  # `make test-long`, with the LSTM experiment's end-to-end run (test_dat_paper_depth_run.py)
def test_every_phase_trains_the_ssm_through_the_sweeper_and_the_record_rebuilds_the_page(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    monkeypatch.setattr(ssm, "DATA", tmp_path / "runs.json.gz")
    monkeypatch.setattr(ssm, "SWEEPS", tmp_path / "sweeps")
    monkeypatch.setattr(ssm, "BUDGETS", (40,))
    monkeypatch.setattr(ssm, "SEEDS", (5201,))
    monkeypatch.setattr(ssm, "PREMISE", 0.0)  # every tiny run counts "enough"
    monkeypatch.setattr(dpd, "EVAL_EVERY", 10)
    monkeypatch.setattr(dpd, "IN_RANGE", (("acc_1x", 0.0), ("recall_acc_1x", 0.0)))
    small = {**ssm.FIXED["model"], "d_model": 16, "n_layers": 1, "n_heads": 2, "ssm_d_state": 4}
    monkeypatch.setattr(ssm, "FIXED", {**ssm.FIXED, "model": small, "eval": {**ssm.FIXED["eval"], "n_sequences": 16}})

    assert ssm.run() == 0
    data = ssm.load()
    assert sorted(dpd.arm_of(r["params"], r["budget"]) for r in data["runs"]) == sorted(
        ["joint", dpd.OFF, "DAT", "DAT + curriculum"] * 2 + list(dpd.ARMS))
    assert ssm.plan(data).phase == "done" and ssm.run() == 0 and len(ssm.load()["runs"]) == len(data["runs"])

    import yaml

    trained = [yaml.safe_load(f.read_text()) for f in (tmp_path / "sweeps").glob("*/trials/*/checkpoint/config.yaml")]
    assert len(trained) == len(data["runs"])
    assert {(c["model"]["mixer"], c["model"]["ssm_transition"], c["eval"]["seed"]) for c in trained} == {
        ("ssm", "rotation", ssm.EVAL_SEED)}
    page = tmp_path / "page.md"
    page.write_text(f"# t\n\n{ssm.BEGIN}\n{ssm.END}\n")
    section = ssm.report(data, ssm.plan(data), page)
    assert "| joint | 1 | pass" in section and "| DAT - joint | `ood_acc_3x` | 1 |" in section


def test_the_exploration_can_train_elsewhere_and_come_back_as_a_pack(tmp_path, monkeypatch):
    import io
    import json
    import tarfile

    import yaml

    monkeypatch.setattr(ssm, "DATA", tmp_path / "record.json.gz")
    monkeypatch.setattr(ssm, "SWEEPS", tmp_path / "sweeps")
    assert ssm.main(["configs", str(tmp_path / "cfg"), "--seeds", *map(str, ssm.EXPLORE_SEEDS)]) == 0
    configs = {f.stem: yaml.safe_load(f.read_text()) for f in sorted((tmp_path / "cfg").glob("*.yaml"))}
    assert len(configs) == 4 and {c["device"] for c in configs.values()} == {"cuda"}
    assert {(c["model"]["mixer"], c["model"]["ssm_transition"]) for c in configs.values()} == {("ssm", "rotation")}
    pack = tmp_path / "runs.tar.gz"
    with tarfile.open(pack, "w:gz") as tar:
        files = {"machine.json": json.dumps({"accelerator": "NVIDIA H200", "torch": "2.11.0+cu130"}).encode()}
        for name, config in configs.items():
            files[f"{name}/config.yaml"] = yaml.safe_dump(config).encode()
            files[f"{name}/metrics.jsonl"] = b"".join(json.dumps({**final(), "step": s}).encode() + b"\n"
                                                      for s in range(dpd.EVAL_EVERY, B1 + 1, dpd.EVAL_EVERY))
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    assert ssm.main(["import", str(pack)]) == 0
    runs = dpd.runs_of(ssm.load())
    assert {(r.arm, r.seed, r.trained_on) for r in runs} == {
        (arm, s, "NVIDIA H200, torch 2.11.0+cu130") for arm in ("joint", dpd.OFF) for s in ssm.EXPLORE_SEEDS}
    assert ssm.plan(ssm.load()).phase == "explore-2"
    assert ssm.main(["import", str(pack)]) == 0 and len(ssm.load()["runs"]) == 4  # nothing recorded twice
