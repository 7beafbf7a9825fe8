"""The command line of every tool beside `sweeper` (experiments/, bench/, the trainer's modules)
keeps the sweeper's promise: a mistake is one line on stderr and exit 2, never a traceback.

    Parser          argparse whose usage errors are one line and exit 2 (not usage + message);
                    `--OPTION=--` and an option of one value given twice are among them
    answer(err)     what a user can cause (a ConfigError, a path the system refuses, a full disk
                    behind stdout, a reader that left, Ctrl-C) as one line and an exit code
    closed_stdout() 2 after one line when started with stdout closed (`>&-`) or full (`>/dev/full`),
                    else None; a closed stderr becomes /dev/null first (its lines never reach stdout)
    to_stderr(line) a line on stderr, lost where the system refuses it (`2>/dev/full`)
    say(err)        print the `answer` to `err` and return its exit code; raise `err` again
                    when it is not one a user can cause
    run_tool(main)  call `main`, and exit with its code or the `answer`; refused at once when
                    started with stdout closed
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import stat
import sys
from typing import Callable, NoReturn

from core.errors import ConfigError, cut, error_line, one_line, path_refusal


OUTPUT_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO}


def summary(doc: str | None) -> str:
    """A module docstring's first paragraph as one line: a command's --help description."""
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def end_marker_as_value(args: list[str]) -> str | None:
    """The first `--OPTION=--` among the options (before a bare `--`), else None: argparse reads
    that `--` as the end of the options and gives the option an empty list, past its type and
    choices, where a verb expects a string or number."""
    for arg in args:
        if arg == "--":
            return None
        if arg.startswith("-") and arg.endswith("=--"):
            return arg
    return None


GIVEN = "_options_given"  # on the namespace while it is parsed: the options given so far


class StoreOnce(argparse.Action):
    """argparse's `store`, but an option given twice is a usage error: argparse would take the last
    silently (`--out a --out b` writes into b, `--storage x --storage y` reads y)."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = namespace.__dict__.setdefault(GIVEN, {})
        if option_string is not None and self.dest in given:
            first = given[self.dest]  # its values are not shown: an address or URI may hold a password
            parser.error(f"{option_string}: given twice" + (f" (as {first})" if first != option_string else "")
                         + "; give it once")
        given[self.dest] = option_string
        setattr(namespace, self.dest, values)


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line and exit 2 (not usage + message), which takes no
    `--OPTION=--` (argparse would give the option an empty list) and no option of one value twice."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register("action", None, StoreOnce)
        self.register("action", "store", StoreOnce)

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        if (arg := end_marker_as_value(args)) is not None:
            self.error(f"{cut(arg, 60)}: '--' is not a value (it marks the end of the options); give the option a value")
        parsed, rest = super().parse_known_args(args, namespace)
        vars(parsed).pop(GIVEN, None)
        return parsed, rest

    def error(self, message: str) -> NoReturn:
        to_stderr(f"error: {one_line(f'{self.prog}: {cut(message, 200)}')} (see {self.prog} --help)")
        sys.exit(2)


def hold_closed_stdout() -> str:
    """For a command started with stdout closed: put /dev/null at descriptor 1 (else the next file
    this process opened would take it, and receive what is printed) and return the one line to say."""
    fd = os.open(os.devnull, os.O_WRONLY)  # the lowest free descriptor: 1, unless stdin is closed too
    if fd != 1:
        os.dup2(fd, 1)
    return "stdout is closed (>&-): the command's output would be lost; send it to a file or to /dev/null instead"


def drop_stdout(stream=None) -> None:
    """Point stdout (or `stream`, stderr) at /dev/null: output its reader left or a full disk refused
    is not tried again at exit (a second error)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), (stream or sys.stdout).fileno())


def output_refusal(err: BaseException) -> str | None:
    """The one line for output the system refused (stdout on a full disk); None for anything else.
    The product's own files refuse with a ConfigError naming them: an OSError naming no file is its output."""
    if not isinstance(err, OSError) or err.errno not in OUTPUT_ERRORS or err.filename is not None:
        return None
    return f"stdout: the output could not be written ({err.strerror})"


def answer(err: BaseException) -> tuple[str | None, int] | None:
    """What a command says on stderr (None: nothing) and its exit code, for what a user can cause:
    a ConfigError, Ctrl-C, a reader that left, a path the system refused, output a full disk
    refused. None for anything else (a bug: its traceback is worth seeing)."""
    if isinstance(err, ConfigError):
        return error_line(str(err)), 2
    if isinstance(err, KeyboardInterrupt):
        return "interrupted", 130
    if isinstance(err, BrokenPipeError):  # `... | head`: the reader left; not an error of ours
        drop_stdout()
        return None, 0
    if isinstance(err, (OSError, RuntimeError)):
        if (line := path_refusal(err)) is not None:
            return error_line(line), 2
        if (line := output_refusal(err)) is not None:
            drop_stdout()
            return error_line(line), 2
    return None


class StdoutLines(logging.StreamHandler):
    """A log's lines on stdout; a reader that left (`| head`) or a full disk ends them there (stdout
    then points at /dev/null), not with a traceback on stderr for every line after."""

    def __init__(self):
        super().__init__(sys.stdout)

    def handleError(self, record: logging.LogRecord) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            drop_stdout()
        else:
            super().handleError(record)


def hold_closed_stderr() -> None:
    """For a command started with stderr closed (`2>&-`): /dev/null at descriptor 2 and as
    `sys.stderr` (else what is said on stderr, a refusal's line, would go to stdout)."""
    if sys.stderr is None:
        fd = os.open(os.devnull, os.O_WRONLY)  # the lowest free descriptor: 2, unless stdin or stdout is closed too
        if fd != 2:
            os.dup2(fd, 2)
            os.close(fd)
        sys.stderr = open(2, "w", closefd=False)


def to_stderr(line: str) -> None:
    """Print `line` on stderr; a stderr the system refuses (a full disk) loses it, as it must."""
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        drop_stdout(sys.stderr)


def full_stdout() -> str | None:
    """The line for a stdout that takes no byte, known before anything is done: the full device
    (`> /dev/full`), or a file on a file system without a free block; else None. (A disk that fills
    while a command runs is said when a write fails: `output_refusal`.)"""
    try:
        fd = sys.stdout.fileno()
        info = os.fstat(fd)
        if stat.S_ISCHR(info.st_mode):
            full = info.st_rdev == os.stat("/dev/full").st_rdev
        else:
            vfs = os.fstatvfs(fd)
            free = vfs.f_bfree if os.geteuid() == 0 else vfs.f_bavail  # root may write the reserved blocks
            full = stat.S_ISREG(info.st_mode) and vfs.f_blocks > 0 and free == 0
    except (OSError, ValueError, AttributeError):  # no such device here, a stream without a descriptor
        return None
    if not full:
        return None
    return ("stdout: the output could not be written (No space left on device): it goes to "
            + ("/dev/full" if stat.S_ISCHR(info.st_mode) else "a file on a full file system")
            + "; nothing was done; send it to a file with room, or to /dev/null")


def closed_stdout() -> int | None:
    """2 after saying so in one line when this process was started with stdout closed, or with a
    stdout that takes no byte (`full_stdout`): nothing is done that its output would not report."""
    hold_closed_stderr()
    if sys.stdout is not None and (line := full_stdout()) is None:
        return None
    if sys.stdout is None:
        line = hold_closed_stdout()
    to_stderr(error_line(line))
    return 2


def say(err: BaseException) -> int:
    """Print the `answer` to `err` on stderr and return its exit code; raise `err` again when it
    is not one a user can cause (a bug: its traceback is worth seeing)."""
    if (said := answer(err)) is None:
        raise err
    line, code = said
    if line is not None:
        to_stderr(line)
    return code


def run_tool(main: Callable[[], int | None]) -> NoReturn:
    """Exit with what `main` returns; what a user can cause is one line on stderr (`answer`)."""
    if (refused := closed_stdout()) is not None:
        sys.exit(refused)
    try:
        code = main() or 0
        sys.stdout.flush()
    except (Exception, KeyboardInterrupt) as err:  # noqa: BLE001 - `say` answers it or raises it again
        code = say(err)
    sys.exit(code)
