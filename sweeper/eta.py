"""How long a sweep will take: ASHA's expected steps, the measured speed, the ETA (pure arithmetic).

    trial records + Plan (the budget and ASHA's rungs, from the search space)
      -> Progress: steps trained, expected steps left, measured speed, ETA

The estimate (docs/usage.md, "How long will it take?"):
  * ASHA decides at its rungs r_0 < r_1 < ... (grace_period x eta^k, at the first report at or
    after each, below max_steps) and lets about 1/eta of the trials through each. A trial at step
    s has passed the rungs below s; each later segment of its budget counts with the chance of
    getting there: expected steps left = sum over segments [a, b] above s of (b - max(a, s)) / eta^j,
    j the rungs still ahead of s before that segment (phase-aware ASHA: only the rungs at or after
    the trial's switch + margin, as planned; with `pre_phase_metric`, every rung: a trial is judged
    before its switch too, by that metric). From step 0 this is the expected length E of a new
    trial (FIFO: E = max_steps; a point not drawn yet: the mean over 64 draws of the space).
  * Speed v: steps per second of one trial, from this launch's own reports (LaunchSpeed: the
    steps of every report's interval over the seconds the trainer timed for them, evaluation and
    checkpoint included), so a resume neither inherits the last launch's speed nor swings with one
    interval; before this launch's first report, the trials' last reported speeds.
  * ETA: the running trials' expected steps left, then E for every trial not yet started, dealt
    out in turn to the max_concurrent slots, each training at v; the last slot to finish is the ETA.
    Between two writes of status.json the ETA counts down with the wall clock.
"""

from __future__ import annotations

import functools
import heapq
import math
from dataclasses import dataclass, field
from typing import Callable

from sweeper.records import TrialRecord


def asha_rungs(grace_period: int, max_t: int, reduction_factor: float, eval_every: int, max_steps: int) -> tuple[int, ...]:
    """The steps where Ray's ASHA (one bracket) can stop a trial: its milestones grace x eta^k
    (k < int(log(max_t / grace) / log(eta) + 1), as ray.tune.schedulers.async_hyperband computes
    them), each moved to the first report at or after it; a rung at max_steps stops nothing."""
    n = int(math.log(max_t / grace_period) / math.log(reduction_factor) + 1)
    rungs = set()
    for k in range(max(n, 0)):
        at = math.ceil(grace_period * reduction_factor ** k / eval_every) * eval_every  # trials report every eval_every
        if at < max_steps:
            rungs.add(at)
    return tuple(sorted(rungs))


@dataclass(frozen=True)
class Plan:
    """What a sweep will train: the budget and where ASHA decides."""

    name: str
    metric: str
    mode: str
    num_samples: int
    max_concurrent: int
    max_steps: int
    rungs: tuple[int, ...] = ()  # ASHA's decision steps below max_steps; () without early stopping
    reduction_factor: float = 1.0  # ASHA's eta; 1 without early stopping
    # phase-aware ASHA: the first step a fresh trial may be judged at, for a sample of the space's
    # points (the estimate averages over them); () when every trial may be judged from the first rung
    not_before: tuple[int, ...] = ()
    not_before_of: Callable[[dict], int] | None = field(default=None, compare=False, repr=False)  # a trial's, from its point
    pre_phase_metric: str | None = None  # phase-aware ASHA that judges a trial before its switch by this metric: every rung

    @classmethod
    def from_space(cls, spec) -> "Plan":
        """From a validated sweeper.space.SearchSpace."""
        b, s = spec.budget, spec.scheduler
        rungs, eta, not_before, of, pre = (), 1.0, (), None, None
        if s.type == "asha":
            grace, max_t = spec.asha_limits()
            rungs, eta = asha_rungs(grace, max_t, s.reduction_factor, b.eval_every, b.max_steps), s.reduction_factor
            if spec.phase_margin() is not None and s.pre_phase_metric:
                pre = s.pre_phase_metric  # judged at every rung: by it before the switch, by the metric after
            elif spec.phase_margin() is not None:
                from sweeper.stopping import planned_not_before, sample_not_before

                of = functools.partial(planned_not_before, spec)
                not_before = sample_not_before(spec)
        return cls(spec.name, spec.metric, spec.mode, b.num_samples, b.max_concurrent, b.max_steps, rungs, eta, not_before, of,
                   pre)

    def expected_steps(self, step: int = 0, params: dict | None = None) -> float:
        """Expected steps a trial at `step` (at point `params`, or any point) still trains, with ASHA
        letting 1/eta through each rung it judges the trial at."""
        if params is not None and self.not_before_of is not None:
            return self._expected(step, self.not_before_of(params))
        if self.not_before:
            return sum(self._expected(step, nb) for nb in self.not_before) / len(self.not_before)
        return self._expected(step, 0)

    def _expected(self, step: int, not_before: int) -> float:
        bounds = (0, *self.rungs, self.max_steps)
        left, judged = 0.0, 0  # judged: rungs ahead of the trial (a report at a rung is still to be judged) it is judged at
        for k in range(len(bounds) - 1):
            if k > 0 and self.rungs[k - 1] >= step and self.rungs[k - 1] >= not_before:
                judged += 1
            span = bounds[k + 1] - max(bounds[k], step)
            if span > 0:
                left += span / self.reduction_factor ** judged
        return left


@dataclass(frozen=True)
class Progress:
    done: int  # steps trained so far, all trials
    left: float  # expected steps still to train
    speed: float | None  # steps/s of one trial (None before the first report)
    eta_s: float | None  # seconds to the end of the sweep (None while the speed is unknown)


@dataclass
class LaunchSpeed:
    """Steps per second of one trial over every report of this launch: the steps of all intervals
    over their seconds (a report's interval runs from the report before it, or from the checkpoint
    a resumed trial starts at; trials report every `eval_every` steps and at their last). A report
    told twice (Ray hands a trial's last one to the scheduler and again at its end) counts once."""

    eval_every: int
    steps: float = 0.0
    seconds: float = 0.0
    counted: dict = field(default_factory=dict)  # trial -> the step of its last report counted

    def add(self, trial, step: int, steps_per_s: float | None) -> None:
        if step <= self.counted.get(trial, 0) or not steps_per_s or steps_per_s <= 0 or not math.isfinite(steps_per_s):
            return
        self.counted[trial] = step
        interval = step % self.eval_every or self.eval_every
        self.steps += interval
        self.seconds += interval / steps_per_s

    def value(self) -> float | None:
        return self.steps / self.seconds if self.seconds > 0 else None


def trial_speed(records: list[TrialRecord]) -> float | None:
    """Steps per second of one trial, over every trial that reported: the trainer's own `steps_per_s`
    (its last interval; a resumed trial's count of steps includes the ones trained before the resume,
    which Ray's time_total_s, counted since this launch, does not), weighted by the trials' steps;
    where a report has none, its steps over time_total_s."""
    steps = seconds = 0.0
    for r in records:
        own, t = r.metrics.get("steps_per_s"), r.metrics.get("time_total_s")
        if r.step > 0 and own and own > 0:
            steps, seconds = steps + r.step, seconds + r.step / float(own)
        elif r.step > 0 and t and t > 0:
            steps, seconds = steps + r.step, seconds + float(t)
    return steps / seconds if seconds > 0 else None


SPEED_RANGE = (1e-6, 1e9)  # steps/s a trial can train at; a file's speed beyond it is none


def plausible(speed: float | None) -> bool:
    """A speed read from the files that a trial could train at (`SPEED_RANGE`)."""
    return speed is not None and SPEED_RANGE[0] <= speed <= SPEED_RANGE[1]


def progress(records: list[TrialRecord], plan: Plan, speed: float | None = None) -> Progress:
    """Where the sweep stands; `speed`: this launch's (LaunchSpeed), else the trials' last reported."""
    running = [plan.expected_steps(r.step, r.params) for r in records if r.status == "running"]
    waiting = [plan.expected_steps(r.step, r.params) for r in records if r.status in ("pending", "interrupted")]
    waiting += [plan.expected_steps(0)] * max(0, plan.num_samples - len(records))
    speed = speed if plausible(speed) else trial_speed(records)
    speed = speed if plausible(speed) else None
    eta = None if speed is None else makespan(running, waiting, plan.max_concurrent) / speed
    return Progress(sum(r.step for r in records), sum(running) + sum(waiting), speed, eta)


def makespan(running: list[float], waiting: list[float], slots: int) -> float:
    """Steps until the last slot is free: running trials hold slots; waiting ones take the first free slot in turn."""
    busy = sorted(running) + [0.0] * max(0, slots - len(running))
    heapq.heapify(busy)
    for steps in waiting:
        heapq.heappush(busy, heapq.heappop(busy) + steps)
    return max(busy, default=0.0)


MAX_CLOCK_DAYS = 10_000  # the longest duration `clock` shows


def clock(seconds: float | None) -> str:
    """A duration as [Nd ]H:MM:SS; "-" for none, for a negative one or one past `MAX_CLOCK_DAYS`
    (read from files: a time no sweep takes)."""
    if seconds is None or not 0 <= seconds <= MAX_CLOCK_DAYS * 86400:
        return "-"
    seconds = int(round(seconds))
    days, rest = divmod(seconds, 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return (f"{days}d " if days else "") + f"{h}:{m:02d}:{s:02d}"
