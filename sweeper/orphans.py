"""The processes of a sweep's local Ray, written down so that none outlives its driver.

`ray.init()` on a laptop starts a GCS server, a raylet, agents and workers as children of the
driver. A driver that exits normally stops them; one killed with SIGKILL cannot, and some (the
dashboard and runtime-env agents) run on forever. `record` writes the driver's descendants to
`<sweep dir>/ray_processes.json` (pid and start time: a pid reused by another program is not
ours); `end_orphans`, called by the next launch of the sweep while it holds the sweep's lock
(so the recorded driver is gone), ends every recorded process still running, and its children.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import psutil

PROCESSES_FILE = "ray_processes.json"


def record(sweep_dir: Path) -> int:
    """Write this driver's descendants (its local Ray). Returns how many."""
    me = psutil.Process()
    procs = []
    for p in me.children(recursive=True):
        try:
            procs.append({"pid": p.pid, "started": p.create_time(), "name": p.name()})
        except psutil.Error:
            continue
    tmp = Path(sweep_dir) / (PROCESSES_FILE + ".tmp")
    tmp.write_text(json.dumps({"driver": os.getpid(), "processes": procs}))
    os.replace(tmp, Path(sweep_dir) / PROCESSES_FILE)
    return len(procs)


def end_orphans(sweep_dir: Path, grace_s: float = 5.0) -> list[str]:
    """End the recorded processes of an earlier driver of this sweep that still run (SIGTERM, then
    SIGKILL after `grace_s`). Call only while holding the sweep's lock. Returns their names."""
    path = Path(sweep_dir) / PROCESSES_FILE
    try:
        data = json.loads(path.read_text())
        recorded = [(int(p["pid"]), float(p["started"])) for p in data["processes"]]
    except (OSError, ValueError, KeyError, TypeError):
        return []  # nothing recorded (or a file cut by a kill): nothing we can safely call ours
    alive = []
    for pid, started in recorded:
        try:
            proc = psutil.Process(pid)
            if abs(proc.create_time() - started) < 0.01 and pid != os.getpid():
                alive.append(proc)
        except psutil.Error:
            continue
    family = {p.pid: p for p in alive}
    for proc in alive:  # workers a recorded raylet started after the record was written
        try:
            family.update({c.pid: c for c in proc.children(recursive=True)})
        except psutil.Error:
            continue
    names = []
    for proc in family.values():
        try:
            names.append(proc.name())
            proc.terminate()
        except psutil.Error:
            continue
    _, left = psutil.wait_procs(list(family.values()), timeout=grace_s)
    for proc in left:
        try:
            proc.kill()
        except psutil.Error:
            continue
    path.unlink(missing_ok=True)
    return names
