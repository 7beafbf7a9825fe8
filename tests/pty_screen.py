"""A command run on a pseudo-terminal of a given size, and what that terminal shows (pyte, a
terminal emulator, replays the bytes): the frames a user saw, and the same bytes on a much wider
screen, where a line the command drew wider than its terminal shows as longer than it."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import termios
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyte

WIDE = 400  # columns of the screen that shows what was drawn beyond the terminal's width


@dataclass
class Capture:
    """The bytes a command wrote to its terminal, its exit code, and the screens seen as it ran."""

    raw: bytes
    code: int | None
    cols: int
    rows: int
    frames: list[list[str]] = field(default_factory=list)  # the screen after each read, when it changed

    def screen(self, cols: int | None = None, rows: int | None = None) -> list[str]:
        """The last screen, `cols` x `rows` (the terminal's own by default), right-trimmed."""
        return render(self.raw, cols or self.cols, rows or self.rows)


def render(raw: bytes, cols: int, rows: int) -> list[str]:
    screen = pyte.Screen(cols, rows)
    pyte.ByteStream(screen).feed(raw)
    return [line.rstrip() for line in screen.display]


def run_on_terminal(cmd: list[str], cwd: Path, env: dict[str, str], cols: int = 80, rows: int = 50,
                    timeout_s: float = 600, ctrl_c_when: str | None = None) -> Capture:
    """Run `cmd` with a pty of `cols` x `rows` as its terminal until it exits (or `timeout_s`,
    then it is killed); with `ctrl_c_when`, a Ctrl-C is typed once that text is on the screen."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the pty is its controlling terminal
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        os.chdir(cwd)
        os.execvpe(cmd[0], cmd, env)
    screen = pyte.Screen(cols, rows)
    stream = pyte.ByteStream(screen)
    raw, frames, code, typed = b"", [], None, False
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if select.select([fd], [], [], 0.5)[0]:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:  # the child closed the terminal
                    chunk = b""
                if not chunk:
                    break
                raw += chunk
                stream.feed(chunk)
                shown = [line.rstrip() for line in screen.display]
                if not frames or frames[-1] != shown:
                    frames.append(shown)
                if ctrl_c_when and not typed and any(ctrl_c_when in line for line in shown):
                    os.write(fd, b"\x03")
                    typed = True
        else:
            os.kill(pid, signal.SIGKILL)
    finally:
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        os.close(fd)
    return Capture(raw, code, cols, rows, frames)
