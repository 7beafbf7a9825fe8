"""`sweeper dashboard NAME`: optuna-dashboard on the sweep's Optuna study (sweeps/NAME/optuna.db).

The study is already there: Ray Tune's OptunaSearch keeps it in the sweep directory, with every
trial's parameters, state (ASHA-stopped trials are PRUNED) and intermediate values by training
step. This verb serves it on 127.0.0.1 with optuna-dashboard, as a subprocess, and prints the
study's page.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from sweeper.serve import serve_until_stopped
from sweeper.adapters.optuna_ledger import study_id
from sweeper.sweep_dir import OPTUNA_DB, find_sweep_dir
from trainables.errors import ConfigError

def study_file(name: str, storage: str | None) -> Path:
    """The sweep's study: NAME under --storage, or a sweep directory given as a path."""
    return find_sweep_dir(name, storage, OPTUNA_DB,
                          missing=f"no Optuna study here (no {OPTUNA_DB}: sweep `{name}` has not started?); `sweeper launch FILE` creates it") / OPTUNA_DB


def serve(db: Path, host: str, port: int) -> subprocess.Popen:
    """optuna-dashboard on `db`, as a subprocess of this one."""
    exe = Path(sys.executable).with_name("optuna-dashboard")  # the console script beside this Python
    exe = str(exe) if exe.is_file() else shutil.which("optuna-dashboard")
    if exe is None:
        raise ConfigError("optuna-dashboard: not installed in this environment (pip install 'dat-sweeper' brings it)")
    return subprocess.Popen([exe, f"sqlite:///{db.resolve()}", "--host", host, "--port", str(port), "--quiet"])


def run(args: argparse.Namespace) -> int:
    db = study_file(args.name, args.storage)
    sid = study_id(db, Path(args.name).name)
    address = f"http://{args.host}:{args.port}"
    proc = serve(db, args.host, args.port)
    page = f"{address}/dashboard/studies/{sid}" if sid is not None else f"{address}/dashboard"
    return serve_until_stopped(proc, f"{address}/api/studies", "optuna-dashboard", args.port,
                               lambda: f"Optuna dashboard on {db}: {page}  (Ctrl-C to stop)")
