"""`sweeper trial`: train one configuration in this process, no Ray, and print its progress.

With `--out DIR` the run keeps its folder:

    DIR/config.yaml       the trial config
    DIR/metrics.jsonl     every report, one JSON object a line, in step order
    DIR/checkpoint        a link to checkpoint-STEP, the newest checkpoint (swapped atomically)
    DIR/result.json       how the run ended

`--resume` continues such a folder. Everything is checked before a byte is written: the
folder's files are regular files read under size limits and parsed into typed records, the
saved config must be the requested one (only `steps` may change), and the checkpoint must be
this run's, hold tensors and plain values only, load into this config's model (its DAT switch
the one this config reaches at its step), and sit at a step in [0, steps] whose report
metrics.jsonl holds, the same report the checkpoint was taken with, at most one report behind
its end (the one a kill between a report and its checkpoint leaves, which the resume trains
again). No file of the run is hard-linked with another. A refusal is one line.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from dataclasses import dataclass

import yaml

from sweeper.fs import check_writable, read_limited
from sweeper.live_events import ReaderMayLeave
from trainables import footprint
from trainables.config import (ConfigError, TrialConfig, config_difference, load_trial_config, trial_config_from_dict,
                               with_overrides)
from core.files import write_atomic
from core.errors import brief, cut, short_path
from trainables.run_dir import (CHECKPOINT, CONFIG, MAX_REPORTS_BYTES, REPORTS, Report, RunDir, check_run_files,
                                checkpoint_entries, regular_or_absent, strict_reports)
from trainables.safe_yaml import UnplainNumber, load_yaml_text, read_yaml

TRIAL_GOES_ON = "note: stdout's reader left; the trial goes on to its end without printing its progress (its reports go to --out)"


@dataclass(frozen=True)
class Options:
    """What the command line gives `sweeper trial`."""

    config: str
    overrides: list[str]
    steps: int | None
    out: str | None
    resume: bool
    threads: int | None


def parse_overrides(items: list[str]) -> dict:
    """`["a.b=3", "c=true"]` -> `{"a.b": 3, "c": True}`; values are read as YAML scalars."""
    out = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {cut(item, 60)}: must be KEY=VALUE, e.g. --set dat.switch_step=500")
        if key.strip() in out:  # the last would win without a word
            raise ConfigError(f"--set {cut(key.strip(), 60)}: given twice; give each key once")
        try:
            out[key.strip()] = load_yaml_text(raw, f"--set {cut(key, 40)}", root_mapping=False)
        except UnplainNumber:
            raise
        except ConfigError:  # text YAML cannot parse (`a: b`, `[x`) is the text itself
            out[key.strip()] = raw
    return out


@dataclass(frozen=True)
class Resume:
    """What `--resume` continues: the checkpoint folder and its step, and the reports kept."""

    checkpoint: Path
    step: int
    reports: list[Report]  # those up to the checkpoint's step
    rewrite: bool  # metrics.jsonl holds more: a report after the checkpoint (trained again) or a line cut short


def check_fresh(out: Path) -> None:
    """A new run's folder: missing, or a folder without a run in it."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {cut(str(out), 80)}: not a folder")
    if any(os.path.lexists(out / name) for name in (REPORTS, CHECKPOINT)) or checkpoint_entries(out):
        raise ConfigError(f"--out {cut(str(out), 80)}: already holds a run; pass --resume to continue it or choose another directory")


def check_resume(out: Path, cfg: TrialConfig) -> Resume:
    """Everything `--resume` relies on, read and checked; nothing is written (module docstring)."""
    from trainables.train import CHECKPOINT_FILE, check_resume as check_checkpoint

    where = f"--resume {cut(str(out), 80)}"
    link = out / CHECKPOINT
    if not (link / CHECKPOINT_FILE).exists():
        raise ConfigError(f"{where}: holds no checkpoint to continue from; "
                          "run without --resume to start (in an empty directory)")
    folder = link.resolve()
    if link.is_symlink() and (folder.parent != out.resolve() or not folder.name.startswith(f"{CHECKPOINT}-")):
        raise ConfigError(f"{where}: checkpoint: must name a checkpoint-STEP folder of this run, "
                          f"names {short_path(folder, 100)}")
    check_run_files(out, "--resume")
    saved = [path for path in (folder / CONFIG, out / CONFIG) if regular_or_absent(path, "--resume")]
    if not saved:
        raise ConfigError(f"{where}: holds no config.yaml to compare the requested config with")
    for path in saved:
        name = short_path(path, 100)
        if (data := read_yaml(path)) == {}:  # an empty document (no text, `{}`, `~`, a comment) loads as every default
            raise ConfigError(f"{where}: {name}: an empty document, where the run's config was saved")
        _same_run(trial_config_from_dict(data, source=name), cfg, name)
    data, reports, cut_short = b"", [], False
    if (found := regular_or_absent(out / REPORTS, "--resume")):
        data = read_limited(out / REPORTS, "--resume", MAX_REPORTS_BYTES)
        reports, cut_short = strict_reports(data, short_path(out / REPORTS, 100))
    # the checkpoint's step, its folder's name, and its report: the one metrics.jsonl holds at that step
    step = check_checkpoint(cfg, folder, short_path(out / REPORTS, 60),
                            {r.step: r.metrics for r in reports} if found else None)
    kept = [r for r in reports if r.step <= step]
    after = [r.step for r in reports if r.step > step]
    if len(after) + cut_short > 1:
        raise ConfigError(f"{where}: the checkpoint is at step {step}, but metrics.jsonl goes on to step "
                          f"{after[-1] if after else '?'} ({len(after)} report{'s' * (len(after) != 1)} after it); a run's "
                          "checkpoint is at most one report behind, so resuming would drop reports: refused")
    return Resume(folder, step, kept, rewrite=b"".join(r.line for r in kept) != data)


def _same_run(saved: TrialConfig, asked: TrialConfig, source: str) -> None:
    """The requested config must be the saved one; only `steps` may change."""
    differs = config_difference(saved, asked)
    if differs:
        key, was, now = differs
        raise ConfigError(f"--resume: {source}: {key}: the run was trained with {brief(was, 40)}, this "
                          f"command asks {brief(now, 40)}; a resumed run may change only `steps`")


def format_progress(m: dict) -> str:
    def by_length(prefix: str) -> str:
        return " ".join(f"{k.removeprefix(prefix)}={v:.3f}" for k, v in m.items() if k.startswith(prefix))

    attn = f"on@{int(m['switch_step'])}" if m.get("attention_active") else "off"
    tv = f" | tv {by_length('tv_')}" if any(k.startswith("tv_") for k in m) else ""  # set_complement
    return (f"step {int(m['step']):>6} | loss {m['loss']:.4f} | train_acc {m['train_acc']:.3f} | "
            f"acc {by_length('acc_')}{tv} | attention {attn} | {m['steps_per_s']:.1f} steps/s")


def run(options: Options) -> int:
    overrides = parse_overrides(options.overrides)
    if options.steps is not None:
        if "steps" in overrides:  # --steps would win without a word
            raise ConfigError("--steps and --set steps: the step budget given twice; give one of them")
        overrides["steps"] = options.steps
    source = "/".join(flag for flag, given in (("--set", options.overrides), ("--steps", options.steps is not None)) if given)
    source = source or short_path(options.config, 100)
    cfg: TrialConfig = with_overrides(load_trial_config(options.config), overrides, source=source)
    if options.resume and not options.out:
        raise ConfigError("--resume: needs --out DIR (the run directory to continue)")
    footprint.check_fits(cfg, options.config)

    import torch  # heavy: only once the config is known to be good

    from sweeper.sweep_dir import check_not_in_sweep
    from trainables.train import resolve_device, train

    resolve_device(cfg.device, source=options.config)  # device: cuda on a machine without one is refused here
    out = Path(options.out) if options.out else None
    resume = None
    if out is not None:  # everything is checked before the first byte is written
        resume = check_resume(out, cfg) if options.resume else None
        if resume is None:
            check_fresh(out)
        check_writable(out, "--out")
        check_not_in_sweep(out.resolve(), "--out")  # a sweep's trials are its own: resumed by its launch
    if options.threads:
        torch.set_num_threads(options.threads)

    if out is not None:
        try:
            out.mkdir(parents=True, exist_ok=True)
            write_atomic(out / CONFIG, yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False), fsync=True)
            if resume is not None and resume.rewrite:
                write_atomic(out / REPORTS, b"".join(r.line for r in resume.reports), fsync=True)
        except OSError as err:
            raise ConfigError(f"--out {cut(str(out), 80)}: cannot write there: {err.strerror or err}") from None
    run = RunDir(out) if out is not None else None
    # a run kept in --out trains to its end when stdout's reader leaves (`| head`); one kept nowhere stops
    shown = sys.stdout if run is None else ReaderMayLeave(sys.stdout, sys.stderr, TRIAL_GOES_ON)

    def report(metrics: dict, checkpoint_dir: str | None) -> None:
        if run is not None:
            run.append(metrics)  # not a report at or before the last one (a resumed finished run re-reports its end)
            if checkpoint_dir is not None:
                run.keep_checkpoint(checkpoint_dir, int(metrics["step"]))
        line = format_progress(metrics) if not metrics.get("diverged") else f"step {metrics['step']}: diverged (non-finite loss)"
        print(line, file=shown, flush=True)

    if resume is not None:
        print(f"resuming from {resume.checkpoint} (step {resume.step})", file=shown, flush=True)
    if run is not None:
        run.note_started()
    result = train(cfg, report=report, resume_from=resume.checkpoint if resume is not None else None)
    if run is not None and result.status == "completed":
        run.note_ended()
    summary = {"status": result.status, "step": result.step, "metrics": result.metrics}
    if out is not None:
        try:  # the reports and the checkpoint are already in the folder; only the summary is missing
            write_atomic(out / "result.json", json.dumps(summary, indent=2), fsync=True)
        except OSError as err:
            raise ConfigError(f"--out {cut(str(out), 80)}: result.json: cannot write it ({err.strerror or err}); "
                              "the reports and the checkpoint are kept") from None
    print(f"{result.status} after {result.step} steps" + (f"; acc_3x={result.metrics['acc_3x']:.3f}" if "acc_3x" in result.metrics else ""),
          file=shown, flush=True)
    return 0 if result.status == "completed" else 1
