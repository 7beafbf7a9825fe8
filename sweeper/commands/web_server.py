"""A local web server as a child of a CLI verb (`sweeper ui`, `sweeper dashboard`).

    check_address(host, port)  bind the address once ourselves, before anything starts: a port
                               another server holds, a host that is not this machine's or a port
                               that needs root is one line (exit 2), not a server that dies later
    exposure_warning(...)      a host other than loopback: one line saying the UI, which has no
                               login, is reachable from the network
    Server(cmd)                the server in a session of its own (a Ctrl-C at the terminal reaches
                               only this process, never the server's workers), its output kept
                               aside: shown with $SWEEPER_VERBOSE, or its last lines when it fails;
                               a guard (sweeper/server_guard.py) stops it if this process is killed
    Server.serve(...)          print the address at once, wait until it answers, print the page,
                               serve until Ctrl-C or SIGTERM, then stop the server's whole process
                               group, quietly (its workers' shutdown tracebacks are dropped)
"""

from __future__ import annotations

import collections
import errno
import http.client
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Callable

from core.errors import ConfigError, brief, cut

START_TIMEOUT_S = 120.0  # until the server answers (MLflow's first start migrates its store: slow on 2 cores)
STOP_TIMEOUT_S = 10.0  # after SIGTERM, before SIGKILL


def _is_wildcard(host: str) -> bool:
    return host in ("", "0.0.0.0", "::", "[::]")


def is_loopback(host: str) -> bool:
    """Whether every address `host` names is a loopback one (127.0.0.1, ::1, localhost)."""
    try:
        infos = socket.getaddrinfo(host.strip("[]"), None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return False
    return all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in infos)


def url_of(host: str, port: int) -> str:
    """The address to open: a wildcard host is reached on this machine through loopback."""
    host = host.strip("[]")
    if _is_wildcard(host):
        host = "::1" if ":" in host else "127.0.0.1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def check_address(host: str, port: int) -> None:
    """Bind (host, port) once, as the server will (SO_REUSEADDR), and let it go: every reason it
    cannot serve there is one ConfigError line naming the flag."""
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host  # [::1]: an IPv6 address
    if not bare.strip():  # getaddrinfo would take it for every interface: a mistake, not a choice
        raise ConfigError(f"--host {brief(host, 20)}: empty; name an address (every interface: 0.0.0.0), "
                          "the default is 127.0.0.1")
    if "[" in bare or "]" in bare:
        raise ConfigError(f"--host {cut(host, 80)}: brackets only around a whole IPv6 address, as in [::1]; "
                          "the default is 127.0.0.1")
    try:
        infos = socket.getaddrinfo(bare, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as err:
        raise ConfigError(f"--host {cut(host, 80)}: not a host name or address this machine can resolve "
                          f"({getattr(err, 'strerror', None) or err}); the default is 127.0.0.1") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(address)
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                raise ConfigError(f"--port {port}: already in use on {cut(host, 80)} (another server holds it); "
                                  "stop it, or pick another --port") from None
            if err.errno == errno.EADDRNOTAVAIL:
                raise ConfigError(f"--host {cut(host, 80)}: not an address of this machine ({err.strerror}); "
                                  "use 127.0.0.1 (the default), or one of the addresses `ip addr` lists") from None
            if err.errno == errno.EACCES:
                raise ConfigError(f"--port {port}: not allowed for this user ({err.strerror}; ports below 1024 need root); "
                                  "pick a port from 1024 up") from None
            raise ConfigError(f"--host {cut(host, 80)} --port {port}: cannot serve there ({err.strerror or err})") from None


def exposure_warning(host: str, port: int, what: str) -> str | None:
    """One warning line when `host` is not loopback only, else None."""
    if is_loopback(host):
        return None
    reach = "every network this machine is on" if _is_wildcard(host.strip("[]")) else f"the network of {host}"
    return (f"warning: --host {cut(host, 80)}: {what} has no login, and anyone who can reach this machine on "
            f"port {port} from {reach} can now open it; the default --host 127.0.0.1 keeps it to this machine")


def _no_proxy_get(url: str, timeout: float) -> None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through $http_proxy
    opener.open(url, timeout=timeout).close()


class Server:
    """A server process in its own session; its output is read into `tail` (and echoed to stderr
    with $SWEEPER_VERBOSE while it serves)."""

    def __init__(self, cmd: list[str], what: str, env: dict[str, str] | None = None):
        self.what = what
        self.tail: collections.deque[str] = collections.deque(maxlen=20)
        self.stopping = False
        self.verbose = bool(os.environ.get("SWEEPER_VERBOSE"))
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True, env=env)
        self._guard, self._guard_pipe = _start_guard(self.proc.pid)
        self._reader = threading.Thread(target=self._read, name=f"{what}-output", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for raw in self.proc.stdout:
            if self.stopping:
                continue  # the workers' shutdown noise
            line = raw.decode(errors="replace").rstrip()
            self.tail.append(line)
            if self.verbose:
                print(line, file=sys.stderr, flush=True)

    def last_words(self) -> str:
        """The server's last meaningful output line, for an error message."""
        lines = [line.strip() for line in self.tail if line.strip()]
        return cut(lines[-1], 160) if lines else "no output"

    def wait_until_up(self, probe_url: str, timeout_s: float = START_TIMEOUT_S) -> None:
        """Return once `probe_url` answers and the server is still ours; a ConfigError line if it exits first."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                self._reader.join(timeout=2)
                raise ConfigError(f"{self.what} exited before it answered (exit {self.proc.returncode}: {self.last_words()})")
            try:
                _no_proxy_get(probe_url, timeout=2)
                if self.proc.poll() is None:
                    return
            except (OSError, http.client.HTTPException):  # not up yet, or a reply cut short as it starts
                if time.monotonic() > deadline:
                    raise ConfigError(f"{probe_url}: {self.what} did not answer within {timeout_s:.0f} s "
                                      f"({self.last_words()})") from None
                time.sleep(0.3)

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL to what is left after STOP_TIMEOUT_S; quiet."""
        self.stopping = True
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C must not leave the server behind
            signal.signal(sig, signal.SIG_IGN)
        group = self.proc.pid  # start_new_session: the leader's pid is the group's id
        _signal_group(group, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() < deadline and (self.proc.poll() is None or _group_alive(group)):
            time.sleep(0.1)
        _signal_group(group, signal.SIGKILL)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.release_guard()

    def release_guard(self) -> None:
        """End the guard: the server was stopped here (or stopped by itself), nothing is left to guard."""
        if self._guard is not None and self._guard.poll() is None:
            self._guard.kill()
            self._guard.wait()
        if self._guard_pipe is not None:
            os.close(self._guard_pipe)
            self._guard_pipe = None

    def serve(self, address: str, probe_url: str, starting: str, ready: Callable[[], str]) -> int:
        """Print `starting` (which names `address`) at once, wait for the server, print `ready()`,
        serve until Ctrl-C, SIGTERM (`kill`) or the server's own end; the server never outlives this
        process's verb."""
        from sweeper.live_events import ReaderMayLeave

        signal.signal(signal.SIGTERM, _interrupt)
        shown = ReaderMayLeave(sys.stdout, sys.stderr, f"note: stdout's reader left; {self.what} serves on at {address} "
                                                       "(Ctrl-C stops)")  # the reader of its address owns no server
        try:
            print(starting, file=shown, flush=True)
            self.wait_until_up(probe_url)
            print(ready(), file=shown, flush=True)
            code = self.proc.wait()
            self._reader.join(timeout=2)
            print(f"error: {self.what} stopped by itself (exit {code}: {self.last_words()})", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 0
        finally:
            if self.proc.poll() is None or _group_alive(self.proc.pid):
                self.stop()
            self.release_guard()
            self._reader.join(timeout=2)  # the server's group has ended: its output is at its end
            if not self._reader.is_alive():
                self.proc.stdout.close()


def _start_guard(group: int) -> tuple[subprocess.Popen | None, int | None]:
    """A process that stops `group` once this one has ended, however it ended, and the write end
    of its pipe: the guard reads the pipe, whose only writer is this process (the end is not
    inheritable), and the kernel closes it when this process goes, SIGKILL included. (None, None)
    where it cannot start."""
    read_end, write_end = os.pipe()
    try:
        guard = subprocess.Popen([sys.executable, "-I", str(Path(__file__).parents[1] / "server_guard.py"), str(group)],
                                 stdin=read_end, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 start_new_session=True)
    except OSError:
        os.close(write_end)
        return None, None
    finally:
        os.close(read_end)
    return guard, write_end


def _interrupt(*_) -> None:
    raise KeyboardInterrupt


def _signal_group(group: int, sig: int) -> None:
    try:
        os.killpg(group, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False
