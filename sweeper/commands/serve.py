"""`sweeper serve`: the resident sweep service, in the foreground or in the background.

    sweeper serve             run it here until Ctrl-C (its log on this terminal)
    sweeper serve --detach    start it in the background, its log in <service dir>/service.log;
                              returns once it answers
    sweeper serve --status    whether it runs: pid, uptime, workers, the sweeps it runs (exit 1: none)
    sweeper serve --stop      stop it: its sweeps are interrupted and written down, resumable
"""

from __future__ import annotations

from dataclasses import dataclass

import os
import subprocess
import sys
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sweeper.local_ray import check_ray_temp
from sweeper.lock import lock_held
from sweeper.service_folder import LOCK, LOG, check_entries, ensure_private_dir, service_dir
from sweeper.service_link import START_S, request
from sweeper.status import a_pid
from core.errors import ConfigError, brief, check_warnings_are_warnings, cut, visible
from core.tool_cli import to_stderr

STOP_TIMEOUT_S = 150.0  # until a stopped service's process has ended (its sweeps write themselves down first)


@dataclass(frozen=True)
class Options:
    """What the command line gives `sweeper serve`."""

    detach: bool
    status: bool
    stop: bool
    workers: int | None


def run(options: Options) -> int:
    if options.workers is not None and (options.status or options.stop):
        raise ConfigError(f"--workers {options.workers}: only when the service starts (not with --status or --stop)")
    if options.status:
        return status()
    if options.stop:
        return stop()
    check_warnings_are_warnings("the service and its sweeps")  # it starts Ray's node and runs the sweeps in-process
    if options.detach:
        return detach(options.workers)
    from sweeper.service_host import main

    return main(["--workers", str(options.workers)] if options.workers else [])


def status() -> int:
    return show_status(service_status())


Pid = Field(gt=0, lt=1 << 31)
Seconds = Field(ge=0, lt=1e12)  # a time since the epoch


class WarmWorker(BaseModel):
    """One warm trial worker, as the service's status gives it."""

    model_config = ConfigDict(frozen=True, strict=True, allow_inf_nan=False)

    pid: int = Pid
    trained: int = Field(ge=0, lt=1 << 31)
    busy: bool


class ServedSweep(BaseModel):
    """One sweep the service runs, as its status gives it."""

    model_config = ConfigDict(frozen=True, strict=True, allow_inf_nan=False)

    name: str = Field(max_length=4096)
    sweep_dir: str | None = Field(max_length=4096)  # None while the sweep starts
    since: float = Seconds
    client_pid: int = Pid


class ServiceStatus(BaseModel):
    """The service's answer to `status`, every field checked before it is shown (sweeper/service_host.py)."""

    model_config = ConfigDict(frozen=True, strict=True, allow_inf_nan=False)

    pid: int = Pid
    started: float = Seconds
    code: str = Field(max_length=64)
    workers: int = Field(ge=0, lt=1 << 31)
    worker_info: list[WarmWorker] = Field(max_length=1 << 16)
    sweeps: list[ServedSweep] = Field(max_length=1 << 16)


def service_status(then: str | None = None) -> ServiceStatus | None:
    """The service's answer to `status`, checked (one line for one that is not a service's); None
    when no service runs. `then`: what to run again if it does not answer."""
    answer = request({"verb": "status"}, then=then, say=to_stderr)
    if answer is None:
        return None
    try:
        return ServiceStatus.model_validate(answer)
    except ValidationError as err:
        from trainables.config import format_validation_error

        raise ConfigError(f"the sweep service at {cut(str(service_dir()), 120)} answered a status that is not a "
                          f"service's ({visible(format_validation_error(err, 'status'))}); its log: {service_dir() / LOG} "
                          "(it may be serving other sweeps: restart it once they have ended)") from None


def show_status(answer: ServiceStatus | None) -> int:
    if answer is None:
        try:  # the exit code is the answer a script reads (`serve --status | true`): kept when the reader left
            print(f"no sweep service runs for this user ({cut(str(service_dir()), 120)})", flush=True)
        except BrokenPipeError:
            from core.tool_cli import drop_stdout

            drop_stdout()
        return 1
    now = time.time()
    print(f"sweep service: pid {answer.pid}, up {_duration(now - answer.started)}, {answer.workers} warm "
          f"workers, code {_shown(answer.code)}; log {service_dir() / LOG}")
    if answer.worker_info:
        print("warm workers: " + ", ".join(f"pid {w.pid} ({w.trained} trials{', busy' if w.busy else ''})"
                                           for w in answer.worker_info[:64]))
    if not answer.sweeps:
        print("no sweep running")
    for s in answer.sweeps[:256]:
        print(f"  {_shown(s.name)}: running {_duration(now - s.since)} for launch pid {s.client_pid} "
              f"({_shown(s.sweep_dir or 'starting', 120)})")
    return 0


def _shown(value, limit: int = 40) -> str:
    """A field the service sent, as one short piece of a line (no terminal escapes)."""
    return cut(value, limit) if isinstance(value, str) else visible(brief(value, limit))


def stop() -> int:
    answer = request({"verb": "stop"}, say=to_stderr)
    if answer is None:
        print("no sweep service runs for this user")
        return 0
    pid = a_pid(answer.get("pid"))
    if answer.get("stopping") is not True or pid is None:
        raise ConfigError(f"the sweep service at {cut(str(service_dir()), 120)} answered the stop with what is not a "
                          f"service's answer ({_shown(answer, 60)}); its log: {service_dir() / LOG}")
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.2)
    if _alive(pid):
        raise ConfigError(f"the sweep service (pid {pid}) is still stopping after {STOP_TIMEOUT_S:.0f} s; "
                          f"its log: {service_dir() / LOG}")
    print(f"sweep service stopped (pid {pid}); its sweeps resume with `sweeper launch FILE`")
    return 0


def detach(workers: int | None) -> int:
    check_ray_temp()  # its Ray's folder and sockets: one line here, before its folder is made, not a traceback in its log
    directory = ensure_private_dir(service_dir())
    if (answer := request({"verb": "status"}, directory)) is not None:
        return _already_runs(answer)
    check_entries(directory)  # a folder or a link where its log, state or socket goes: one line, nothing started
    log_path = directory / LOG
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.fchmod(fd, 0o600)
    log = os.fdopen(fd, "ab")
    command = [sys.executable, "-m", "sweeper.service_host", *(["--workers", str(workers)] if workers else [])]
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, close_fds=True)
    log.close()
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            if lock_held(directory / LOCK):  # another service took the lock first (a --detach at the same moment)
                return _wait_for_the_other(directory, deadline)
            tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
            raise ConfigError(f"the sweep service did not start (exit {proc.returncode}): "
                              f"{tail[0].removeprefix('error: ')[:200]}")
        if (answer := request({"verb": "status"}, directory)) is not None:  # waits while a service starts
            if a_pid(answer.get("pid")) != proc.pid:  # another's, started at the same moment, took the lock
                return _already_runs(answer)
            print(f"sweep service running (pid {proc.pid}); log {log_path}; `sweeper launch FILE` attaches to it, "
                  "`sweeper serve --stop` stops it")
            return 0
        time.sleep(0.2)
    raise ConfigError(f"the sweep service (pid {proc.pid}) did not answer within {START_S:.0f} s; its log: {log_path}")


def _already_runs(answer: dict) -> int:
    print(f"a sweep service already runs (pid {a_pid(answer.get('pid')) or '?'}); `sweeper serve --status`")
    return 0


def _wait_for_the_other(directory: Path, deadline: float) -> int:
    """The service that holds the lock, once it answers (it may still be starting)."""
    while time.monotonic() < deadline:
        if (answer := request({"verb": "status"}, directory)) is not None:
            return _already_runs(answer)
        time.sleep(0.2)
    raise ConfigError(f"a sweep service holds {directory / LOCK} but did not answer within {START_S:.0f} s; "
                      f"its log: {directory / LOG}")


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"
