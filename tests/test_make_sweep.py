"""`make sweep` on a terminal: Ctrl-C reaches the sweep alone (it pauses and says so) and make
ends without an error line of its own; any other failure of the sweep is still make's error.
The sweep is a stand-in with the launch's contract (exit 130 on Ctrl-C), run through the real
Makefile recipe in a pseudo-terminal."""

import os
import pty
import re
import select
import shutil
import stat
import time

import pytest

from conftest import ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")

STAND_IN = """#!{python}
import signal, sys, time
code = int(sys.argv[-1]) if sys.argv[-1].isdigit() else 0
signal.signal(signal.SIGINT, lambda *_: (print("sweep interrupted; run the same command to resume", flush=True), sys.exit(130)))
print("plan: stand-in", flush=True)
if code:
    sys.exit(code)
time.sleep(60)
"""


def run_in_pty(args: list[str], ctrl_c: bool) -> tuple[str, int]:
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(ROOT)
        os.execvp(args[0], args)
    out, deadline = b"", time.monotonic() + 60
    while b"plan: stand-in" not in out and time.monotonic() < deadline:
        if select.select([fd], [], [], 1)[0]:
            try:
                out += os.read(fd, 4096)
            except OSError:
                break
    if ctrl_c:
        os.write(fd, b"\x03")
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    return out.decode(errors="replace"), os.waitstatus_to_exitcode(status)


def stand_in(tmp_path, code: int = 0) -> list[str]:
    path = tmp_path / "sweeper"
    body = STAND_IN.format(python=os.path.realpath(shutil.which("python3") or "/usr/bin/python3"))
    if code:
        body = body.replace("int(sys.argv[-1]) if sys.argv[-1].isdigit() else 0", str(code))
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return ["make", "-s", "-o", str(path), "sweep", f"BIN={tmp_path}"]


def test_ctrl_c_on_make_sweep_is_the_sweep_s_pause_not_make_s_error(tmp_path):
    out, code = run_in_pty(stand_in(tmp_path), ctrl_c=True)
    assert "sweep interrupted; run the same command to resume" in out
    assert "***" not in out and code == 0, out  # no `make: ***` (`make[1]: ***` under another make)


def test_a_failing_sweep_is_still_make_s_error(tmp_path):
    out, code = run_in_pty(stand_in(tmp_path, code=2), ctrl_c=False)
    assert re.search(r"make(\[\d+\])?: \*\*\*", out) and code == 2, out
