"""Othello with played targets: the pre-registered EMA test of docs/results/dat_paper_depth.md
("Addendum: Othello with played targets"), run through the sweep service.

    python -m experiments.othello_played run       # train what the record lacks (resumable), then export
    python -m experiments.othello_played export    # copy finished runs into the record
    python -m experiments.othello_played report    # rebuild the results section of othello.md

The sweep is experiments/othello_spaces/played_targets.yaml (EMA 0.999 | none x seeds 7201-7205,
5000 steps, FIFO). Each finished run's every report goes into
docs/results/othello_played_runs.json.gz, the committed record the report is rebuilt from. The
test, as registered: paired by seed, EMA - none on `acc_3x`, and on the difference of differences
(the `acc_3x` gain minus the `acc_1x` gain); the legal-target runs at 5000 steps (othello.json,
other seeds) beside it, unpaired.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from experiments.pages import DamagedSection, read_page, replace_section, write_page
from experiments.record import finished_trials, git_restore, read_json_rows, read_record, write_record
from core.errors import ConfigError, cut, short_path
from core.tool_cli import Parser, run_tool, summary

ROOT = Path(__file__).resolve().parent.parent
SPACE = ROOT / "experiments" / "othello_spaces" / "played_targets.yaml"
DATA = ROOT / "docs" / "results" / "othello_played_runs.json.gz"
RESULTS = ROOT / "docs" / "results" / "othello.md"
LEGAL = ROOT / "docs" / "results" / "othello.json"  # the legal-target runs (soft targets), 5000 steps: long_gpt_*
SWEEPS = ROOT / "sweeps"
BEGIN, END = "<!-- played:begin (experiments/othello_played.py report) -->", "<!-- played:end -->"
EMA, NONE = 0.999, 0.0
KS = (1, 2, 3)


def space() -> dict:
    return yaml.safe_load(SPACE.read_text())


def load() -> dict:
    """The record: {"space": the sweep file as run, "runs": [{"params": {seed, ema.decay}, "reports"}, ...]};
    a run of another kind (what a finished played-target run does not record) is one ConfigError line."""
    from core.errors import ConfigError, short_path
    from experiments.record import git_restore

    data = read_record(DATA, lambda: {"space": space(), "runs": []})
    seen: dict[tuple, int] = {}
    for i, r in enumerate(data["runs"]):
        if (why := not_a_run(r)) is None and (first := seen.setdefault(key(r["params"]), i)) != i:
            why = f"the same run as run {first}"
        if why is not None:
            raise ConfigError(f"{short_path(DATA, 100)}: run {i}: {why}; restore it with {git_restore(DATA)}")
    return data


def not_a_run(r: dict) -> str | None:
    """Why a recorded run is not a finished played-target run, or None: a whole `seed` >= 0 and a
    number `ema.decay` in [0, 1), reports of a whole rising `step` whose last holds `acc_{k}x` in [0, 1]."""
    from trainables.run_dir import is_number

    params, reports = r.get("params"), r.get("reports")
    if not isinstance(params, dict) or not isinstance(reports, list) or not reports:
        return "not a recorded run (`params` an object, `reports` a non-empty list)"
    seed, decay = params.get("seed"), params.get("ema.decay")
    if type(seed) is not int or seed < 0 or not is_number(decay) or not 0 <= decay < 1:
        return "params: a whole seed >= 0 and an ema.decay in [0, 1]"
    if not all(isinstance(x, dict) and type(x.get("step")) is int for x in reports) or any(
            a["step"] >= b["step"] for a, b in zip(reports, reports[1:])):
        return "reports: each an object with a whole `step`, the steps rising"
    if bad := [f"acc_{k}x" for k in KS if not (is_number(reports[-1].get(f"acc_{k}x")) and 0 <= reports[-1][f"acc_{k}x"] <= 1)]:
        return f"reports: the last lacks {bad[0]} as an accuracy in [0, 1]"
    raw = reports[-1].get("raw_acc_3x", 0.0)  # the EMA run's live weights, read beside its acc_3x
    if not (is_number(raw) and 0 <= raw <= 1):
        return "reports: the last holds raw_acc_3x, not as an accuracy in [0, 1]"
    return None


def key(params: dict) -> tuple:
    return int(params["seed"]), float(params["ema.decay"])


def export() -> int:
    """Copy every finished played-target run of the sweep into the record; the number added."""
    sp, data = space(), load()
    have = {key(r["params"]) for r in data["runs"]}
    added = 0
    for config, reports, _ in finished_trials(SWEEPS / sp["name"]):
        try:
            if config["task"].get("othello_targets") != "played" or config["steps"] != sp["budget"]["max_steps"]:
                continue
            params = {"seed": config["seed"], "ema.decay": config["ema"]["decay"]}
        except (KeyError, TypeError, AttributeError) as err:
            raise ConfigError(f"{short_path(SWEEPS / sp['name'], 80)}: a finished trial's config lacks {cut(str(err), 60)} "
                              "(not a config of this experiment); move that trial's folder away") from None
        if (why := not_a_run({"params": params, "reports": reports})) is not None:  # the record's reader would refuse it
            raise ConfigError(f"{short_path(SWEEPS / sp['name'], 80)}: a finished trial is not a played-target run ({why}); "
                              "move that trial's folder away")
        if key(params) not in have:
            data["runs"].append({"params": params, "reports": reports})
            have.add(key(params))
            added += 1
    if added:
        data["runs"].sort(key=lambda r: key(r["params"]))
        write_record(DATA, data)
    return added


def finals(data: dict) -> dict[float, dict[int, dict]]:
    """ema.decay -> seed -> the final report."""
    out: dict[float, dict[int, dict]] = {}
    for r in data["runs"]:
        seed, decay = key(r["params"])
        out.setdefault(decay, {})[seed] = r["reports"][-1]
    return out


def gains(runs: dict[int, dict]) -> dict[int, dict]:
    """seed -> {"gain": acc_3x - acc_1x}: the paired difference of these is the difference of differences."""
    return {s: {"gain": m["acc_3x"] - m["acc_1x"]} for s, m in runs.items()}


def verdict(p3: dict, pdd: dict) -> str:
    """The registered wording: both intervals above 0, only the first, or a null worded by its ends."""
    lo, hi = p3["ci"]
    if lo > 0 and pdd["ci"][0] > 0:
        return "EMA helps length generalisation under sampled targets"
    if lo > 0:
        return "EMA helps, not specifically beyond the training length"
    if hi < 0:
        return f"EMA hurts at 3x, by {-p3['mean']:.3f} [{-hi:.3f}, {-lo:.3f}]"
    return f"no effect detected: the data rule out a gain from EMA larger than {hi:.3f} at 3x (and a loss larger than {-lo:.3f})"


def report(data: dict) -> str:
    """The results section (markdown) from the record."""
    from experiments.othello_report import mean_sd, paired

    f = finals(data)
    ema, none = f.get(EMA, {}), f.get(NONE, {})
    seeds = sorted(set(ema) | set(none))
    want = space()["space"]["seed"]["choices"]
    lines = [f"### Played targets (sampled next moves): does EMA help? ({len(data['runs'])} of {2 * len(want)} runs)", "",
             "Rebuilt by `python -m experiments.othello_played report` from "
             "[othello_played_runs.json.gz](othello_played_runs.json.gz); pre-registered in "
             "[dat_paper_depth.md](dat_paper_depth.md#addendum-othello-with-played-targets). Final step, evaluation "
             "seed 7299, scored against the legal-move set.", "",
             "| seed | none: acc 1x / 2x / 3x | EMA 0.999: acc 1x / 2x / 3x | EMA's live weights: acc 3x | Δ acc_3x (EMA - none) |",
             "|---|---|---|---|---|"]

    def accs(m: dict | None) -> str:
        return " / ".join(f"{m[f'acc_{k}x']:.3f}" for k in KS) if m else "-"

    for s in seeds:
        a, b = ema.get(s), none.get(s)
        raw = f"{a['raw_acc_3x']:.3f}" if a and "raw_acc_3x" in a else "-"
        d = f"{a['acc_3x'] - b['acc_3x']:+.3f}" if a and b else "-"
        lines.append(f"| {s} | {accs(b)} | {accs(a)} | {raw} | {d} |")
    shared = sorted(set(ema) & set(none))
    lines.append("")
    if len(shared) < 2:
        lines.append(f"The paired test needs two seeds with both runs; {len(shared)} so far.")
        return "\n".join(lines)
    p3, p1 = paired(ema, none, "acc_3x"), paired(ema, none, "acc_1x")
    pdd = paired(gains(ema), gains(none), "gain")
    lines += ["| comparison, paired by seed | n (df) | per-seed Δ | mean [95% interval] | t (df) | seeds ahead |",
              "|---|---|---|---|---|---|"]
    for label, p in (("EMA - none, `acc_3x`", p3), ("EMA - none, `acc_1x`", p1),
                     ("EMA - none, (`acc_3x` - `acc_1x`): difference of differences", pdd)):
        n, df = len(p["seeds"]), p["df"]
        lines.append(f"| {label} | {n} ({df}) | {' '.join(f'{x:+.3f}' for x in p['diffs'])} | {p['mean']:+.3f} "
                     f"[{p['ci'][0]:+.3f}, {p['ci'][1]:+.3f}] | {p['t']:+.2f} ({df}) | {p['ahead']} of {n} |")
    same = [abs(ema[s]["raw_acc_3x"] - none[s]["acc_3x"]) for s in shared if "raw_acc_3x" in ema[s]]
    lines += ["", f"**Verdict (registered rule): {verdict(p3, pdd)}.**"
              + ("" if len(shared) == len(want) else f" (interim: {len(shared)} of {len(want)} seeds)")]
    if same:
        lines.append(f"Check: the EMA run's live weights score what the no-EMA run of the same seed scores "
                     f"(largest |Δ acc_3x| {max(same):.4f}), as the EMA does not feed back into training.")
    if LEGAL.exists():
        from trainables.run_dir import is_number

        legal = read_json_rows(LEGAL, {"final": dict}, keyed=True)
        by = {g: [r["final"] for n, r in legal.items() if n.rsplit("_s", 1)[0] == g]
              for g in ("long_gpt_ema0.0_drop0.0", "long_gpt_ema0.999_drop0.0")}
        if any(not (is_number(m.get("acc_3x")) and 0 <= m["acc_3x"] <= 1) for rows in by.values() for m in rows):
            raise ConfigError(f"{short_path(LEGAL, 100)}: a long_gpt row's final acc_3x is not an accuracy in [0, 1]; "
                              f"restore it with {git_restore(LEGAL)}")
        if all(by.values()):
            (mn, sn), (me, se) = (mean_sd([m["acc_3x"] for m in by[g]]) for g in by)
            pn, pe = mean_sd([m["acc_3x"] for m in none.values()]), mean_sd([m["acc_3x"] for m in ema.values()])
            lines += ["", "Beside it, unpaired (other seeds, 7101-7105): legal-move targets at 5000 steps score "
                      f"`acc_3x` {mn:.3f} ± {sn:.3f} without EMA and {me:.3f} ± {se:.3f} with it; played targets "
                      f"{pn[0]:.3f} ± {pn[1]:.3f} and {pe[0]:.3f} ± {pe[1]:.3f} (mean ± sd over seeds)."]
    return "\n".join(lines)


def write_report(data: dict) -> str:
    """Replace the section between the markers of othello.md (appended once if it has none)."""
    body, path = report(data), RESULTS
    try:
        text = replace_section(read_page(path), BEGIN, END, BEGIN + "\n\n" + body + "\n\n" + END)
    except DamagedSection as err:
        print(f"othello_played: {path}: its played-targets section is damaged ({err}); nothing written", file=sys.stderr)
        raise SystemExit(2) from None
    write_page(path, text)
    return body


def run() -> int:
    """Train the sweep (it resumes where it stopped), export, rebuild the section."""
    rc = subprocess.call([str(Path(sys.executable).with_name("sweeper")), "launch", str(SPACE), "--storage",
                          str(SWEEPS), "--progress", "lines", "--progress-every", "600"], cwd=ROOT)
    print(f"othello_played: {export()} runs added to {DATA.relative_to(ROOT)}", flush=True)
    print(write_report(load()), flush=True)
    return rc


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m experiments.othello_played", description=summary(__doc__))
    sub = parser.add_subparsers(dest="verb", required=True)
    sub.add_parser("run", help="train the sweep (resumable), export, rebuild the section")
    sub.add_parser("export", help="copy finished runs into the record")
    sub.add_parser("report", help="rebuild the results section of othello.md from the record")
    args = parser.parse_args(argv)
    if args.verb == "run":
        return run()
    if args.verb == "export":
        print(f"othello_played: {export()} runs added")
        return 0
    print(write_report(load()))
    return 0


if __name__ == "__main__":
    run_tool(main)
