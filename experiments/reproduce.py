"""`sweeper reproduce`: the DAT paper's four systems, several seeds each, side by side.

    pure LSTM         preset lstm          (attention off)
    pure Transformer  preset transformer   (no recurrence, rotary positions, 4 blocks)
    hybrid, joint     preset hybrid_joint  (attention on from step 0)
    hybrid + DAT      preset hybrid_dat    (attention switched on at dat.switch_step)

Every (system, seed) trains in its own process, one torch thread each, `--workers` at a
time. Prints a table of mean and min over seeds at each evaluation length (the state and
recall halves too), checks the bar of the reproduction issue, and writes
docs/results/dat_reproduction_4systems.md with a plot (never dat_reproduction.md: that file holds
the pre-registered factorial reproduction, run by `python -m experiments.dat_reproduction`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import mean

from trainables.config import MAX_SEED, ConfigError, TrialConfig, load_trial_config, with_overrides
from core import worker_pool
from core.errors import brief, cut, short_path

SYSTEMS = {"lstm": "pure LSTM", "transformer": "pure Transformer", "hybrid_joint": "hybrid, joint", "hybrid_dat": "hybrid + DAT"}
# the order the pool takes the runs in (higher first; on a quiet 2-core machine, 2026-11-23: Transformer
# ~325 s, joint ~258 s, DAT ~230 s, LSTM ~154 s). Strictly longest first measured slower, 25.8 against
# 25.4 min: the two 4-block Transformers side by side ran 13% slower each (memory bandwidth)
COST = {"hybrid_joint": 4, "hybrid_dat": 3, "transformer": 2, "lstm": 1}
CURVE_KEYS = tuple(f"{p}_{k}x" for p in ("acc", "state_acc", "recall_acc") for k in (1, 2, 3, 4)) + ("eval_sequences",)
QUICK = {"steps": 40, "model.d_model": 16, "model.n_layers": 1, "model.n_heads": 2,
         "eval.every": 20, "eval.n_sequences": 32, "optim.batch_size": 16}


def system_config(system: str, seed: int, overrides: dict, device: str) -> TrialConfig:
    """The preset of `system` with the shared overrides (dat.* only for the DAT hybrid). If the
    step budget is cut below the preset's switch step, DAT switches at a third of the run."""
    cfg = load_trial_config(system)
    chosen = {"seed": seed, "device": device, **{k: v for k, v in overrides.items() if _applies(system, k)}}
    steps = chosen.get("steps", cfg.steps)
    if system == "hybrid_dat" and "dat.switch_step" not in chosen and cfg.dat.switch_step > steps:
        chosen["dat.switch_step"] = steps // 3
    return with_overrides(cfg, chosen, source="--set")


def _job(args: tuple) -> dict:
    system, seed, overrides, device = args
    import torch

    from trainables.train import train

    torch.set_num_threads(1)
    cfg = system_config(system, seed, overrides, device)
    history: list[dict] = []  # every evaluation during training: the per-length accuracies at that step

    def keep(metrics: dict, _checkpoint) -> None:
        history.append({"step": metrics["step"], **{k: metrics[k] for k in CURVE_KEYS if k in metrics}})

    start = time.perf_counter()
    result = train(cfg, report=keep)
    return {"system": system, "seed": seed, "status": result.status, "metrics": result.metrics,
            "wall_s": time.perf_counter() - start, "steps": cfg.steps, "history": history}


def _applies(system: str, key: str) -> bool:
    """DAT settings only make sense for the DAT hybrid; the rest applies to every system."""
    return not (key.startswith("dat.") and system != "hybrid_dat")


def run_all(systems: list[str], seeds: int, overrides: dict, workers: int, device: str) -> list[dict]:
    jobs = [(s, seed, overrides, device) for seed in range(seeds) for s in systems]
    jobs.sort(key=lambda job: -COST.get(job[0], 0))  # longest first (stable: seeds stay in order)
    with worker_pool.pool(workers) as pool:
        results = []
        for r in pool.imap_unordered(_job, jobs):
            m = r["metrics"]
            print(f"  done {r['system']:<13} seed {r['seed']}  acc 1x..4x: "
                  + " ".join(f"{m.get(f'acc_{k}x', float('nan')):.3f}" for k in (1, 2, 3, 4))
                  + f"  ({r['wall_s']:.0f}s)", flush=True)
            results.append(r)
    return results


def summarise(results: list[dict], multipliers=(1, 2, 3, 4)) -> dict:
    """system -> metric -> {mean, min} over seeds."""
    table: dict = {}
    present = {r["system"] for r in results}
    for system in [s for s in SYSTEMS if s in present] + sorted(present - set(SYSTEMS)):
        runs = [r["metrics"] for r in results if r["system"] == system]
        table[system] = {}
        for k in multipliers:
            for prefix in ("acc", "state_acc", "recall_acc"):
                key = f"{prefix}_{k}x"
                values = [m[key] for m in runs if key in m]
                if values:
                    table[system][key] = {"mean": mean(values), "min": min(values)}
    return table


def curves(results: list[dict], key: str = "acc_3x") -> dict[str, list[tuple[int, float]]]:
    """system -> [(training step, mean of `key` over the seeds evaluated at that step)]."""
    out: dict[str, list[tuple[int, float]]] = {}
    for system in dict.fromkeys(r["system"] for r in results):
        by_step: dict[int, list[float]] = {}
        for r in results:
            if r["system"] == system:
                for h in r.get("history", []):
                    if key in h:
                        by_step.setdefault(h["step"], []).append(h[key])
        n_seeds = sum(r["system"] == system for r in results)
        out[system] = [(step, mean(v)) for step, v in sorted(by_step.items()) if len(v) == n_seeds]
    return out


def gap_table(results: list[dict], every: int = 1000) -> str:
    """Mean acc at 3x of the two hybrids, and DAT's lead, at every `every` training steps: how the
    gap depends on the budget (the bar is read at the end)."""
    c = curves(results)
    joint, dat = dict(c.get("hybrid_joint", [])), dict(c.get("hybrid_dat", []))
    steps = [s for s in sorted(set(joint) & set(dat)) if s % every == 0 or s == max(joint)]
    if not steps:
        return ""
    lines = ["| training step | " + " | ".join(str(s) for s in steps) + " |", "|---|" + "---|" * len(steps)]
    lines.append("| hybrid, joint: acc 3x | " + " | ".join(f"{joint[s]:.3f}" for s in steps) + " |")
    lines.append("| hybrid + DAT: acc 3x | " + " | ".join(f"{dat[s]:.3f}" for s in steps) + " |")
    lines.append("| DAT's lead | " + " | ".join(f"{dat[s] - joint[s]:+.3f}" for s in steps) + " |")
    counts = dict(curves(results, "eval_sequences").get("hybrid_joint", []))  # eval.mid_run_sequences, then all at the end
    if counts:
        lines.append("| sequences per length evaluated | " + " | ".join(f"{counts[s]:.0f}" if s in counts else "-" for s in steps) + " |")
    return "\n".join(lines)


def check_bar(table: dict) -> list[tuple[str, bool, str]]:
    """The reproduction's bars, row by row: (row, passed, measured)."""
    get = lambda s, k: table.get(s, {}).get(k, {}).get("mean")  # noqa: E731
    rows = []
    dat3, joint1, joint3 = get("hybrid_dat", "acc_3x"), get("hybrid_joint", "acc_1x"), get("hybrid_joint", "acc_3x")
    if dat3 is not None:
        rows.append(("hybrid + DAT: mean acc at 3x >= 0.90", dat3 >= 0.90, f"{dat3:.3f}"))
    if joint1 is not None:
        rows.append(("hybrid, joint: mean acc at 1x >= 0.95", joint1 >= 0.95, f"{joint1:.3f}"))
    if joint3 is not None and dat3 is not None:
        rows.append(("hybrid, joint: acc at 3x at least 0.25 below DAT's", dat3 - joint3 >= 0.25, f"{joint3:.3f} (gap {dat3 - joint3:+.3f})"))
    lstm_r3, tf_s3 = get("lstm", "recall_acc_3x"), get("transformer", "state_acc_3x")
    if lstm_r3 is not None:
        rows.append(("pure LSTM: recall at 3x < 0.6", lstm_r3 < 0.6, f"{lstm_r3:.3f}"))
    if tf_s3 is not None:
        rows.append(("pure Transformer: state tracking at 3x < 0.6", tf_s3 < 0.6, f"{tf_s3:.3f}"))
    return rows


def format_table(table: dict, multipliers=(1, 2, 3, 4)) -> str:
    lines = ["| system | metric | " + " | ".join(f"{k}x mean (min)" for k in multipliers) + " |",
             "|---|---|" + "---|" * len(multipliers)]
    for system, metrics in table.items():
        for prefix, label in (("acc", "all"), ("state_acc", "state"), ("recall_acc", "recall")):
            cells = [metrics.get(f"{prefix}_{k}x") for k in multipliers]
            if any(c is None for c in cells):
                continue
            lines.append(f"| {SYSTEMS.get(system, system)} | {label} | " + " | ".join(f"{c['mean']:.3f} ({c['min']:.3f})" for c in cells) + " |")
    return "\n".join(lines)


def plot(table: dict, max_len: int, path: Path, multipliers=(1, 2, 3, 4), training: dict | None = None) -> None:
    """Accuracy against evaluation length (all targets, state, recall), and, given `training`
    (see `curves`), accuracy at 3x against the training step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    color = {system: f"C{i}" for i, system in enumerate([*SYSTEMS, *(set(table) - set(SYSTEMS))])}  # one per system, every panel
    fig, axes = plt.subplots(1, 4 if training else 3, figsize=(17 if training else 13, 3.8), sharey=True)
    lengths = [k * max_len for k in multipliers]
    for ax, (prefix, title) in zip(axes, (("acc", "all targets"), ("state_acc", "state tracking (ADD)"), ("recall_acc", "recall (QUERY)"))):
        ax.axvspan(0, max_len, color="0.9", label="training lengths")
        for system, metrics in table.items():
            ys = [metrics.get(f"{prefix}_{k}x", {}).get("mean") for k in multipliers]
            if None not in ys:
                ax.plot(lengths, ys, marker="o", color=color[system], label=SYSTEMS.get(system, system))
        ax.set_title(title)
        ax.set_xlabel("evaluation length (steps)")
        ax.set_xlim(0, lengths[-1] + 5)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    if training:
        ax = axes[3]
        for system, points in training.items():
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], color=color.get(system, "k"), label=SYSTEMS.get(system, system))
        ax.set_title(f"at 3x ({3 * max_len} steps) during training")
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("per-token accuracy (mean over seeds)")
    axes[2].legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_markdown(path: Path, table: dict, bar: list, command: str, wall_s: float, overrides: dict, seeds: int,
                   gaps: str = "", commit: str = "unknown") -> None:
    gaps = f"\nDuring training (mean over seeds; the bar reads the last column):\n\n{gaps}\n" if gaps else ""
    bar_lines = "\n".join(f"| {row} | {'pass' if ok else '**miss**'} | {value} |" for row, ok, value in bar)
    path.write_text(f"""# DAT reproduction

Command: `{command}`
Commit: `{commit}`; wall time {wall_s / 60:.1f} min; {seeds} seeds per system; overrides: `{json.dumps(overrides)}`

![accuracy against evaluation length]({path.with_suffix('.png').name})

{format_table(table)}

| the bar | result | measured |
|---|---|---|
{bar_lines}
{gaps}
The DAT hybrid here is the `hybrid_dat` preset: attention gated off until step 1500, every target
trained from step 0 (the paper's plain DAT; DAT + a state-only curriculum is `hybrid_dat_curriculum`,
see trainer.md). The pre-registered factorial reproduction: [dat_reproduction.md](dat_reproduction.md). Both hybrids
give attention rotary positions (`model.positional: rope`), as does the pure Transformer (4 blocks,
chosen on the recall-only task: [transformer_baseline.md](transformer_baseline.md)); the pure LSTM has none. How these defaults were found, and what plain DAT (all targets
before the switch) and position-free hybrids gave: [dat_exploration.md](dat_exploration.md).
""")


MAX_REUSE_BYTES = 64 * 2**20  # an earlier run's JSON: 12 runs with their histories take ~1 MB


def read_reuse(path: str) -> list[dict]:
    """An earlier run's results (`--reuse`), read under a size limit and checked field by field:
    what the table, the bars and the plot read of each result must be there and of its kind."""
    from sweeper.fs import read_json_limited

    where = f"--reuse {short_path(path, 100)}"
    data = read_json_limited(path, "--reuse", MAX_REUSE_BYTES, where)
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list):
        raise ConfigError(f"{where}: results: must be a list of runs (the JSON `sweeper reproduce` writes), got {brief(results, 40)}")
    seen: dict[tuple, int] = {}
    for i, r in enumerate(results):
        at = f"{where}: results[{i}]"
        if isinstance(r, dict) and (first := seen.setdefault((repr(r.get("system")), repr(r.get("seed"))), i)) != i:
            raise ConfigError(f"{at}: the same system and seed as results[{first}] ({brief(r.get('system'), 30)}, seed "
                              f"{brief(r.get('seed'), 20)}); each run once, or the table would count it twice")
        if not isinstance(r, dict):
            raise ConfigError(f"{at}: must be a mapping, got {brief(r, 40)}")
        if not isinstance(r.get("system"), str) or r["system"] not in SYSTEMS:
            raise ConfigError(f"{at}.system: must be one of {', '.join(SYSTEMS)}, got {brief(r.get('system'), 40)}")
        if not isinstance(r.get("seed"), int) or isinstance(r.get("seed"), bool) or not 0 <= r["seed"] <= MAX_SEED:
            raise ConfigError(f"{at}.seed: must be a whole number in [0, {MAX_SEED}], got {brief(r.get('seed'), 40)}")
        _check_metrics(r.get("metrics"), f"{at}.metrics")
        history = r.get("history", [])
        if not isinstance(history, list):
            raise ConfigError(f"{at}.history: must be a list, got {brief(history, 40)}")
        for j, h in enumerate(history):
            _check_metrics(h, f"{at}.history[{j}]")
            if not isinstance(h.get("step"), int) or isinstance(h.get("step"), bool) or h["step"] < 0:
                raise ConfigError(f"{at}.history[{j}].step: must be a whole number >= 0, got {brief(h.get('step'), 40)}")
    return results


def _check_metrics(m, at: str) -> None:
    if not isinstance(m, dict):
        raise ConfigError(f"{at}: must be a mapping of metrics, got {brief(m, 40)}")
    for key, value in m.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            raise ConfigError(f"{at}.{cut(str(key), 40)}: must be a finite number, got {brief(value, 40)}")
        if "acc_" in key and not 0 <= value <= 1:
            raise ConfigError(f"{at}.{cut(key, 40)}: an accuracy must lie in [0, 1], got {value}")


def output_paths(out: Path, quick: bool) -> list[Path]:
    md = out / ("dat_reproduction_quick.md" if quick else "dat_reproduction_4systems.md")
    return [md.with_suffix(".json"), md, md.with_suffix(".png")]


def check_out(out: Path, quick: bool) -> None:
    """`--out` before any training: a folder (or one that can be made) where real bytes can be
    written, and none of the files it will hold a folder, a link or a device."""
    from sweeper.fs import check_writable

    where = f"--out {short_path(out, 100)}"
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{where}: is a file; a folder is expected (the table, plot and JSON go in it)")
    for path in output_paths(out, quick):
        if path.is_symlink() or (path.exists() and not path.is_file()):
            kind = "a link" if path.is_symlink() else "a folder" if path.is_dir() else "not a regular file"
            raise ConfigError(f"{where}: {path.name} is {kind}; a file is written there")
    check_writable(out, "--out")


def save(out: Path, quick: bool, results: list[dict], table: dict, write_rest) -> Path:
    """The results JSON first (the runs themselves), then the table and plot. Should the disk fail
    now, after the training, the JSON goes to the temporary folder instead and the line says where."""
    json_path = output_paths(out, quick)[0]
    payload = json.dumps({"results": results, "table": table}, indent=1)
    try:
        out.mkdir(parents=True, exist_ok=True)
        json_path.write_text(payload)
        write_rest()
    except OSError as err:
        import tempfile

        fd, kept = tempfile.mkstemp(prefix="dat_reproduction-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            f.write(payload)
        raise ConfigError(f"--out {short_path(out, 80)}: cannot write there after the runs ({err.strerror or err}); "
                          f"the results are in {kept} (use it with --reuse)") from None
    return json_path


@dataclass(frozen=True)
class Options:
    """What the command line gives `sweeper reproduce`."""

    seeds: int
    workers: int | None
    systems: list[str] | None
    overrides: list[str]
    device: str
    quick: bool
    out: str
    gap_every: int
    reuse: str | None


def check_memory(systems: list[str], overrides: dict, device: str | None, at_once: int) -> None:
    """One line, before any run trains, when `at_once` runs of the largest system's config would not fit
    in this machine's available memory (`trainables/footprint.py`, as `sweeper trial` checks one run)."""
    from trainables import footprint

    need = {s: footprint.estimate_bytes(system_config(s, 0, overrides, device)) for s in systems}
    largest = max(need, key=need.get)
    if need[largest] * at_once > (available := footprint.available_bytes()):
        raise ConfigError(f"reproduce: {largest}: {at_once} runs at once need about {need[largest] * at_once / 2**30:.1f} GB "
                          f"of memory ({need[largest] / 2**30:.1f} GB each); this machine has {available / 2**30:.1f} GB "
                          "available: fewer --workers, or a smaller model (--set)")


def run(options: Options) -> int:
    from sweeper.commands.trial import parse_overrides

    overrides = {**(QUICK if options.quick else {}), **parse_overrides(options.overrides)}
    if "seed" in overrides:  # it would win over each run's own seed: one seed trained --seeds times, tabled as many
        raise ConfigError(f"--set seed={brief(overrides['seed'], 20)}: the training seeds are 0 to N-1 of --seeds, "
                          "one run each; leave seed out of --set")
    systems = options.systems or list(SYSTEMS)
    if (unused := next((k for k in overrides if not any(_applies(s, k) for s in systems)), None)) is not None:
        raise ConfigError(f"--set {cut(unused, 40)}: no system of --systems ({cut(', '.join(systems), 60)}) takes it "
                          "(dat.* is the DAT hybrid's, hybrid_dat); it would be ignored")
    from trainables.train import resolve_device

    for s in systems:  # fail fast on a bad override, and on cuda (--device or --set) without a CUDA device
        resolve_device(system_config(s, 0, overrides, options.device).device, source="reproduce")
    workers = options.workers or os.cpu_count() or 1
    check_memory(systems, overrides, options.device, min(workers, len(systems) * options.seeds))
    # every input and output is checked before the first run trains (a full run takes 16-26 min)
    kept = [r for r in read_reuse(options.reuse) if r["system"] not in systems] if options.reuse else []
    if options.out:
        check_out(Path(options.out), options.quick)
    print(f"reproduce: {len(systems)} systems x {options.seeds} seeds, {workers} workers, overrides {overrides}")
    commit = _commit()  # the code the runs start from
    start = time.perf_counter()
    results = run_all(systems, options.seeds, overrides, workers, options.device)
    wall = time.perf_counter() - start
    if options.reuse:  # the other systems' results from an earlier run, as they were
        print(f"reusing {len(kept)} results of other systems from {options.reuse}")
        results = kept + results
    table = summarise(results)
    print(format_table(table))
    bar = check_bar(table)
    if not options.quick and not options.reuse and set(systems) == set(SYSTEMS) and options.seeds >= 3:
        bar.append(("the full reproduction in <= 45 min of wall time", wall <= 45 * 60, f"{wall / 60:.1f} min on {workers} workers"))
    for row, ok, value in bar:
        print(f"{'PASS' if ok else 'MISS'}  {row}: {value}")
    gaps = gap_table(results, every=max(1, options.gap_every))
    if gaps:
        print(gaps)
    print(f"wall time {wall / 60:.1f} min")
    if options.out:
        out = Path(options.out)
        _, md, png = output_paths(out, options.quick)

        def write_rest() -> None:
            write_markdown(md, table, bar, "sweeper " + " ".join(sys.argv[1:]), wall, overrides, options.seeds, gaps, commit)
            plot(table, load_trial_config("hybrid_dat").task.max_len, png, training=curves(results))

        save(out, options.quick, results, table, write_rest)
        print(f"wrote {md}")
    return 0


def add_verb(sub: argparse._SubParsersAction) -> None:
    """`sweeper reproduce`, added to the command line through the `sweeper.verbs` entry point."""
    from sweeper.cli import verb
    from sweeper.cli_types import Distinct, cpus, positive_int, seed_count

    p = sub.add_parser("reproduce", help="train the DAT paper's four systems over seeds and write the results table",
                       description="Train the DAT paper's four systems (DAT hybrid, joint hybrid, pure LSTM, pure "
                                   "Transformer) over seeds, check the old bar, write the table, plot and JSON "
                                   "(dat_reproduction_4systems.md). The pre-registered factorial reproduction "
                                   "is `python -m experiments.dat_reproduction run|report`.")
    p.add_argument("--seeds", type=seed_count, default=3, help="training seeds per system (default 3)")
    p.add_argument("--workers", type=cpus, default=None, help="processes at once, at most this machine's CPUs (default: all of them)")
    p.add_argument("--systems", nargs="+", choices=list(SYSTEMS), action=Distinct, help="a subset of the systems")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a trial-config field for every system (dat.* only for the DAT hybrid)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"], help="where the runs train (default cpu)")
    p.add_argument("--quick", action="store_true", help="a tiny budget that checks the plumbing, not the science")
    p.add_argument("--out", default="docs/results", help="where the markdown, plot and JSON go ('' for nowhere)")
    p.add_argument("--gap-every", type=positive_int, default=1000, metavar="STEPS",
                   help="the hybrids' acc at 3x is tabled every STEPS training steps (default 1000)")
    p.add_argument("--reuse", metavar="JSON", help="take the systems not run now from an earlier run's JSON")
    p.set_defaults(func=verb("experiments.reproduce"))
