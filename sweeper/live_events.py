"""A sweep's events on this process's terminal (sweeper/events.py).

Lines go to stdout (`info`) or stderr (`note`, `warning`) as they come; between `Running` and
`Fitted` the live view (sweeper/live.py) draws the sweep from its folder. `sweeper launch` uses it
for a sweep in its own process, and for one on the service, whose events reach it over the socket.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from sweeper.events import Event, Fitted, Running, Say, TopTrials


class Terminal:
    """The sink of a sweep whose progress this terminal shows (`progress`: auto, table, lines or none)."""

    def __init__(self, progress: str = "auto", every_s: float = 30.0, out: TextIO | None = None,
                 err: TextIO | None = None):
        self.progress, self.every_s = progress, every_s
        self.err = ReaderMayLeave(err or sys.stderr, None)
        self.out = ReaderMayLeave(out or sys.stdout, self.err)
        self.view = None

    def __call__(self, event: Event) -> None:
        if isinstance(event, Say):
            stream = self.out if event.level == "info" else self.err
            print(fitted(event.text, terminal_width(stream)), file=stream, flush=True)
        elif isinstance(event, Running) and self.view is None and self.progress != "none":
            from sweeper import live

            self.view = live.LiveView(event.sweep_dir, live.plan_of(event.sweep_dir), self.progress, self.every_s, self.out)
            self.view.__enter__()
        elif isinstance(event, Fitted):
            self.close()
        elif isinstance(event, TopTrials):
            print(top_trials(event.sweep_dir, terminal_width(self.out)), file=self.out, flush=True)

    def close(self) -> None:
        """The live view ends (its last frame drawn); lines after it print below."""
        if self.view is not None:
            view, self.view = self.view, None
            view.__exit__(None, None, None)

    def __enter__(self) -> "Terminal":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class ReaderMayLeave:
    """The sweep's stdout or stderr, whose reader may leave (`sweeper launch ... | head`): the sweep
    goes on, what it would print there from then on is dropped, and one note on `err` says so (None:
    no note, the stream is stderr itself). A pipe's reader is not the sweep's owner: a lost view never
    abandons trials half-started."""

    NOTE = "note: stdout's reader left; the sweep goes on without printing its progress (`sweeper status` shows it)"

    def __init__(self, stream: TextIO, err: "TextIO | None", note: str = NOTE):
        import threading

        self.stream, self.err, self.note, self.left, self._lock = stream, err, note, False, threading.Lock()

    def write(self, text: str) -> int:
        if not self.left:
            try:
                self.stream.write(text)
            except BrokenPipeError:
                self._leave()
        return len(text)

    def flush(self) -> None:
        if not self.left:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self._leave()

    def _leave(self) -> None:
        with self._lock:
            if self.left:
                return
            self.left = True
            if self.stream in (sys.stdout, sys.stderr):
                from core.tool_cli import drop_stdout

                drop_stdout(self.stream)
            if self.err is not None:
                print(self.note, file=self.err, flush=True)

    def __getattr__(self, name: str):  # isatty, fileno, encoding: the stream's own
        return getattr(self.stream, name)


def terminal_width(out: TextIO) -> int | None:
    """The columns of the terminal `out` is, or None (a log, a pipe: lines are not cut)."""
    import shutil

    try:
        return shutil.get_terminal_size().columns if out.isatty() else None
    except (AttributeError, ValueError, OSError):
        return None


def fitted(text: str, width: int | None) -> str:
    """`text` wrapped at spaces to `width` (None: as it is), each continuation indented by two;
    a word longer than the line (a path, a URL) is kept whole, for copying."""
    if width is None:
        return text
    import textwrap

    out = []
    for line in text.splitlines() or [""]:
        indent = line[:len(line) - len(line.lstrip(" "))]
        out.append(textwrap.fill(line.strip(" "), width, initial_indent=indent, subsequent_indent=indent + "  ",
                                 break_long_words=False, break_on_hyphens=False) if len(line) > width else line)
    return "\n".join(out)


def top_trials(sweep_dir: Path, width: int | None) -> str:
    """The sweep's best trials from its status.json, fitted to `width` (a damaged file: one line)."""
    from sweeper.status import format_table, load_records
    from core.errors import ConfigError, cut

    try:
        data, records = load_records(sweep_dir)
    except ConfigError as err:
        return cut(f"(no table: {err})", width or 300)
    return format_table(records, data["metric"], data["mode"], width=width)
