"""The resident sweep service (`sweeper serve`; `python -m sweeper.service_host` is the same).

One long-lived process holds what every launch would otherwise start again: a local Ray
(loopback only), warm trial workers with torch and the trainer imported
(sweeper/adapters/ray_warm.py), and Ray Tune, Optuna and MLflow imported. Each attached launch
(sweeper/commands/attach.py) becomes a `Sweep` (sweeper/sweep.py) in a thread of its own, the same
object a launch in its own process runs (its own lock, study, views, trainable and MLflow run); its
events go back to that launch, and its interrupt or disconnection stops that sweep only. The
service's own lines go to its log (`logging`).

    socket      <service dir>/service.sock (sweeper/service_link.py), mode 0600 in a 0700 folder;
                a connection from another user is refused (SO_PEERCRED), a bad request gets one
                line back; neither stops the service
    state       service.json: pid, start time, code hash, workers; the log is service.log when
                detached (`sweeper serve --detach`)
    ending      `sweeper serve --stop`, SIGTERM, SIGHUP (its terminal closed) or Ctrl-C: every sweep
                is interrupted and written down (resumable), then Ray shuts down; SIGKILL loses
                nothing either (each sweep resumes as after a killed driver; the next service ends
                the killed one's Ray processes, recorded in its folder: sweeper/orphans.py)
    new code    a launch while the checkout's modules on disk differ from those the service
                imported (its own hash of core/, sweeper/ and trainables/, never a request's)
                restarts the service first when it runs no sweep (new imports, new warm workers);
                while sweeps run, it runs in its own process. No sweep runs older code than its launch.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from sweeper import orphans
from sweeper.events import Event, Running, Say
from sweeper.faults import Faults
from sweeper.local_ray import LATE_NOTE, check_ray_temp, loopback_only
from sweeper.lock import open_lock_file, take_exclusive
from sweeper.request import SweepRequest, other_checkout, other_environment, request_verb
from sweeper.service_session import LaunchSink, Served, StoreFiles, first_message, reply_error, say_alive, watch_client
from sweeper.sweep import Sweep, SweepHost
from sweeper.service_folder import LOCK, LOG, SOCKET, STATE, check_entries, ensure_private_dir, read_state, service_dir
from sweeper.service_link import Messages, code_hash, listen, peer, project_root, send
from sweeper.status import a_pid
from core.files import write_atomic
from core.errors import ConfigError, brief, cut, error_line, one_line, path_refusal, visible
from core.uri_secrets import shown
from core.tool_cli import Parser, StdoutLines, run_tool
from sweeper.cli_types import cpus

JOIN_S = 120.0  # at the end, how long each sweep may take to write itself down
BUSY_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.ECONNABORTED}

log = logging.getLogger(__name__)


class Service:
    def __init__(self, directory: Path, workers: int):
        check_ray_temp()  # before its folder is made
        self.dir = ensure_private_dir(directory)
        check_entries(self.dir)  # a folder or link where its socket, state or log goes: one line, before Ray
        self.lock = self._take_lock()
        (self.dir / STATE).unlink(missing_ok=True)  # a killed service's: until this one listens, none answers
        if ended := orphans.end_orphans(self.dir):  # a SIGKILLed service's Ray: ours to end now
            log.info(f"ended {len(ended)} processes of an earlier service that was killed")
        self.code = code_hash()
        self.sweeps: dict[int, Served] = {}  # by the id of its thread
        self.sweeps_lock = threading.Lock()
        self.stores = StoreFiles()
        self.ending = threading.Event()
        self.restart = False
        Faults.from_env()  # $SWEEPER_FAULT: each sweep kills the service on cue (tests/faults/); a bad value refused now

        if not loopback_only():
            log.warning(LATE_NOTE)
        from sweeper.adapters import mlflow_tracking  # noqa: F401  (imported once, for every sweep)
        from sweeper.adapters import ray_tune
        from sweeper.adapters.ray_warm import start_workers

        ray_tune.init_ray(None)
        self.workers = start_workers(workers)
        orphans.record(self.dir)
        self.started = time.time()
        os.chdir(self.dir)  # once Ray started (a relative $RAY_TMPDIR is the start folder's): a folder it was started in may go
        self.listener = listen(self.dir)
        self._write_state()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda *_: self._stop_everything())

    def _stop_everything(self) -> None:
        """SIGTERM, SIGHUP or Ctrl-C: every sweep stops now, as a launch's own driver would, then the service."""
        self.ending.set()
        for sweep in list(self.sweeps.values()):  # no lock in a signal handler: a copy of the values
            sweep.stop.set()

    # -- start-up ------------------------------------------------------------------------------

    def _take_lock(self):
        f = open_lock_file(self.dir / LOCK)
        try:
            take_exclusive(f)  # a launch's `lock_held` probe may hold it shared for an instant
        except BlockingIOError:
            f.close()
            pid = a_pid(read_state(self.dir).get("pid")) or "?"  # a state file cut short or damaged says nothing
            raise ConfigError(f"a sweep service already runs for this user (pid {pid}, {self.dir}); "
                              "`sweeper serve --status` shows it, `sweeper serve --stop` stops it") from None
        return f

    def _write_state(self) -> None:
        state = {"pid": os.getpid(), "started": self.started, "code": self.code, "workers": len(self.workers),
                 "socket": str(self.dir / SOCKET), "log": str(self.dir / LOG)}
        write_atomic(self.dir / STATE, json.dumps(state))

    # -- serving -------------------------------------------------------------------------------

    def serve(self) -> int:
        log.info(f"sweep service: pid {os.getpid()}, {len(self.workers)} warm workers, socket {self.dir / SOCKET}")
        noted = -60.0
        while not self.ending.is_set():
            try:
                conn, _ = self.listener.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError as err:
                if self.ending.is_set():
                    break
                if err.errno not in BUSY_ERRNOS:
                    raise
                if time.monotonic() - noted >= 60:  # out of descriptors or memory: one line a minute, not a try
                    noted = time.monotonic()
                    log.warning(f"cannot take a connection now ({err.strerror}); the waiting ones are taken later")
                time.sleep(0.2)
                continue
            threading.Thread(target=self._answer, args=(conn,), name="sweeper-service-conn", daemon=True).start()
        return self._end()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                if peer(conn)[1] != os.getuid():
                    send(conn, {"error": f"this sweep service answers its own user ({os.getuid()}) only"})
                    return
                messages = iter(Messages(conn))
                if (message := first_message(conn, messages)) is None:  # a client that says nothing holds no thread
                    return
                verb = request_verb(message)
                if verb == "launch":
                    self._launch(conn, message, messages)
                elif verb == "status":
                    send(conn, self.status())
                elif verb == "stop":
                    send(conn, {"stopping": True, "pid": os.getpid()})
                    self.ending.set()
                else:
                    raise ConfigError(f"unknown request verb {brief(verb, 40)} (launch, status, stop)")
            except ConfigError as err:
                reply_error(conn, one_line(str(err)))
            except OSError:
                return  # the client left (a broken pipe, a reset): nothing to answer, nothing to log
            except Exception as err:  # noqa: BLE001 - a request must never stop the service
                log.exception("a request failed")
                reply_error(conn, f"the service failed on this request ({type(err).__name__}: {cut(str(err), 160)}); "
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
        if stale := other_checkout(message, project_root()):  # the code it claims is not trusted: the disk decides
            send(conn, {"stale": stale})
            return
        if code_hash() != self.code:  # before the request is read: newer code may send fields this one does not know
            with self.sweeps_lock:
                busy = bool(self.sweeps)
            if busy:
                send(conn, {"stale": "the sweep service runs older code than this checkout and has sweeps running; this "
                                     "sweep runs in its own process (`sweeper serve --stop` and start it again once they end)"})
                return
            send(conn, {"restart": "the sweep service runs older code than this checkout: it restarts (new imports, "
                                   "new warm workers)"})
            self.restart = True
            self.ending.set()
            return
        request = SweepRequest.from_message(message)
        if request.address is not None:  # its trials would train on this service's Ray, not there
            raise ConfigError(f"address {shown(request.address, 80)}: the service runs sweeps on its own Ray; "
                              "`sweeper launch --in-process --address ...` joins a cluster")
        if stale := other_environment(message, os.environ) or self.stores.replaced(request.tracking_uri):
            send(conn, {"stale": stale})
            return
        send(conn, {"accepted": True})  # at once: a launch that hears nothing knows the service is not answering
        served = Served(visible(cut(Path(request.file).name, 80)), peer(conn)[0])  # a name for the log: one line
        sink = LaunchSink(conn)
        reader = threading.Thread(target=watch_client, args=(rest, served.stop), name="sweeper-service-client", daemon=True)
        me = threading.get_ident()
        with self.sweeps_lock:
            self.sweeps[me] = served
        reader.start()
        ended = threading.Event()
        threading.Thread(target=say_alive, args=(sink, ended), name="sweeper-service-alive", daemon=True).start()
        code = 1
        try:
            host = SweepHost(served.stop, self.workers, lambda: self._running(but=me))
            with Sweep(request, self._announcing(sink, served), host, Faults.from_env()) as sweep:
                sweep.open()
                sweep.run()
                code = sweep.finish()
        except ConfigError as err:
            sink(Say(error_line(str(err)), "warning"))
            code = 2
        except Exception as err:  # noqa: BLE001 - the sweep's failure, not the service's
            if (line := path_refusal(err)) is None:  # else a path no check named: the user's, one line
                log.exception(f"sweep {served.name} failed")
            sink(Say(error_line(line) if line else f"error: the sweep failed on the service ({type(err).__name__}: "
                     f"{cut(str(err), 160)}); the service's log has the details ({self.dir / LOG})", "warning"))
            code = 1 if line is None else 2
        finally:
            self.stores.remember(request.tracking_uri)  # the file MLflow now holds open for this URI
            with self.sweeps_lock:
                self.sweeps.pop(me, None)
            ended.set()
            sink.end(code)
            log.info(f"sweep {served.name}: ended with {code}")

    def _running(self, but: int) -> int:
        """How many sweeps run on the service now, but the one of thread `but`."""
        with self.sweeps_lock:
            return sum(key != but for key in self.sweeps)

    def _announcing(self, sink: LaunchSink, served: Served):
        """The launch's sink, which also notes in the service's status where the sweep runs."""

        def forward(event: Event) -> None:
            if isinstance(event, Running):
                served.sweep_dir, served.name = event.sweep_dir, event.sweep_dir.name
                log.info(f"sweep {served.name}: running for pid {served.client_pid}")
            sink(event)

        return forward

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
        for name in (STATE, SOCKET):  # a socket without its state file: a service ending, not one gone astray
            with contextlib.suppress(OSError):
                (self.dir / name).unlink()
        from sweeper.adapters import ray_tune

        ray_tune.shutdown_ray()
        self.lock.close()
        log.info("sweep service: stopped" + (" (restarting on new code)" if self.restart else ""))
        return 0


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m sweeper.service_host", description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=cpus, default=None, help="warm trial workers (default: this machine's CPUs)")
    args = parser.parse_args(argv)
    from sweeper.cli_types import usable_cpus

    logging.basicConfig(handlers=[StdoutLines()], level=logging.INFO, format="%(message)s", force=True)
    try:
        service = Service(service_dir(), max(1, args.workers or usable_cpus()))
    except ConfigError as err:
        sys.stderr.write(f"{error_line(str(err))}\n")
        return 2
    code = service.serve()
    if service.restart:
        os.execv(sys.executable, [sys.executable, "-m", "sweeper.service_host", *(argv if argv is not None else sys.argv[1:])])
    return code


if __name__ == "__main__":
    run_tool(main)
