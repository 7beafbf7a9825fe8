"""Reading a search-space file and checking it before anything runs.

`load_space` validates everything: the schema (sweeper/space.py), the dotted paths against the
trial config, and 200 sampled configs (plus every range end and every choice) against the trial
config's own rules. Every mistake is one `SpaceError` line: `file: key: rule`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterator

from pydantic import ValidationError

from sweeper.adapters.optuna_search import sample_configs
from sweeper.space import (CategoricalParam, Param, SearchSpace, SpaceError, base_trial_dict, iter_params,
                           trial_config_for, trial_config_paths)
from trainables import footprint
from trainables.config import ConfigError, TrialConfig, flatten, format_validation_error, read_yaml
from core.errors import brief, cut, short_path
from sweeper.sweep_dir import SPACE_FILE
from trainables.metrics import direction, reported_metrics

N_VALIDATION_SAMPLES = 200


def load_space(path: str | Path, n_samples: int = N_VALIDATION_SAMPLES, shown: str | None = None) -> SearchSpace:
    """Read and fully validate a search-space file; raise SpaceError on the first mistake. `shown`:
    the file as its user named it, in error lines (default: `path`)."""
    source = short_path(shown or path)
    try:
        data = read_yaml(path, shown=shown)
    except ConfigError as err:
        raise SpaceError(str(err)) from None
    try:
        spec = SearchSpace.model_validate(data)
    except ValidationError as err:
        raise SpaceError(_space_error_line(err, source)) from None
    check_space(spec, source, n_samples)
    return spec


def load_saved_space(sweep_dir: str | Path, n_samples: int = N_VALIDATION_SAMPLES) -> SearchSpace:
    """The space a sweep's folder was started with, from the folder's own copy (space.yaml): a file
    there, never a link followed out of the folder (whose text an error line would quote)."""
    path = Path(sweep_dir) / SPACE_FILE
    if path.is_symlink():
        raise SpaceError(f"{short_path(path)}: a link; a sweep's folder holds its own copy of its space file")
    return load_space(path, n_samples)


def searched_twice(space: dict[str, Param]) -> tuple[tuple[str, str], tuple[str, str]] | None:
    """The first path searched twice on one trial, as two (path, condition), or None. A path may be
    searched in several places only under different choices of one parameter (those branches never
    meet in a trial); at the top level and in a branch, or in two parameters' branches, both apply."""
    seen: dict[str, list[tuple[tuple, str]]] = {}

    def walk(sub: dict[str, Param], chain: tuple, cond: str) -> Iterator[tuple[tuple[str, str], tuple[str, str]]]:
        for path, spec in sub.items():
            for other, other_cond in seen.get(path, []):
                if not _exclusive(chain, other):
                    yield (path, other_cond), (path, cond)
            seen.setdefault(path, []).append((chain, cond))
            if isinstance(spec, CategoricalParam):
                for choice, branch in spec.when.items():
                    yield from walk(branch, chain + ((id(spec), choice),), f"{path}={choice}")

    return next(walk(space, (), ""), None)


def _exclusive(a: tuple, b: tuple) -> bool:
    """Whether two places in the tree (chains of (parameter, choice)) can never both apply."""
    for (node_a, choice_a), (node_b, choice_b) in zip(a, b):
        if node_a != node_b:
            return False  # two parameters' branches: both may be chosen
        if choice_a != choice_b:
            return True
    return False  # one place holds the other


def _space_error_line(err: ValidationError, source: str) -> str:
    # without pydantic's discriminator hops: `space.x.low`, not `space.x.int.low`
    return format_validation_error(err, source, hide=("int", "float", "categorical"))


def check_space(spec: SearchSpace, source: str, n_samples: int) -> None:
    """Cross-checks the schema cannot express: paths, fixed, budget, scheduler, baselines, samples."""
    known = trial_config_paths()
    fixed_flat = flatten(spec.fixed)
    set_by = {"steps": "budget.max_steps", "eval.every": "budget.eval_every", "eval.full_at": "the scheduler (ASHA's rungs)"}
    for key, by in set_by.items():
        if key in fixed_flat:
            raise SpaceError(f"{source}: fixed.{key}: set by {by}; remove it from `fixed`")
    for path, _, cond in iter_params(spec.space):
        where = f"space.{cut(path, 60)}" + (f" (when {cut(cond, 60)})" if cond else "")
        if path not in known:
            raise SpaceError(f"{source}: {where}: no such key in the trial config (e.g. model.n_layers, dat.switch_step)")
        if path in set_by:
            raise SpaceError(f"{source}: {where}: set by {set_by[path]}; it cannot be searched")
        if path in fixed_flat:
            raise SpaceError(f"{source}: {where}: also set in `fixed`; a key is either fixed or searched")
    if twice := searched_twice(spec.space):
        (path, first), (_, second) = twice
        place = lambda cond: f"when {cut(cond, 50)}" if cond else "at the top level"  # noqa: E731
        raise SpaceError(f"{source}: space.{cut(path, 60)}: searched twice on one trial ({place(first)} and "
                         f"{place(second)}); a key may repeat only under different choices of one parameter")
    try:
        TrialConfig.model_validate(base_trial_dict(spec))
    except ValidationError as err:
        # field errors in `fixed` are reported here; cross-field rules may depend on the
        # searched values and are checked on the samples below
        for e in err.errors():
            key = ".".join(map(str, e["loc"]))
            if e["type"] == "extra_forbidden" or key in fixed_flat:
                one = ValidationError.from_exception_data(err.title, [e])
                raise SpaceError(format_validation_error(one, f"{source}: fixed").replace(": fixed: ", ": fixed.", 1)) from None

    sch, budget = spec.scheduler, spec.budget
    _, max_t = spec.asha_limits()
    if max_t != budget.max_steps:  # a trial stopped at max_t < max_steps would count as pruned, never complete
        raise SpaceError(f"{source}: scheduler.max_t: must equal budget.max_steps (or be left out), got ({max_t}, {budget.max_steps})")
    if sch.type == "asha" and (sch.grace_period or 0) > max_t:
        raise SpaceError(f"{source}: scheduler.grace_period: `grace_period <= max_t` must hold, got ({sch.grace_period}, {max_t})")
    if sch.type == "asha" and sch.grace_period is not None and sch.grace_period < budget.eval_every:
        raise SpaceError(f"{source}: scheduler.grace_period: `grace_period >= budget.eval_every` must hold "
                         f"(trials report every eval_every steps), got ({sch.grace_period}, {budget.eval_every})")
    if spec.searcher.sampler == "cmaes" and any(isinstance(p, CategoricalParam) for _, p, _ in iter_params(spec.space)):
        raise SpaceError(f"{source}: searcher.sampler: cmaes cannot search categorical parameters; use tpe or random")
    if spec.searcher.sampler == "grid":
        check_grid(spec, source)
    if len(spec.searcher.baseline) > budget.num_samples:
        raise SpaceError(f"{source}: searcher.baseline: more baseline points ({len(spec.searcher.baseline)}) than budget.num_samples ({budget.num_samples})")
    seen: dict[str, int] = {}
    for i, point in enumerate(spec.searcher.baseline):  # a point already trained is never trained again
        if (first := seen.setdefault(json.dumps(point, sort_keys=True, default=repr), i)) != i:
            raise SpaceError(f"{source}: searcher.baseline: point {i + 1} repeats point {first + 1} "
                             f"({cut(repr(point), 80)}); list each point once")

    known_direction = direction(spec.metric)
    if spec.mode is None:
        raise SpaceError(f"{source}: mode: {cut(spec.metric, 40)} has no better direction of its own; set mode: max or min")
    if known_direction is not None and spec.mode != known_direction:
        better = "lower" if known_direction == "min" else "higher"
        raise SpaceError(f"{source}: mode: {spec.metric} is better {better}, so mode must be {known_direction} "
                         f"(or leave mode out), got {spec.mode}")
    if fixed_flat.get("device") == "cuda" and spec.resources.gpu == 0:
        raise SpaceError(f"{source}: fixed.device: cuda needs resources.gpu > 0 (trials get no GPU otherwise), got gpu 0")
    if spec.resources.gpu > 0 and fixed_flat.get("device") == "cpu":
        raise SpaceError(f"{source}: resources.gpu: trials with fixed.device cpu would hold a GPU they never use, got gpu {spec.resources.gpu}")

    for params in sample_configs(spec, source, n_samples):
        check_trial(spec, trial_config_for(spec, params, source), source, params)


def check_grid(spec: SearchSpace, source: str) -> None:
    """A grid sweep runs every point of the product of categorical choices, each once: so only
    unconditional categorical parameters, no baseline points, and num_samples = the grid's size."""
    for path, p, cond in iter_params(spec.space):
        if not isinstance(p, CategoricalParam):
            raise SpaceError(f"{source}: searcher.sampler: grid searches categorical parameters only, got space.{cut(path, 60)} ({p.type})")
        if p.when:
            raise SpaceError(f"{source}: searcher.sampler: grid cannot search conditional parameters (space.{cut(path, 60)} has `when`)")
    if spec.searcher.baseline:
        raise SpaceError(f"{source}: searcher.baseline: a grid runs every point once; baseline points would run twice")
    size = math.prod(len(p.choices) for p in spec.space.values())  # type: ignore[union-attr]
    if spec.budget.num_samples != size:
        raise SpaceError(f"{source}: budget.num_samples: a grid of {size} points needs num_samples {size}, got {spec.budget.num_samples}")


def check_trial(spec: SearchSpace, cfg: TrialConfig, source: str, params: dict[str, Any]) -> None:
    """What a sampled trial config must satisfy beyond its own rules: the sweep's metric (and the
    scheduler's pre-phase metric) is one it reports, and it fits in this machine's memory."""
    names = reported_metrics(cfg)
    if spec.metric not in names:
        close = sorted(n for n in names if n.split("_")[0] == spec.metric.split("_")[0]) or sorted(names)
        raise SpaceError(f"{source}: metric: trials of this space do not report {brief(spec.metric, 40)} "
                         f"(task {cfg.task.name}, lengths {list(cfg.eval.multipliers)}); e.g. {', '.join(close[:4])}")
    signal = spec.scheduler.pre_phase_metric
    if signal is not None and signal not in names:
        close = sorted(n for n in names if n.split("_")[0] == signal.split("_")[0]) or sorted(names)
        raise SpaceError(f"{source}: scheduler.pre_phase_metric: trials of this space do not report {brief(signal, 40)} "
                         f"(task {cfg.task.name}, lengths {list(cfg.eval.multipliers)}); e.g. {', '.join(close[:4])}")
    try:
        footprint.check_fits(cfg, source)
    except ConfigError as err:
        where = f" at the sampled point {brief(params, 80)}" if params else ""
        raise SpaceError(f"{err}{where}") from None
