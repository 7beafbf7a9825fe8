"""`sweeper report NAME`: a sweep's comparison from MLflow, in the terminal or as Markdown.

    top trials        searched parameters, accuracy at 1x..4x, steps, status
    parameter effect  numeric: Spearman correlation with the metric, the best value, and a flag
                      when the best value sits at the edge of the searched range (tuning playbook);
                      categorical: the mean metric per choice
    importance        Optuna's fANOVA importances over the study's completed trials
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from statistics import mean

from sweeper.records import length_family
from sweeper.sweep_dir import OPTUNA_DB
from trainables.config import ConfigError


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
    return value if number is None or not math.isfinite(number) or number == int(number) else f"{number:.4g}"


def parameter_effects(runs: list[dict], metric: str, mode: str, ranges: dict[str, tuple]) -> list[str]:
    """One Markdown row per searched parameter."""
    rows = []
    searched = sorted({p for r in runs for p in r["searched"]})
    scored = [r for r in runs if metric in r["metrics"]]
    for name in searched:
        path = name.split("|")[0]
        have = [r for r in scored if path in r["params"] and name in r["searched"]]
        if not have:
            continue
        values = [r["params"][path] for r in have]
        scores = [r["metrics"][metric] for r in have]
        best = max(have, key=lambda r: r["metrics"][metric] * (1 if mode == "max" else -1))
        nums = [_number(v) for v in values]
        if None not in nums and len(set(nums)) > 2:
            rho = spearman(nums, scores)
            lo, hi = ranges.get(name, (min(nums), max(nums)))
            best_v = _number(best["params"][path])
            edge = " **at the edge of the range**" if best_v is not None and (best_v <= lo or best_v >= hi) else ""
            rows.append(f"| `{name}` | numeric | Spearman {'-' if rho is None else f'{rho:+.2f}'} | best {_short(best['params'][path])}{edge} |")
        else:
            by_choice: dict[str, list[float]] = {}
            for v, s in zip(values, scores):
                by_choice.setdefault(v, []).append(s)
            means = ", ".join(f"{k}: {mean(v):.3f} (n={len(v)})" for k, v in sorted(by_choice.items()))
            rows.append(f"| `{name}` | categorical | mean {metric}: {means} | best {best['params'][path]} |")
    return rows


def build_report(name: str, uri: str, sweep_dir: Path | None, experiment: str | None, top: int) -> str:
    from sweeper.adapters import mlflow_tracking as tracking
    from sweeper.adapters.optuna_search import param_importances, walk
    from sweeper.space import IntParam, FloatParam, load_space, param_names

    runs = tracking.fetch_trial_runs(uri, name, experiment)
    spec = None
    if sweep_dir is not None and (sweep_dir / "space.yaml").exists():
        spec = load_space(sweep_dir / "space.yaml", n_samples=0)
    metric, mode = (spec.metric, spec.mode) if spec else ("acc_3x", "max")
    ranges = {}
    if spec:
        for _, p, pname, _ in walk(spec.space, param_names(spec.space)):
            if isinstance(p, (IntParam, FloatParam)):
                ranges[pname] = (p.low, p.high)
    sign = 1 if mode == "max" else -1
    ordered = sorted((r for r in runs if metric in r["metrics"]), key=lambda r: -sign * r["metrics"][metric])
    searched = sorted({p for r in runs for p in r["searched"]})
    family = length_family(metric)  # the scored metric at every length: acc_{k}x, or tv_{k}x, ...
    header = ["trial", *searched, *(f"{family}_{k}x" for k in (1, 2, 3, 4)), "steps", "status"]
    lines = [f"# Sweep `{name}`", "", f"{len(runs)} trials in MLflow ({uri}); scored by `{metric}` ({mode}).", "",
             f"## Top {min(top, len(ordered))} trials", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in ordered[:top]:
        cells = [r["trial_id"] + (" (best)" if r["best"] else "")]
        cells += [_short(r["params"].get(s.split("|")[0], "")) if s in r["searched"] else "" for s in searched]
        # a length the metric does not exist at (ood_acc_1x: nothing lies beyond the range at 1x) is "-"
        cells += [f"{v:.3f}" if (v := r["metrics"].get(f"{family}_{k}x")) is not None else "-" for k in (1, 2, 3, 4)]
        cells += [str(int(r["metrics"].get("step", 0))), r["status"]]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Parameter effect", "", "| parameter | kind | effect | best value |", "|---|---|---|---|",
              *parameter_effects(runs, metric, mode, ranges)]
    if sweep_dir is not None and (sweep_dir / OPTUNA_DB).exists():
        rows, n = param_importances(sweep_dir / OPTUNA_DB, name)
        lines += ["", f"## Parameter importance (fANOVA, {n} completed trials)", ""]
        lines += ["| parameter | importance |", "|---|---|", *rows] if rows else ["Too few completed trials for importances."]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    from sweeper.adapters import mlflow_tracking as tracking
    from sweeper.status import SPACE_FILE
    from sweeper.sweep_dir import find_sweep_dir

    sweep_dir = find_sweep_dir(args.name, args.storage, SPACE_FILE)
    name = sweep_dir.name if sweep_dir == Path(args.name) else args.name
    from sweeper.adapters.optuna_ledger import sweep_attrs
    from sweeper.sweep_dir import OPTUNA_DB

    logged_to = sweep_attrs(sweep_dir / OPTUNA_DB, name).get("sweeper.tracking_uri")
    uri = args.tracking_uri or logged_to or tracking.resolve_uri(None)
    if not sweep_dir.exists() and not args.tracking_uri:
        raise ConfigError(f"{sweep_dir}: no sweep here; pass --tracking-uri to read `{name}` from an MLflow server")
    source = ("--tracking-uri" if args.tracking_uri else
              f"the tracking URI the sweep logged to ({sweep_dir / OPTUNA_DB})" if logged_to else
              tracking.uri_source(None))
    tracking.preflight(uri, source=source)
    text = build_report(name, uri, sweep_dir if sweep_dir.exists() else None, args.experiment, args.top)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)
        print(f"wrote {args.markdown}")
    return 0
