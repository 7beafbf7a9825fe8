"""The fault-injection harness: launch a tiny sweep with a cue in $SWEEPER_FAULT (sweeper/faults.py),
let the driver kill itself, relaunch the same command, and check the sweep's ledger afterwards.

Real processes throughout: `sweeper launch` (real Ray, Optuna, torch), a real `mlflow server`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import optuna

from tests.conftest import ROOT, sweeper_cmd

NAME = "faults"
EVERY = 10
FINAL = ("completed", "stopped", "diverged", "failed")
SPACE = """
name: {name}
metric: acc_3x
mode: max
fixed:
  model: {{d_model: 16, n_layers: 1, n_heads: 2}}
  eval: {{n_sequences: 16, batch_size: 16}}
  optim: {{batch_size: 16, warmup_steps: 5}}
space:
  dat.switch_step: {{type: int, low: 0, high: {max_steps}, step: 10}}
  optim.lr: {{type: float, low: 1.0e-3, high: 1.0e-2, log: true}}
budget: {{num_samples: {num_samples}, max_concurrent: 2, max_steps: {max_steps}, eval_every: 10}}
scheduler: {{type: asha, grace_period: 10, reduction_factor: 2, phase_aware: false}}  # plain ASHA: stops to cut into
searcher: {{sampler: tpe, seed: 0, baseline: [{{dat.switch_step: 0, optim.lr: 3.0e-3}}]}}
resources: {{cpu: 1, gpu: 0}}
"""
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
for key in ("MLFLOW_TRACKING_URI", "SWEEPER_FAULT"):
    ENV.pop(key, None)


class Sweep:
    """One sweep in its own folder, logging to `mlflow_url` under its own experiment."""

    def __init__(self, workdir: Path, mlflow_url: str, experiment: str, storage: Path | None = None,
                 num_samples: int = 4, max_steps: int = 40, address: str | None = None, fifo: bool = False):
        self.workdir, self.url, self.experiment = Path(workdir), mlflow_url, experiment
        self.num_samples, self.max_steps, self.address = num_samples, max_steps, address
        # ASHA's rungs (grace 10, reduction 2, max_t max_steps): the only steps it stops a trial at
        self.rungs = tuple(10 * 2**k for k in range(8) if 10 * 2**k < max_steps)
        self.space = self.workdir / f"{NAME}.yaml"
        space = SPACE.format(name=NAME, num_samples=num_samples, max_steps=max_steps)
        if fifo:  # every trial trains to max_steps: a sweep of known length
            space = space.replace("type: asha, grace_period: 10, reduction_factor: 2, phase_aware: false", "type: fifo")
        self.space.write_text(space)
        self.storage = storage
        self.dir = (storage or self.workdir / "sweeps") / NAME
        self.sessions: list[int] = []  # session ids: each driver started leads its own session (Ray and its workers join it)

    @property
    def cmd(self) -> list[str]:
        extra = ["--storage", str(self.storage)] if self.storage else []
        if self.address:
            extra += ["--address", self.address, "--shared-storage"]
        return sweeper_cmd("launch", self.space, "--tracking-uri", self.url, "--experiment", self.experiment,
                           "--progress", "lines", *extra)

    def start(self, fault: str | None = None, env: dict[str, str] | None = None) -> subprocess.Popen:
        """`sweeper launch` in its own session, with `env` (default ENV) and the fault cue, if any."""
        env = env if env is not None else ENV
        env = {**env, "SWEEPER_FAULT": fault} if fault else env
        proc = subprocess.Popen(self.cmd, cwd=self.workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
        self.sessions.append(proc.pid)
        return proc

    def run(self, fault: str | None = None, timeout: float = 480) -> tuple[int, str, str]:
        proc = self.start(fault)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.cleanup()
            out, err = proc.communicate()
            raise AssertionError(f"sweeper launch ran past {timeout} s: {err[-2000:]}")
        self.keep_log(out, err)
        return proc.returncode, out, err

    def keep_log(self, out: str, err: str) -> None:
        """Each launch's output beside the sweep, for a post-mortem of a failed case."""
        n = len(list(self.workdir.glob("launch-*.log")))
        (self.workdir / f"launch-{n}.log").write_text(f"{out}\n--- stderr ---\n{err}")

    def status(self) -> dict | None:
        try:
            return json.loads((self.dir / "status.json").read_text())
        except (OSError, ValueError):
            return None

    def study(self):
        return optuna.load_study(study_name=NAME, storage=f"sqlite:///{self.dir / 'optuna.db'}")

    def leftovers(self) -> list[int]:
        """Processes still alive in the sessions this sweep's drivers started. By session, not process
        group: Ray's workers each get a process group of their own, but stay in the driver's session."""
        alive = []
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit() and int(proc.name) != os.getpid():
                try:
                    if os.getsid(int(proc.name)) in self.sessions and not _zombie(proc):
                        alive.append(int(proc.name))
                except (ProcessLookupError, PermissionError):
                    pass
        return alive

    def cleanup(self, timeout: float = 30) -> None:
        """SIGKILL every process of this sweep's sessions (the drivers, their Ray, Ray's workers), and
        return only once all are gone: a worker that outlived its driver may still be writing."""
        deadline = time.time() + timeout
        while alive := self.leftovers():
            for pid in alive:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            if time.time() > deadline:
                raise AssertionError(f"processes of the sweep still alive {timeout:.0f} s after SIGKILL: {alive}")
            time.sleep(0.1)


def _zombie(proc: Path) -> bool:
    """An exited process not yet reaped by its parent: it runs nothing and writes nothing."""
    try:
        return (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def resume_and_watch(sweep: Sweep, timeout: float = 480) -> tuple[int, str, str, list[str]]:
    """Relaunch without a fault; while it runs, `sweeper status` must describe this run, not the dead one.
    Returns (rc, stdout, stderr, what was wrong with status while it ran)."""
    before = sweep.status()
    proc = sweep.start()
    problems: list[str] = []
    seen = False
    deadline = time.time() + timeout
    while proc.poll() is None and time.time() < deadline:
        st = sweep.status()
        if st and st.get("driver", {}).get("pid") == proc.pid and st["state"] == "running":
            r = subprocess.run(sweeper_cmd("status", NAME, *(["--storage", str(sweep.storage)] if sweep.storage else [])),
                               cwd=sweep.workdir, env=ENV, capture_output=True, text=True, timeout=120)
            if proc.poll() is not None:  # it ended meanwhile: the answer may describe the end
                break
            first = (r.stdout.splitlines() or [""])[0]
            again = sweep.status() or {}
            ended_meanwhile = again.get("state") == "finished" and first.startswith(f"sweep {NAME}: finished")
            if r.returncode != 0 or not (first.startswith(f"sweep {NAME}: running") or ended_meanwhile):
                # (the driver may still be shutting Ray down after writing `finished`: that answer is right)
                problems.append(f"`sweeper status` during the resumed run said {first!r} (rc {r.returncode}, {r.stderr[-300:]}); "
                                f"status.json said {st['state']} by pid {st['driver']['pid']} at {st['updated']:.1f} before it, "
                                f"{again.get('state')} by {again.get('driver')} at {again.get('updated', 0):.1f} after it (now {time.time():.1f})")
            ended = {t["trial_id"]: t["status"] for t in (before or {}).get("trials", []) if t["status"] in FINAL}
            now = {t["trial_id"]: t["status"] for t in st["trials"]}
            for trial_id, status in ended.items():
                if now.get(trial_id, status) != status:
                    problems.append(f"{trial_id} ended {status} before the fault, shown {now[trial_id]} during the resume")
            seen = True
            break
        time.sleep(0.3)
    try:
        out, err = proc.communicate(timeout=max(1.0, deadline - time.time()))
    except subprocess.TimeoutExpired:
        sweep.cleanup()
        out, err = proc.communicate()
    sweep.keep_log(out, err)
    if not seen and proc.returncode == 0 and before and any(t["status"] not in FINAL for t in before.get("trials", [])):
        problems.append("status.json never named the resumed driver as running while trials were left to train")
    return proc.returncode, out, err, problems


def check_ledger(sweep: Sweep, finished_before: dict[str, dict], lost_node: bool = False) -> list[str]:
    """What a sweep must hold after faults and a resume; returns what is wrong (empty: nothing).
    `lost_node`: a worker node died mid-trial (its trial continues from its folder's checkpoint)."""
    from mlflow import MlflowClient

    wrong: list[str] = []
    summary = json.loads((sweep.dir / "summary.json").read_text())
    trials = {t["trial_id"]: t for t in summary["trials"]}
    if len(summary["trials"]) != sweep.num_samples or len(trials) != sweep.num_samples:
        wrong.append(f"{len(summary['trials'])} trials in summary.json, {len(trials)} distinct; {sweep.num_samples} expected")
    status = sweep.status() or {}
    if status.get("state") != "finished":
        wrong.append(f"status.json state {status.get('state')!r} after a clean finish")
    for t in trials.values():
        if t["status"] not in FINAL:
            wrong.append(f"{t['trial_id']} is {t['status']} after the sweep finished")
        elif t["status"] == "completed" and t["step"] != sweep.max_steps:
            wrong.append(f"{t['trial_id']} completed at step {t['step']}")
        elif t["status"] == "stopped" and t["step"] not in sweep.rungs:
            # ASHA judges only at its rungs (reports fall on them), and its rungs are in the ledger: a
            # trial stopped anywhere else was judged by a scheduler that forgot them
            wrong.append(f"{t['trial_id']} stopped at step {t['step']}, not at one of ASHA's rungs {sweep.rungs}")
    for trial_id, before in finished_before.items():  # never trained again
        after = trials.get(trial_id)
        if after is None:
            wrong.append(f"{trial_id} ended {before['status']} before the fault and is gone")
        elif (after["status"], after["step"], after["metrics"].get("steps_per_s")) != (before["status"], before["step"], before["metrics"].get("steps_per_s")):
            wrong.append(f"{trial_id} ended {before['status']} at {before['step']} before the fault, trained again: "
                         f"{after['status']} at {after['step']}")
    # each trial's own log of reports (its folder's metrics.jsonl) never goes back or repeats: a resumed
    # trial continues from its newest checkpoint, and the reports after it are dropped before it does
    for t in trials.values():
        path = Path(t["path"]) / "metrics.jsonl"
        steps = [json.loads(line)["step"] for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
        if steps != list(range(EVERY, t["step"] + 1, EVERY)):
            wrong.append(f"{t['trial_id']}: metrics.jsonl has steps {steps}")
    # Optuna agrees with the scheduler: COMPLETE at max_steps, PRUNED at the rung ASHA stopped it
    study_trials = [x for x in sweep.study().trials if "duplicate_of" not in x.user_attrs]
    live = [x for x in study_trials if x.state.name != "FAIL"]
    if len(live) != sweep.num_samples:
        wrong.append(f"{len(live)} Optuna trials not FAIL ({[x.state.name for x in study_trials]}); {sweep.num_samples} expected")
    expected_state = {"completed": "COMPLETE", "stopped": "PRUNED", "diverged": "COMPLETE", "failed": "FAIL"}
    by_number = {x.number: x for x in study_trials}
    for t in trials.values():
        x = by_number.get(int(t["trial_id"].lstrip("t")))  # the trial's name is its number in the study
        if x is None or x.params != t["params"]:
            wrong.append(f"{t['trial_id']}: the study holds {x.params if x else 'no such trial'}, the sweep {t['params']}")
            continue
        if x.state.name != expected_state[t["status"]]:
            wrong.append(f"{t['trial_id']} is {t['status']} at {t['step']}, Optuna says {x.state.name}")
        elif x.intermediate_values and max(x.intermediate_values) != t["step"]:
            wrong.append(f"{t['trial_id']} ended at {t['step']}, Optuna's last intermediate step is {max(x.intermediate_values)}")
    # MLflow: one parent, one child per trial, each report once at its step
    c = MlflowClient(sweep.url)
    exp = c.get_experiment_by_name(sweep.experiment)
    runs = c.search_runs([exp.experiment_id], max_results=1000) if exp else []
    parents = [r for r in runs if r.data.tags.get("role") == "sweep"]
    children = [r for r in runs if r.data.tags.get("role") == "trial"]
    if len(parents) != 1 or parents[0].info.status != "FINISHED":
        wrong.append(f"MLflow parents: {[(p.info.run_id[:8], p.info.status) for p in parents]} (one FINISHED expected)")
    if sorted(r.data.tags.get("trial_id") for r in children) != sorted(trials):
        wrong.append(f"MLflow children {sorted(r.data.tags.get('trial_id') for r in children)} for trials {sorted(trials)}")
    for r in children:
        t = trials.get(r.data.tags.get("trial_id"))
        if t is None:
            continue
        if r.info.status != "FINISHED" or r.data.tags.get("status") != t["status"]:
            wrong.append(f"MLflow run of {t['trial_id']}: {r.info.status}, tag {r.data.tags.get('status')}; the sweep says {t['status']}")
        steps = [m.step for m in c.get_metric_history(r.info.run_id, "acc_3x")]
        if steps != list(range(EVERY, t["step"] + 1, EVERY)):
            wrong.append(f"MLflow history of {t['trial_id']} (ended at {t['step']}): steps {steps}")
    return wrong


def finished_trials(sweep: Sweep) -> dict[str, dict]:
    st = sweep.status() or {"trials": []}
    return {t["trial_id"]: t for t in st["trials"] if t["status"] in FINAL}


def check_after_fault(sweep: Sweep) -> list[str]:
    """Right after the fault: every trial status.json calls stopped was stopped by the scheduler (the
    study holds it PRUNED at that step); a trial an interrupt cut off is never labelled a stop."""
    wrong = []
    study = {x.number: x for x in sweep.study().trials}
    for t in (sweep.status() or {"trials": []})["trials"]:
        if t["status"] == "stopped":
            match = [x for n, x in study.items() if n == int(t["trial_id"].lstrip("t"))]
            if not match or match[0].state.name != "PRUNED" or max(match[0].intermediate_values, default=None) != t["step"]:
                wrong.append(f"after the fault, {t['trial_id']} is stopped at {t['step']} while the study has "
                             f"{[(x.state.name, max(x.intermediate_values, default=None)) for x in match]}")
    return wrong
