"""Trainer speed: real training tokens per second of the real loop, this tree against an older commit.

    python bench/trainer_speed.py --baseline REV [--steps 1000] [--rounds 3] [--memory]

Both trainers run `trainables.train.train` on the default `hybrid_dat` preset, on the CPU with
one thread, each in its own process (PYTHONPATH at its tree; the baseline is checked out with
`git worktree add $TMPDIR/baseline-REV REV` if it is not there yet). They alternate old, new,
new, old, ... so that a shared machine's noise hits both sides alike; the ratio is taken pair
by pair and its median printed.

The run is a default trial compressed in steps: `--steps` S (1000) with the switch at S/4 and
evaluation at the default cadence (every 250 steps; each tree's own evaluation sets between and
at the end), so the steps before and after the switch have the 6000-step trial's shares; evaluation
does not quite: 1 of its 4 evaluations is the last (on the full sets), against 1 of 24 in the trial.
`--steps 6000` runs the trial itself. What is counted, in both trees alike, by wrapping the model's forward:

    real tokens    non-PAD input positions of the training batches (padding does not count)
    tokens/s       real tokens / wall time of `train()` (batches, steps, evaluation, checkpoints)
    ms/step        the trainer's own `steps_per_s` (each report's interval, its evaluation included)
                   less the evaluation, timed apart: training only, before and after the switch
    eval share     the evaluations' time (timed around the trainer's `_evaluate`) / wall time; until
                   2026-11-23 this bench printed 1 - training time / wall time with the evaluations
                   counted as training: the 2-4% it printed then were set-up, checkpoints and reports
    set-up+ckpt    the rest: evaluation sets, model, checkpoints, reports
    GFLOP/s        the model's FLOPs (below) over the wall time: `executed` counts every position
                   computed, padding included; `useful` counts real tokens only

FLOPs, counted from the shapes (2 per multiply-add): per position, the LSTM 2*4D*2D, attention's
projections 2*4D^2, the MLP 2*2*D*H, the head 2*D*V; the causal attention scores and mix
2*2*hs per attended pair (L(L+1)/2 pairs per head). Training counts forward + backward as 3x the
forward; evaluation 1x. Norms, activations and the optimizer are left out (a few percent).

Peak: vector FP32 lanes per FMA unit x FMA units x 2 x clock (`cpu MHz` of /proc/cpuinfo, the
nominal clock: boost can run above it). Zen 4 (AMD family 0x19 with AVX-512) runs 512-bit
instructions on two 256-bit FMA pipes: 2 x 8 lanes x 2 = 32 FLOP/cycle; AVX-512 Intel server
cores are taken as 2 x 16 x 2, AVX2 cores as 2 x 8 x 2.

`--memory` also runs one full default trial (6000 steps, the reproduction's evaluation seed) of this
tree alone and prints its RSS at every report, the growth from the first report after the switch to
the last mid-run one (reports that follow the same work: an evaluation on the sets' first sequences;
the last report, after the full sets' evaluation, is printed apart), and its acc_3x (seed 0 of the
reproduction's DAT row, run on this tree's trainer). Beside RSS it prints the growth of the bytes
malloc holds in use (glibc's `mallinfo2`: live allocations, torch's CPU tensors included): RSS that
grows while these stay flat is memory the allocator keeps on its free lists, not a leak.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))  # run as a script or loaded by path
from worktree import baseline_tree  # noqa: E402
from core.tool_cli import Parser, run_tool  # noqa: E402
from sweeper.cli_types import positive_int  # noqa: E402

REPRO_EVAL_SEED = 20261121  # the reproduction's evaluation seed: the memory run's acc_3x compares with its table


# --------------------------------------------------------------------------- child: one run in one tree


def model_flops(cfg, B: int, L: int, attention: bool) -> float:
    """Forward FLOPs of HybridLM on a (B, L) batch (module docstring)."""
    m, D = cfg.model, cfg.model.d_model
    per_pos = 0.0
    if m.mixer == "lstm":
        per_pos += 2 * 4 * D * 2 * D
    if m.attention and attention:
        per_pos += 2 * 4 * D * D
    per_pos += 2 * 2 * D * m.mlp_ratio * D
    per_block = B * L * per_pos
    if m.attention and attention:
        per_block += B * m.n_heads * (L * (L + 1) / 2) * 2 * 2 * (D // m.n_heads)
    return m.n_layers * per_block + B * L * 2 * D * _vocab(cfg)


def _vocab(cfg) -> int:
    t = cfg.task
    return t.modulus + t.n_keys + t.n_values + 2


def child(steps_total: int, eval_seed: int | None) -> None:
    import torch

    torch.set_num_threads(1)
    from trainables.config import load_trial_config, with_overrides
    from trainables.model import HybridLM
    from trainables.train import train

    cfg = load_trial_config("hybrid_dat")
    over = {"steps": steps_total, "device": "cpu"}
    if steps_total != cfg.steps:
        over["dat.switch_step"] = steps_total // 4
    if eval_seed is not None:
        over["eval.seed"] = eval_seed
    cfg = with_overrides(cfg, over)
    pad = _vocab(cfg) - 1
    count = {"real": 0, "positions": 0, "train_flops": 0.0, "eval_flops": 0.0}
    forward = HybridLM.forward

    def counting_forward(self, tokens):
        B, L = tokens.shape
        attention = self.attn_scale != 0.0
        if self.training:
            count["real"] += int((tokens != pad).sum())
            count["positions"] += B * L
            count["train_flops"] += 3 * model_flops(cfg, B, L, attention)
        else:
            count["eval_flops"] += model_flops(cfg, B, L, attention)
        return forward(self, tokens)

    HybridLM.forward = counting_forward
    loop = sys.modules["trainables.train"]  # the module (an older trainables/__init__ exports a function by its name)

    evaluate, eval_s = loop._evaluate, []  # the trainer's steps_per_s includes its interval's evaluation: time it apart

    def timed_evaluate(*args, **kwargs):
        start = time.perf_counter()
        out = evaluate(*args, **kwargs)
        eval_s.append(time.perf_counter() - start)
        return out

    loop._evaluate = timed_evaluate
    reports, rss, heap = [], [], []

    def report(metrics, ckpt):
        reports.append({k: metrics[k] for k in ("step", "steps_per_s", "attention_active", "acc_3x")})
        reports[-1]["eval_sequences"] = metrics.get("eval_sequences", 0.0)  # absent in trees before subset evaluations
        rss.append(_rss_mib())
        heap.append(_heap_mib())

    start = time.perf_counter()
    train(cfg, report=report)
    wall = time.perf_counter() - start
    every = cfg.eval.every
    steps = [min(every, r["step"] - (i * every)) for i, r in enumerate(reports)]  # each report's interval
    train_s = [n / r["steps_per_s"] - e for n, r, e in zip(steps, reports, eval_s)]  # the interval less its evaluation
    train_time = sum(train_s)
    before = [1e3 * t / n for t, n, r in zip(train_s, steps, reports) if not r["attention_active"]]
    after = [1e3 * t / n for t, n, r in list(zip(train_s, steps, reports))[1:] if r["attention_active"]]  # the switch's interval is mixed
    out = {
        "wall_s": wall, "steps": steps_total, **count, "train_s": train_time, "eval_s": sum(eval_s),
        "ms_before": statistics.mean(before) if before else None, "ms_after": statistics.mean(after) if after else None,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_mib": rss, "heap_mib": heap, "report_steps": [r["step"] for r in reports], "acc_3x": reports[-1]["acc_3x"],
        "eval_sequences": [r["eval_sequences"] for r in reports],
        "switch_step": cfg.dat.switch_step,
    }
    print("RESULT " + json.dumps(out))


def _heap_mib() -> float | None:
    """Bytes glibc's malloc holds in use (small blocks and mmapped ones), MiB; None without glibc 2.33+."""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

    try:
        mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = MallInfo2
    info = mallinfo2()
    return (info.uordblks + info.hblkhd) / 2**20


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


# --------------------------------------------------------------------------- parent: A/B


def run_tree(tree: Path, steps: int, eval_seed: int | None = None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--steps", str(steps)]
    if eval_seed is not None:
        cmd += ["--eval-seed", str(eval_seed)]
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not line:
        raise SystemExit(f"run in {tree} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(line[-1][len("RESULT "):])


def cpu_peak() -> tuple[float, str]:
    """FP32 GFLOP/s of one core from its vector width, FMA units and clock (module docstring)."""
    info = Path("/proc/cpuinfo").read_text()
    flags = set(re.search(r"^flags\s*:\s*(.*)$", info, re.M).group(1).split())
    vendor = re.search(r"^vendor_id\s*:\s*(\S+)", info, re.M).group(1)
    family = int(re.search(r"^cpu family\s*:\s*(\d+)", info, re.M).group(1))
    mhz = float(re.search(r"^cpu MHz\s*:\s*([\d.]+)", info, re.M).group(1))
    if "avx512f" in flags and vendor == "AuthenticAMD" and family == 0x19:
        lanes, units, why = 8, 2, "Zen 4: AVX-512 on 2 x 256-bit FMA pipes"
    elif "avx512f" in flags:
        lanes, units, why = 16, 2, "AVX-512, 2 x 512-bit FMA units"
    elif "fma" in flags:
        lanes, units, why = 8, 2, "AVX2, 2 x 256-bit FMA units"
    else:
        lanes, units, why = 4, 1, "SSE, no FMA"
    peak = lanes * units * 2 * mhz / 1e3
    return peak, f"{why}: {units} x {lanes} FP32 lanes x 2 FLOP x {mhz:.0f} MHz = {peak:.1f} GFLOP/s per core"


def cpu_model() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    name = re.search(r"Model name:\s*(.*)", out)
    return f"{name.group(1).strip() if name else platform.processor()}, {os.cpu_count()} cores"


def summary(r: dict, peak: float) -> dict:
    flops = r["train_flops"] + r["eval_flops"]
    useful = r["train_flops"] * r["real"] / r["positions"] + r["eval_flops"]
    return {
        "tok_s": r["real"] / r["wall_s"],
        "pad": 1 - r["real"] / r["positions"],
        "eval_share": r["eval_s"] / r["wall_s"],
        "other_share": 1 - (r["train_s"] + r["eval_s"]) / r["wall_s"],  # set-up, checkpoints, reports
        "gflops": flops / r["wall_s"] / 1e9,
        "useful_gflops": useful / r["wall_s"] / 1e9,
        "peak_frac": flops / r["wall_s"] / 1e9 / peak,
    }


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="git revision of the old trainer")
    parser.add_argument("--steps", type=positive_int, default=1000,
                        help="steps per run, a multiple of 1000; the switch at steps/4 (6000: the trial itself)")
    parser.add_argument("--rounds", type=positive_int, default=3, help="old/new pairs (order old new new old ...)")
    parser.add_argument("--memory", action="store_true", help="also one full 6000-step trial of this tree: RSS over the run")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--eval-seed", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.steps, args.eval_seed)
        return
    if not (args.baseline or args.memory):  # --steps and --rounds alone would be taken and nothing measured
        parser.error("nothing to measure: give --baseline REV (old against new) or --memory")
    if args.steps % 1000:
        parser.error(f"--steps: must be a multiple of 1000, got {args.steps}")

    peak, how = cpu_peak()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True).stdout
    print(f"machine: {cpu_model()}; 1 torch thread per run; {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"peak: {how}")
    print(f"new: {ROOT} at {head}{' + uncommitted changes' if dirty else ''}")
    rows: dict[str, list[dict]] = {"old": [], "new": []}
    if args.baseline:
        old = baseline_tree(args.baseline)
        print(f"old: {old} ({args.baseline})")
        print(f"run: default hybrid_dat, {args.steps} steps, switch at {args.steps // 4 if args.steps != 6000 else 1500}, "
              f"eval every 250 (each tree its own sets: the full ones at the end); {args.rounds} rounds, old/new alternating")
        for i in range(args.rounds):
            order = ("old", "new") if i % 2 == 0 else ("new", "old")
            for side in order:
                r = run_tree(old if side == "old" else ROOT, args.steps)
                s = summary(r, peak)
                rows[side].append(r | s)
                print(f"  round {i + 1} {side}: {s['tok_s']:8.0f} real tok/s  wall {r['wall_s']:6.1f} s  "
                      f"ms/step {_ms(r['ms_before'])} | {_ms(r['ms_after'])}  eval {s['eval_share']:5.1%}  "
                      f"{s['gflops']:5.1f} GFLOP/s  acc_3x {r['acc_3x']:.3f}", flush=True)
        _table(rows, peak)
    if args.memory:
        _memory(peak)


def _ms(x: float | None) -> str:
    return "  n/a" if x is None else f"{x:5.1f}"


def _table(rows: dict[str, list[dict]], peak: float) -> None:
    med = {side: {k: statistics.median(r[k] or 0.0 for r in rs) for k in
                  ("tok_s", "pad", "eval_share", "other_share", "gflops", "useful_gflops", "peak_frac", "ms_before", "ms_after",
                   "peak_rss_mib", "wall_s")} for side, rs in rows.items()}
    ratios = [n["tok_s"] / o["tok_s"] for o, n in zip(rows["old"], rows["new"])]
    print("\nmedians            old        new")
    for key, fmt, label in (("tok_s", "{:10.0f}", "real tokens/s"), ("wall_s", "{:10.1f}", "wall s"),
                            ("ms_before", "{:10.1f}", "ms/step before"), ("ms_after", "{:10.1f}", "ms/step after"),
                            ("pad", "{:10.1%}", "PAD share"), ("eval_share", "{:10.1%}", "eval share"),
                            ("other_share", "{:10.1%}", "set-up+ckpt"),
                            ("gflops", "{:10.1f}", "GFLOP/s exec"), ("useful_gflops", "{:10.1f}", "GFLOP/s useful"),
                            ("peak_frac", "{:10.1%}", "of peak (exec)"), ("peak_rss_mib", "{:10.0f}", "peak RSS MiB")):
        print(f"{label:15s}" + "".join(fmt.format(med[side][key]) for side in ("old", "new")))
    print(f"useful of peak {med['old']['useful_gflops'] / peak:10.1%}{med['new']['useful_gflops'] / peak:10.1%}")
    print(f"\nratio new/old real tokens/s: median {statistics.median(ratios):.2f}x "
          f"(pairs: {', '.join(f'{x:.2f}' for x in ratios)}; target >= 2.5x)")


def _memory(peak: float) -> None:
    print(f"\nmemory: one full default trial (hybrid_dat, 6000 steps, eval.seed {REPRO_EVAL_SEED} as in "
          f"docs/results/dat_reproduction.md) of this tree, RSS at each report")
    r = run_tree(ROOT, 6000, eval_seed=REPRO_EVAL_SEED)
    s = summary(r, peak)
    steps, rss = r["report_steps"], r["rss_mib"]
    print("  " + "  ".join(f"{st}:{m:.0f}" for st, m in zip(steps, rss)))
    # Growth is read between reports that follow the same work: the mid-run ones (an evaluation on the sets'
    # first sequences). The last report follows the full sets' evaluation (longer batches, more memory
    # held by the allocator afterwards): its RSS is printed apart, not read as growth.
    full = max(r["eval_sequences"])
    after = [i for i, st in enumerate(steps) if st > r["switch_step"]]
    mid = [i for i in after if r["eval_sequences"][i] < full] or after  # every report full (no subsets): all of them
    kind = "mid-run reports" if mid is not after else "reports"
    a, b = mid[0], mid[-1]
    print(f"  peak RSS {r['peak_rss_mib']:.0f} MiB; RSS {rss[a]:.1f} MiB at step {steps[a]} -> {rss[b]:.1f} MiB at step "
          f"{steps[b]}: growth {rss[b] - rss[a]:+.1f} MiB over {steps[b] - steps[a]} steps ({kind} after the switch); "
          f"{rss[-1]:.1f} MiB after the last, full evaluation ({full:.0f} sequences per length) at step {steps[-1]}")
    heap = r.get("heap_mib") or [None]
    if heap[0] is not None:
        print(f"  malloc in use (live allocations) at the same reports: {heap[a]:.1f} -> {heap[b]:.1f} MiB: growth "
              f"{heap[b] - heap[a]:+.1f} MiB; the rest of RSS's growth is held on the allocator's free lists")
    else:
        print("  malloc in use: not readable here (needs glibc 2.33+'s mallinfo2)")
    print(f"  the trial: {r['wall_s']:.0f} s, {s['tok_s']:.0f} real tok/s, eval share {s['eval_share']:.1%}, "
          f"ms/step {_ms(r['ms_before'])} | {_ms(r['ms_after'])}, acc_3x {r['acc_3x']:.3f}")


if __name__ == "__main__":
    run_tool(main)
