"""The SSM's fused CUDA scan (mamba-ssm's `selective_scan_fn`) checked against the reference scan, and timed.

    python bench/ssm_fused.py [--build-from SRC] [--repeats 30] [--trial-steps 600] [--out FILE.json]

Needs a CUDA device and mamba-ssm's compiled kernel. mamba-ssm ships as source that compiles its kernel
for nine GPU generations; `--build-from SRC` (an unpacked mamba-ssm sdist) instead JIT-builds only
`selective_scan_cuda` for the GPU at hand (torch.utils.cpp_extension, mamba-ssm's own nvcc flags) and
imports mamba-ssm's Python ops from SRC without its package `__init__` (which imports models this bench
does not use, some needing packages a bare GPU image lacks).

Three parts, each printed as a table:

1. Correctness. For `decay` and `rotation` (the families the kernel computes; `signed` has no fused
   path), at sequence lengths 45 (training) and 180 (4x evaluation), fresh random float32 inputs on the
   GPU: outputs and the gradients of every input, from the fused path (`selective_scan`, method auto)
   and from the PyTorch chunked scan on the GPU (the path without mamba-ssm), each against
   `selective_scan_reference` run in float64 on the CPU. Error: ||x - ref|| / ||ref||. Bar, stated before
   the run: < 1e-4 for every output and gradient (float32 arithmetic with fast-math exponentials).
2. Speed: HybridLM (d_model 64, 2 blocks, attention on) training step at 64 x 45 tokens and evaluation
   forward at 256 x 180 tokens on the GPU: LSTM, SSM fused, SSM chunked; median milliseconds.
3. A whole trial: the default `hybrid_dat` preset with the mixer `ssm` / `rotation` (the mixer space's
   SSM arm) for `--trial-steps` steps, fused and chunked: the trainer's own steps/s before and after
   the switch, and its final accuracies (the same seed, so any gap is the scans' arithmetic).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from trainables import ssm  # noqa: E402
from trainables.config import ModelConfig, load_trial_config, with_overrides  # noqa: E402
from trainables.model import HybridLM  # noqa: E402
from trainables.ssm import selective_scan, selective_scan_reference  # noqa: E402
from core.errors import ConfigError  # noqa: E402
from core.tool_cli import Parser, run_tool  # noqa: E402
from sweeper.cli_types import count, positive_int  # noqa: E402
from sweeper.fs import check_output_file  # noqa: E402

BAR = 1e-4
SOURCES = ["selective_scan.cpp", "selective_scan_fwd_fp32.cu", "selective_scan_fwd_fp16.cu", "selective_scan_fwd_bf16.cu",
           "selective_scan_bwd_fp32_real.cu", "selective_scan_bwd_fp32_complex.cu", "selective_scan_bwd_fp16_real.cu",
           "selective_scan_bwd_fp16_complex.cu", "selective_scan_bwd_bf16_real.cu", "selective_scan_bwd_bf16_complex.cu"]
NVCC_FLAGS = ["-O3", "-std=c++17", "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
              "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
              "-U__CUDA_NO_BFLOAT162_OPERATORS__", "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
              "--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math", "-lineinfo"]  # mamba-ssm's setup.py


def build_kernel(src: Path, build_dir: Path) -> float:
    """JIT-build mamba-ssm's selective_scan_cuda for this GPU only; make mamba_ssm's ops importable. Seconds spent."""
    from torch.utils.cpp_extension import load

    major, minor = torch.cuda.get_device_capability()
    csrc = src / "csrc" / "selective_scan"
    build_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    module = load("selective_scan_cuda", [str(csrc / s) for s in SOURCES], extra_cflags=["-O3", "-std=c++17"],
                  extra_cuda_cflags=NVCC_FLAGS + [f"-gencode=arch=compute_{major}{minor},code=sm_{major}{minor}"],
                  extra_include_paths=[str(csrc)], build_directory=str(build_dir), verbose=False)
    sys.modules["selective_scan_cuda"] = module
    package = types.ModuleType("mamba_ssm")  # the package without its __init__ (model imports)
    package.__path__ = [str(src / "mamba_ssm")]
    sys.modules["mamba_ssm"] = package
    return time.perf_counter() - start


def scan_inputs(b: int, L: int, E: int, N: int, transition: str, seed: int) -> list[torch.Tensor]:
    """Fresh random float32 scan inputs on the GPU, realistic ranges (as the mixer produces them)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, device="cuda")  # noqa: E731
    u, B, C = r(b, L, E), r(b, L, N), r(b, L, N)
    delta = torch.nn.functional.softplus(r(b, L, E) - 2)  # step sizes, mostly small, some large
    A = -torch.exp(r(E, N // 2 if transition == "rotation" else N))
    D = r(E)
    theta = [r(b, L, N // 2)] if transition == "rotation" else []
    return [t.requires_grad_() for t in [u, delta, A, B, C, D, *theta]]


def outputs_and_grads(inputs: list[torch.Tensor], transition: str, method: str | None, gy: torch.Tensor) -> list[torch.Tensor]:
    u, delta, A, B, C, D, *theta = inputs
    kw = dict(transition=transition, theta=theta[0] if theta else None)
    y = selective_scan_reference(u, delta, A, B, C, D, **kw) if method is None else \
        selective_scan(u, delta, A, B, C, D, method=method, **kw)
    return [y, *torch.autograd.grad(y, inputs, gy)]


def check(transitions=("decay", "rotation"), lengths=(45, 180), b=8, E=128, N=16) -> list[dict]:
    rows = []
    names = ["y", "u", "delta", "A", "B", "C", "D", "theta"]
    for transition in transitions:
        assert ssm._fused_applies(True, transition, "auto"), f"fused path does not apply to {transition}"
        for L in lengths:
            inputs = scan_inputs(b, L, E, N, transition, seed=1000 + L)
            gy = torch.randn(b, L, E, device="cuda", generator=torch.Generator(device="cuda").manual_seed(L))
            ref = outputs_and_grads([t.detach().cpu().double().requires_grad_() for t in inputs], transition,
                                    None, gy.cpu().double())
            for method, label in (("auto", "fused"), ("chunked", "chunked")):
                got = outputs_and_grads(inputs, transition, method, gy)
                errs = {n: float((g.detach().double().cpu() - r.detach()).norm() / r.detach().norm()) for n, g, r in zip(names, got, ref)}
                finite = all(bool(torch.isfinite(g).all()) for g in got)
                rows.append({"transition": transition, "L": L, "path": label, "finite": finite,
                             "max_err": max(errs.values()), "errors": errs,
                             "pass": finite and max(errs.values()) < BAR})
    return rows


def median_ms(fn, repeats: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(1e3 * (time.perf_counter() - start))
    return statistics.median(times)


def model(mixer: str, transition: str = "decay", method: str = "auto") -> HybridLM:
    torch.manual_seed(0)
    net = HybridLM(ModelConfig(d_model=64, n_layers=2, n_heads=4, mixer=mixer, ssm_transition=transition), 100).cuda()
    for m in net.modules():
        if isinstance(m, ssm.SSMMixer):
            m.scan_method = method
    return net


def speed(repeats: int) -> list[dict]:
    train_tokens = torch.randint(100, (64, 45), device="cuda")
    eval_tokens = torch.randint(100, (256, 180), device="cuda")
    arms = [("LSTM", "lstm", "decay", "auto")] + [
        (f"SSM {t} {label}", "ssm", t, method) for t in ("decay", "rotation") for method, label in (("auto", "fused"), ("chunked", "chunked"))]
    rows = []
    for name, mixer, transition, method in arms:
        net = model(mixer, transition, method)
        opt = torch.optim.AdamW(net.parameters(), lr=1e-3)

        def step():
            loss = net(train_tokens).logsumexp(-1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

        def evaluate():
            with torch.no_grad():
                net(eval_tokens)

        rows.append({"arm": name, "train_ms": median_ms(step, repeats), "eval_ms": median_ms(evaluate, repeats)})
    return rows


def trial(steps: int) -> list[dict]:
    from trainables.train import train

    cfg = with_overrides(load_trial_config("hybrid_dat"), {
        "steps": steps, "dat.switch_step": steps // 4, "eval.every": steps // 4, "device": "cuda",  # first report: before the switch
        "model.mixer": "ssm", "model.ssm_transition": "rotation"})
    rows = []
    kernel = ssm._fused_kernel
    for label, fused in (("fused", True), ("chunked", False)):
        ssm._fused_kernel = kernel if fused else (lambda: None)
        reports: list[dict] = []
        start = time.perf_counter()
        train(cfg, report=lambda m, _: reports.append(m))
        rows.append({"path": label, "wall_s": time.perf_counter() - start,
                     "steps_per_s": [r["steps_per_s"] for r in reports],
                     **{k: reports[-1][k] for k in ("acc_1x", "acc_2x", "acc_3x", "acc_4x")}})
    ssm._fused_kernel = kernel
    return rows


def main() -> None:
    ap = Parser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-from", type=Path, help="an unpacked mamba-ssm sdist: JIT-build its kernel for this GPU")
    ap.add_argument("--build-dir", type=Path, default=Path("/tmp/selective_scan_build"))
    ap.add_argument("--repeats", type=positive_int, default=30)
    ap.add_argument("--trial-steps", type=count, default=600, help="0 skips the whole-trial part")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.out:  # before anything is built or timed: a refusal after would lose the result
        check_output_file(args.out, "--out")
    if not torch.cuda.is_available():
        raise ConfigError("bench/ssm_fused.py: needs a CUDA device; this machine has none")
    result: dict = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    if args.build_from:
        result["build_s"] = build_kernel(args.build_from, args.build_dir)
        print(f"built selective_scan_cuda for sm_{''.join(map(str, torch.cuda.get_device_capability()))} "
              f"in {result['build_s']:.0f} s", flush=True)
    if ssm._fused_kernel() is None:
        raise ConfigError("bench/ssm_fused.py: mamba_ssm's selective_scan_fn is not importable (install mamba-ssm or pass --build-from)")
    print(f"device: {result['device']}; torch {result['torch']}", flush=True)

    result["check"] = check()
    print(f"\n1. correctness, ||x - ref|| / ||ref|| against the float64 reference (bar < {BAR:g})")
    print(f"{'transition':<10} {'L':>4} {'path':<8} {'y':>9} {'worst grad':>11} {'which':>6}  pass")
    for r in result["check"]:
        grads = {k: v for k, v in r["errors"].items() if k != "y"}
        worst = max(grads, key=grads.get)
        print(f"{r['transition']:<10} {r['L']:>4} {r['path']:<8} {r['errors']['y']:>9.2e} {grads[worst]:>11.2e} "
              f"{worst:>6}  {'yes' if r['pass'] else 'NO'}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))

    result["speed"] = speed(args.repeats)
    print("\n2. speed, median ms on the GPU (HybridLM d_model 64, 2 blocks, attention on)")
    print(f"{'arm':<22} {'train step 64x45':>17} {'eval fwd 256x180':>17}")
    for r in result["speed"]:
        print(f"{r['arm']:<22} {r['train_ms']:>17.2f} {r['eval_ms']:>17.2f}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))

    if args.trial_steps:
        result["trial"] = trial(args.trial_steps)
        print(f"\n3. a whole trial: hybrid_dat with mixer ssm / rotation, {args.trial_steps} steps on the GPU")
        print(f"{'path':<8} {'wall s':>7} {'steps/s before':>15} {'after':>7} {'acc_1x':>7} {'acc_3x':>7}")
        for r in result["trial"]:
            print(f"{r['path']:<8} {r['wall_s']:>7.1f} {r['steps_per_s'][0]:>15.1f} {r['steps_per_s'][-1]:>7.1f} "
                  f"{r['acc_1x']:>7.3f} {r['acc_3x']:>7.3f}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    if not all(r["pass"] for r in result["check"]):
        sys.exit(1)


if __name__ == "__main__":
    run_tool(main)
