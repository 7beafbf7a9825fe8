"""`sweeper dashboard NAME`: optuna-dashboard on the sweep's Optuna study (sweeps/NAME/optuna.db).

The study is already there: it is the sweep's ledger, in the sweep directory, with every
trial's parameters, state (ASHA-stopped trials are PRUNED) and intermediate values by training
step. This verb serves it on 127.0.0.1 with optuna-dashboard, in a process of its own
(sweeper/serve.py): its address is printed at once, the study's page when it answers; Ctrl-C or
SIGTERM stops it.
"""

from __future__ import annotations

from dataclasses import dataclass

import shutil
import sys
from pathlib import Path

from sweeper.adapters.optuna_study import sweep_study
from sweeper.commands.web_server import Server, check_address, exposure_warning, url_of
from sweeper.fs import check_beside, sqlite_url
from sweeper.sweep_dir import OPTUNA_DB, find_sweep_dir
from core.errors import ConfigError


@dataclass(frozen=True)
class Options:
    """What the command line gives `sweeper dashboard`."""

    name: str
    storage: str | None
    host: str
    port: int


def study_file(name: str, storage: str | None) -> Path:
    """The sweep's study: NAME under --storage, or a sweep directory given as a path."""
    return find_sweep_dir(name, storage, OPTUNA_DB,
                          missing=f"no Optuna study here (no {OPTUNA_DB}: sweep `{name}` has not started?); `sweeper launch FILE` creates it") / OPTUNA_DB


def command(db: Path, host: str, port: int) -> list[str]:
    """optuna-dashboard on `db`: the console script beside this Python."""
    exe = Path(sys.executable).with_name("optuna-dashboard")
    exe = str(exe) if exe.is_file() else shutil.which("optuna-dashboard")
    if exe is None:
        raise ConfigError("optuna-dashboard: not installed in this environment (pip install 'dat-sweeper' brings it)")
    bind = f"[{host}]" if ":" in host and not host.startswith("[") else host  # its server reads HOST:PORT: IPv6 bracketed
    return [exe, sqlite_url(db.resolve()), "--host", bind, "--port", str(port), "--quiet"]


def run(options: Options) -> int:
    db = study_file(options.name, options.storage)
    sid, _ = sweep_study(db, db.parent.resolve().name)  # read-only: an empty, damaged or foreign study is one line
    check_beside(db, "the study")  # the dashboard's server opens it for writing
    check_address(options.host, options.port)  # a held port, a foreign host: one line before anything starts
    cmd = command(db, options.host, options.port)
    if warning := exposure_warning(options.host, options.port, "the Optuna dashboard"):
        print(warning, file=sys.stderr, flush=True)
    address = url_of(options.host, options.port)
    page = f"{address}/dashboard/studies/{sid}"
    server = Server(cmd, "optuna-dashboard")
    return server.serve(address, f"{address}/api/studies", f"Optuna dashboard on {db}: {address}  (starting; Ctrl-C to stop)",
                        lambda: f"ready: {page}")
