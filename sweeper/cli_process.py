"""What the command line's own process does around a verb: check its working folder and its
stdout, adopt and end its descendants (what a user can cause is `core.tool_cli.answer`'s)."""

from __future__ import annotations

import contextlib
import os
import sys

from core.errors import ConfigError, brief


def check_working_dir() -> None:
    """A working folder removed under the shell is one line, before any verb resolves a path; so
    is a $HOME relative or a file, under which the sweeper, Ray and MLflow keep their files (a signing key,
    a token, settings): relative, they would land in whatever folder a command runs from."""
    try:
        os.getcwd()
    except FileNotFoundError:
        raise ConfigError("the working folder no longer exists (removed or moved away); cd to one that "
                          "does and run the command again") from None
    home = os.environ.get("HOME")
    if home is not None and not os.path.isabs(home):
        raise ConfigError(f"$HOME {brief(home, 60)}: not an absolute path (the sweeper, Ray and MLflow keep files "
                          "under it); set it to your home folder, or unset it")
    if home and (os.path.isfile(home) or _under_a_file(home)):  # matplotlib, Ray and MLflow warn or fail under it
        raise ConfigError(f"$HOME {brief(home, 60)}: a file, or under one, not a folder (the sweeper, Ray and MLflow "
                          "keep files under it); set it to your home folder, or unset it")


def _under_a_file(path: str) -> bool:
    try:
        os.stat(path)
    except NotADirectoryError:
        return True
    except OSError:
        pass
    return False


PR_SET_CHILD_SUBREAPER = 36  # Linux prctl(2)


def adopt_orphans() -> None:
    """Make this process the reaper of its descendants' orphans (Linux): a process whose parent
    ended (a Ray worker whose raylet was killed) becomes this process's child, not the init
    process's, so `exit_at_once` can reap it. Without it, where the init process does not reap (a
    container's), every killed process would stay behind as a zombie. Elsewhere, a no-op."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def exit_at_once(code: int) -> None:
    """End the process now, its work written. The processes it started (a local Ray: GCS, raylet,
    agents, idle workers, none holding anything of the sweep) are killed and reaped, where
    `ray.shutdown()` waits 1-1.5 s for them, and the interpreter's own teardown of torch, Ray,
    MLflow and their threads, seconds that a Ctrl-C or the end of a sweep would wait for, is skipped."""
    import time

    import psutil

    sys.stdout.flush()
    sys.stderr.flush()
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        left = psutil.Process().children(recursive=True)  # again: a raylet may start a worker meanwhile
        for child in left:
            with contextlib.suppress(psutil.Error):
                child.kill()
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0] > 0:  # every ended child (orphans adopted above) reaped
                pass
        if not left:
            break
        time.sleep(0.01)
    os._exit(code)
