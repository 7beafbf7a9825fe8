"""The Optuna adapter: a SearchSpace as a define-by-run function, samplers, baselines.

The only module of the sweeper that imports optuna (besides the importance table of
`sweeper report`). A conditional parameter is suggested only after its parent's choice
is drawn, so Optuna's trials hold exactly the parameters that exist for them.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any, Iterator

import optuna

from trainables.config import ConfigError
from core.errors import brief, cut, repr_cut
from sweeper.fs import sqlite_read_only_url, why_unreadable
from sweeper.space import CategoricalParam, FloatParam, IntParam, Param, SearchSpace, SpaceError, grid_points, param_names, trial_config_for

optuna.logging.set_verbosity(optuna.logging.ERROR)  # what goes wrong is said in the sweeper's own lines, not Optuna's SQL
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

Condition = tuple[tuple[str, Any], ...]  # ((parent param name, required choice), ...)


def walk(space: dict[str, Param], names: dict, cond: Condition = (), cond_str: str = "") -> Iterator[tuple[str, Param, str, Condition]]:
    """(path, spec, optuna name, conditions) for every parameter, depth first."""
    for path, spec in space.items():
        name = names[(path, cond_str)]
        yield path, spec, name, cond
        if isinstance(spec, CategoricalParam):
            for choice, sub in spec.when.items():
                yield from walk(sub, names, cond + ((name, choice),), f"{path}={choice}")


def distribution(spec: Param) -> optuna.distributions.BaseDistribution:
    if isinstance(spec, IntParam):
        return optuna.distributions.IntDistribution(spec.low, spec.high, log=spec.log, step=spec.step)
    if isinstance(spec, FloatParam):
        return optuna.distributions.FloatDistribution(spec.low, spec.high, log=spec.log, step=spec.step)
    return optuna.distributions.CategoricalDistribution(spec.choices)


class DefineByRun:
    """The function Ray Tune's OptunaSearch calls with each new Optuna trial (picklable: Ray
    saves the searcher with the experiment)."""

    def __init__(self, spec: SearchSpace):
        self.space = spec.space
        self.names = param_names(spec.space)

    def __call__(self, trial: optuna.Trial) -> None:
        self._suggest(trial, self.space, "")

    def _suggest(self, trial: optuna.Trial, space: dict[str, Param], cond_str: str) -> None:
        for path, p in space.items():
            name = self.names[(path, cond_str)]
            if isinstance(p, IntParam):
                trial.suggest_int(name, p.low, p.high, step=p.step, log=p.log)
            elif isinstance(p, FloatParam):
                trial.suggest_float(name, p.low, p.high, step=p.step, log=p.log)
            else:
                value = trial.suggest_categorical(name, p.choices)
                sub = _branch(p, value)
                if sub:
                    self._suggest(trial, sub, f"{path}={value}")


define_by_run = DefineByRun


def _branch(p: CategoricalParam, value: Any) -> dict[str, Param] | None:
    for key, sub in p.when.items():
        if key == value and type(key) is type(value):
            return sub
    return None


class AskTellGridSampler(optuna.samplers.GridSampler):
    """Optuna's GridSampler without its end-of-grid `study.stop()`, which only works inside
    `study.optimize` (Ray drives the study by ask and tell, where it raises); the sweep ends
    after num_samples trials, which validation makes equal to the grid's size."""

    def after_trial(self, study, trial, state, values) -> None:  # noqa: ANN001
        pass


def make_sampler(spec: SearchSpace, drawn: int = 0) -> optuna.samplers.BaseSampler:
    """The space's sampler for a study that holds `drawn` trials already. A resumed sweep's random
    stream starts where its trials leave off (the seed moved on by `drawn`): a sampler seeded
    afresh would draw the points of the first launch again. Grid and QMC read their position from
    the study itself."""
    seed = spec.searcher.seed
    moved = None if seed is None else (seed + drawn) % 2**32
    startup = {} if spec.searcher.startup_trials is None else {"n_startup_trials": spec.searcher.startup_trials}
    return {
        "tpe": lambda: optuna.samplers.TPESampler(seed=moved, multivariate=True, group=True, **startup),
        "random": lambda: optuna.samplers.RandomSampler(seed=moved),
        "cmaes": lambda: optuna.samplers.CmaEsSampler(seed=moved, warn_independent_sampling=False),
        "qmc": lambda: optuna.samplers.QMCSampler(seed=seed, scramble=True, warn_independent_sampling=False),
        # every grid point once, in a seeded random order; the study (sweeps/<name>/optuna.db) records which
        # points ran, so a resumed sweep draws only the rest
        "grid": lambda: AskTellGridSampler({k: p.choices for k, p in spec.space.items()}, seed=seed),
    }[spec.searcher.sampler]()


def baseline_points(spec: SearchSpace, source: str = "<space>") -> list[dict[str, Any]]:
    """The baseline points keyed by Optuna parameter name, checked against the space."""
    entries = list(walk(spec.space, param_names(spec.space)))
    by_name = {name: (p, cond) for _, p, name, cond in entries}
    by_path: dict[str, list[str]] = {}
    for path, _, name, _ in entries:
        by_path.setdefault(path, []).append(name)
    points = []
    for i, raw in enumerate(spec.searcher.baseline):
        where = f"{source}: searcher.baseline[{i}]"
        point = {}
        for key, value in raw.items():
            if key in by_name:
                name = key
            elif len(by_path.get(key, [])) == 1:
                name = by_path[key][0]
            else:
                known = ", ".join(by_name)
                raise SpaceError(f"{where}.{cut(str(key), 60)}: not a searched parameter (searched: {cut(known, 120)})")
            p, _ = by_name[name]
            if not contains(p, value):
                raise SpaceError(f"{where}.{key}: {brief(value)} is outside the searched {cut(_describe(p), 100)}")
            point[name] = value
        for name in point:
            for parent, choice in by_name[name][1]:
                if parent in point and point[parent] != choice:
                    raise SpaceError(f"{where}.{name}: exists only when {parent}={brief(choice)}, but the point sets {parent}={brief(point[parent])}")
        points.append(point)
    return points


def contains(p: Param, value: Any) -> bool:
    """Whether the parameter `p` can take `value` (inside its range, on its step, among its choices)."""
    if isinstance(p, CategoricalParam):
        return any(value == c and type(value) is type(c) for c in p.choices) or value in p.choices
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float) and not math.isfinite(value)):
        return False
    if isinstance(p, IntParam) and value != int(value):
        return False
    if not p.low <= value <= p.high:
        return False
    if p.step:
        k = (value - p.low) / p.step
        return abs(k - round(k)) < 1e-8
    return True


def _describe(p: Param) -> str:
    if isinstance(p, CategoricalParam):
        return f"choices {p.choices}"
    return f"range [{p.low}, {p.high}]" + (f" with step {p.step}" if p.step not in (None, 1) else "")


def sample_configs(spec: SearchSpace, source: str, n_random: int) -> list[dict[str, Any]]:
    """Draw the baselines, every range end and choice, and `n_random` random points; each must
    make a valid trial config. Returns the sampled parameter dicts."""
    names = param_names(spec.space)
    forced: list[dict[str, Any]] = list(baseline_points(spec, source))
    for _, p, name, cond in walk(spec.space, names):
        values = p.choices if isinstance(p, CategoricalParam) else [p.low, p.high]  # a step divides the range
        forced += [{**dict(cond), name: v} for v in values]

    if spec.searcher.sampler == "grid":  # small by construction: check every point
        forced, n_random = grid_points(spec), 0
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=spec.searcher.seed))
    for point in forced:
        study.enqueue_trial(point, skip_if_exists=False)
    suggest = define_by_run(spec)
    samples = []
    for _ in range(len(forced) + n_random):
        trial = study.ask()
        suggest(trial)
        samples.append(dict(trial.params))
        study.tell(trial, 0.0)
    for params in samples:
        try:
            trial_config_for(spec, params, source)
        except ConfigError as err:
            rule = str(err).removeprefix(f"{source}: ")
            raise SpaceError(f"{source}: space: a sampled point breaks a trial-config rule: {rule} "
                             f"(the point: {brief(params, 100)})") from None
    return samples


def random_points(spec: SearchSpace, n: int) -> list[dict[str, Any]]:
    """`n` points drawn at random from the space (seeded by the searcher's seed)."""
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=spec.searcher.seed))
    suggest, points = define_by_run(spec), []
    for _ in range(n):
        trial = study.ask()
        suggest(trial)
        points.append(dict(trial.params))
        study.tell(trial, 0.0)
    return points


def describe_space(spec) -> list[str]:
    """One line per parameter: optuna name, distribution (cut: a choice may list 1,000 values),
    condition."""
    lines = []
    for _, p, name, cond in walk(spec.space, param_names(spec.space)):
        when = "  when " + ", ".join(f"{k}={v}" for k, v in cond) if cond else ""
        lines.append(f"  {name:<40} {repr_cut(distribution(p), 160)}{when}")
    return lines


def param_importances(storage: Path, study_name: str) -> tuple[list[str], int]:
    """fANOVA importances over COMPLETE trials (ASHA-stopped ones trained less: left out; draws
    of an already-trained point, tagged `duplicate_of`, counted once)."""
    try:
        ro = optuna.storages.RDBStorage(sqlite_read_only_url(storage), skip_table_creation=True)
        study = optuna.load_study(study_name=study_name, storage=ro)
        trials = study.trials
    except Exception as err:  # noqa: BLE001 - a study damaged past its schema: one line
        raise ConfigError(f"{storage}: not a readable Optuna study ({why_unreadable(storage, err)})") from None
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE and "duplicate_of" not in t.user_attrs]
    if len(complete) < 2 or len({tuple(t.values) for t in complete}) < 2:  # one value: nothing to attribute
        return [], len(complete)
    try:
        trained = optuna.create_study(directions=study.directions)  # in memory: the trials that trained
        trained.add_trials(complete)
        with warnings.catch_warnings():  # a verb's own process: the evaluator's notes on ties stay out of the report
            warnings.simplefilter("ignore", UserWarning)
            imp = optuna.importance.get_param_importances(  # named: the library's default has changed before
                trained, evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0))
    except (RuntimeError, ValueError, TypeError):  # too few distinct points, or values the study holds wrongly
        return [], len(complete)
    return [f"| `{k}` | {v:.3f} |" for k, v in imp.items()], len(complete)


