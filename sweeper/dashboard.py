"""`sweeper dashboard NAME`: optuna-dashboard on the sweep's Optuna study (sweeps/NAME/optuna.db).

The study is already there: Ray Tune's OptunaSearch keeps it in the sweep directory, with every
trial's parameters, state (ASHA-stopped trials are PRUNED) and intermediate values by training
step. This verb serves it on 127.0.0.1 with optuna-dashboard, as a subprocess, and prints the
study's page.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from trainables.errors import ConfigError

OPTUNA_DB = "optuna.db"  # = sweeper.launch.OPTUNA_DB (launch pulls in pydantic models)


def study_file(name: str, storage: str | None) -> Path:
    """The sweep's study: NAME under --storage, or a sweep directory given as a path."""
    from sweeper.launch import sweep_dir_for

    direct = Path(name)
    sweep_dir = direct if (direct / OPTUNA_DB).is_file() else sweep_dir_for(name, storage)[1]
    db = sweep_dir / OPTUNA_DB
    if not db.is_file():
        raise ConfigError(f"{db}: no Optuna study here (sweep `{name}` has not started?); "
                          "`sweeper launch FILE` creates it")
    return db


def study_id(db: Path, study_name: str) -> int | None:
    """The study's id in the SQLite file (its page is /dashboard/studies/ID); None if unknown."""
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
            rows = con.execute("SELECT study_id, study_name FROM studies ORDER BY study_id").fetchall()
    except sqlite3.Error as err:
        raise ConfigError(f"{db}: not an Optuna study ({err})") from None
    if not rows:
        raise ConfigError(f"{db}: holds no study yet")
    return next((i for i, n in rows if n == study_name), rows[0][0] if len(rows) == 1 else None)


def serve(db: Path, host: str, port: int) -> subprocess.Popen:
    """optuna-dashboard on `db`, as a subprocess of this one."""
    exe = Path(sys.executable).with_name("optuna-dashboard")  # the console script beside this Python
    exe = str(exe) if exe.is_file() else shutil.which("optuna-dashboard")
    if exe is None:
        raise ConfigError("optuna-dashboard: not installed in this environment (pip install 'dat-sweeper' brings it)")
    return subprocess.Popen([exe, f"sqlite:///{db.resolve()}", "--host", host, "--port", str(port), "--quiet"])


def wait_until_up(proc: subprocess.Popen, address: str, port: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise ConfigError(f"--port {port}: optuna-dashboard exited (is the port in use?)")
        try:
            urllib.request.urlopen(f"{address}/api/studies", timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise ConfigError(f"{address}: optuna-dashboard did not answer within {timeout_s:.0f} s") from None
            time.sleep(0.3)


def _interrupt(*_) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    db = study_file(args.name, args.storage)
    sid = study_id(db, Path(args.name).name)
    address = f"http://{args.host}:{args.port}"
    proc = serve(db, args.host, args.port)
    signal.signal(signal.SIGTERM, _interrupt)  # `kill` stops the server too, as Ctrl-C does
    try:
        wait_until_up(proc, address, args.port)
        page = f"{address}/dashboard/studies/{sid}" if sid is not None else f"{address}/dashboard"
        print(f"Optuna dashboard on {db}: {page}  (Ctrl-C to stop)", flush=True)
        return proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
