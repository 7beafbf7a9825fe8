"""The search-space file: one YAML file, one question (format: search_spaces/README.md).

    SearchSpace
    ├── name, description, metric (acc_3x), mode (max)
    ├── fixed       a partial trial config shared by every trial
    ├── space       dotted path -> int | float | categorical; a categorical may carry
    │               `when: {choice: {path: param, ...}}`, parameters that exist only
    │               when that choice is drawn (nesting allowed)
    ├── budget      num_samples, max_concurrent, max_steps, eval_every
    ├── scheduler   asha (grace_period, max_t, reduction_factor) | fifo
    ├── searcher    sampler (tpe | random | cmaes | qmc | grid), seed, baseline points
    └── resources   cpu, gpu per trial (fractions allowed)

`load_space` validates everything before anything runs: the schema, the dotted paths
against the trial config, and 200 sampled configs (plus every range end and every
choice) against the trial config's own rules. Every mistake is one `SpaceError` line:
`file: key: rule`.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Annotated, Any, Iterator, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sweeper.asha import milestones
from trainables import footprint
from trainables.config import MAX_SEED, MAX_STEPS, ConfigError, TrialConfig, format_validation_error, read_yaml, set_dotted, trial_config_from_dict
from trainables.errors import brief, cut, short_path
from trainables.metrics import direction, reported_metrics

N_VALIDATION_SAMPLES = 200
MAX_INT = 10**15  # ends of an int range; beyond any sensible setting, within a float's exact range
# A sweep's name becomes a folder, a lock file beside it, an MLflow experiment and run name, a Ray job id and a
# quoted value in MLflow's search filters: letters, digits, `_`, `-`, `.`, not first a dot or dash, and short
NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.")
MAX_NAME = 80


def check_name(value: str) -> str:
    """`value` if it is a safe sweep name, else ValueError stating the rule and a cut value."""
    if not isinstance(value, str):
        raise ValueError(f"must be a string, got {brief(value, 40)}")
    if not value or len(value) > MAX_NAME:
        raise ValueError(f"must be 1 to {MAX_NAME} characters (it names a folder and MLflow runs), "
                         f"got {len(value):,}: {brief(value, 40)}")
    bad = next((c for c in value if c not in NAME_CHARS), None)
    if bad is not None:
        raise ValueError(f"may hold only letters, digits, `_`, `-` and `.`, got {bad!r} in {brief(value, 40)}")
    if value[0] in ".-":
        raise ValueError(f"must start with a letter, a digit or `_`, got {brief(value, 40)}")
    return value


class SpaceError(ConfigError):
    """A mistake in a search-space file; one line naming the file, key and rule."""


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class IntParam(_Frozen):
    type: Literal["int"]
    low: int = Field(ge=-MAX_INT, le=MAX_INT)
    high: int = Field(ge=-MAX_INT, le=MAX_INT)
    step: int = Field(1, ge=1, le=MAX_INT)
    log: bool = False

    @model_validator(mode="after")
    def _check(self) -> "IntParam":
        _check_range(self.low, self.high, self.log)
        if self.log and self.step != 1:
            raise ValueError(f"`log` needs `step == 1`, got step={self.step}")
        _check_step(self.low, self.high, self.step)
        return self


class FloatParam(_Frozen):
    type: Literal["float"]
    low: float = Field(ge=-1e300, le=1e300)
    high: float = Field(ge=-1e300, le=1e300)
    step: float | None = Field(None, gt=0)
    log: bool = False

    @model_validator(mode="after")
    def _check(self) -> "FloatParam":
        _check_range(self.low, self.high, self.log)
        if self.log and self.step is not None:
            raise ValueError("`log` and `step` cannot be used together")
        if self.step is not None:
            _check_step(self.low, self.high, self.step)
        return self


Scalar = Union[bool, int, float, str, None]


class CategoricalParam(_Frozen):
    type: Literal["categorical"]
    choices: list[Scalar] = Field(min_length=1, max_length=1000)
    when: dict[Scalar, dict[str, "Param"]] = {}  # choice -> parameters that exist only under it

    @model_validator(mode="after")
    def _check(self) -> "CategoricalParam":
        if len(set(map(repr, self.choices))) != len(self.choices):
            raise ValueError(f"choices must be distinct, got {brief(self.choices)}")
        for key in self.when:
            if not any(key == c and type(key) is type(c) for c in self.choices):
                raise ValueError(f"`when` key {brief(key)} is not one of the choices {brief(self.choices)}")
        return self


Param = Annotated[Union[IntParam, FloatParam, CategoricalParam], Field(discriminator="type")]
CategoricalParam.model_rebuild()


def _check_range(low: float, high: float, log: bool) -> None:
    if not low < high:
        raise ValueError(f"`low < high` must hold, got (low={low}, high={high})")
    if log and low <= 0:
        raise ValueError(f"`log` needs `low > 0`, got low={low}")


def _check_step(low: float, high: float, step: float) -> None:
    if step > high - low:  # the range would collapse to its low end
        raise ValueError(f"`step <= high - low` must hold (else only `low` can be drawn), got step={step} for [{low}, {high}]")


class Budget(_Frozen):
    num_samples: int = Field(20, ge=1, le=1_000_000)  # trials in the sweep, baselines included
    max_concurrent: int = Field(2, ge=1, le=100_000)  # trials running at once
    max_steps: int = Field(6000, ge=1, le=MAX_STEPS)  # training steps of a trial that is never stopped
    eval_every: int = Field(250, ge=1, le=MAX_STEPS)  # report (and checkpoint, and ASHA decision) interval

    @model_validator(mode="after")
    def _check(self) -> "Budget":
        if self.eval_every > self.max_steps:
            raise ValueError(f"`eval_every <= max_steps` must hold, got ({self.eval_every}, {self.max_steps})")
        return self


class Scheduler(_Frozen):
    type: Literal["asha", "fifo"] = "asha"
    grace_period: int | None = Field(None, ge=1, le=MAX_STEPS)  # steps before a trial can be stopped; default 2 x eval_every
    max_t: int | None = Field(None, ge=1, le=MAX_STEPS)  # must equal budget.max_steps (its default)
    reduction_factor: float = Field(3.0, gt=1.0, le=1000.0)
    # phase-aware: a trial is judged only from its last training phase on (a DAT switch, the end of
    # a curriculum: trainables/phases.py) + phase_margin steps; false: plain ASHA
    phase_aware: bool = True
    phase_margin: int | None = Field(None, ge=0, le=MAX_STEPS)  # default 2 x eval_every


class Searcher(_Frozen):
    # grid: every combination of the (categorical, unconditional) choices exactly once, num_samples = their product
    sampler: Literal["tpe", "random", "cmaes", "qmc", "grid"] = "tpe"
    seed: int = Field(0, ge=0, le=MAX_SEED)
    baseline: list[dict[str, Any]] = Field([], max_length=10_000)  # points evaluated first: {param name: value}


class Resources(_Frozen):
    cpu: float = Field(1.0, gt=0, le=100_000)
    gpu: float = Field(0.0, ge=0, le=1024)

    @model_validator(mode="after")
    def _check(self) -> "Resources":
        if self.gpu > 1 and self.gpu != int(self.gpu):
            raise ValueError(f"gpu above 1 must be a whole number, got {self.gpu}")
        return self


class SearchSpace(_Frozen):
    name: str  # also a folder, a lock file, MLflow names and filters: check_name
    description: str = Field("", max_length=10_000)
    metric: str = Field("acc_3x", max_length=100)  # a metric the trials report (trainables/metrics.py)
    mode: Literal["max", "min"] | None = None  # default: the metric's own direction; None only when it has none (refused)
    fixed: dict[str, Any] = {}
    space: dict[str, Param] = Field(min_length=1)
    budget: Budget = Budget()
    scheduler: Scheduler = Scheduler()
    searcher: Searcher = Searcher()
    resources: Resources = Resources()

    @field_validator("name", mode="before")
    @classmethod
    def _name(cls, value: Any) -> str:
        return check_name(value)

    @model_validator(mode="before")
    @classmethod
    def _default_mode(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("mode") is None and isinstance(data.get("metric", "acc_3x"), str):
            data = {**data, "mode": direction(data.get("metric", "acc_3x"))}  # None: check_space asks for it
        return data

    def asha_limits(self) -> tuple[int, int]:
        """(grace_period, max_t) as ASHA gets them: the one place their defaults are resolved."""
        b, s = self.budget, self.scheduler
        return (s.grace_period or min(2 * b.eval_every, b.max_steps)), (s.max_t or b.max_steps)

    def asha_rungs(self) -> tuple[int, ...]:
        """The steps ASHA compares trials at (Ray's rule for one bracket: grace x rf^k up to max_t,
        each met by a trial's first report at or after it), lowest first; () without ASHA."""
        if self.scheduler.type != "asha":
            return ()
        return tuple(sorted(milestones(*self.asha_limits(), self.scheduler.reduction_factor)))

    def phase_margin(self) -> int | None:
        """Steps after a trial's last phase change before ASHA may judge it; None: plain ASHA."""
        s = self.scheduler
        if s.type != "asha" or not s.phase_aware:
            return None
        return s.phase_margin if s.phase_margin is not None else 2 * self.budget.eval_every


# --------------------------------------------------------------------------- walking the tree


def iter_params(space: dict[str, Param], parent: str = "") -> Iterator[tuple[str, Param, str]]:
    """Every parameter as (dotted path, spec, condition), depth first; condition is '' at top level."""
    for path, spec in space.items():
        yield path, spec, parent
        if isinstance(spec, CategoricalParam):
            for choice, sub in spec.when.items():
                yield from iter_params(sub, f"{path}={choice}")


def param_names(space: dict[str, Param]) -> dict[tuple[str, str], str]:
    """(path, condition) -> the Optuna parameter name: the path, or `path|condition` when the
    same path is searched under several parents (different parameters, per the tuning playbook)."""
    entries = [(path, cond) for path, _, cond in iter_params(space)]
    counts: dict[str, int] = {}
    for path, _ in entries:
        counts[path] = counts.get(path, 0) + 1
    return {(p, c): (p if counts[p] == 1 else f"{p}|{c or 'top'}") for p, c in entries}


def trial_config_paths() -> set[str]:
    """Every dotted path a trial config accepts (`model.n_layers`, `steps`, ...)."""
    def walk(model: type[BaseModel], prefix: str) -> Iterator[str]:
        for name, field in model.model_fields.items():
            ann = field.annotation
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                yield from walk(ann, f"{prefix}{name}.")
            else:
                yield f"{prefix}{name}"
    return set(walk(TrialConfig, ""))


def flatten(data: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in data.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


# --------------------------------------------------------------------------- loading


def load_space(path: str | Path, n_samples: int = N_VALIDATION_SAMPLES) -> SearchSpace:
    """Read and fully validate a search-space file; raise SpaceError on the first mistake."""
    source = short_path(path)
    try:
        data = read_yaml(path)
    except ConfigError as err:
        raise SpaceError(str(err)) from None
    try:
        spec = SearchSpace.model_validate(data)
    except ValidationError as err:
        raise SpaceError(_space_error_line(err, source)) from None
    check_space(spec, source, n_samples)
    return spec


def _space_error_line(err: ValidationError, source: str) -> str:
    # without pydantic's discriminator hops: `space.x.low`, not `space.x.int.low`
    return format_validation_error(err, source, hide=("int", "float", "categorical"))


def base_trial_dict(spec: SearchSpace) -> dict:
    """`fixed` with the budget applied: steps = max_steps, eval.every = eval_every, and the
    scheduler's: eval.full_at = ASHA's rungs."""
    data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in spec.fixed.items()}
    data["steps"] = spec.budget.max_steps
    data.setdefault("eval", {})
    data["eval"] = {**data["eval"], "every": spec.budget.eval_every}
    if rungs := spec.asha_rungs():  # every comparison ASHA makes is on the full evaluation sets
        data["eval"]["full_at"] = list(rungs)
    return data


def trial_config_for(spec: SearchSpace, params: dict[str, Any], source: str = "<trial>") -> TrialConfig:
    """The trial config of one sampled point: `fixed` + budget + the sampled dotted paths."""
    data = base_trial_dict(spec)
    for name, value in params.items():
        set_dotted(data, name.split("|")[0], value, source)
    return trial_config_from_dict(data, source)


def check_space(spec: SearchSpace, source: str, n_samples: int) -> None:
    """Cross-checks the schema cannot express: paths, fixed, budget, scheduler, baselines, samples."""
    from sweeper.adapters.optuna_search import sample_configs  # optuna is imported only when validating samples

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


def grid_points(spec: SearchSpace) -> list[dict[str, Any]]:
    """Every point of a grid space ({path: choice}), in the order of the choices."""
    paths = list(spec.space)
    return [dict(zip(paths, combo)) for combo in itertools.product(*(spec.space[k].choices for k in paths))]  # type: ignore[union-attr]


def check_trial(spec: SearchSpace, cfg: TrialConfig, source: str, params: dict[str, Any]) -> None:
    """What a sampled trial config must satisfy beyond its own rules: the sweep's metric is one
    it reports, and it fits in this machine's memory."""
    names = reported_metrics(cfg)
    if spec.metric not in names:
        close = sorted(n for n in names if n.split("_")[0] == spec.metric.split("_")[0]) or sorted(names)
        raise SpaceError(f"{source}: metric: trials of this space do not report {brief(spec.metric, 40)} "
                         f"(task {cfg.task.name}, lengths {list(cfg.eval.multipliers)}); e.g. {', '.join(close[:4])}")
    try:
        footprint.check_fits(cfg, source)
    except ConfigError as err:
        where = f" at the sampled point {brief(params, 80)}" if params else ""
        raise SpaceError(f"{err}{where}") from None
