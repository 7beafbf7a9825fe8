"""The paper-depth experiment's rules (experiments/dat_paper_depth.py) on hand-made records: what
each plan phase asks for, the switch and budget rules, and the report's statistics."""

from __future__ import annotations

import math

import pytest
from core.errors import ConfigError

from experiments import dat_paper_depth as dpd
from experiments import dat_paper_depth_report as rep
from trainables.metrics import CURVE

B1, B2 = dpd.BUDGETS


def final(acc1=0.99, recall1=0.99, ood3=0.8, **extra) -> dict:
    curve = {f"{CURVE}{e:03d}": (1.0 if e <= 25 else ood3) for e in range(5, 105, 5)}
    m = {"step": 0, "acc_1x": acc1, "state_acc_1x": 1.0, "recall_acc_1x": recall1, "ood_acc_3x": ood3,
         "acc_3x": (acc1 + 2 * ood3) / 3, "ood_state_acc_3x": ood3, "ood_recall_acc_3x": ood3, "last_acc_3x": ood3,
         "seq_acc_3x": ood3 / 2, "seq_acc_1x": 0.9, **curve}
    m.update({f"ood_acc_{k}x": ood3 for k in (2, 4)})
    m.update({f"{fam}_{k}x": ood3 for fam in ("acc", "last_acc", "seq_acc") for k in (2, 4)})
    m.update({"acc_1x": acc1, "last_acc_1x": acc1, "seq_acc_1x": 0.9})
    m.update(extra)
    return m


def record(budget: int, arm: str, seed: int, switch: int, reports: list[dict] | None = None, **final_kw) -> dict:
    params = dpd.cell(arm, seed, budget, switch)
    reports = reports or [{**final(**final_kw), "step": budget}]
    return {"budget": budget, "params": params, "reports": reports}


def off_reports(budget: int, converge_step: int, best: float = 1.0) -> list[dict]:
    """An attention-off run whose state accuracy climbs, then stays at `best` from `converge_step`."""
    out = []
    for step in range(dpd.EVAL_EVERY, budget + 1, dpd.EVAL_EVERY):
        acc = best if step >= converge_step else best - 0.2 * (converge_step - step) / converge_step - 0.02
        out.append({**final(), "step": step, "state_acc_1x": acc})
    return out


def explored(budget: int, switch_at: dict[int, int], failing: set = frozenset()) -> list[dict]:
    """Both exploration phases at `budget`, the attention-off runs converging at `switch_at[seed]`;
    the (arm, seed) pairs in `failing` miss the in-range check (recall 0.80)."""
    runs = [record(budget, dpd.OFF, s, 0, off_reports(budget, switch_at[s])) for s in dpd.EXPLORE_SEEDS]
    runs += [record(budget, "joint", s, 0, recall1=0.8 if ("joint", s) in failing else 0.99) for s in dpd.EXPLORE_SEEDS]
    switch = dpd.switch_rule([dpd.runs_of({"runs": [r]})[0] for r in runs[:2]], budget)
    runs += [record(budget, arm, s, switch, recall1=0.8 if (arm, s) in failing else 0.99)
             for s in dpd.EXPLORE_SEEDS for arm in ("DAT", "DAT + curriculum")]
    return runs


def test_an_empty_record_asks_for_joint_and_attention_off_on_the_exploration_seeds_only():
    p = dpd.plan({"runs": []})
    assert p.phase == "explore-1" and p.budget == B1 and p.switch is None
    assert {(c["dat.mode"], c["dat.switch_step"], c["seed"]) for c in p.todo} == {
        (mode, B1, s) for mode in ("none", "fixed") for s in dpd.EXPLORE_SEEDS}
    assert not {c["seed"] for c in p.todo} & set(dpd.SEEDS)


def test_the_switch_is_the_latest_convergence_rounded_up_and_capped_at_half_the_budget():
    runs = [record(B1, dpd.OFF, 0, 0, off_reports(B1, 1750)), record(B1, dpd.OFF, 1, 0, off_reports(B1, 2600))]
    off = dpd.runs_of({"runs": runs})
    assert [dpd.converged_at(r.reports)[0] for r in off] == [1750, 2750]  # 2600 lies between evaluations
    assert dpd.switch_rule(off, B1) == 2750
    late = dpd.runs_of({"runs": [record(B1, dpd.OFF, 0, 0, off_reports(B1, 9000))]})
    assert dpd.switch_rule(late, B1) == B1 // 2


def test_a_dip_below_the_band_after_converging_moves_the_convergence_later():
    reports = off_reports(B1, 1000)
    reports[7]["state_acc_1x"] -= 0.05  # step 2000 dips out of the 0.01 band around the best
    assert dpd.converged_at(reports) == (2250, 1.0)


def test_after_the_first_phase_plain_dat_and_the_curriculum_arm_train_at_the_rule_s_switch():
    runs = [record(B1, dpd.OFF, s, 0, off_reports(B1, 1500)) for s in dpd.EXPLORE_SEEDS]
    runs += [record(B1, "joint", s, 0) for s in dpd.EXPLORE_SEEDS]
    p = dpd.plan({"runs": runs})
    assert p.phase == "explore-2" and p.switch == 1500
    assert sorted((c["curriculum.state_only_steps"], c["dat.switch_step"]) for c in p.todo) == [(0, 1500)] * 2 + [(1500, 1500)] * 2


def test_every_arm_in_range_keeps_the_budget_and_confirms_on_fresh_seeds_in_chunks_of_two():
    p = dpd.plan({"runs": explored(B1, {0: 1500, 1: 2000})})
    assert p.phase == "confirm" and p.budget == B1 and p.switch == 2000
    assert len(p.todo) == 3 * len(dpd.SEEDS) and {c["seed"] for c in p.todo} == set(dpd.SEEDS)
    assert {dpd.arm_of(c, B1) for c in p.todo} == set(dpd.ARMS)
    first = dpd.chunk(p)
    assert len(first) == 6 and {c["seed"] for c in first} == set(dpd.SEEDS[:2])
    name, space = dpd.space_for(p, first)
    assert space["budget"]["max_steps"] == B1 and space["searcher"]["baseline"] == first
    assert space["scheduler"] == {"type": "fifo"} and name == dpd.space_for(p, list(first))[0]


def test_a_chunk_interrupted_after_some_runs_were_recorded_is_resumed_not_started_anew(tmp_path):
    import yaml

    explored_runs = explored(B1, {0: 1500, 1: 2000})
    p = dpd.plan({"runs": explored_runs})
    first = dpd.chunk(p)
    name, space = dpd.space_for(p, first)
    (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(space, sort_keys=False))
    (tmp_path / "dat_depth_damaged.yaml").write_text("name: [unclosed")
    assert dpd.unfinished_sweep(p, tmp_path) == tmp_path / f"{name}.yaml"
    two_recorded = [record(B1, dpd.arm_of(c, B1), c["seed"], 2000) for c in first[:2]]
    p = dpd.plan({"runs": explored_runs + two_recorded})
    assert dpd.space_for(p, dpd.chunk(p))[0] != name  # the missing cells alone would name a new sweep
    assert dpd.unfinished_sweep(p, tmp_path) == tmp_path / f"{name}.yaml"
    chunk_done = [record(B1, dpd.arm_of(c, B1), c["seed"], 2000) for c in first]
    p = dpd.plan({"runs": explored_runs + chunk_done})
    assert dpd.unfinished_sweep(p, tmp_path) is None


def test_an_arm_out_of_range_on_one_exploration_seed_moves_to_the_next_budget():
    runs = explored(B1, {0: 1500, 1: 1500}, failing={("DAT", 1)})
    p = dpd.plan({"runs": runs})
    assert p.phase == "explore-1" and p.budget == B2
    assert any("DAT seed 1: recall_acc_1x 0.800 < 0.95" in n for n in p.notes)


def test_the_last_budget_is_kept_whatever_it_gives():
    runs = explored(B1, {0: 1500, 1: 1500}, failing={("DAT", 1)}) + explored(B2, {0: 3000, 1: 2000}, failing={("DAT", 0)})
    p = dpd.plan({"runs": runs})
    assert p.phase == "confirm" and p.budget == B2 and p.switch == 3000
    assert "reported as undertrained" in p.notes[-1]


def confirmed(joint_curriculum: bool = True) -> list[dict]:
    runs = explored(B1, {0: 1500, 1: 1500})
    arms = (*dpd.ARMS, dpd.JOINT_CURRICULUM) if joint_curriculum else dpd.ARMS
    return runs + [record(B1, arm, s, 1500) for s in dpd.SEEDS for arm in arms]


def transformer_record(candidate: tuple, seed: int, recall: float, acc1: float = 0.99, ood3: float = 0.8) -> dict:
    return {"budget": B1, "params": dpd.transformer_cell(candidate, seed, B1),
            "reports": [{**final(acc1=acc1, recall1=recall, ood3=ood3), "step": B1}]}


def test_after_the_three_arms_joint_with_the_curriculum_trains_on_the_confirmation_seeds_in_chunks_of_six():
    p = dpd.plan({"runs": confirmed(joint_curriculum=False)})
    assert p.phase == "joint-curriculum" and [c["seed"] for c in p.todo] == list(dpd.SEEDS)
    assert {(c["dat.mode"], c["dat.switch_step"], c["curriculum.state_only_steps"]) for c in p.todo} == {("none", B1, 1500)}
    assert {dpd.arm_of(c, B1) for c in p.todo} == {dpd.JOINT_CURRICULUM}
    first = dpd.chunk(p)
    assert [c["seed"] for c in first] == list(dpd.SEEDS[:6])
    name, space = dpd.space_for(p, first)
    assert space["searcher"]["baseline"] == first
    done = dpd.runs_of({"runs": confirmed()})
    conf = rep.confirmation(done, B1)
    assert set(conf) == {*dpd.ARMS, dpd.JOINT_CURRICULUM}
    assert rep.gaps(conf, "DAT + curriculum", dpd.JOINT_CURRICULUM, "ood_acc_3x") == {s: 0.0 for s in dpd.SEEDS}
    assert dpd.JOINT_CURRICULUM not in rep.confirmation(dpd.runs_of({"runs": confirmed(joint_curriculum=False)}), B1)


def test_after_the_hybrids_the_pure_transformer_candidates_train_on_exploration_seed_0():
    p = dpd.plan({"runs": confirmed()})
    assert p.phase == "transformer-select" and len(p.todo) == len(dpd.TRANSFORMER_CANDIDATES) == 8
    assert {c["seed"] for c in p.todo} == {0} and {c["model.mixer"] for c in p.todo} == {"none"}
    assert {dpd.arm_of(c, B1) for c in p.todo} == {dpd.TRANSFORMER}
    name, space = dpd.space_for(p, dpd.chunk(p))
    assert space["space"]["model.n_layers"]["choices"] == [2, 4] and len(space["searcher"]["baseline"]) == 8


def test_the_best_recall_candidate_is_confirmed_only_if_it_learns_recall_in_range():
    recalls = [0.5, 0.6, 0.7, 0.97, 0.4, 0.3, 0.96, 0.2]
    tried = [transformer_record(c, 0, r) for c, r in zip(dpd.TRANSFORMER_CANDIDATES, recalls)]
    p = dpd.plan({"runs": confirmed() + tried})
    assert p.phase == "transformer-confirm" and {c["seed"] for c in p.todo} == set(dpd.SEEDS)
    assert {dpd.candidate_of(c) for c in p.todo} == {dpd.TRANSFORMER_CANDIDATES[3]}
    assert [c["seed"] for c in dpd.chunk(p)] == list(dpd.SEEDS[:6])  # one run a seed: six seeds a sweep
    low = [transformer_record(c, 0, r - 0.3) for c, r in zip(dpd.TRANSFORMER_CANDIDATES, recalls)]
    p = dpd.plan({"runs": confirmed() + low})
    assert p.phase == "done" and "no candidate learns recall in range" in p.notes[-1]


def test_tied_recall_is_broken_by_in_range_accuracy_then_by_the_earlier_candidate():
    def tied(acc1: dict) -> list[dict]:
        return [transformer_record(c, 0, 1.0 if i in (1, 5, 6) else 0.9, acc1=acc1.get(i, 0.98), ood3=0.9 - 0.1 * i)
                for i, c in reversed(list(enumerate(dpd.TRANSFORMER_CANDIDATES)))]  # record order must not decide

    def chosen(acc1: dict) -> tuple:
        return {dpd.candidate_of(c) for c in dpd.plan({"runs": confirmed() + tied(acc1)}).todo}.pop()

    assert chosen({5: 0.999}) == dpd.TRANSFORMER_CANDIDATES[5]  # recall ties: the higher acc_1x wins, not ood
    assert chosen({}) == dpd.TRANSFORMER_CANDIDATES[1]  # a full tie: the earlier candidate


def test_every_run_recorded_means_done():
    chosen = dpd.TRANSFORMER_CANDIDATES[0]
    runs = confirmed() + [transformer_record(c, 0, 0.99 if c == chosen else 0.5) for c in dpd.TRANSFORMER_CANDIDATES]
    runs += [transformer_record(chosen, s, 0.99) for s in dpd.SEEDS]
    assert dpd.plan({"runs": runs}).phase == "done"


def test_the_paired_interval_and_the_detectable_gap():
    m, lo, hi = rep.interval([1.0, 2.0, 3.0])
    assert m == 2.0 and hi - m == pytest.approx(4.303 / math.sqrt(3), abs=1e-3) and lo == pytest.approx(2 * m - hi)
    # 47 seeds detect a gap of about 0.10 for a paired spread of 0.244 (80% power, two-sided 5%)
    assert rep.detectable_gap(0.244, 47) == pytest.approx(0.102, abs=0.002)
    assert rep.detectable_gap(0.244, 15) == pytest.approx(0.190, abs=0.002)


def test_conclusions_are_worded_by_the_interval():
    assert rep.wording("DAT", "joint", 0.1, 0.02, 0.18).startswith("DAT beats joint by +0.100")
    assert rep.wording("DAT", "joint", -0.1, -0.18, -0.02).startswith("joint beats DAT by 0.100")
    assert rep.wording("DAT", "joint", 0.01, -0.05, 0.07) == (
        "no difference detected: rules out a benefit of DAT larger than +0.070 and a loss larger than 0.050")


def test_the_cliff_is_in_range_minus_the_last_third_of_3x():
    assert rep.cliff(final(ood3=0.3)) == pytest.approx(0.7)


def test_the_cliff_reads_the_registered_curve_points_alone():
    # a report's other names that begin like a curve point are no points of it (the cliff parsed them)
    assert rep.cliff(final(ood3=0.3, curve_acc_sxyz=0.0, curve_acc_s060x=9.0)) == pytest.approx(0.7)


def test_the_report_rebuilds_its_section_and_one_picture_per_metric(tmp_path):
    runs = explored(B1, {0: 1500, 1: 1500})
    runs += [record(B1, arm, s, 1500, ood3=0.9 if arm == "DAT" else 0.6, recall1=0.8 if arm == "joint" else 0.99)
             for s in dpd.SEEDS[:3] for arm in dpd.ARMS]
    runs += [transformer_record(c, 0, 0.5 + 0.01 * i) for i, c in enumerate(dpd.TRANSFORMER_CANDIDATES[:2])]
    page = tmp_path / "page.md"
    page.write_text("# title\n\n## Results\n\nold\n")
    data = {"runs": runs}
    section = rep.report(data, dpd.plan(data), page)
    assert page.read_text().count(dpd.BEGIN) == 1 and section in page.read_text()
    assert "| joint | 3 | **undertrained** (0 of 3 seeds pass)" in section
    assert "### The pure Transformer's candidates" in section and "| 2 | rope | 0.003 | 0.510 |" in section
    assert "pending (3 of 15 seeds)" in section and "| P3 |" in section and "| pending |" in section
    assert sorted(p.name for p in tmp_path.glob("*.png")) == sorted(f"page_{s}.png" for s in rep.PICTURES)
    again = rep.report(data, dpd.plan(data), page)  # a second report replaces the section, never appends
    assert page.read_text().count(dpd.BEGIN) == 1 and again.split("\n", 3)[3] == section.split("\n", 3)[3]


def test_a_run_s_wall_time_sums_its_intervals_over_their_measured_rates():
    reports = [{**final(), "step": 250, "steps_per_s": 25.0}, {**final(), "step": 750, "steps_per_s": 50.0}]
    run = dpd.runs_of({"runs": [record(B1, "joint", 5101, 0, reports)]})[0]
    assert rep.training_seconds(run) == pytest.approx(250 / 25 + 500 / 50)
    unmeasured = dpd.runs_of({"runs": [record(B1, "joint", 5101, 0, [{**final(), "step": 250}])]})[0]
    assert rep.training_seconds(unmeasured) is None


def confirmed_with_gain(cur_gain: float) -> dict:
    """Exploration at the first budget, then every arm on every confirmation seed, DAT + curriculum
    `cur_gain` ahead of plain DAT on ood_acc_3x (with a seed-to-seed wobble)."""
    runs = explored(B1, {0: 1500, 1: 1500})
    for i, s in enumerate(dpd.SEEDS):
        wobble = 0.01 * (i % 3 - 1)
        runs += [record(B1, "joint", s, 1500, ood3=0.6), record(B1, "DAT", s, 1500, ood3=0.8),
                 record(B1, "DAT + curriculum", s, 1500, ood3=0.8 + cur_gain + wobble)]
    return {"design": dpd.design(), "runs": runs}


@pytest.mark.parametrize(("cur_gain", "arm", "state_only"), [(0.05, "DAT + curriculum", 1500), (0.0, "DAT", 0)])
def test_the_preset_carries_the_arm_the_rule_recommends(tmp_path, monkeypatch, cur_gain, arm, state_only):
    from experiments.record import write_record
    from trainables.config import load_trial_config

    monkeypatch.setattr(dpd, "DATA", tmp_path / "runs.json.gz")
    monkeypatch.setattr(dpd, "PRESET", tmp_path / "hybrid_dat_paper.yaml")
    write_record(dpd.DATA, confirmed_with_gain(cur_gain))
    assert dpd.main(["preset"]) == 0
    text = dpd.PRESET.read_text()
    assert f"paper's depth (4 blocks): {arm}, chosen by" in text
    config = load_trial_config(dpd.PRESET)
    assert (config.model.n_layers, config.steps, config.dat.mode, config.dat.switch_step) == (4, B1, "fixed", 1500)
    assert config.curriculum.state_only_steps == state_only and config.model.mixer == "lstm"


def test_no_preset_before_every_seed_is_paired(tmp_path, monkeypatch, capsys):
    from experiments.record import write_record

    monkeypatch.setattr(dpd, "DATA", tmp_path / "runs.json.gz")
    monkeypatch.setattr(dpd, "PRESET", tmp_path / "hybrid_dat_paper.yaml")
    data = confirmed_with_gain(0.05)
    data["runs"] = [r for r in data["runs"] if r["params"]["seed"] != dpd.SEEDS[-1]]
    write_record(dpd.DATA, data)
    assert dpd.main(["preset"]) == 2
    assert not dpd.PRESET.exists()
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "14 of 15 paired seeds" in err


def test_the_premise_table_reads_each_run_s_last_evaluation_before_the_switch():
    def reports(pre_ood: float, final_ood: float) -> list[dict]:
        return [{**final(), "step": 1250, "ood_state_acc_3x": 0.0},
                {**final(), "step": 1250 + 250, "ood_state_acc_3x": pre_ood, "eval_sequences": 64},
                {**final(ood3=final_ood), "step": B1}]
    runs = [record(B1, "DAT", s, 1750, reports(pre, out)) for s, pre, out in
            ((5101, 0.5, 0.7), (5102, 0.9, 0.9), (5103, 1.0, 0.8))]
    conf = rep.confirmation(dpd.runs_of({"runs": runs}), B1)
    section = "\n".join(rep.premise_section(conf, 1750))
    assert "step 1500, 64 sequences per length" in section
    assert "| DAT | 5101 | 1.000 | 0.500 | 0.700 | 0.700 |" in section
    assert "across its 3 runs" in section and "r = +0.76" in section
    assert rep.premise_section(conf, 250) == []  # no evaluation before the switch: nothing to show


def test_every_phase_s_sweep_file_passes_the_sweeper_s_own_validation(tmp_path):
    import yaml

    from sweeper.space_file import load_space

    recalls = [0.5, 0.6, 0.7, 0.97, 0.4, 0.3, 0.96, 0.2]
    tried = [transformer_record(c, 0, r) for c, r in zip(dpd.TRANSFORMER_CANDIDATES, recalls)]
    records = [[], explored(B1, {0: 1500, 1: 1500})[:4], explored(B1, {0: 1500, 1: 1500}), confirmed(joint_curriculum=False),
               confirmed(), confirmed() + tried]
    phases = []
    for runs in records:
        p = dpd.plan({"runs": runs})
        name, space = dpd.space_for(p, dpd.chunk(p))
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(space, sort_keys=False))
        spec = load_space(path, n_samples=20)  # raises SpaceError on a file `sweeper launch` would refuse
        assert spec.budget.num_samples == len(dpd.chunk(p))
        phases.append(p.phase)
    assert phases[-3:] == ["joint-curriculum", "transformer-select", "transformer-confirm"] and "confirm" in phases


@pytest.mark.parametrize("damage", [dpd.BEGIN + "\nno end\n", dpd.END + "\n" + dpd.BEGIN + "\n", 2 * (dpd.BEGIN + dpd.END)])
def test_a_damaged_results_section_is_one_line_and_the_page_is_left_as_it_was(tmp_path, monkeypatch, damage, capsys):
    monkeypatch.setattr(dpd, "RESULTS", tmp_path / "page.md")
    monkeypatch.setattr(dpd, "DATA", tmp_path / "runs.json.gz")
    page = "# title\n" + damage
    dpd.RESULTS.write_text(page)
    assert dpd.main(["report"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "damaged" in err
    assert dpd.RESULTS.read_text() == page and not list(tmp_path.glob("*.png"))


def pack_of(tmp_path, runs: dict[str, tuple[dict, int]], extra: dict[str, bytes] | None = None,
            machine: dict | None = None):
    """A pack as experiments/device_runs.py writes it: {name: (trial config, last step)}, `extra`
    files, and machine.json (`machine`, an H200's by default)."""
    import io
    import json
    import tarfile

    import yaml

    path = tmp_path / "runs.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        files = {"machine.json": json.dumps(machine or {"accelerator": "NVIDIA H200", "torch": "2.11.0+cu130"}).encode()}
        for name, (config, last) in runs.items():
            files[f"{name}/config.yaml"] = yaml.safe_dump(config).encode()
            files[f"{name}/metrics.jsonl"] = b"".join(
                json.dumps({**final(), "step": s}).encode() + b"\n" for s in range(250, last + 1, 250))
        files.update(extra or {})
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_a_pack_from_elsewhere_adds_only_whole_seeds_trained_with_the_plan_s_exact_config(tmp_path, monkeypatch):
    monkeypatch.setattr(dpd, "DATA", tmp_path / "record.json.gz")
    dpd.save({"design": dpd.design(), "runs": explored(B1, {0: 1500, 1: 2000})})
    p = dpd.plan(dpd.load())
    s1, s2, s3 = dpd.SEEDS[-3:]
    cells = {s: [c for c in p.todo if c["seed"] == s] for s in (s1, s2, s3)}
    runs = {f"s{s1}_{i}": (dpd.trial_config(p, c, "cuda"), B1) for i, c in enumerate(cells[s1])}
    runs |= {f"s{s2}_{i}": (dpd.trial_config(p, c, "cuda"), B1 if i else B1 // 2) for i, c in enumerate(cells[s2])}
    tampered = dpd.trial_config(p, cells[s3][0], "cuda")
    tampered["optim"]["lr"] = 0.01
    planted = {**dpd.trial_config(p, cells[s3][1], "cuda"), "seed": 99}
    runs |= {"tampered": (tampered, B1), "planted": (planted, B1)}
    added, skipped = dpd.import_pack(pack_of(tmp_path, runs))
    assert added == 3
    recorded = [r for r in dpd.runs_of(dpd.load()) if r.seed in (s1, s2, s3)]
    assert {(r.seed, r.arm, r.trained_on) for r in recorded} == {(s1, a, "NVIDIA H200, torch 2.11.0+cu130") for a in dpd.ARMS}
    assert any(line.startswith(f"s{s2}_0: unfinished") for line in skipped)
    assert any(line.startswith(f"seed {s2} (confirm):") for line in skipped)
    assert any(line.startswith("tampered: its config differs") for line in skipped)
    assert any(line.startswith("planted: not a cell the plan misses") for line in skipped)
    again, skipped = dpd.import_pack(pack_of(tmp_path, runs))
    assert again == 0 and f"s{s1}_0: not a cell the plan misses" in skipped


def test_a_pack_s_second_run_of_a_cell_or_a_run_short_of_a_metric_is_named_not_recorded(tmp_path, monkeypatch):
    import json

    import yaml

    monkeypatch.setattr(dpd, "DATA", tmp_path / "record.json.gz")
    dpd.save({"design": dpd.design(), "runs": explored(B1, {0: 1500, 1: 2000})})
    p = dpd.plan(dpd.load())
    s1, s2 = dpd.SEEDS[-2:]
    configs = {s: [dpd.trial_config(p, c, "cuda") for c in p.todo if c["seed"] == s] for s in (s1, s2)}
    runs = {f"s{s1}_{i}": (c, B1) for i, c in enumerate(configs[s1])} | {f"s{s1}_x": (configs[s1][0], B1)}
    runs |= {f"s{s2}_{i}": (c, B1) for i, c in enumerate(configs[s2][1:], 1)}
    short = {k: v for k, v in final().items() if k != "seq_acc_3x"}
    extra = {f"s{s2}_0/config.yaml": yaml.safe_dump(configs[s2][0]).encode(),
             f"s{s2}_0/metrics.jsonl": json.dumps({**short, "step": B1}).encode() + b"\n"}
    added, skipped = dpd.import_pack(pack_of(tmp_path, runs, extra))
    assert added == 3  # seed s1 whole, its first run kept; seed s2 not, one of its runs lacking a metric
    assert f"s{s1}_x: the same cell as s{s1}_0, which is kept" in skipped
    assert f"s{s2}_0: reports: step {B1} lacks seq_acc_3x, which the experiment reads" in skipped
    assert {r.seed for r in dpd.runs_of(dpd.load())} & {s1, s2} == {s1}


def test_a_pack_s_run_with_an_accuracy_no_run_makes_is_named_not_recorded(tmp_path, monkeypatch):
    import json

    import yaml

    monkeypatch.setattr(dpd, "DATA", tmp_path / "record.json.gz")
    dpd.save({"design": dpd.design(), "runs": explored(B1, {0: 1500, 1: 2000})})
    before = dpd.DATA.read_bytes()
    p = dpd.plan(dpd.load())
    seed = dpd.SEEDS[-1]
    configs = [dpd.trial_config(p, c, "cuda") for c in p.todo if c["seed"] == seed]
    runs = {f"s{seed}_{i}": (c, B1) for i, c in enumerate(configs[1:], 1)}
    extra = {f"s{seed}_0/config.yaml": yaml.safe_dump(configs[0]).encode(),
             f"s{seed}_0/metrics.jsonl": json.dumps({**final(), "ood_acc_3x": 7.0, "step": B1}).encode() + b"\n"}
    added, skipped = dpd.import_pack(pack_of(tmp_path, runs, extra))
    assert added == 0 and f"s{seed}_0: reports: ood_acc_3x 7.0 at step {B1} is not an accuracy in [0, 1]" in skipped
    assert dpd.DATA.read_bytes() == before


def test_a_damaged_pack_is_one_line_and_exit_2_or_a_line_per_damaged_run(tmp_path, monkeypatch, capsys):
    import yaml

    monkeypatch.setattr(dpd, "DATA", tmp_path / "record.json.gz")
    dpd.save({"design": dpd.design(), "runs": explored(B1, {0: 1500, 1: 2000})})
    before = dpd.DATA.read_bytes()
    (tmp_path / "junk.tar.gz").write_bytes(b"not a tar")
    assert dpd.main(["import", str(tmp_path / "junk.tar.gz")]) == 2
    assert "not a readable tar.gz" in capsys.readouterr().err
    p = dpd.plan(dpd.load())
    good = dpd.trial_config(p, p.todo[0], "cuda")
    pack = pack_of(tmp_path, {}, {"machine.json": b"[1, 2]"})
    assert dpd.main(["import", str(pack)]) == 2
    assert "machine.json" in capsys.readouterr().err
    pack = pack_of(tmp_path, {"ok": (good, B1)}, {
        "listed/config.yaml": b"- a list", "listed/metrics.jsonl": b"",
        "badline/config.yaml": yaml.safe_dump(good).encode(),
        "badline/metrics.jsonl": b'{"step": 250, "acc_1x": "high"}\n'})
    added, skipped = dpd.import_pack(pack)
    assert added == 0  # "ok" alone is not every arm of its seed
    assert any(line.startswith("listed: ") for line in skipped)
    assert any(line.startswith("badline: ") and "acc_1x" in line for line in skipped)
    assert dpd.DATA.read_bytes() == before
    (tmp_path / "cfgs").mkdir()
    (tmp_path / "cfgs" / "old.yaml").write_text("steps: 1")
    assert dpd.main(["configs", str(tmp_path / "cfgs"), "--seeds", str(p.todo[0]["seed"])]) == 2
    assert "not an empty folder" in capsys.readouterr().err
    assert dpd.main(["configs", str(tmp_path / "cfgs" / "old.yaml"), "--seeds", str(p.todo[0]["seed"])]) == 2
    assert "not an empty folder" in capsys.readouterr().err
    assert dpd.main(["configs", str(tmp_path / "none"), "--seeds", "999"]) == 2  # no open cell of that seed
    assert "no open cell of seeds 999" in capsys.readouterr().err and not (tmp_path / "none").exists()
    with pytest.raises(ConfigError, match="--seeds \\[999\\]: no cell of phase"):  # one seed with cells, one without
        dpd.main(["configs", str(tmp_path / "some"), "--seeds", str(p.todo[0]["seed"]), "999"])
    assert not (tmp_path / "some").exists()
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    assert dpd.main(["configs", str(tmp_path / "dangling"), "--seeds", str(p.todo[0]["seed"])]) == 2
    assert "a link to nothing" in capsys.readouterr().err and not (tmp_path / "gone").exists()


def test_a_later_phase_already_determined_can_train_elsewhere_while_the_confirmation_runs(tmp_path, monkeypatch):
    import yaml

    monkeypatch.setattr(dpd, "DATA", tmp_path / "record.json.gz")
    monkeypatch.setattr(dpd, "SWEEPS", tmp_path / "sweeps")
    dpd.save({"design": dpd.design(), "runs": explored(B1, {0: 1500, 1: 2000})})
    assert dpd.plan(dpd.load()).phase == "confirm"
    assert dpd.write_configs(tmp_path / "cfg", [0], "cuda", "transformer-select") == (len(dpd.TRANSFORMER_CANDIDATES), [])
    configs = {f.stem: yaml.safe_load(f.read_text()) for f in sorted((tmp_path / "cfg").glob("*.yaml"))}
    assert {name.split("_")[0] for name in configs} == {"s0"}
    assert {c["model"]["mixer"] for c in configs.values()} == {"none"} and {c["steps"] for c in configs.values()} == {B1}
    some = dict(list(configs.items())[:-1])
    added, skipped = dpd.import_pack(pack_of(tmp_path, {n: (c, B1) for n, c in some.items()}))
    assert added == 0 and any(line.startswith("seed 0 (transformer-select):") for line in skipped)
    added, skipped = dpd.import_pack(pack_of(tmp_path, {n: (c, B1) for n, c in configs.items()}))
    assert added == len(dpd.TRANSFORMER_CANDIDATES) and not skipped
    p = dpd.plan(dpd.load())
    assert p.phase == "confirm" and "transformer-select" not in {ph for ph, _ in dpd.open_cells(dpd.load()).values()}
    assert dpd.write_configs(tmp_path / "cfg2", [dpd.SEEDS[0]], "cuda", "joint-curriculum") == (1, [])
    # a confirmation seed the local sweep is training too is named: it would train twice
    local = dpd.chunk(p)
    name, space = dpd.space_for(p, local)
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "sweeps" / f"{name}.yaml").write_text(yaml.safe_dump(space, sort_keys=False))
    seed = local[0]["seed"]
    written, busy = dpd.write_configs(tmp_path / "cfg3", [seed], "cuda")
    assert written == sum(c["seed"] == seed for c in p.todo) and busy == [seed]
    assert {f.stem.split("_")[0] for f in (tmp_path / "cfg3").glob("*.yaml")} == {f"s{seed}"}


def test_the_report_names_the_seeds_whose_runs_trained_on_more_than_one_machine():
    runs = dpd.runs_of({"runs": confirmed(joint_curriculum=False)})
    conf = rep.confirmation(runs, B1)
    assert rep.mixed_machines(conf).startswith("Every seed's runs trained on one machine")
    moved = [dpd.Run(r.arm, r.seed, r.budget, r.params, r.reports, "NVIDIA H200, torch 2.11.0+cu130")
             if r.seed == dpd.SEEDS[0] and r.arm == "DAT" else r for r in runs]
    line = rep.mixed_machines(rep.confirmation(moved, B1))
    assert f"{dpd.SEEDS[0]} (" in line and "DAT on NVIDIA H200" in line and "joint on CPU" in line
    assert str(dpd.SEEDS[1]) + " (" not in line


def test_the_candidates_table_lists_the_rules_pick_first():
    tied = [transformer_record(c, 0, 1.0 if i in (0, 4) else 0.5, acc1=0.999 if i == 4 else 0.98)
            for i, c in enumerate(dpd.TRANSFORMER_CANDIDATES)]
    lines = rep.transformer_section(dpd.runs_of({"runs": tied[:6]}), B1)
    assert lines[2].endswith("leads so far.") and lines[6].startswith("| 4 | rope | 0.001 | 1.000 |")
    lines = rep.transformer_section(dpd.runs_of({"runs": tied}), B1)
    assert lines[2].endswith("is the rule's pick.") and len([line for line in lines if line.startswith("| ")]) == 1 + 8


def test_a_chunk_s_sweep_keeps_its_name_so_an_interrupted_one_resumes_rather_than_starts_again():
    # names the sweeps of this experiment already carry: a change to how a cell is keyed would start
    # new sweeps beside them instead of resuming them
    p = dpd.plan({"runs": []})
    name, space = dpd.space_for(p, dpd.chunk(p))
    assert name == "dat_depth_848100b1" and space["description"] == "DAT at the paper's depth, explore-1 (experiments/dat_paper_depth.py)"
    cells = [dpd.transformer_cell((4, "rope", 1e-3), s, 24_000) for s in range(5101, 5107)]
    confirm = dpd.Plan("transformer-confirm", 24_000, 12_000, cells, [])
    assert dpd.space_for(confirm, cells)[0] == "dat_depth_d34cf122"
