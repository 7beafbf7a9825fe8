"""The search-space format: every validation rule, conditional parameters, sampled configs."""

import subprocess
import sys
import textwrap

import optuna
import pytest

from sweeper.adapters.optuna_search import baseline_points, define_by_run, sample_configs
from sweeper.space import SpaceError, trial_config_for
from sweeper.space_file import load_space

GOOD = """
name: t
fixed:
  model: {d_model: 16, n_heads: 2}
space:
  dat.switch_step: {type: int, low: 0, high: 100, step: 10}
  optim.lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}
  model.mixer:
    type: categorical
    choices: [lstm, none]
    when:
      lstm:
        model.n_layers: {type: int, low: 1, high: 3}
      none:
        model.positional: {type: categorical, choices: [none, sinusoidal]}
        model.n_layers: {type: int, low: 2, high: 4}
        dat.mode: {type: categorical, choices: [none]}   # no recurrence: nothing to delay
budget: {num_samples: 4, max_steps: 100, eval_every: 10}
searcher:
  baseline:
    - {dat.switch_step: 0, model.mixer: lstm}
"""


def write(tmp_path, text, name="s.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def edit(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new)


def test_the_good_file_loads(tmp_path):
    spec = load_space(write(tmp_path, GOOD))
    assert spec.budget.max_steps == 100 and spec.metric == "acc_3x" and spec.mode == "max"


# each case: (how to break GOOD, the key and rule the one-line error must name)
BROKEN = {
    "unknown_top_key": (("budget:", "budgett: {}\nbudget:"), "budgett: unknown key"),
    "unknown_param_key": (("step: 10}", "step: 10, lo: 1}"), "space.dat.switch_step.lo: unknown key"),
    "low_gt_high": (("low: 0, high: 100", "low: 100, high: 0"), "space.dat.switch_step: `low < high` must hold"),
    "log_low_zero": (("low: 1.0e-4", "low: 0.0"), "space.optim.lr: `log` needs `low > 0`"),
    "no_such_path": (("dat.switch_step:", "dat.switch_stepp:"), "space.dat.switch_stepp: no such key in the trial config"),
    "nested_bad_path": (("model.positional:", "model.positionall:"), "space.model.positionall (when model.mixer=none): no such key"),
    "bad_choice_value": (("choices: [none, sinusoidal]", "choices: [none, rotary]"), "model.positional: must be 'none', 'sinusoidal' or 'rope', got 'rotary'"),
    "cross_rule_on_samples": (("high: 100, step: 10", "high: 200, step: 10"), "`dat.switch_step <= steps` must hold"),
    "when_not_a_choice": (("      none:\n", "      gru:\n"), "`when` key 'gru' is not one of the choices"),
    "fixed_bad_value": (("d_model: 16", "d_model: 4"), "fixed.model.d_model: must be greater than or equal to 8, got 4"),
    "fixed_unknown": (("n_heads: 2}", "n_heads: 2, depth: 3}"), "fixed.model.depth: unknown key"),
    "fixed_and_searched": (("n_heads: 2}", "n_heads: 2}\n  dat: {switch_step: 10}"), "space.dat.switch_step: also set in `fixed`"),
    "budget_rule": (("eval_every: 10", "eval_every: 1000"), "`eval_every <= max_steps` must hold"),
    "steps_in_fixed": (("n_heads: 2}", "n_heads: 2}\n  steps: 50"), "fixed.steps: set by budget.max_steps"),
    "baseline_out_of_range": (("switch_step: 0, model", "switch_step: 5, model"), "searcher.baseline[0].dat.switch_step: 5 is outside"),
    "baseline_unknown": (("{dat.switch_step: 0,", "{dat.nope: 0,"), "searcher.baseline[0].dat.nope: not a searched parameter"),
    "baseline_twice": (("    - {dat.switch_step: 0, model.mixer: lstm}\n", "    - {dat.switch_step: 0, model.mixer: lstm}\n"
                        "    - {model.mixer: lstm, dat.switch_step: 0}\n"), "searcher.baseline: point 2 repeats point 1"),
    "bad_type": (("num_samples: 4", "num_samples: four"), "budget.num_samples: must be a valid integer"),
    "bad_sampler": (("searcher:\n", "searcher:\n  sampler: hyperband\n"), "searcher.sampler: must be 'tpe', 'random', 'cmaes', 'qmc' or 'grid'"),
    "cmaes_categorical": (("searcher:\n", "searcher:\n  sampler: cmaes\n"), "cmaes cannot search categorical"),
    "empty_space": (("space:\n", "space: {}\nx_space:\n"), "space: Dictionary should have at least 1 item"),
    "pre_phase_metric_no_direction": (("budget:", "scheduler: {pre_phase_metric: lr}\nbudget:"),
                                      "scheduler.pre_phase_metric: must be a per-length metric with a better direction"),
    "pre_phase_metric_not_reported": (("budget:", "scheduler: {pre_phase_metric: state_acc_9x}\nbudget:"),
                                      "scheduler.pre_phase_metric: trials of this space do not report 'state_acc_9x'"),
    "pre_phase_metric_plain_asha": (("budget:", "scheduler: {phase_aware: false, pre_phase_metric: state_acc_1x}\nbudget:"),
                                    "scheduler: `pre_phase_metric` needs `type: asha` with `phase_aware: true`"),
    "pre_phase_metric_fifo": (("budget:", "scheduler: {type: fifo, pre_phase_metric: state_acc_1x}\nbudget:"),
                              "got type fifo"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_each_rule_gives_one_line_naming_file_key_and_rule(tmp_path, case):
    (old, new), expected = BROKEN[case]
    path = write(tmp_path, edit(GOOD, old, new))
    with pytest.raises(SpaceError) as err:
        load_space(path)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path}: ")
    assert expected in msg, msg


def test_the_pre_phase_metric_defaults_to_none_and_reaches_the_early_stopping(tmp_path):
    from sweeper.adapters.optuna_ledger import MEMORY, Ledger
    from sweeper.stopping import stopper_for

    default = load_space(write(tmp_path, GOOD))
    assert default.scheduler.pre_phase_metric is None
    assert stopper_for(default, Ledger(MEMORY, default, create=True)).pre_metric is None  # today's rule
    spec = load_space(write(tmp_path, edit(GOOD, "budget:", "scheduler: {pre_phase_metric: ood_state_acc_3x}\nbudget:"), "p.yaml"))
    stopper = stopper_for(spec, Ledger(MEMORY, spec, create=True))
    assert (stopper.pre_metric, stopper.pre_mode) == ("ood_state_acc_3x", "max")


def test_ambiguous_conditional_paths_are_different_parameters(tmp_path):
    spec = load_space(write(tmp_path, GOOD))
    samples = sample_configs(spec, "s", 200)
    for params in samples:
        keys = set(params)
        # conditional parameters exist exactly when their parent's choice is drawn
        if params["model.mixer"] == "lstm":
            assert "model.n_layers|model.mixer=lstm" in keys and "model.positional" not in keys
            assert 1 <= params["model.n_layers|model.mixer=lstm"] <= 3
        else:
            assert {"model.positional", "model.n_layers|model.mixer=none"} <= keys
            assert 2 <= params["model.n_layers|model.mixer=none"] <= 4
        cfg = trial_config_for(spec, params)  # and all 200 make valid trial configs
        assert cfg.steps == 100 and cfg.eval.every == 10


def test_every_shipped_space_validates_and_its_samples_are_valid_trials():
    from pathlib import Path

    files = sorted(Path(__file__).parent.parent.glob("search_spaces/*.yaml"))
    assert len(files) >= 3
    for f in files:
        spec = load_space(f)
        for params in sample_configs(spec, str(f), 200):
            trial_config_for(spec, params)


def test_define_by_run_with_tpe_suggests_the_same_space(tmp_path):
    spec = load_space(write(tmp_path, GOOD))
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0))
    study.optimize(lambda t: (define_by_run(spec)(t), 0.5)[1], n_trials=12)
    assert {t.params["model.mixer"] for t in study.trials} == {"lstm", "none"}


def test_baselines_resolve_to_parameter_names(tmp_path):
    spec = load_space(write(tmp_path, GOOD))
    assert baseline_points(spec) == [{"dat.switch_step": 0, "model.mixer": "lstm"}]


def test_validate_cli_prints_the_space_and_bad_files_exit_2(tmp_path):
    good = write(tmp_path, GOOD)
    r = subprocess.run([sys.executable, "-m", "sweeper.cli", "validate", str(good)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "model.n_layers|model.mixer=none" in r.stdout and "valid" in r.stdout
    bad = write(tmp_path, edit(GOOD, "low: 0, high: 100", "low: 100, high: 0"), "bad.yaml")
    r = subprocess.run([sys.executable, "-m", "sweeper.cli", "validate", str(bad)], capture_output=True, text=True)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
