"""What a sweep's study must hold to be read back: every attribute the sweeper writes, of its own
kind, and the study's direction, metric and trials' parameters those of the space it was started
with. A study edited outside the sweeper (a rung's value no run made, a parent run's uid that is
none, a parameter of another range) is one line, before a resume or a rebuilt view uses it.
"""

from __future__ import annotations

import math
import re
from typing import Any

import optuna

from core.errors import brief, cut
from sweeper.adapters.optuna_search import contains, distribution, walk
from sweeper.records import FINAL
from sweeper.space import SearchSpace, param_names
from trainables.run_dir import is_number

NUMBER_ATTRS = ("rung.", "pre_rung.", "stopped_at", "paused_at", "duplicate_of")  # trial attributes that hold numbers
STEP_ATTRS = ("stopped_at", "paused_at")  # trial attributes that hold a training step
MAX_URI = 2000  # characters of the tracking URI a sweep keeps (a URI of a server or a database)
UID = re.compile(r"[0-9a-f]{32}")  # an MLflow run's uid
SPACE_CHANGED = (": not the space the sweep began with (its file and space.yaml edited, or the study); put them back, "
                 "or pass --restart")
STUDY_CHANGED = "; the study was changed outside the sweeper: put the sweep's own back, or pass --restart to start it over"


def ledger_problem(study: optuna.Study, trials: list[optuna.trial.FrozenTrial], spec: SearchSpace) -> str | None:
    """What in the study the sweeper did not write, with its advice, or None."""
    problem = _study_problem(study, spec) or next(filter(None, (_trial_problem(t, trials, spec) for t in trials)), None)
    return problem if problem is None or problem.endswith(SPACE_CHANGED) else problem + STUDY_CHANGED


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _whole(value: Any) -> bool:
    return is_number(value) and value == int(value)


def _study_problem(study: optuna.Study, spec: SearchSpace) -> str | None:
    attrs = study.user_attrs
    for key in ("sweeper.started", "sweeper.elapsed_s"):
        if key in attrs and not (is_number(attrs[key]) and attrs[key] >= 0):
            return f"study attribute {key} is {brief(attrs[key])}, not a number"
    uri = attrs.get("sweeper.tracking_uri")
    if uri is not None and not (isinstance(uri, str) and 0 < len(uri) <= MAX_URI and uri.isprintable()):
        return f"study attribute sweeper.tracking_uri is {brief(uri)}, not a tracking URI"
    uid = attrs.get("sweeper.mlflow_uid")
    if uid is not None and not (isinstance(uid, str) and UID.fullmatch(uid)):
        return f"study attribute sweeper.mlflow_uid is {brief(uid)}, not an MLflow run's uid"
    if "pasha.max_t" in attrs and not (_whole(attrs["pasha.max_t"]) and 1 <= attrs["pasha.max_t"] <= spec.budget.max_steps):
        return f"study attribute pasha.max_t is {brief(attrs['pasha.max_t'])}, not a step of the budget"
    direction = optuna.study.StudyDirection.MAXIMIZE if spec.mode == "max" else optuna.study.StudyDirection.MINIMIZE
    if list(study.directions) != [direction]:
        return f"the study {_directions(study)}, the space's mode is {spec.mode}{SPACE_CHANGED}"
    if study.metric_names is not None and list(study.metric_names) != [spec.metric]:
        return (f"the study's metric is {brief(study.metric_names)}, the space's {cut(spec.metric, 40)}{SPACE_CHANGED}")
    return None


def _directions(study: optuna.Study) -> str:
    return " and ".join(("maximizes" if d == optuna.study.StudyDirection.MAXIMIZE else "minimizes") for d in study.directions)


def _trial_problem(t: optuna.trial.FrozenTrial, trials: list, spec: SearchSpace) -> str | None:
    where = f"trial {t.number}'s"
    for key, value in t.user_attrs.items():
        if key.startswith(NUMBER_ATTRS) and not _number(value):
            return f"{where} attribute {cut(key, 40)} is {brief(value)}, not a number"
        if key.startswith(("rung.", "pre_rung.")):
            step = key.split(".", 1)[1]
            if not (step.isdigit() and 1 <= int(step) <= spec.budget.max_steps):
                return f"{where} attribute {cut(key, 40)} names no step of the budget"
            if key.startswith("rung.") and (problem := _rung_problem(t, int(step), value)):
                return f"{where} attribute {cut(key, 40)} is {brief(value)}, {problem}"
        if key in STEP_ATTRS and not (_whole(value) and 0 <= value <= spec.budget.max_steps):
            return f"{where} attribute {key} is {brief(value)}, not a step of the budget"
        if key == "duplicate_of" and not (_whole(value) and value != t.number and any(o.number == value for o in trials)):
            return f"{where} attribute duplicate_of is {brief(value)}, no other trial's number"
        if key == "status" and value not in FINAL:
            return f"{where} attribute status is {brief(value)}, not how a trial ends ({', '.join(FINAL)})"
    return _params_problem(t, spec)


def _rung_problem(t: optuna.trial.FrozenTrial, rung: int, value: float) -> str | None:
    """A rung holds the value the study recorded for the trial at its first step at or past the rung
    (`stopping.on_report`: a step trained again is judged by its first value); where the study
    holds those values, the rung's is one of them. NaN is taken (a study of an older sweeper's)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if not is_number(value):  # infinite, or a whole number past a float
        return "no value a trial reports"
    reported = {v for s, v in t.intermediate_values.items() if s >= rung}
    if reported and value not in reported:
        return f"a value the trial never reported at or past step {rung}"
    return None


def _params_problem(t: optuna.trial.FrozenTrial, spec: SearchSpace) -> str | None:
    params = {name: p for _, p, name, _ in walk(spec.space, param_names(spec.space))}
    for name, value in t.params.items():
        p = params.get(name)
        if p is None:
            return f"trial {t.number} draws {cut(name, 60)}, which the space does not search{SPACE_CHANGED}"
        if t.distributions[name] != distribution(p):
            return (f"trial {t.number}'s {cut(name, 60)} was drawn from {cut(str(t.distributions[name]), 90)}, not the "
                    f"space's{SPACE_CHANGED}")
        if not contains(p, value):
            return f"trial {t.number}'s {cut(name, 60)} is {brief(value)}, not a value the space draws (its range, step, choices)"
    return None
