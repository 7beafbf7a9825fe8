"""The pre-registered reproduction's report: arms from sweep records, paired statistics, bars, the results file."""

import json
import math

import pytest

from experiments import dat_reproduction as rep


def _status(tmp_path, group, trials, num_samples):
    d = tmp_path / rep.SWEEP_NAME[group]
    d.mkdir(parents=True, exist_ok=True)
    (d / "status.json").write_text(json.dumps({"num_samples": num_samples, "trials": trials}))


def _trial(params, ood3, acc1=1.0, status="completed", step=6000):
    metrics = {"acc_1x": acc1, "acc_3x": ood3, "ood_acc_3x": ood3, "recall_acc_1x": acc1, "ood_state_acc_3x": ood3,
               "ood_recall_acc_3x": ood3}
    return {"trial_id": "t", "params": params, "status": status, "step": step, "metrics": metrics, "path": ""}


def _hybrids(tmp_path, dat_scores, joint_scores, extra=()):
    trials = [_trial({"dat.mode": "fixed", "curriculum.state_only_steps": 0, "seed": s}, v) for s, v in dat_scores.items()]
    trials += [_trial({"dat.mode": "none", "curriculum.state_only_steps": 0, "seed": s}, v) for s, v in joint_scores.items()]
    _status(tmp_path, "hybrids", trials + list(extra), 20)


def test_only_completed_runs_count_and_arms_come_from_the_parameters(tmp_path):
    unfinished = _trial({"dat.mode": "fixed", "curriculum.state_only_steps": 1500, "seed": 2027}, 0.5, status="running", step=3000)
    _hybrids(tmp_path, {2027: 0.9}, {2027: 0.4}, extra=[unfinished])
    runs, progress = rep.finished_runs(tmp_path)
    assert sorted((r.arm, r.seed) for r in runs) == [("DAT", 2027), ("joint", 2027)]
    assert progress == {"hybrids": (2, 20)}


def test_mean_interval_is_the_t_interval():
    m, lo, hi = rep.mean_interval([0.1, 0.2, 0.3])
    half = 4.303 * 0.1 / math.sqrt(3)  # t(0.975, 2) * sd / sqrt(n)
    assert m == pytest.approx(0.2) and lo == pytest.approx(0.2 - half) and hi == pytest.approx(0.2 + half)


def test_a_bar_waits_for_every_seed_then_passes_or_fails(tmp_path):
    # three seeds in: B1 and B2 are pending, whatever the numbers
    _hybrids(tmp_path, {s: 0.95 for s in rep.SEEDS[:3]}, {s: 0.40 for s in rep.SEEDS[:3]})
    bars = {b.id: b for b in rep.check_bars(rep.finished_runs(tmp_path)[0])}
    assert bars["B1"].verdict == "pending" and bars["B2"].verdict == "pending"
    # one seed lost: an every-seed bar has failed already, a mean bar still waits
    _hybrids(tmp_path, {2027: 0.95, 2028: 0.30}, {2027: 0.40, 2028: 0.40})
    bars = {b.id: b for b in rep.check_bars(rep.finished_runs(tmp_path)[0])}
    assert bars["B1"].verdict == "fail" and bars["B2"].verdict == "pending"
    # all five, DAT ahead in four and behind in one: B1 fails, the mean gap may still pass B2
    _hybrids(tmp_path, {s: 0.95 for s in rep.SEEDS}, {**{s: 0.40 for s in rep.SEEDS[:4]}, rep.SEEDS[4]: 0.97})
    bars = {b.id: b for b in rep.check_bars(rep.finished_runs(tmp_path)[0])}
    assert bars["B1"].verdict == "fail" and "2031: -0.020" in bars["B1"].measured
    m, lo, _ = rep.mean_interval([0.55] * 4 + [-0.02])
    assert bars["B2"].verdict == ("pass" if m >= 0.10 and lo > 0 else "fail")


def test_the_preset_rule_needs_all_five_paired_seeds(tmp_path):
    cur = [_trial({"dat.mode": "fixed", "curriculum.state_only_steps": 1500, "seed": s}, 0.99) for s in rep.SEEDS]
    _hybrids(tmp_path, {s: 0.90 + 0.001 * i for i, s in enumerate(rep.SEEDS)}, {}, extra=cur)
    assert "becomes DAT + curriculum" in rep.preset_decision(rep.finished_runs(tmp_path)[0])
    _hybrids(tmp_path, {s: 0.90 for s in rep.SEEDS[:4]}, {}, extra=cur)
    assert "stays plain DAT" in rep.preset_decision(rep.finished_runs(tmp_path)[0])


def test_report_rewrites_only_the_results_section(tmp_path, monkeypatch):
    monkeypatch.setattr(rep, "baselines", lambda: {n: {} for n in ("chance", "recency", "in_range")})
    monkeypatch.setattr(rep, "plot", lambda *a, **k: None)
    monkeypatch.setattr(rep, "front_plot", lambda *a, **k: None)
    out = tmp_path / "r.md"
    out.write_text("# t\n\n## Pre-registration\nB1 ...\n\n## Results\n\nPending.\n\n## History\nold\n")
    _hybrids(tmp_path, {2027: 0.9}, {2027: 0.4})
    rep.report(tmp_path, out)
    rep.report(tmp_path, out)  # twice: the section is replaced, not appended
    text = out.read_text()
    assert text.count(rep.BEGIN) == 1 and "Pending." not in text
    assert text.startswith("# t\n\n## Pre-registration\nB1 ...\n") and text.endswith("## History\nold\n")
    assert "**PARTIAL**" in text and "| DAT | 1 |" in text


def test_the_front_plot_draws_the_arms_that_have_runs(tmp_path, monkeypatch):
    """The one-figure summary: one curve per main-group arm with finished runs, none for an arm without."""
    pytest.importorskip("matplotlib")
    ks = rep.MULTIPLIERS
    full = {f"{p}acc_{k}x": 0.5 for p in ("", "ood_") for k in ks}
    runs = [rep.Run("joint", s, {**full, "acc_1x": 0.9 + 0.01 * i}) for i, s in enumerate(rep.SEEDS)]
    runs += [rep.Run("DAT + curriculum", s, full) for s in rep.SEEDS[:3]]
    base = {n: dict(full) for n in ("chance", "recency")}
    import matplotlib.pyplot as plt

    drawn = []
    real_subplots = plt.subplots

    def spy(*a, **k):
        fig, axes = real_subplots(*a, **k)
        drawn.append(axes)
        return fig, axes

    monkeypatch.setattr(plt, "subplots", spy)
    rep.front_plot(runs, base, tmp_path / "front.png")
    assert (tmp_path / "front.png").stat().st_size > 10_000
    labels = [t.get_text() for t in drawn[0][1].get_legend().get_texts()]
    assert "joint (n=5)" in labels and "DAT + curriculum (n=3)" in labels
    assert not any(label.startswith(("DAT (", "pure LSTM", "pure Transformer")) for label in labels)
