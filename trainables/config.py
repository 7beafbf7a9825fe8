"""The trial configuration: one frozen, typed object per training run.

A trial config has six sections plus run-level fields::

    TrialConfig
    ├── task   which synthetic task, its sizes and training lengths
    ├── model  the HybridLM: width, depth, mixer, attention on/off
    ├── dat    Delayed Attention Training: when and how attention is held back
    ├── curriculum  which targets train first (state only for N steps), with or without DAT
    ├── optim  AdamW, learning-rate schedule, clipping, batch size
    ├── ema    exponential moving average of the weights, evaluated instead of the raw weights
    ├── eval   evaluation interval and the fixed evaluation sets
    └── steps, seed, device

It is validated once, at the boundary (a YAML file, a CLI flag, the dict that
Ray hands a trial); everything inside the trainer works with these objects.
`load_trial_config` turns any mistake into a `ConfigError` whose message is one
line naming the file, the key and the rule.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Mapping

from pydantic import ConfigDict, Field, ValidationError, model_validator

from core.errors import ConfigError, brief, cut, short_path, why_absent
from core.numbers_only import NumbersOnly
from trainables.safe_yaml import read_yaml

__all__ = ["ConfigError", "TrialConfig", "read_yaml", "load_trial_config", "trial_config_from_dict", "with_overrides",
           "flatten", "config_difference"]

MAX_SEED = 2**32 - 1  # seeds of torch, numpy and Optuna's samplers all accept [0, 2**32)
MAX_STEPS = 10**8  # ~3 years of training at 1 step/s; a larger number is a typo


class _Frozen(NumbersOnly):
    # no inf/nan anywhere: a bound that is infinite is a mistake, never a setting
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class TaskConfig(_Frozen):
    name: Literal["modsum_recall", "modsum", "recall", "set_complement", "othello"] = "modsum_recall"
    modulus: int = Field(10, ge=2, le=64)  # m: ADD digits and running sums live in Z_m
    n_keys: int = Field(64, ge=1, le=256)  # distinct keys; many, so the LSTM alone cannot hold them all
    n_values: int = Field(10, ge=2, le=256)  # distinct values a key can hold
    min_len: int = Field(5, ge=1, le=100_000)  # training lengths in steps, uniform in [min_len, max_len]
    max_len: int = Field(25, ge=1, le=100_000)  # also the 1x evaluation length
    p_store: float = Field(0.25, ge=0.0, le=1.0)  # share of STORE steps (modsum_recall)
    p_query: float = Field(0.25, ge=0.0, le=1.0)  # share of QUERY steps; the rest are ADD
    n_tokens: int = Field(64, ge=2, le=4096)  # set_complement: the set vocabulary v (lengths count tokens)
    # training batches of the sequence tasks (trainables/tasks.py): bucketed = pools of 32 batches sorted by
    # length (~3% PAD, same sequences and lengths, similar lengths share a batch); padded = a uniform mix per
    # batch (~45% PAD), the slow reference. set_complement and othello always draw padded batches
    batching: Literal["bucketed", "padded"] = "bucketed"
    train_plies: int = Field(0, ge=0, le=60)  # othello: moves per training game; 0: max_len (60: full games, the reference)
    # othello: what training asks after each move: the uniform distribution over the legal moves (legal), or
    # the move the game actually played next, one-hot (played: a sample of that distribution, noisy targets)
    othello_targets: Literal["legal", "played"] = "legal"

    @model_validator(mode="after")
    def _check(self) -> "TaskConfig":
        if self.min_len > self.max_len:
            raise ValueError(f"`min_len <= max_len` must hold, got ({self.min_len}, {self.max_len})")
        if self.name == "modsum_recall":
            if self.p_store + self.p_query >= 1.0:
                raise ValueError(
                    f"`p_store + p_query < 1` must hold (the rest are ADD steps), "
                    f"got {self.p_store} + {self.p_query}"
                )
            if self.p_store <= 0.0 or self.p_query <= 0.0:
                raise ValueError("modsum_recall needs p_store > 0 and p_query > 0")
        if self.othello_targets != "legal" and self.name != "othello":
            raise ValueError(f"othello_targets is othello's; task {self.name} has its own targets")
        return self


class ModelConfig(_Frozen):
    d_model: int = Field(64, ge=8, le=4096)  # residual width D
    n_layers: int = Field(2, ge=1, le=64)  # hybrid blocks
    n_heads: int = Field(4, ge=1, le=4096)  # attention heads; must divide d_model
    mixer: Literal["lstm", "ssm", "none"] = "lstm"  # the recurrent sublayer ("none": pure Transformer)
    attention: bool = True  # False: pure recurrent model (no attention sublayer)
    # where attention gets positions: rope (rotary, on queries and keys only: the recurrent path
    # sees none), sinusoidal (added to the input, for pure Transformers), none (order from the
    # recurrence alone). Why rope: docs/results/dat_exploration.md
    positional: Literal["none", "sinusoidal", "rope"] = "rope"
    mlp_ratio: int = Field(4, ge=0, le=16)  # MLP hidden width = mlp_ratio * d_model; 0: no MLP (attention-only)
    attn_zero_init: bool = True  # attention output projection starts at 0: switching it on is smooth
    attn_dropout: float = Field(0.0, ge=0.0, lt=1.0)  # dropout on the attention probabilities (seed 002)
    resid_dropout: float = Field(0.0, ge=0.0, lt=1.0)  # dropout on every sublayer's output before the residual add
    ssm_d_state: int = Field(16, ge=1, le=256)  # SSM mixer: state size N per channel
    ssm_d_conv: int = Field(4, ge=1, le=16)  # SSM mixer: causal depthwise convolution width
    ssm_expand: int = Field(2, ge=1, le=8)  # SSM mixer: inner width E = expand * d_model
    # SSM mixer's state transition (trainables/ssm.py): decay = Mamba-1's exp(Δ A) in (0, 1]; signed = 2 exp(Δ A) - 1
    # in (-1, 1] (parity); rotation = exp(Δ A) times an input-dependent turn of pairs of state dims (Z_m for any m)
    ssm_transition: Literal["decay", "signed", "rotation"] = "decay"

    @model_validator(mode="after")
    def _check(self) -> "ModelConfig":
        if self.d_model % self.n_heads:
            raise ValueError(f"`d_model % n_heads == 0` must hold, got ({self.d_model}, {self.n_heads})")
        if self.positional == "rope" and (self.d_model // self.n_heads) % 2:
            raise ValueError(f"positional=rope turns pairs of dims: d_model / n_heads must be even, got {self.d_model // self.n_heads}")
        if self.ssm_transition == "rotation" and self.ssm_d_state % 2:
            raise ValueError(f"ssm_transition=rotation turns pairs of state dims: ssm_d_state must be even, got {self.ssm_d_state}")
        if self.mixer == "none" and not self.attention:
            raise ValueError("a model needs a mixer or attention: got mixer=none and attention=false")
        return self


class DATConfig(_Frozen):
    """Delayed Attention Training. `mode: none` trains attention jointly from step 0."""

    mode: Literal["none", "fixed", "adaptive"] = "fixed"
    switch_step: int = Field(1500, ge=0, le=MAX_STEPS)  # fixed mode: first step with attention active
    hold: Literal["gate", "freeze"] = "gate"  # how attention is held back before the switch
    rewarmup_steps: int = Field(0, ge=0, le=MAX_STEPS)  # linear LR re-warmup of the attention params after the switch
    ramp_steps: int = Field(0, ge=0, le=MAX_STEPS)  # attention's output rises linearly from 0 to 1 over this many steps after the switch
    # adaptive mode (trainables/switch.py): a criterion on smoothed training signals decides the switch
    criterion: Literal["state_acc", "loss_plateau", "grad_norm"] = "state_acc"
    min_step: int = Field(250, ge=0, le=MAX_STEPS)  # never switch before this step
    max_step: int = Field(3000, ge=0, le=MAX_STEPS)  # switch at this step if the criterion has not fired
    smoothing: float = Field(0.95, ge=0.0, lt=1.0)  # EMA decay of the signals (0: raw per-step values)
    acc_threshold: float = Field(0.95, gt=0.0, le=1.0)  # state_acc: smoothed state-tracking accuracy to reach
    plateau_delta: float = Field(0.01, ge=0.0, lt=1.0)  # loss_plateau: relative improvement that counts
    patience: int = Field(200, ge=1, le=MAX_STEPS)  # loss_plateau: steps without such an improvement
    grad_ratio: float = Field(0.3, gt=0.0, lt=1.0)  # grad_norm: settled at this fraction of the peak norm

    @model_validator(mode="after")
    def _check(self) -> "DATConfig":
        if self.mode == "adaptive" and self.min_step > self.max_step:
            raise ValueError(f"`min_step <= max_step` must hold, got ({self.min_step}, {self.max_step})")
        return self


class CurriculumConfig(_Frozen):
    """A curriculum over targets, independent of DAT: only the state-tracking targets are trained
    first, then every target. DAT itself trains every target (the paper's method); the two combine
    into four hybrid arms (joint, joint + curriculum, DAT, DAT + curriculum; docs/trainer.md)."""

    state_only_steps: int = Field(0, ge=0, le=MAX_STEPS)  # steps [0, N) train the state targets only (0: off)
    state_only_until_switch: bool = False  # instead: the state targets only while DAT holds attention back

    @model_validator(mode="after")
    def _check(self) -> "CurriculumConfig":
        if self.state_only_steps and self.state_only_until_switch:
            raise ValueError("set one of `state_only_steps` and `state_only_until_switch`, not both")
        return self

    @property
    def active(self) -> bool:
        return bool(self.state_only_steps) or self.state_only_until_switch


class EMAConfig(_Frozen):
    """Exponential moving average of the weights (seed 002); evaluation then uses the average."""

    decay: float = Field(0.0, ge=0.0, lt=1.0)  # 0 disables EMA; e.g. 0.999 averages over ~1000 steps
    bias_correction: bool = False  # Adam-style correction: early averages are not pulled to the init


class OptimConfig(_Frozen):
    lr: float = Field(3e-3, gt=0.0, le=1.0)
    weight_decay: float = Field(0.01, ge=0.0, le=100.0)
    beta1: float = Field(0.9, ge=0.0, lt=1.0)
    beta2: float = Field(0.98, ge=0.0, lt=1.0)
    schedule: Literal["cosine", "constant"] = "cosine"  # after warmup
    warmup_steps: int = Field(100, ge=0, le=MAX_STEPS)
    min_lr_ratio: float = Field(0.1, ge=0.0, le=1.0)  # cosine floor as a fraction of lr
    grad_clip: float = Field(1.0, ge=0.0)  # 0 disables clipping
    batch_size: int = Field(64, ge=1, le=1_000_000)
    # AdamW's fused kernel: one pass over each parameter instead of ~10 ops (a CPU step 2.0 -> 0.4 ms); it
    # rounds differently (weights ~1e-5 apart after 20 steps). false: torch's default loop, the reference
    fused: bool = True


class EvalConfig(_Frozen):
    every: int = Field(250, ge=1, le=MAX_STEPS)  # evaluate (and report, and checkpoint) every N steps
    multipliers: tuple[int, ...] = Field((1, 2, 3, 4), max_length=16)  # evaluation lengths, as multiples of task.max_len
    n_sequences: int = Field(256, ge=1, le=10_000_000)  # sequences per evaluation length (the full sets)
    # evaluations before the last step use only the first N sequences of each set (the same N every
    # time), at most n_sequences; the last step and the steps of `full_at` use the full sets
    mid_run_sequences: int = Field(64, ge=1, le=10_000_000)
    # training steps whose evaluation uses the full sets too: the first evaluation at or after each
    # (a sweep with ASHA sets them to its rungs, so every comparison it makes is on the full sets)
    full_at: tuple[int, ...] = Field((), max_length=64)
    batch_size: int = Field(256, ge=1, le=1_000_000)
    seed: int = Field(1_000_003, ge=0, le=MAX_SEED - 64)  # evaluation sets' seed (+k per length); apart from the training seed
    # > 0: also report accuracy against the position in the sequence, in windows of this many steps
    # (`curve_acc_s{end}`, on the longest set; the sequence tasks only; trainables/evaluate.py)
    curve_window: int = Field(0, ge=0, le=MAX_STEPS)

    @model_validator(mode="after")
    def _check(self) -> "EvalConfig":
        if not self.multipliers or any(not 1 <= k <= 64 for k in self.multipliers):
            raise ValueError(f"multipliers must be non-empty and within [1, 64], got {brief(list(self.multipliers))}")
        if len(set(self.multipliers)) != len(self.multipliers):
            raise ValueError(f"multipliers must be distinct, got {brief(list(self.multipliers))}")
        if any(not 1 <= s <= MAX_STEPS for s in self.full_at):
            raise ValueError(f"full_at must hold training steps within [1, {MAX_STEPS}], got {brief(list(self.full_at))}")
        return self

    def is_full(self, step: int, last_step: int, previous_report: int) -> bool:
        """Whether the evaluation at `step` (the previous one at `previous_report`) uses the full sets."""
        return step >= last_step or any(previous_report < s <= step for s in self.full_at)


class TrialConfig(_Frozen):
    task: TaskConfig = TaskConfig()
    model: ModelConfig = ModelConfig()
    dat: DATConfig = DATConfig()
    curriculum: CurriculumConfig = CurriculumConfig()
    optim: OptimConfig = OptimConfig()
    ema: EMAConfig = EMAConfig()
    eval: EvalConfig = EvalConfig()
    steps: int = Field(6000, ge=1, le=MAX_STEPS)  # training steps (optimizer updates)
    seed: int = Field(0, ge=0, le=MAX_SEED)  # model init, training data and dropout
    device: Literal["auto", "cpu", "cuda"] = "auto"  # auto: CUDA when present

    @model_validator(mode="before")
    @classmethod
    def _legacy_phase1_targets(cls, data: Any) -> Any:
        """`dat.phase1_targets` (of earlier versions) is read as the curriculum it was: `state` on a
        modsum_recall DAT run is `curriculum.state_only_until_switch: true`; elsewhere it changed
        nothing (joint runs, tasks whose targets are all of one kind) and `all` is today's DAT."""
        if not isinstance(data, Mapping) or not isinstance(data.get("dat"), Mapping) or "phase1_targets" not in data["dat"]:
            return data
        dat = dict(data["dat"])
        targets = dat.pop("phase1_targets")
        if targets not in ("all", "state"):
            raise ValueError(f"dat.phase1_targets (replaced by `curriculum`) must be all or state, got {brief(targets)}")
        data = {**data, "dat": dat}
        task = data.get("task") if isinstance(data.get("task"), Mapping) else {}
        if targets == "state" and dat.get("mode", "fixed") != "none" and task.get("name", "modsum_recall") == "modsum_recall":
            if isinstance(data.get("curriculum"), Mapping) and any(data["curriculum"].values()):
                raise ValueError("dat.phase1_targets: state and `curriculum` cannot both be given; use `curriculum` alone")
            data["curriculum"] = {"state_only_until_switch": True}
        return data

    @model_validator(mode="after")
    def _check(self) -> "TrialConfig":
        cur = self.curriculum
        if cur.active and self.task.name != "modsum_recall":
            raise ValueError(f"curriculum needs task modsum_recall (state and recall targets to order), got task {self.task.name}")
        if cur.state_only_steps > self.steps:
            raise ValueError(f"`curriculum.state_only_steps <= steps` must hold, got ({cur.state_only_steps}, {self.steps})")
        if cur.state_only_until_switch and self.dat.mode == "none":
            raise ValueError("curriculum.state_only_until_switch needs dat.mode fixed or adaptive (there is no switch); "
                             "use curriculum.state_only_steps")
        if self.dat.mode != "none":
            if not self.model.attention:
                raise ValueError("dat.mode must be `none` when model.attention is false (nothing to delay)")
            if self.model.mixer == "none":
                raise ValueError("dat.mode must be `none` when model.mixer is none (nothing trains before the switch)")
        if self.dat.mode == "fixed" and self.dat.switch_step > self.steps:
            raise ValueError(
                f"`dat.switch_step <= steps` must hold, got ({self.dat.switch_step}, {self.steps})"
            )
        if self.task.name == "set_complement" and self.task.max_len * max(self.eval.multipliers) >= self.task.n_tokens:
            raise ValueError(
                f"set_complement needs `task.max_len * max(eval.multipliers) < task.n_tokens` (a token must be left "
                f"unseen), got {self.task.max_len} * {max(self.eval.multipliers)} >= {self.task.n_tokens}"
            )
        if self.dat.mode == "adaptive" and self.dat.max_step > self.steps:
            raise ValueError(f"`dat.max_step <= steps` must hold, got ({self.dat.max_step}, {self.steps})")
        if self.task.name == "othello" and self.task.max_len * max(self.eval.multipliers) > 60:
            raise ValueError(
                f"othello needs `task.max_len * max(eval.multipliers) <= 60` (a game has at most 60 moves), "
                f"got {self.task.max_len} * {max(self.eval.multipliers)} = {self.task.max_len * max(self.eval.multipliers)}"
            )
        if self.eval.curve_window and self.task.name in ("set_complement", "othello"):
            raise ValueError(f"eval.curve_window needs a sequence task (modsum_recall, modsum, recall), got task {self.task.name}")
        if self.dat.mode == "adaptive" and self.dat.criterion == "state_acc" and self.task.name in ("recall", "set_complement", "othello"):
            raise ValueError(f"dat.criterion state_acc needs state-tracking targets; task {self.task.name} has none")
        return self


# --------------------------------------------------------------------------- loading


def format_validation_error(err: ValidationError, source: str, hide: tuple[str, ...] = (),
                            value_shown: bool = False) -> str:
    """The first error of a pydantic ValidationError as `source: key: rule, got value`;
    `hide` names location parts to leave out of the key (a union's discriminator tags). A
    validator's own rule says its value where it matters; `value_shown` adds it to every rule that
    does not (a request's fields, where the caller may not see what was sent)."""
    first = err.errors()[0]
    key = ".".join(cut(str(p), 40) for p in first["loc"] if p not in hide)
    msg = first["msg"].removeprefix("Value error, ").replace("Input should be", "must be")
    if first["type"] == "extra_forbidden":
        msg = "unknown key"
    elif first["type"] == "missing":  # its input is the mapping around the key: not worth showing
        msg = "required"
    elif first["type"] in ("model_type", "dict_type"):  # pydantic names its own class: say what the file must hold
        msg = f"must be a mapping of keys, got {brief(first.get('input'))}"
    elif ((first["type"] not in ("value_error", "number") or value_shown and "got " not in msg)
          and "input" in first):  # "number": NumbersOnly's says what it got
        msg = f"{cut(msg, 120)}, got {brief(first['input'])}"
    more = len(err.errors()) - 1
    tail = f" (and {more} more error{'s' if more > 1 else ''})" if more else ""
    return f"{source}: {key + ': ' if key else ''}{msg}{tail}"


def trial_config_from_dict(data: Mapping[str, Any], source: str = "<config>") -> TrialConfig:
    """Validate a plain mapping (YAML, Ray's trial dict) into a TrialConfig."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: <root>: must be a mapping, got {brief(data)}")
    try:
        return TrialConfig.model_validate(dict(data))
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, source)) from None


PRESETS_DIR = Path(__file__).parent / "presets"


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def load_trial_config(path_or_preset: str | Path) -> TrialConfig:
    """Load a trial config from a YAML file, or from a preset name (see trainables/presets/)."""
    path = Path(path_or_preset)
    try:
        if not path.exists() and (PRESETS_DIR / f"{path_or_preset}.yaml").exists():
            path = PRESETS_DIR / f"{path_or_preset}.yaml"
        found = path.exists()
    except OSError as err:  # a name the file system refuses (too long, ...)
        raise ConfigError(f"{brief(str(path_or_preset), 60)}: not a file or preset ({err.strerror})") from None
    if not found:
        why = why_absent(path)
        raise ConfigError(f"{short_path(path)}: {why}" + (f" (and not a preset: {', '.join(preset_names())})"
                                                        if why == "no such file" else ""))
    return trial_config_from_dict(read_yaml(path), source=short_path(path))


def with_overrides(config: TrialConfig, overrides: Mapping[str, Any], source: str = "<overrides>") -> TrialConfig:
    """A copy of `config` with dotted-path overrides applied (`{"dat.switch_step": 100}`), re-validated."""
    data = config.model_dump()
    for dotted, value in overrides.items():
        set_dotted(data, dotted, value, source)
    return trial_config_from_dict(data, source)


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested mapping as one level of dotted keys: `{"dat": {"switch_step": 6}}` -> `{"dat.switch_step": 6}`."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def config_difference(saved: TrialConfig, asked: TrialConfig, free: frozenset[str] = frozenset({"steps"})
                      ) -> tuple[str, Any, Any] | None:
    """The first dotted key (sorted) outside `free` where `asked` is not `saved`, with the saved and
    the asked value; None when a run saved with `saved` may continue as `asked`."""
    a, b = flatten(saved.model_dump(mode="json")), flatten(asked.model_dump(mode="json"))
    for key in sorted(a.keys() | b.keys()):
        if key not in free and a.get(key) != b.get(key):
            return key, a.get(key), b.get(key)
    return None


def set_dotted(data: dict, dotted: str, value: Any, source: str = "<overrides>") -> None:
    """Set `data["a"]["b"] = value` for `dotted="a.b"`, creating sections as needed (validation
    of the result rejects unknown keys); a path through a non-section is a ConfigError."""
    *parents, leaf = dotted.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{source}: {dotted}: `{part}` is a value, not a section")
    node[leaf] = value
