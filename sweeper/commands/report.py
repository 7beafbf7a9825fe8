"""`sweeper report NAME`: a sweep's comparison from MLflow, in the terminal or as Markdown.

    top trials        searched parameters, accuracy at 1x..4x, steps, status
    parameter effect  numeric: Spearman correlation with the metric, the best value, and a flag
                      when the best value sits at the edge of the searched range (tuning playbook);
                      categorical: the mean metric per choice
    importance        Optuna's fANOVA importances over the study's completed trials

A parameter's kind comes from the sweep's space file (int and float parameters are numeric, even
with two values tried); without it, from the values MLflow holds. The report only reads: the
sweep's study and an SQLite tracking store are opened read-only (an empty or damaged one is one
line, exit 2, and stays as it was), and `--markdown FILE` is checked before anything is read.
"""

from __future__ import annotations

import os
import re

from dataclasses import dataclass

import math
from pathlib import Path
from statistics import mean

from sweeper.records import length_metrics
from sweeper.sweep_dir import OPTUNA_DB, SPACE_FILE
from sweeper.fs import half_done, journal_left, sqlite_read_only_url
from sweeper.report_file import REPORT_START, check_markdown
from sweeper.store_settings import check_store_settings
from sweeper.tracking_uri import sqlite_path
from trainables.config import ConfigError
from core.errors import brief, cut, expand_user, short_path, visible, warnings_as_errors
from core.uri_secrets import hide_password, shown


@dataclass(frozen=True)
class Options:
    """What the command line gives `sweeper report`."""

    name: str
    storage: str | None
    tracking_uri: str | None
    experiment: str | None
    top: int
    markdown: str | None


def _ranks(xs: list[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2
        i = j + 1
    return ranks


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Rank correlation (ties get mean ranks); None when either side is constant."""
    if len(xs) < 3:
        return None
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = mean(rx), mean(ry)
    sx = sum((a - mx) ** 2 for a in rx) ** 0.5
    sy = sum((b - my) ** 2 for b in ry) ** 0.5
    if sx == 0 or sy == 0:
        return None
    return sum((a - mx) * (b - my) for a, b in zip(rx, ry)) / (sx * sy)


def _number(v: str):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _short(value: str) -> str:
    """A parameter value as MLflow stores it (a string), floats cut to 4 significant digits."""
    number = _number(value)
    return _cell(value) if number is None or not math.isfinite(number) or number == int(number) else f"{number:.4g}"


MAX_CELL = 60  # characters of a table cell


def _cell(value) -> str:
    """A value anyone who logs to the store chose, as one bounded Markdown table cell: line
    breaks and terminal escapes made visible, a `|` escaped."""
    return cut(str(value), MAX_CELL).replace("|", "\\|")


MAX_CHOICES = 12  # values of a categorical parameter its effect names
MIN_TRIALS_FOR_EFFECT = 3  # scored trials a parameter's effect is shown from (and two values of it)


def parameter_effects(runs: list[dict], metric: str, mode: str, ranges: dict[str, tuple],
                      kinds: dict[str, str] | None = None) -> list[str]:
    """One Markdown row per searched parameter. `kinds`: Optuna name -> numeric or categorical,
    from the space file; a parameter it does not name is numeric when every value is a number."""
    rows = []
    searched = sorted({p for r in runs for p in r["searched"]})
    scored = [r for r in runs if metric in r["metrics"]]
    for name in searched:
        path = name.split("|")[0]
        have = [r for r in scored if path in r["params"] and name in r["searched"]]
        if not have:
            continue
        values = {str(r["params"][path]) for r in have}
        if len(have) < MIN_TRIALS_FOR_EFFECT or len(values) < 2:  # two baselines, or one value: nothing to compare
            rows.append(f"| `{_cell(name)}` | - | too few trials to say ({len(have)} scored, {len(values)} "
                        f"value{'s' if len(values) != 1 else ''}; at least {MIN_TRIALS_FOR_EFFECT} and 2) | - |")
            continue
        best = max(have, key=lambda r: r["metrics"][metric] * (1 if mode == "max" else -1))
        kind = (kinds or {}).get(name)
        if kind is None:
            kind = "numeric" if all(_number(r["params"][path]) is not None for r in have) else "categorical"
        if kind == "numeric":
            points = [(n, r["metrics"][metric]) for r in have if (n := _number(r["params"][path])) is not None]
            rho = spearman([x for x, _ in points], [y for _, y in points])
            nums = [x for x, _ in points] or [0.0]
            lo, hi = ranges.get(name, (min(nums), max(nums)))
            best_v = _number(best["params"][path])
            edge = " **at the edge of the range**" if best_v is not None and (best_v <= lo or best_v >= hi) else ""
            rows.append(f"| `{_cell(name)}` | numeric | Spearman {'-' if rho is None else f'{rho:+.2f}'} | best {_short(best['params'][path])}{edge} |")
        else:
            by_choice: dict[str, list[float]] = {}
            for r in have:
                by_choice.setdefault(r["params"][path], []).append(r["metrics"][metric])
            means = ", ".join(f"{_cell(k)}: {mean(v):.3f} (n={len(v)})" for k, v in sorted(by_choice.items())[:MAX_CHOICES])
            more = f", and {len(by_choice) - MAX_CHOICES} more" if len(by_choice) > MAX_CHOICES else ""
            rows.append(f"| `{_cell(name)}` | categorical | mean {metric}: {means}{more} | best {_cell(best['params'][path])} |")
    return rows


def space_kinds(spec) -> tuple[dict[str, tuple], dict[str, str]]:
    """From a sweep's space: the range of each numeric parameter, and each parameter's kind
    (int and float: numeric; categorical: categorical), by Optuna name."""
    from sweeper.adapters.optuna_search import walk
    from sweeper.space import FloatParam, IntParam, param_names

    ranges, kinds = {}, {}
    for _, p, pname, _ in walk(spec.space, param_names(spec.space)):
        numeric = isinstance(p, (IntParam, FloatParam))
        kinds[pname] = "numeric" if numeric else "categorical"
        if numeric:
            ranges[pname] = (p.low, p.high)
    return ranges, kinds


def readable_store(uri: str, source: str) -> str:
    """The URI to read MLflow through. An SQLite store is opened read-only (never created, never
    migrated); missing or empty is one line. A server must answer its health check."""
    from sweeper.tracking_uri import preflight

    if (given := sqlite_path(uri)) is None:
        preflight(uri, source=source)
        return uri
    check_store_settings(uri)  # MLflow's settings of the engine it reads the store with
    path = expand_user(given).resolve()
    if not path.is_file():
        there = "not a regular file" if os.path.lexists(path) else "no file"
        raise ConfigError(f"{source} {shown(uri)}: no MLflow store there ({there} {shown(str(path))}); "
                          "pass the --tracking-uri the sweep logged to")
    if path.stat().st_size == 0:
        raise ConfigError(f"{source} {shown(uri)}: {shown(str(path))} is empty, not an MLflow store")
    return sqlite_read_only_url(path)


def fetch_runs(uri: str, shown_uri: str, name: str, experiment: str | None, parent_uid: str | None = None) -> list[dict]:
    """The sweep's trial runs; a store that cannot be read (damaged, foreign, an older schema) is one line."""
    from sweeper.adapters.mlflow_store import fetch_trial_runs

    try:
        return fetch_trial_runs(uri, name, experiment, parent_uid, shown_uri)
    except ConfigError:
        raise
    except Exception as err:  # noqa: BLE001 - whatever the store's library raises: one line
        if (path := sqlite_path(shown_uri)) is not None and journal_left(path):
            raise half_done(shown(shown_uri), "the next `sweeper launch` or `sweeper ui` on it") from None
        first = (str(err).strip().splitlines() or [""])[0]
        if option := warnings_as_errors():  # a library's warning, raised: the store is likely sound
            raise ConfigError(f"{shown(shown_uri)}: reading it failed with warnings raised as errors (-W {cut(option, 40)}; "
                              f"{type(err).__name__}: {cut(first, 80)}); unset PYTHONWARNINGS (or -W) and run this again") from None
        if "readonly database" in first:  # read only, MLflow found tables of its schema missing and would make them
            first = "tables of MLflow's schema are missing: another application's database, or one damaged"
        raise ConfigError(f"{shown(shown_uri)}: not a readable MLflow store ({type(err).__name__}: {cut(first, 100)})") from None


def build_report(name: str, uri: str, sweep_dir: Path | None, experiment: str | None, top: int,
                 shown_uri: str | None = None, parent_uid: str | None = None) -> str:
    """The report as Markdown. `uri`: the store to read (read-only for SQLite); `shown_uri`: as the user
    named it; `parent_uid`: the sweep's parent run, as its study records it (None: the newest of the name)."""
    from sweeper.space_file import load_saved_space

    shown_uri = shown_uri or uri
    runs = fetch_runs(uri, shown_uri, name, experiment, parent_uid)
    spec = None
    if sweep_dir is not None and (sweep_dir / SPACE_FILE).exists():
        spec = load_saved_space(sweep_dir, n_samples=0)
    metric, mode = (spec.metric, spec.mode) if spec else ("acc_3x", "max")
    ranges, kinds = space_kinds(spec) if spec else ({}, None)
    sign = 1 if mode == "max" else -1
    ordered = sorted((r for r in runs if metric in r["metrics"]), key=lambda r: -sign * r["metrics"][metric])
    searched = sorted({p for r in runs for p in r["searched"]})
    lengths = length_metrics(metric)  # the scored metric at every length: acc_{k}x, or tv_{k}x, ...
    header = ["trial", *searched, *lengths, "steps", "status"]
    lines = [f"{REPORT_START.decode()}{name}`", "",
             f"{len(runs)} trials in MLflow ({hide_password(shown_uri)}); scored by `{metric}` ({mode}).", "",
             f"## Top {min(top, len(ordered))} trials", "", "| " + " | ".join(map(_cell, header)) + " |", "|" + "---|" * len(header)]
    for r in ordered[:top]:
        cells = [_cell(r["trial_id"]) + (" (best)" if r["best"] else "")]
        cells += [_short(r["params"].get(s.split("|")[0], "")) if s in r["searched"] else "" for s in searched]
        # a length the metric does not exist at (ood_acc_1x: nothing lies beyond the range at 1x) is "-"
        cells += [f"{v:.3f}" if (v := r["metrics"].get(m)) is not None else "-" for m in lengths]
        cells += [str(int(r["metrics"].get("step", 0))), _cell(r["status"])]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Parameter effect", "", "| parameter | kind | effect | best value |", "|---|---|---|---|",
              *parameter_effects(runs, metric, mode, ranges, kinds)]
    if sweep_dir is not None and (sweep_dir / OPTUNA_DB).exists():
        from sweeper.adapters.optuna_study import sweep_study
        from sweeper.adapters.optuna_search import param_importances

        sweep_study(sweep_dir / OPTUNA_DB, name)  # read-only: a damaged or foreign study is one line
        rows, n = param_importances(sweep_dir / OPTUNA_DB, name)
        lines += ["", f"## Parameter importance (fANOVA, {n} completed trials)", ""]
        lines += ["| parameter | importance |", "|---|---|", *rows] if rows else ["No importances: fewer than two completed trials, or one value for all."]
    return "\n".join(lines) + "\n"


def report_uri(cli_value: str | None, logged_to: str | None, default: str, study: Path) -> str:
    """The store to read: --tracking-uri, else the one the sweep logged to (kept without its password:
    the default store, $MLFLOW_TRACKING_URI, supplies it when it is that store), else the default."""
    if cli_value is not None:  # a blank one is the preflight's to refuse
        return cli_value
    if not logged_to:
        return default
    if not isinstance(logged_to, str) or len(logged_to) > 4096:
        raise ConfigError(f"{study}: the tracking URI the sweep logged to is not a URI ({brief(logged_to, 40)}); pass "
                          "--tracking-uri")
    if ":***@" in logged_to:
        if hide_password(default) == logged_to:
            return default
        raise ConfigError(f"{study}: the sweep logged to {logged_to}, whose password is not kept; pass --tracking-uri "
                          "with it (or set MLFLOW_TRACKING_URI)")
    return logged_to


def run(options: Options) -> int:
    from sweeper.adapters.mlflow_tracking import PARENT_UID
    from sweeper.adapters.optuna_study import sweep_study
    from sweeper.sweep_dir import find_sweep_dir, is_path
    from sweeper.tracking_uri import resolve_uri, uri_source

    sweep_dir = find_sweep_dir(options.name, options.storage, SPACE_FILE)
    if is_path(options.name) and not any((sweep_dir / marker).exists() for marker in (SPACE_FILE, OPTUNA_DB)):
        raise ConfigError(f"{short_path(options.name, 120)}: no sweep here (no {SPACE_FILE}, no {OPTUNA_DB}); a sweep "
                          "whose folder is gone is read from MLflow by its name: `sweeper report NAME --tracking-uri URI`")
    markdown = check_markdown(options.markdown, sweep_dir) if options.markdown is not None else None
    name = sweep_dir.resolve().name if is_path(options.name) or sweep_dir == Path(options.name) else options.name.rstrip("/")
    if not sweep_dir.exists() and options.tracking_uri is None:
        raise ConfigError(f"{sweep_dir}: no sweep here; pass --tracking-uri to read `{name}` from an MLflow server")
    study = sweep_dir / OPTUNA_DB
    if os.path.lexists(study) and not study.is_file():
        raise ConfigError(f"{study}: not a regular file (a FIFO, a folder); put the sweep's study back")
    if study.is_file() and study.stat().st_size == 0:
        raise ConfigError(f"{study}: empty, not a sweep's Optuna study; move it away (`sweeper launch` makes a new one)")
    attrs = sweep_study(study, name)[1] if study.is_file() else {}  # read-only
    logged_to, parent_uid = attrs.get("sweeper.tracking_uri"), attrs.get(PARENT_UID)
    if parent_uid is not None and not (isinstance(parent_uid, str) and re.fullmatch(r"[0-9a-f]{32}", parent_uid)):
        raise ConfigError(f"{study}: the sweep's {PARENT_UID} is not a run's uid ({brief(parent_uid, 40)}); "
                          "put the sweep's study back")
    uri = report_uri(options.tracking_uri, logged_to, resolve_uri(None), study)
    source = ("--tracking-uri" if options.tracking_uri is not None else
              f"the tracking URI the sweep logged to ({study})" if uri == logged_to else
              uri_source(None))
    text = build_report(name, readable_store(uri, source), sweep_dir if sweep_dir.exists() else None, options.experiment,
                        options.top, shown_uri=uri, parent_uid=parent_uid)
    if markdown is not None:  # written before anything is shown: a reader that leaves (`| head`) loses no file
        try:
            markdown.write_text(text)
        except OSError as err:
            raise ConfigError(f"--markdown {cut(str(markdown), 120)}: cannot write it ({err.strerror or err})") from None
    print(text)
    if markdown is not None:
        print(f"wrote {visible(str(markdown))}")
    return 0
