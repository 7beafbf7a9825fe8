"""The search-space file: one YAML file, one question (format: search_spaces/README.md).

    SearchSpace
    ├── name, description, metric (acc_3x), mode (max)
    ├── fixed       a partial trial config shared by every trial
    ├── space       dotted path -> int | float | categorical; a categorical may carry
    │               `when: {choice: {path: param, ...}}`, parameters that exist only
    │               when that choice is drawn (nesting allowed)
    ├── budget      num_samples, max_concurrent, max_steps, eval_every
    ├── scheduler   asha (grace_period, max_t, reduction_factor, phases) | fifo: space_scheduler.py
    ├── searcher    sampler (tpe | random | cmaes | qmc | grid), seed, baseline points
    └── resources   cpu, gpu per trial (fractions allowed)

The schema, and what a sweep derives from it (the trial config of a sampled point, ASHA's rungs,
a grid's points). Reading and checking a file: sweeper/space_file.py.
"""

from __future__ import annotations

from decimal import Decimal, localcontext

import itertools
from typing import Annotated, Any, Iterator, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sweeper.asha import milestones
from sweeper.space_scheduler import Scheduler
from sweeper.sweep_dir import MAX_NAME, check_name  # noqa: F401 - a sweep name's rule, read by the space's `name`
from trainables.config import MAX_SEED, MAX_STEPS, ConfigError, TrialConfig, set_dotted, trial_config_from_dict
from core.errors import brief
from core.numbers_only import NumbersOnly
from trainables.metrics import direction

MAX_INT = 10**15  # ends of an int range; beyond any sensible setting, within a float's exact range
MAX_GRID_POINTS = 10**15  # values a stepped float range may hold: Optuna works its grid out in 28-digit decimals
# A sweep's name becomes a folder, a lock file beside it, an MLflow experiment and run name, a Ray job id and a
# quoted value in MLflow's search filters: letters, digits, `_`, `-`, `.`, not first a dot or dash, and short
class SpaceError(ConfigError):
    """A mistake in a search-space file; one line naming the file, key and rule."""


class _Frozen(NumbersOnly):
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
            if (self.high - self.low) / self.step > MAX_GRID_POINTS:
                raise ValueError(f"`(high - low) / step <= 1e15` must hold (a finer step is no step), "
                                 f"got step={self.step} for [{self.low}, {self.high}]")
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
        if len(set(self.choices)) != len(self.choices):  # Optuna finds a choice by ==: true would stand for 1
            raise ValueError(f"choices must differ in value, not only in type (true == 1 == 1.0), got {brief(self.choices)}")
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
    with localcontext() as exact:  # the numbers as written, as Optuna checks them; wide enough for any float
        exact.prec = 2000
        rest = (Decimal(repr(high)) - Decimal(repr(low))) % Decimal(repr(step))
    if rest != 0:
        raise ValueError(f"`high - low` must be a multiple of `step` (else `high` is never drawn), got step={step} "
                         f"for [{low}, {high}]")


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


class Searcher(_Frozen):
    # grid: every combination of the (categorical, unconditional) choices exactly once, num_samples = their product
    sampler: Literal["tpe", "random", "cmaes", "qmc", "grid"] = "tpe"
    seed: int = Field(0, ge=0, le=MAX_SEED)
    baseline: list[dict[str, Any]] = Field([], max_length=10_000)  # points evaluated first: {param name: value}
    startup_trials: int | None = Field(None, ge=1, le=100_000)  # tpe: random draws before TPE models (Optuna: 10)

    @model_validator(mode="after")
    def _check(self) -> "Searcher":
        if self.startup_trials is not None and self.sampler != "tpe":
            raise ValueError(f"startup_trials is TPE's: sampler {self.sampler} takes none")
        return self


class Resources(_Frozen):
    cpu: float = Field(1.0, gt=0, le=100_000)
    gpu: float = Field(0.0, ge=0, le=1024)
    # true: a finished trial's worker process (torch already imported) takes the next trial; false: a
    # fresh worker per trial, placed anew (trials spread over a cluster's nodes as resources allow)
    reuse_workers: bool = True

    @model_validator(mode="after")
    def _check(self) -> "Resources":
        if self.gpu > 1 and self.gpu != int(self.gpu):
            raise ValueError(f"gpu above 1 must be a whole number, got {self.gpu}")
        for name, amount in (("cpu", self.cpu), ("gpu", self.gpu)):
            if amount != round(amount, 4):  # Ray counts resources in steps of 0.0001
                raise ValueError(f"{name} may have at most 4 decimal places (Ray's resolution), got {amount!r}")
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


def base_trial_dict(spec: SearchSpace) -> dict:
    """`fixed` with the budget applied: steps = max_steps, eval.every = eval_every, and the
    scheduler's: eval.full_at = ASHA's rungs."""
    data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in spec.fixed.items()}
    data["steps"] = spec.budget.max_steps
    section = data.setdefault("eval", {})
    if isinstance(section, dict):  # anything else (`eval: null`): TrialConfig's validation says so, in one line
        data["eval"] = {**section, "every": spec.budget.eval_every}
        if rungs := spec.asha_rungs():  # every comparison ASHA makes is on the full evaluation sets
            data["eval"]["full_at"] = list(rungs)
    return data


def trial_config_for(spec: SearchSpace, params: dict[str, Any], source: str = "<trial>") -> TrialConfig:
    """The trial config of one sampled point: `fixed` + budget + the sampled dotted paths."""
    data = base_trial_dict(spec)
    for name, value in params.items():
        set_dotted(data, name.split("|")[0], value, source)
    return trial_config_from_dict(data, source)


def grid_points(spec: SearchSpace) -> list[dict[str, Any]]:
    """Every point of a grid space ({path: choice}), in the order of the choices."""
    paths = list(spec.space)
    return [dict(zip(paths, combo)) for combo in itertools.product(*(spec.space[k].choices for k in paths))]  # type: ignore[union-attr]
