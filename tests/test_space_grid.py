"""`searcher.sampler: grid`: every point of a grid of categorical parameters, each exactly once."""

from __future__ import annotations

import itertools
from pathlib import Path

import optuna
import pytest
import yaml

from sweeper.adapters.optuna_search import define_by_run, make_sampler
from sweeper.space import SearchSpace, SpaceError, grid_points, trial_config_for
from sweeper.space_file import load_space

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENT_SPACES = sorted((ROOT / "experiments" / "dat_reproduction_spaces").glob("*.yaml"))


def _space(tmp_path, **over) -> Path:
    data = {
        "name": "g",
        "fixed": {"model": {"d_model": 16, "n_layers": 1, "n_heads": 2}, "eval": {"n_sequences": 8}, "dat": {"switch_step": 20}},
        "space": {"seed": {"type": "categorical", "choices": [1, 2, 3]},
                  "dat.mode": {"type": "categorical", "choices": ["none", "fixed"]}},
        "budget": {"num_samples": 6, "max_concurrent": 1, "max_steps": 60, "eval_every": 10},
        "scheduler": {"type": "fifo"},
        "searcher": {"sampler": "grid", "seed": 0},
    }
    for key, value in over.items():
        section, _, leaf = key.partition("__")
        if leaf:
            data[section] = {**data[section], leaf: value}
        else:
            data[section] = value
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_grid_sweep_draws_every_point_exactly_once(tmp_path):
    spec = load_space(_space(tmp_path))
    study = optuna.create_study(direction="maximize", sampler=make_sampler(spec))
    suggest = define_by_run(spec)
    drawn = []
    for _ in range(spec.budget.num_samples):
        trial = study.ask()
        suggest(trial)
        drawn.append((trial.params["seed"], trial.params["dat.mode"]))
        study.tell(trial, 0.0)
    assert sorted(drawn) == sorted(itertools.product([1, 2, 3], ["none", "fixed"]))


def test_a_resumed_grid_study_draws_only_the_points_not_yet_run(tmp_path):
    """The study lives in SQLite (sweeps/<name>/optuna.db); a new sampler on it skips what was run."""
    spec = load_space(_space(tmp_path))
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    first = optuna.create_study(study_name="g", storage=storage, direction="maximize", sampler=make_sampler(spec))
    seen = []
    for _ in range(2):
        trial = first.ask()
        define_by_run(spec)(trial)
        seen.append(tuple(trial.params.values()))
        first.tell(trial, 0.0)
    again = optuna.load_study(study_name="g", storage=storage, sampler=make_sampler(spec))
    for _ in range(4):
        trial = again.ask()
        define_by_run(spec)(trial)
        seen.append(tuple(trial.params.values()))
        again.tell(trial, 0.0)
    assert len(set(seen)) == 6


@pytest.mark.parametrize("over, words", [
    ({"budget__num_samples": 5}, "budget.num_samples: a grid of 6 points needs num_samples 6, got 5"),
    ({"space": {"optim.lr": {"type": "float", "low": 0.001, "high": 0.01}}}, "searcher.sampler: grid searches categorical parameters only"),
    ({"space": {"dat.mode": {"type": "categorical", "choices": ["none", "fixed"],
                             "when": {"fixed": {"dat.ramp_steps": {"type": "categorical", "choices": [0, 5]}}}}},
      "budget__num_samples": 2}, "searcher.sampler: grid cannot search conditional parameters"),
    ({"searcher": {"sampler": "grid", "baseline": [{"seed": 1, "dat.mode": "none"}]}}, "searcher.baseline"),
])
def test_a_bad_grid_is_one_line(tmp_path, over, words):
    with pytest.raises(SpaceError) as err:
        load_space(_space(tmp_path, **over))
    assert words in str(err.value) and "\n" not in str(err.value)


def test_grid_points_are_the_product_of_the_choices(tmp_path):
    spec = load_space(_space(tmp_path))
    points = grid_points(spec)
    assert len(points) == 6 and {(p["seed"], p["dat.mode"]) for p in points} == set(itertools.product([1, 2, 3], ["none", "fixed"]))


@pytest.mark.parametrize("path", EXPERIMENT_SPACES, ids=lambda p: p.stem)
def test_the_reproduction_grids_train_exactly_the_presets(path):
    """Every grid point of the pre-registered reproduction's sweeps is an arm's preset with only the seed, the evaluation
    seed and the device changed (so the sweep runs what docs/results/dat_reproduction.md names)."""
    from experiments import dat_reproduction as rep
    from trainables.config import load_trial_config, with_overrides

    spec = load_space(path)
    group = path.stem
    preset = {"joint": "hybrid_joint", "joint + curriculum": "hybrid_joint_curriculum", "DAT": "hybrid_dat",
              "DAT + curriculum": "hybrid_dat_curriculum", "pure LSTM": "lstm", "pure Transformer": "transformer",
              "joint, no positions": "hybrid_joint", "DAT, no positions": "hybrid_dat",
              "joint, 4 blocks": "hybrid_joint", "DAT, 4 blocks": "hybrid_dat"}
    extra = {"nope": {"model.positional": "none"}, "depth4": {"model.n_layers": 4}}.get(group, {})
    points = grid_points(spec)
    assert len(points) == spec.budget.num_samples == rep.PLANNED[group]
    for params in points:
        arm = rep.arm_of(group, params)
        assert arm is not None, params
        cfg = trial_config_for(spec, params)
        expected = with_overrides(load_trial_config(preset[arm]), {
            "seed": params["seed"], "eval.seed": rep.EVAL_SEED, "device": "cpu", **extra})
        assert cfg.model_dump() == expected.model_dump(), (arm, params)
        assert params["seed"] in rep.SEEDS


class _NoViews:
    def on_start(self, number): pass
    def on_report(self, number, result): pass
    def on_end(self, number): pass


def test_the_sweep_s_searcher_walks_the_whole_grid_without_raising(tmp_path):
    """Through the searcher the sweep really uses (ask and tell on the ledger): every point once, each
    told COMPLETE, then the searcher says it has finished. (Optuna's own GridSampler calls study.stop at
    the last tell, which raises outside study.optimize; ours does not call it.)"""
    from ray.tune.search import Searcher

    from sweeper.adapters.optuna_ledger import Ledger
    from sweeper.adapters.ray_search import LedgerSearcher

    spec = load_space(_space(tmp_path))
    ledger = Ledger(f"sqlite:///{tmp_path / 'o.db'}", spec, create=True)
    searcher = LedgerSearcher(ledger, _NoViews(), spec.budget.num_samples, spec.budget.max_steps, spec.metric, spec.mode)
    seen = []
    for i in range(spec.budget.num_samples):
        params = searcher.suggest(f"t{i}")["params"]
        seen.append((params["seed"], params["dat.mode"]))
        searcher.on_trial_complete(f"t{i}", {spec.metric: 0.5, "step": spec.budget.max_steps})
    assert searcher.suggest("one more") == Searcher.FINISHED
    assert sorted(seen, key=str) == sorted(itertools.product([1, 2, 3], ["none", "fixed"]), key=str)
    study = optuna.load_study(study_name=spec.name, storage=f"sqlite:///{tmp_path / 'o.db'}")
    states = {t.state for t in study.get_trials(deepcopy=False)}
    assert states == {optuna.trial.TrialState.COMPLETE}


def test_a_resumed_sweep_still_runs_the_baseline_points_it_had_not_started(tmp_path):
    """Baseline points are queued in the study at the start; a sweep interrupted before it drew them
    all must draw the rest when resumed, not count them as run (they were lost once: a resumed
    sweep of 4 grid cells ended `finished` after the 2 it had started)."""
    from sweeper.adapters.optuna_ledger import Ledger

    spec = SearchSpace.model_validate({
        "name": "queued", "metric": "acc_3x", "space": {"seed": {"type": "categorical", "choices": [0, 1, 2, 3]}},
        "budget": {"num_samples": 4, "max_steps": 100, "eval_every": 50}, "scheduler": {"type": "fifo"},
        "searcher": {"sampler": "random", "seed": 0, "baseline": [{"seed": s} for s in range(4)]}})
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    first = Ledger(url, spec, create=True)
    started = [first.new_trial(), first.new_trial()]
    assert [first.trials[n].params["seed"] for n in started] == [0, 1] and first.counted() == 2
    resumed = Ledger(url, spec, create=False)  # the driver was killed with two points still queued
    assert resumed.counted() == 2 and resumed.unfinished() == started
    rest = [resumed.new_trial(), resumed.new_trial()]
    assert [resumed.trials[n].params["seed"] for n in rest] == [2, 3] and resumed.counted() == 4
