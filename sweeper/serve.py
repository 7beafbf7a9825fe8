"""A local web server as a child of a CLI verb (`sweeper ui`, `sweeper dashboard`): wait until it
answers, print where, serve until Ctrl-C or SIGTERM, then stop it."""

from __future__ import annotations

import signal
import subprocess
import time
import urllib.request
from typing import Callable

from trainables.errors import ConfigError


def wait_until_up(proc: subprocess.Popen, probe_url: str, what: str, port: int, timeout_s: float = 60) -> None:
    """Return once `probe_url` answers; a one-line ConfigError if the server exits or never answers."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise ConfigError(f"--port {port}: {what} exited (is the port in use?)")
        try:
            urllib.request.urlopen(probe_url, timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise ConfigError(f"{probe_url}: {what} did not answer within {timeout_s:.0f} s") from None
            time.sleep(0.3)


def _interrupt(*_) -> None:
    raise KeyboardInterrupt


def serve_until_stopped(proc: subprocess.Popen, probe_url: str, what: str, port: int, banner: Callable[[], str]) -> int:
    """Wait for the server, print `banner()`, then serve until it exits, Ctrl-C or SIGTERM (`kill`
    stops the server too, as Ctrl-C does); the child never outlives this process's verb."""
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        wait_until_up(proc, probe_url, what, port)
        print(banner(), flush=True)
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
