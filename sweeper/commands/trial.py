"""`sweeper trial`: train one configuration in this process, no Ray, and print its progress."""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

import yaml

from trainables import footprint
from trainables.config import ConfigError, TrialConfig, load_trial_config, with_overrides
from trainables.errors import cut
from trainables.safe_yaml import load_yaml_text


def parse_overrides(items: list[str]) -> dict:
    """`["a.b=3", "c=true"]` -> `{"a.b": 3, "c": True}`; values are read as YAML scalars."""
    out = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {cut(item, 60)}: must be KEY=VALUE, e.g. --set dat.switch_step=500")
        try:
            out[key.strip()] = load_yaml_text(raw, f"--set {cut(key, 40)}", root_mapping=False)
        except ConfigError:
            out[key.strip()] = raw
    return out


def _drop_reports_after(path: Path, step: int) -> None:
    """A run killed between a report and its checkpoint logged reports the resume will redo."""
    if path.exists():
        kept = [line for line in path.read_text().splitlines() if json.loads(line)["step"] <= step]
        path.write_text("".join(line + "\n" for line in kept))


def _last_reported_step(path: Path) -> int:
    if not path.exists():
        return -1
    lines = path.read_text().splitlines()
    return int(json.loads(lines[-1])["step"]) if lines else -1


def keep_checkpoint(out: Path, checkpoint_dir: str, step: int) -> None:
    """Make `out/checkpoint` the newest checkpoint, atomically: the files are copied to their own
    folder `checkpoint-STEP` first, then the `checkpoint` symlink is swapped to it (rename(2)
    replaces a link at once), then older folders go. A kill at any point leaves `checkpoint`
    naming a complete checkpoint (the previous one or the new one)."""
    target = out / f"checkpoint-{step}"
    if Path(checkpoint_dir).resolve() == target.resolve():  # the resumed final checkpoint, reported again
        return
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(checkpoint_dir, target)
    link = out / "checkpoint"
    if link.is_dir() and not link.is_symlink():  # a run directory of an older version: a plain folder
        link.rename(out / "checkpoint-previous")
    tmp = out / "checkpoint.swap"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target.name)
    os.replace(tmp, link)
    for old in out.glob("checkpoint-*"):
        if old != target:
            shutil.rmtree(old, ignore_errors=True)


def format_progress(m: dict) -> str:
    def by_length(prefix: str) -> str:
        return " ".join(f"{k.removeprefix(prefix)}={v:.3f}" for k, v in m.items() if k.startswith(prefix))

    attn = f"on@{int(m['switch_step'])}" if m.get("attention_active") else "off"
    tv = f" | tv {by_length('tv_')}" if any(k.startswith("tv_") for k in m) else ""  # set_complement
    return (f"step {int(m['step']):>6} | loss {m['loss']:.4f} | train_acc {m['train_acc']:.3f} | "
            f"acc {by_length('acc_')}{tv} | attention {attn} | {m['steps_per_s']:.1f} steps/s")


def run(args: argparse.Namespace) -> int:
    overrides = parse_overrides(args.overrides)
    if args.steps is not None:
        overrides["steps"] = args.steps
    cfg: TrialConfig = with_overrides(load_trial_config(args.config), overrides, source="--set")
    if args.resume and not args.out:
        raise ConfigError("--resume: needs --out DIR (the run directory to continue)")
    footprint.check_fits(cfg, args.config)

    import torch  # heavy: only once the config is known to be good

    from trainables.train import CHECKPOINT_FILE, checkpoint_step, resolve_device, train

    resolve_device(cfg.device, source=args.config)  # device: cuda on a machine without one is refused here
    if args.threads:
        torch.set_num_threads(args.threads)

    out = Path(args.out) if args.out else None
    resume_from = None
    if out is not None:
        ckpt = out / "checkpoint"
        if args.resume and not (ckpt / CHECKPOINT_FILE).exists():
            raise ConfigError(f"--resume: {cut(str(out), 80)} holds no checkpoint to continue from; "
                              "run without --resume to start (in an empty directory)")
        if args.resume:
            resume_from = ckpt.resolve()
            _drop_reports_after(out / "metrics.jsonl", checkpoint_step(resume_from))
        elif (out / "metrics.jsonl").exists() or ckpt.exists():
            raise ConfigError(f"--out {cut(str(out), 80)}: already holds a run; pass --resume to continue it or choose another directory")
        try:
            out.mkdir(parents=True, exist_ok=True)
            (out / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
        except OSError as err:
            raise ConfigError(f"--out {cut(str(out), 80)}: cannot write there: {err.strerror or err}") from None

    def report(metrics: dict, checkpoint_dir: str | None) -> None:
        print(format_progress(metrics) if not metrics.get("diverged") else f"step {metrics['step']}: diverged (non-finite loss)", flush=True)
        if out is None:
            return
        if metrics["step"] > _last_reported_step(out / "metrics.jsonl"):  # a resumed finished run re-reports its end
            with open(out / "metrics.jsonl", "a") as f:
                f.write(json.dumps(metrics) + "\n")
        if checkpoint_dir is not None:
            keep_checkpoint(out, checkpoint_dir, int(metrics["step"]))

    if resume_from is not None:
        print(f"resuming from {resume_from}")
    result = train(cfg, report=report, resume_from=resume_from)
    summary = {"status": result.status, "step": result.step, "metrics": result.metrics}
    if out is not None:
        (out / "result.json").write_text(json.dumps(summary, indent=2))
    print(f"{result.status} after {result.step} steps" + (f"; acc_3x={result.metrics['acc_3x']:.3f}" if "acc_3x" in result.metrics else ""))
    return 0 if result.status == "completed" else 1
