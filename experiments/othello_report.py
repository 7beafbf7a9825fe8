"""Tables and plots of docs/results/othello.md from the runs' reports.

    python experiments/othello_report.py RUNS_DIR_OR_JSON... [--out docs/results/othello]
    python experiments/othello_report.py docs/results/othello.json --paired-only

Each input is a directory written by othello_run.py (NAME.jsonl per run) or a JSON file mapping
NAME -> {"reports": [...]}; a single stored record (OUT.json, NAME -> {"final": ..., "curve": ...})
is read back as it is. Runs are grouped by name without the trailing `_s<seed>`. Writes
OUT.json (every run's final metrics and its acc_{k}x curves: the record the tables are built
from), OUT.png, and prints the markdown tables: mean ± standard deviation over seeds per group,
the per-seed numbers, the pre-registered comparisons (difference of means, its standard error),
for EMA runs the averaged weights against the live weights of the same run, and the settings
compared paired by training seed (the re-analysis pre-registered in dat_paper_depth.md).
`--paired-only` prints that last table and writes nothing. OUT.json and OUT.png are written only
where nothing is, or over this tool's own earlier output (never through a link).
"""

from __future__ import annotations

import gzip
import json
import math
import re
import zlib
import statistics as st
from pathlib import Path

import matplotlib
from scipy import stats

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from core import json_text
from core.errors import ConfigError, brief, cut, short_path
from core.files import check_output, write_atomic
from core.tool_cli import Parser, run_tool, summary

KS = (1, 2, 3)
NAMES = ("acc", "tv", "illegal_mass")
MAX_TEXT = 256 << 20  # characters of all inputs together: the stored records hold under 1 MB each


def _text(path: Path, left: int | None = None) -> str:
    """A regular file's text, gzip-compressed (.gz) or not (a FIFO is not opened: it would block);
    refused past `left` characters, what the inputs read before it left of MAX_TEXT."""
    if not path.is_file():
        raise ConfigError(f"{short_path(path, 120)}: " + ("not a regular file (a FIFO, a device?)" if path.exists()
                                                          else "no such file or folder"))
    with (gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")) as f:
        left = MAX_TEXT if left is None else left
        text = f.read(left + 1)  # decompressed: a small .gz may hold gigabytes
    if len(text) > left:
        raise ConfigError(f"{short_path(path, 120)}: the inputs hold more than {MAX_TEXT >> 20} MiB of text together; "
                          "not Othello runs or their record")
    return text


def load(paths: list[Path]) -> dict:
    runs, left = {}, MAX_TEXT  # read at the call: the limit holds for all inputs together
    for p in paths:
        for f in sorted(p.glob("*.jsonl")) if p.is_dir() else [p]:
            text = _text(f, left)
            left -= len(text)
            if p.is_dir():
                runs[f.stem] = {"reports": [json_text.loads(line) for line in text.splitlines()]}
            else:
                runs.update({k: {"reports": v["reports"]} for k, v in json_text.loads(text).items()})
    return runs


def read(paths: list[Path]) -> dict:
    """The record: read back from one stored OUT.json, or built from the runs' reports; one
    ConfigError line for inputs that are neither."""
    try:
        return _read(paths)
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError,
            IndexError) as err:
        if isinstance(err, ConfigError):
            raise
        what = f"no key {err}" if isinstance(err, KeyError) else f"{type(err).__name__}: {cut(str(err), 80)}"
        raise ConfigError(f"{cut(' '.join(map(str, paths)), 120)}: not Othello runs or their record ({what})") from None


def _read(paths: list[Path]) -> dict:
    if len(paths) == 1 and paths[0].is_file():
        rec = json_text.loads(_text(paths[0]))
        if all("final" in r for r in rec.values()):
            return _checked(rec, paths)
    return _checked(record(load(paths)), paths)


def _checked(rec: dict, paths: list[Path]) -> dict:
    """The record, each run named GROUP_sSEED with a final report holding every `NAME_Kx` the tables
    read as a finite number (an accuracy within [0, 1]); one ConfigError line for the first that is not."""
    from trainables.run_dir import is_number

    where = cut(" ".join(map(str, paths)), 100)
    for name, r in rec.items():
        if not isinstance(name, str) or re.fullmatch(r"(.+)_s(\d+)", name) is None:
            raise ConfigError(f"{where}: run {brief(name, 40)}: not named GROUP_sSEED; not Othello runs or their record")
        final = r.get("final") if isinstance(r, dict) else None
        for metric in (f"{n}_{k}x" for n in NAMES for k in KS):
            value = final.get(metric) if isinstance(final, dict) else None
            if not is_number(value) or ("acc" in metric and not 0 <= value <= 1):
                raise ConfigError(f"{where}: run {cut(name, 40)}: {metric} {brief(value, 20)} is not "
                                  + ("an accuracy in [0, 1]" if "acc" in metric else "a finite number"))
    return rec


def record(runs: dict) -> dict:
    keep = [f"{n}_{k}x" for n in (*NAMES, "loss", "raw_acc") for k in KS] + ["step", "loss"]
    out = {}
    for name, r in sorted(runs.items()):
        final = r["reports"][-1]
        out[name] = {"final": {k: final[k] for k in keep if k in final},
                     "curve": [{k: m[k] for k in ("step", "acc_1x", "acc_3x") if k in m} for m in r["reports"]]}
    return out


def groups(rec: dict) -> dict[str, dict[int, dict]]:
    g: dict[str, dict[int, dict]] = {}
    for name, r in rec.items():
        base, seed = re.fullmatch(r"(.+)_s(\d+)", name).groups()
        g.setdefault(base, {})[int(seed)] = r["final"]
    return g


def mean_sd(xs: list[float]) -> tuple[float, float]:
    return st.mean(xs), (st.stdev(xs) if len(xs) > 1 else float("nan"))


def diff(a: dict[int, dict], b: dict[int, dict], key: str) -> tuple[float, float]:
    """mean(a) - mean(b) and its standard error from the per-seed spreads."""
    xa, xb = [m[key] for m in a.values()], [m[key] for m in b.values()]
    se = math.sqrt(st.variance(xa) / len(xa) + st.variance(xb) / len(xb))
    return st.mean(xa) - st.mean(xb), se


def tables(g: dict) -> str:
    lines = ["| group | seeds | " + " | ".join(f"{n} {k}x" for n in NAMES for k in KS) + " |",
             "|---|---|" + "---|" * (len(NAMES) * len(KS))]
    for base, seeds in g.items():
        cells = []
        for n in NAMES:
            for k in KS:
                m, sd = mean_sd([r[f"{n}_{k}x"] for r in seeds.values()])
                cells.append(f"{m:.3f} ± {sd:.3f}")
        lines.append(f"| {base} | {len(seeds)} | " + " | ".join(cells) + " |")
    lines += ["", "Per seed, `acc_1x / acc_2x / acc_3x`:", "", "| group | " + " | ".join(f"seed {s}" for s in range(7101, 7106)) + " |",
              "|---|" + "---|" * 5]
    for base, seeds in g.items():
        cells = [" / ".join(f"{seeds[s][f'acc_{k}x']:.3f}" for k in KS) if s in seeds else "" for s in range(7101, 7106)]
        lines.append(f"| {base} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


COMPARISONS = [  # (label, a, b): a - b
    ("EMA 0.999 vs none", "gpt_ema0.999_drop0.0", "gpt_ema0.0_drop0.0"),
    ("EMA 0.99 vs none", "gpt_ema0.99_drop0.0", "gpt_ema0.0_drop0.0"),
    ("attn dropout 0.1 vs none", "gpt_ema0.0_drop0.1", "gpt_ema0.0_drop0.0"),
    ("EMA 0.999 vs none, with dropout 0.1", "gpt_ema0.999_drop0.1", "gpt_ema0.0_drop0.1"),
    ("EMA 0.999 vs none, full-game reference", "ref60_ema0.999", "ref60_ema0.0"),
    ("DAT hybrid vs joint hybrid", "hybrid_dat", "hybrid_joint"),
    ("joint hybrid vs GPT", "hybrid_joint", "gpt_ema0.0_drop0.0"),
    ("full-game reference vs 20-move GPT", "ref60_ema0.0", "gpt_ema0.0_drop0.0"),
    ("5000 steps: EMA 0.999 vs none", "long_gpt_ema0.999_drop0.0", "long_gpt_ema0.0_drop0.0"),
    ("5000 steps: dropout 0.1 vs none", "long_gpt_ema0.0_drop0.1", "long_gpt_ema0.0_drop0.0"),
    ("5000 steps: EMA 0.999 vs none, with dropout 0.1", "long_gpt_ema0.999_drop0.1", "long_gpt_ema0.0_drop0.1"),
    ("5000 vs 1250 steps (no EMA, no dropout)", "long_gpt_ema0.0_drop0.0", "gpt_ema0.0_drop0.0"),
]


PAIRED = [  # (label, a, b): a - b, per shared training seed; the set pre-registered in dat_paper_depth.md
    ("EMA 0.999 - none", "gpt_ema0.999_drop0.0", "gpt_ema0.0_drop0.0"),
    ("EMA 0.99 - none", "gpt_ema0.99_drop0.0", "gpt_ema0.0_drop0.0"),
    ("attention dropout 0.1 - none", "gpt_ema0.0_drop0.1", "gpt_ema0.0_drop0.0"),
    ("5000 steps: EMA 0.999 - none", "long_gpt_ema0.999_drop0.0", "long_gpt_ema0.0_drop0.0"),
    ("5000 steps: dropout 0.1 - none", "long_gpt_ema0.0_drop0.1", "long_gpt_ema0.0_drop0.0"),
    ("DAT hybrid - joint hybrid", "hybrid_dat", "hybrid_joint"),
]


def paired(a: dict[int, dict], b: dict[int, dict], metric: str) -> dict:
    """a - b on `metric` over the seeds both have: the per-seed differences, their mean and sd, the
    paired t with n-1 degrees of freedom, its two-sided 95% interval, and the seeds a is ahead on."""
    seeds = sorted(a.keys() & b.keys())
    d = [a[s][metric] - b[s][metric] for s in seeds]
    m, sd = mean_sd(d)
    se, df = sd / math.sqrt(len(d)), len(d) - 1
    t = m / se if se else math.copysign(math.inf, m) if m else math.nan
    half = stats.t.ppf(0.975, df) * se
    return {"seeds": seeds, "diffs": d, "mean": m, "sd": sd, "t": t, "df": df, "ci": (m - half, m + half),
            "ahead": sum(x > 0 for x in d)}


def verdict(p: dict) -> str:
    """An effect if the 95% interval excludes 0; otherwise what the interval's ends rule out."""
    lo, hi = p["ci"]
    if lo > 0:
        return "effect: a better"
    if hi < 0:
        return "effect: b better"
    return f"no effect detected: rules out a gain larger than {hi:.3f} and a loss larger than {-lo:.3f}"


def paired_table(g: dict) -> str:
    """The pre-registered paired comparisons (a - b per shared seed) as a markdown table."""
    lines = ["| comparison (a - b) | n (df) | per-seed Δ acc_3x | mean Δ acc_3x [95% interval] | t (df) | seeds ahead | "
             "mean Δ acc_1x [95% interval] | verdict (acc_3x) |", "|---|---|---|---|---|---|---|---|"]
    for label, a, b in PAIRED:
        if a in g and b in g:
            p3, p1 = paired(g[a], g[b], "acc_3x"), paired(g[a], g[b], "acc_1x")
            n, df = len(p3["seeds"]), p3["df"]
            lines.append(f"| {label} | {n} ({df}) | {' '.join(f'{x:+.3f}' for x in p3['diffs'])} | "
                         f"{p3['mean']:+.3f} [{p3['ci'][0]:+.3f}, {p3['ci'][1]:+.3f}] | {p3['t']:+.2f} ({df}) | "
                         f"{p3['ahead']} of {n} | {p1['mean']:+.3f} [{p1['ci'][0]:+.3f}, {p1['ci'][1]:+.3f}] | {verdict(p3)} |")
    return "\n".join(lines)


def paired_ema(g: dict) -> str:
    """EMA weights minus the live weights of the same run (raw_acc_{k}x): the same training, paired per seed."""
    lines = ["| group | Δ acc_1x | Δ acc_2x | Δ acc_3x (± SE) | Δ acc_3x / SE | seeds with Δ acc_3x > 0 |", "|---|---|---|---|---|---|"]
    for base, seeds in g.items():
        if not all("raw_acc_3x" in r for r in seeds.values()):
            continue
        d = {k: [r[f"acc_{k}x"] - r[f"raw_acc_{k}x"] for r in seeds.values()] for k in KS}
        m3, sd3 = mean_sd(d[3])
        se = sd3 / math.sqrt(len(d[3]))
        lines.append(f"| {base} | {st.mean(d[1]):+.3f} | {st.mean(d[2]):+.3f} | {m3:+.3f} ± {se:.3f} | {m3 / se:+.1f} | "
                     f"{sum(x > 0 for x in d[3])} of {len(d[3])} |")
    return "\n".join(lines)


def comparisons(g: dict) -> str:
    lines = ["| comparison (a - b) | Δ acc_1x | Δ acc_3x (± SE) | Δ acc_3x / SE | Δ tv_3x |", "|---|---|---|---|---|"]
    for label, a, b in COMPARISONS:
        if a in g and b in g:
            d1, _ = diff(g[a], g[b], "acc_1x")
            d3, se = diff(g[a], g[b], "acc_3x")
            dtv, _ = diff(g[a], g[b], "tv_3x")
            lines.append(f"| {label} | {d1:+.3f} | {d3:+.3f} ± {se:.3f} | {d3 / se:+.1f} | {dtv:+.3f} |")
    return "\n".join(lines)


PLOTTED = [("gpt_ema0.0_drop0.0", "GPT, no EMA", "C0", "-"), ("gpt_ema0.999_drop0.0", "GPT, EMA 0.999", "C1", "-"),
           ("gpt_ema0.0_drop0.1", "GPT, attn dropout 0.1", "C2", "-"), ("hybrid_dat", "hybrid (LSTM), DAT", "C3", "--"),
           ("hybrid_joint", "hybrid (LSTM), joint", "C4", "--"), ("ref60_ema0.0", "GPT trained on full games", "k", ":")]


def plot(g: dict, rec: dict, path: Path) -> None:
    fig, axes = plt.subplots(1, 4, figsize=(17, 3.9))
    for ax, n, label in zip(axes, NAMES, ("legal top-1 (acc)", "TV distance to the target", "mass on illegal moves")):
        for base, name, colour, style in PLOTTED:
            if base not in g:
                continue
            ms = [mean_sd([r[f"{n}_{k}x"] for r in g[base].values()]) for k in KS]
            ax.errorbar(KS, [m for m, _ in ms], yerr=[s for _, s in ms], label=f"{name} ({len(g[base])})", color=colour,
                        linestyle=style, marker="o", capsize=3)
        ax.set(xticks=KS, xticklabels=["1-20", "21-40", "41-60"], xlabel="moves scored (training: 1-20)", ylabel=label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="lower left")
    ax = axes[3]
    for name, r in rec.items():
        if name.startswith("long_gpt_") and "_drop0.0_" in name:
            ema = "ema0.999" in name
            steps = [c["step"] for c in r["curve"]]
            ax.plot(steps, [c["acc_3x"] for c in r["curve"]], color="C1" if ema else "C0", alpha=0.7, lw=1)
    ax.plot([], [], color="C0", label="no EMA"), ax.plot([], [], color="C1", label="EMA 0.999")
    ax.set(xlabel="training step (5000-step extension)", ylabel="legal top-1 at moves 41-60", title="one line per seed")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = Parser(description=summary(__doc__))
    parser.add_argument("inputs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=Path("docs/results/othello"))
    parser.add_argument("--paired-only", action="store_true", help="print the paired comparisons only; write nothing")
    args = parser.parse_args()
    rec = read(args.inputs)
    if not rec:
        raise ConfigError(f"{cut(' '.join(map(str, args.inputs)), 120)}: no Othello runs there (no NAME.jsonl, no "
                          "record); nothing to report")
    g = groups(rec)
    if args.paired_only:
        print(paired_table(g))
        return
    text = "\n".join((tables(g), "", comparisons(g), "", paired_ema(g), "", paired_table(g)))  # before anything is written
    check_outputs(args.out)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out.with_suffix(".json"), json.dumps(rec, indent=1) + "\n")
    plot(g, rec, args.out.with_suffix(".png"))
    print(text)


def is_record(path: Path) -> bool:
    """`path` holds a record this tool wrote (its OUT.json)."""
    try:
        rec = json_text.loads(_text(path))
        return isinstance(rec, dict) and bool(rec) and all(isinstance(r, dict) and "final" in r for r in rec.values()) \
            and _checked(rec, [path]) is rec
    except (ConfigError, OSError, ValueError, UnicodeDecodeError, AttributeError, TypeError):
        return False


def is_png(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(8) == b"\x89PNG\r\n\x1a\n"


def check_outputs(out: Path) -> None:
    """`--out STEM` names OUT.json and OUT.png: each new, or this tool's own earlier output; written
    in a folder that takes real bytes. One ConfigError line otherwise, before anything is written."""
    from sweeper.fs import check_writable

    if out.exists() and not out.is_file():
        raise ConfigError(f"--out {short_path(out, 100)}: names a stem (STEM.json and STEM.png are written), "
                          "not a folder or device")
    check_output(out.with_suffix(".json"), "--out", is_record, "an Othello record this tool wrote")
    check_output(out.with_suffix(".png"), "--out", is_png, "a PNG picture")
    check_writable(out.parent, "--out")


if __name__ == "__main__":
    run_tool(main)
