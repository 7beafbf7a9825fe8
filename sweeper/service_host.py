"""The resident sweep service (`sweeper serve`; `python -m sweeper.service_host` is the same).

One long-lived process holds what every launch would otherwise start again: a local Ray
(loopback only), warm trial workers with torch and the trainer imported
(sweeper/adapters/ray_warm.py), and Ray Tune, Optuna and MLflow imported. Each attached launch
(sweeper/attach.py) becomes a sweep in a thread of its own, running the same code as a launch in
its own process (sweeper/commands/launch.py: its own lock, study, views and MLflow run); its
output goes back to that launch, and its interrupt or disconnection stops that sweep only.

    socket      <service dir>/service.sock (sweeper/service_link.py), mode 0600 in a 0700 folder;
                a connection from another user is refused (SO_PEERCRED), a bad request gets one
                line back; neither stops the service
    state       service.json: pid, start time, code hash, workers; the log is service.log when
                detached (`sweeper serve --detach`)
    ending      `sweeper serve --stop`, SIGTERM or Ctrl-C: every sweep is interrupted and written
                down (resumable), then Ray shuts down. SIGKILL loses nothing either: each sweep
                resumes as after a killed driver, and the next service ends the killed one's Ray
                processes (recorded in its folder, sweeper/orphans.py)
    new code    a launch from a checkout whose modules differ from the service's (a hash of
                sweeper/ and trainables/) restarts the service first when it runs no sweep: new
                imports, new warm workers; while sweeps run, that launch runs in its own process
                and says so. A sweep never runs code older than its launch's.
"""

from __future__ import annotations

import argparse
import fcntl
import io
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from pathlib import Path

from sweeper import faults, orphans
from sweeper.lock import open_lock_file
from sweeper.service_link import (LOG, SOCKET, STATE, Messages, code_hash, ensure_private_dir, peer,
                                  project_root, send, service_dir)
from trainables.errors import ConfigError, brief, cut, one_line

LOCK = "service.lock"
JOIN_S = 120.0  # at the end, how long each sweep may take to write itself down


class _Sinks:
    """Which connection the output of each sweep thread goes to; other threads write to the log."""

    def __init__(self):
        self.by_thread: dict[int, tuple[socket.socket, threading.Lock]] = {}

    def write(self, kind: str, text: str, fallback: io.TextIOBase) -> None:
        target = self.by_thread.get(threading.get_ident())
        if target is None:
            fallback.write(text)
            return
        conn, lock = target
        try:
            with lock:
                send(conn, {kind: text})
        except OSError:
            pass  # the launch left; its sweep is being stopped


class _Routed(io.TextIOBase):
    """sys.stdout / sys.stderr of the service: each sweep thread's writes go to its launch."""

    def __init__(self, sinks: _Sinks, kind: str, fallback: io.TextIOBase):
        self.sinks, self.kind, self.fallback = sinks, kind, fallback

    def write(self, text: str) -> int:
        self.sinks.write(self.kind, text, self.fallback)
        return len(text)

    def flush(self) -> None:
        self.fallback.flush()

    def fileno(self) -> int:
        return self.fallback.fileno()

    def isatty(self) -> bool:
        return False


class Sweep:
    def __init__(self, name: str, client_pid: int):
        self.name, self.client_pid, self.since = name, client_pid, time.time()
        self.stop = threading.Event()
        self.sweep_dir: Path | None = None


class Service:
    def __init__(self, directory: Path, workers: int):
        self.dir = ensure_private_dir(directory)
        self.lock = self._take_lock()
        ended = orphans.end_orphans(self.dir)  # a SIGKILLed service's Ray: ours to end now
        if ended:
            print(f"ended {len(ended)} processes of an earlier service that was killed", flush=True)
        self.code = code_hash()
        self.sweeps: dict[int, Sweep] = {}  # by the id of its thread
        self.sweeps_lock = threading.Lock()
        self.ending = threading.Event()
        self.restart = False
        self.sinks = _Sinks()
        faults.arm()  # $SWEEPER_FAULT: the service kills itself on cue (tests/faults/)

        from sweeper.commands.launch import loopback_only

        loopback_only()
        from sweeper.adapters import mlflow_tracking  # noqa: F401  (imported once, for every sweep)
        from sweeper.adapters import ray_tune
        from sweeper.adapters.ray_warm import start_workers

        ray_tune.init_ray(None)
        self.workers = start_workers(workers)
        orphans.record(self.dir)
        self.started = time.time()
        self.listener = self._listen()
        self._write_state()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self._stop_everything())
        sys.stdout = _Routed(self.sinks, "out", sys.__stdout__)
        sys.stderr = _Routed(self.sinks, "err", sys.__stderr__)

    def _stop_everything(self) -> None:
        """SIGTERM or Ctrl-C: every sweep stops now, as a launch's own driver would, then the service."""
        self.ending.set()
        for sweep in list(self.sweeps.values()):  # no lock in a signal handler: a copy of the values
            sweep.stop.set()

    # -- start-up ------------------------------------------------------------------------------

    def _take_lock(self):
        f = open_lock_file(self.dir / LOCK)
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            pid = json.loads((self.dir / STATE).read_text() or "{}").get("pid", "?") if (self.dir / STATE).exists() else "?"
            raise ConfigError(f"a sweep service already runs for this user (pid {cut(str(pid), 20)}, {self.dir}); "
                              "`sweeper serve --status` shows it, `sweeper serve --stop` stops it") from None
        return f

    def _listen(self) -> socket.socket:
        path = self.dir / SOCKET
        if path.exists() or path.is_symlink():
            path.unlink()  # a killed service's socket: nothing answers on it (we hold the service's lock)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            listener.bind(str(path))  # created 0600: only this user may connect
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        listener.listen(16)
        listener.settimeout(0.5)
        return listener

    def _write_state(self) -> None:
        state = {"pid": os.getpid(), "started": self.started, "code": self.code, "workers": len(self.workers),
                 "socket": str(self.dir / SOCKET), "log": str(self.dir / LOG)}
        tmp = self.dir / (STATE + ".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self.dir / STATE)

    # -- serving -------------------------------------------------------------------------------

    def serve(self) -> int:
        print(f"sweep service: pid {os.getpid()}, {len(self.workers)} warm workers, socket {self.dir / SOCKET}",
              file=sys.__stdout__, flush=True)
        while not self.ending.is_set():
            try:
                conn, _ = self.listener.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                if self.ending.is_set():
                    break
                raise
            threading.Thread(target=self._answer, args=(conn,), name="sweeper-service-conn", daemon=True).start()
        return self._end()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                if peer(conn)[1] != os.getuid():
                    send(conn, {"error": f"this sweep service answers its own user ({os.getuid()}) only"})
                    return
                messages = iter(Messages(conn))
                message = next(messages, None)
                if message is None:
                    return
                verb = message.get("verb")
                if verb == "launch":
                    self._launch(conn, message, messages)
                elif verb == "status":
                    send(conn, self.status())
                elif verb == "stop":
                    send(conn, {"stopping": True, "pid": os.getpid()})
                    self.ending.set()
                else:
                    send(conn, {"error": f"unknown request verb {brief(verb, 40)} (launch, status, stop)"})
            except ConfigError as err:
                _reply_error(conn, one_line(str(err)))
            except Exception as err:  # noqa: BLE001 - a request must never stop the service
                traceback.print_exc(file=sys.__stderr__)
                _reply_error(conn, f"the service failed on this request ({type(err).__name__}: {cut(str(err), 160)}); "
                                   f"its log has the details")

    def status(self) -> dict:
        with self.sweeps_lock:
            sweeps = [{"name": s.name, "sweep_dir": str(s.sweep_dir) if s.sweep_dir else None, "since": s.since,
                       "client_pid": s.client_pid} for s in self.sweeps.values()]
        from sweeper.adapters.ray_warm import workers_info

        workers = workers_info(self.workers)
        return {"pid": os.getpid(), "started": self.started, "code": self.code, "workers": len(self.workers),
                "worker_info": workers, "sweeps": sweeps}

    def _launch(self, conn: socket.socket, message: dict, rest) -> None:
        args = launch_args(message)
        if message.get("root") != project_root():
            send(conn, {"stale": f"the sweep service runs the checkout at {project_root()}, this launch is from "
                                 f"{cut(str(message.get('root')), 120)}: it runs in its own process"})
            return
        if message.get("code") != self.code:
            with self.sweeps_lock:
                busy = bool(self.sweeps)
            if busy:
                send(conn, {"stale": "the sweep service runs older code than this checkout and has sweeps running; "
                                     "this sweep runs in its own process (`sweeper serve --stop` and start it again "
                                     "once they end)"})
                return
            send(conn, {"restart": "the sweep service runs older code than this checkout: it restarts (new imports, "
                                   "new warm workers)"})
            self.restart = True
            self.ending.set()
            return
        from sweeper.commands.launch import SweepHost, run_sweep

        sweep = Sweep(Path(args.file).name, peer(conn)[0])
        host = SweepHost(stop=sweep.stop, workers=self.workers,
                         announce=lambda path: self._announce(conn, sweep, path),
                         fitted=lambda: self._tell(conn, {"fitted": True}))
        reader = threading.Thread(target=_watch_client, args=(rest, sweep.stop), name="sweeper-service-client", daemon=True)
        me = threading.get_ident()
        with self.sweeps_lock:
            self.sweeps[me] = sweep
        self.sinks.by_thread[me] = (conn, threading.Lock())
        reader.start()
        code = 1
        try:
            code = run_sweep(args, host)
        except ConfigError as err:
            print(f"error: {one_line(str(err))}", file=sys.stderr)
            code = 2
        except Exception as err:  # noqa: BLE001 - the sweep's failure, not the service's
            traceback.print_exc(file=sys.__stderr__)
            print(f"error: the sweep failed on the service ({type(err).__name__}: {cut(str(err), 160)}); "
                  f"the service's log has the details ({self.dir / LOG})", file=sys.stderr)
            code = 1
        finally:
            sys.stdout.flush()
            self.sinks.by_thread.pop(me, None)
            with self.sweeps_lock:
                self.sweeps.pop(me, None)
            try:
                send(conn, {"exit": code})
            except OSError:
                pass
            print(f"sweep {sweep.name}: ended with {code}", file=sys.__stdout__, flush=True)

    def _announce(self, conn: socket.socket, sweep: Sweep, path: Path) -> None:
        sweep.sweep_dir, sweep.name = path, path.name
        print(f"sweep {sweep.name}: running for pid {sweep.client_pid}", file=sys.__stdout__, flush=True)
        self._tell(conn, {"sweep_dir": str(path)})

    def _tell(self, conn: socket.socket, message: dict) -> None:
        try:
            with self.sinks.by_thread[threading.get_ident()][1]:
                send(conn, message)
        except OSError:
            pass  # the launch left; its sweep is being stopped

    # -- the end -------------------------------------------------------------------------------

    def _end(self) -> int:
        self.listener.close()
        with self.sweeps_lock:
            running = list(self.sweeps.values())
        for sweep in running:
            sweep.stop.set()
        deadline = time.monotonic() + JOIN_S
        while time.monotonic() < deadline:
            with self.sweeps_lock:
                if not self.sweeps:
                    break
            time.sleep(0.1)
        for name in (SOCKET, STATE):
            try:
                (self.dir / name).unlink()
            except OSError:
                pass
        from sweeper.adapters import ray_tune

        ray_tune.shutdown_ray()
        self.lock.close()
        print("sweep service: stopped" + (" (restarting on new code)" if self.restart else ""), file=sys.__stdout__, flush=True)
        return 0


def _reply_error(conn: socket.socket, text: str) -> None:
    try:
        send(conn, {"error": text})
        send(conn, {"exit": 2})
    except OSError:
        pass


def _watch_client(messages, stop: threading.Event) -> None:
    """The rest of the launch's messages: an interrupt, or the connection closing, stops its sweep."""
    try:
        for message in messages:
            if message.get("verb") == "interrupt":
                stop.set()
    except ConfigError:
        pass
    stop.set()


def launch_args(message: dict) -> argparse.Namespace:
    """A launch request as `sweeper launch`'s arguments; a field of the wrong type is one line."""
    def text(key: str, required: bool = True) -> str | None:
        value = message.get(key)
        if value is None and not required:
            return None
        if not isinstance(value, str) or not value or len(value) > 4096:
            raise ConfigError(f"launch request: {key}: must be a non-empty text, got {brief(value, 40)}")
        return value

    every = message.get("progress_every", 30.0)
    if not isinstance(every, (int, float)) or isinstance(every, bool) or not 0 < every < 1e6:
        raise ConfigError(f"launch request: progress_every: must be a number of seconds, got {brief(every, 40)}")
    for key in ("file", "storage"):
        if not os.path.isabs(text(key)):
            raise ConfigError(f"launch request: {key}: must be an absolute path, got {brief(message[key], 60)}")
    return argparse.Namespace(file=text("file"), storage=text("storage"), tracking_uri=text("tracking_uri"),
                              experiment=text("experiment", required=False), restart=message.get("restart") is True,
                              address=None, shared_storage=False, progress="none", progress_every=float(every),
                              exit_at_once=False, in_process=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sweeper.service_host", description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=None, help="warm trial workers (default: this machine's CPUs)")
    args = parser.parse_args(argv)
    from sweeper.cli import usable_cpus

    try:
        service = Service(service_dir(), max(1, args.workers or usable_cpus()))
    except ConfigError as err:
        print(f"error: {one_line(str(err))}", file=sys.stderr)
        return 2
    code = service.serve()
    if service.restart:
        os.execv(sys.executable, [sys.executable, "-m", "sweeper.service_host", *(argv if argv is not None else sys.argv[1:])])
    return code


if __name__ == "__main__":
    sys.exit(main())
