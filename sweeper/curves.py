"""Learning curves to replay a space on: the trials of sweeps already run, or a stored record.

    load_curves(sources, spec, storage)   a Grid (sweeper/replay.py) of every curve that reached the
                                          space's `max_steps` (or diverged), grouped by the space's
                                          searched parameters; a point the space draws that no curve
                                          holds trains on the nearest one that does

A source is a sweep (its name under `storage`, or its folder: the study says each trial's point,
the trial's folder its reports) or a record file (`.json` or `.json.gz`, as experiments/curve_grid.py
writes them: {"grid": {...}, "runs": [{"params": {...}, "reports": [...]}]}). Everything is read,
nothing written. A curve cut short (a trial stopped early, or still running) says nothing about where
its point ends, so it is left out, as is a curve at a point the space could not draw (out of a range,
not one of the choices); the count of those is kept for the caller to say.
"""

from __future__ import annotations

import gzip
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

from core import json_text
from core.errors import ConfigError, brief, cut, short_path
from sweeper.replay import Grid, point_key
from sweeper.status import finite
from trainables.config import MAX_STEPS
from sweeper.space import SearchSpace

MAX_RECORD_BYTES = 256 << 20  # a record read whole (decompressed): larger is refused, not read
MAX_CURVES = 5_000  # curves one replay reads (a recorded grid holds ~100; 2,000 replay in ~15 s)
MAX_RECORD_VALUES = 5_000_000  # JSON values of a record (~30 bytes of text each in a real one): ~0.5 GB parsed
METRIC_BOUND = 1e12  # a recorded metric beyond it is no measurement (accuracies, losses)


@dataclass(frozen=True)
class Curves:
    grid: Grid
    complete: int  # curves that reached max_steps (or diverged): the grid's runs
    left_out: int  # curves not used: stopped early, still running, without the metric, or at no point of the space
    sources: tuple[str, ...]


def load_curves(sources: list[str], spec: SearchSpace, storage: str | None) -> Curves:
    from sweeper.adapters.optuna_search import walk
    from sweeper.space import param_names

    seen: dict[str, int] = {}
    for i, source in enumerate(sources):  # curves counted twice would weigh their point twice
        if (first := seen.setdefault(_identity(source, storage), i)) != i:
            raise ConfigError(f"--curves {cut(source, 80)}: the same curves as --curves {cut(sources[first], 80)}; "
                              "name each once")
    params_of = {name: (param, cond) for _, param, name, cond in walk(spec.space, param_names(spec.space))}
    axes = tuple(sorted(params_of))
    runs: dict[tuple, list[list[dict]]] = {}
    complete = left_out = 0
    for source in sources:
        for params, reports in _read(source, storage):
            if complete + left_out >= MAX_CURVES:  # a replay's time grows with them: minutes past it, without a word
                raise ConfigError(f"--curves {cut(', '.join(sources), 120)}: more than {MAX_CURVES:,} curves; replay a "
                                  "part of them (a sweep, a record of one question)")
            if _complete(reports, spec) and _in_space(params, params_of):
                runs.setdefault(point_key(axes, params), []).append([r for r in reports if spec.metric in r])
                complete += 1
            else:
                left_out += 1
    if not runs:
        raise ConfigError(f"--curves {cut(', '.join(sources), 120)}: no curve reaches step {spec.budget.max_steps} "
                          f"with `{spec.metric}` in its reports ({left_out} left out: cut short, without it or at no point of the space); a replay needs "
                          "curves trained to the space's budget.max_steps")
    for i, axis in enumerate(axes):
        if all(key[i] is None for key in runs):
            raise ConfigError(f"--curves: the space searches `{axis}`, which none of the {complete} complete curves "
                              "recorded; replay a space that searches what the curves vary")
    grid = Grid(axes, runs, spec.metric, spec.mode, spec.budget.max_steps).with_scales_of(spec)
    return Curves(grid, complete, left_out, tuple(sources))


def _in_space(params: dict, params_of: dict) -> bool:
    """Each searched value one the space could draw (`optuna_search.contains`: within its range, on
    its step, among its choices; a flag is no number) on the branch its parents took, or absent (a
    parameter of a branch not taken). A curve at any other point is no answer the space could find."""
    from sweeper.adapters.optuna_search import contains

    for name, (param, cond) in params_of.items():
        value = params.get(name)
        if value is None:
            continue
        if not contains(param, value) or any(params.get(parent) != choice for parent, choice in cond):
            return False
    return True


def _complete(reports: list[dict], spec: SearchSpace) -> bool:
    """Trained to the space's max_steps, or ended by divergence; the metric a number of at most
    METRIC_BOUND and the step a whole one of at most MAX_STEPS throughout, the steps rising
    (anything else is no curve to replay, nor a number a line could show)."""
    scored = [r for r in reports if spec.metric in r]
    if not scored or not all(_sound(r, spec.metric) for r in scored):
        return False
    steps = [int(r["step"]) for r in scored]
    if any(b <= a for a, b in zip(steps, steps[1:])) or steps[0] <= 0:
        return False
    diverged = reports[-1].get("diverged")  # the trainer's 0.0 or 1.0: "no", 0.5 or NaN end no run
    return steps[-1] >= spec.budget.max_steps or (isinstance(diverged, (int, float)) and diverged == 1)


def _sound(report: dict, metric: str) -> bool:
    value, step = finite(report[metric]), finite(report.get("step"))
    return value is not None and abs(value) <= METRIC_BOUND and step is not None and step == int(step) <= MAX_STEPS


def _identity(source: str, storage: str | None) -> str:
    """The file or sweep folder `source` names, however it is spelled (a name, a path, a trailing /)."""
    if _is_record(Path(source)):
        return os.path.realpath(source)
    from sweeper.sweep_dir import OPTUNA_DB, find_sweep_dir

    return os.path.realpath(find_sweep_dir(source, storage, OPTUNA_DB, missing="no sweep (no optuna.db) and no record file here"))


def _is_record(path: Path) -> bool:
    try:
        return path.is_file() or path.suffix in (".json", ".gz")
    except OSError:
        return True  # `_read_record` says why it cannot be read


def _read(source: str, storage: str | None) -> list[tuple[dict, list[dict]]]:
    path = Path(source)
    try:
        if _is_record(path):
            return _read_record(path)
    except OSError as err:
        raise ConfigError(f"--curves {short_path(source, 120)}: cannot be read ({err.strerror or err})") from None
    return _read_sweep(source, storage)


def _read_record(path: Path) -> list[tuple[dict, list[dict]]]:
    """A record file's runs; one line for a file that is not one."""
    shown = short_path(path, 120)
    if not path.is_file():
        raise ConfigError(f"--curves {shown}: " + ("not a regular file (a FIFO, a device, a folder?)" if path.exists()
                                                    else "no such record file"))
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            text = f.read(MAX_RECORD_BYTES + 1)
        if len(text) > MAX_RECORD_BYTES:
            raise ValueError(f"more than {MAX_RECORD_BYTES >> 20} MiB of text")
        if (values := text.count(",")) > MAX_RECORD_VALUES:  # parsed, tiny values take ~25x their text
            raise ValueError(f"about {values:,} values, more than {MAX_RECORD_VALUES:,}")
        data = json_text.loads(text)
        runs = data["runs"]
        out = []
        for run in runs:
            params, reports = run["params"], run["reports"]
            if not isinstance(params, dict) or not isinstance(reports, list) or not all(isinstance(r, dict) for r in reports):
                raise ValueError(f"a run must hold a `params` mapping and a list of `reports`, got {brief(run, 40)}")
            out.append((params, reports))
        return out
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, ValueError, KeyError, TypeError, MemoryError) as err:
        what = (f"no key {err}" if isinstance(err, KeyError) else "too large for this machine's memory"
                if isinstance(err, MemoryError) else cut(str(err), 100))
        raise ConfigError(f"--curves {shown}: not a record of learning curves ({what})") from None


def _read_sweep(source: str, storage: str | None) -> list[tuple[dict, list[dict]]]:
    """Each trial of a sweep as (its point, its reports), read-only from its study and its folder."""
    from sweeper.adapters.optuna_study import trial_points
    from sweeper.records import trial_name
    from sweeper.space_file import load_saved_space
    from sweeper.sweep_dir import OPTUNA_DB, find_sweep_dir
    from trainables.run_dir import RunDir

    sweep_dir = find_sweep_dir(source, storage, OPTUNA_DB, missing="no sweep (no optuna.db) and no record file here")
    try:
        points = trial_points(sweep_dir / OPTUNA_DB, Path(sweep_dir).resolve().name, limit=MAX_CURVES)
        budget = load_saved_space(sweep_dir, n_samples=0).budget.max_steps  # a report past it is no report
    except ConfigError as err:
        raise ConfigError(f"--curves {err}") from None
    return [(params, RunDir(sweep_dir / "trials" / trial_name(number), budget).reports()) for number, params in points]
