"""The command line of every tool beside `sweeper` (experiments/, bench/, the trainer's modules)
keeps the sweeper's promise: a mistake is one line on stderr and exit 2, never a traceback.

    Parser          argparse whose usage errors are one line and exit 2 (not usage + message)
    run_tool(main)  call `main`, and turn what a user can cause (a ConfigError, a path the system
                    refuses, a reader that left, Ctrl-C) into one line and an exit code
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, NoReturn

from core.errors import ConfigError, cut, error_line, one_line, path_refusal


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line and exit 2 (not usage + message)."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {one_line(f'{self.prog}: {cut(message, 200)}')} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def drop_stdout() -> None:
    """Point stdout at /dev/null: output its reader left or a full disk refused is not tried again
    at exit (a second error)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def run_tool(main: Callable[[], int | None]) -> NoReturn:
    """Exit with what `main` returns; what a user can cause is one line on stderr."""
    try:
        code = main() or 0
        sys.stdout.flush()
    except ConfigError as err:
        print(error_line(str(err)), file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = 130
    except BrokenPipeError:  # `... | head`: the reader left
        drop_stdout()
        code = 0
    except (OSError, RuntimeError) as err:
        if (line := path_refusal(err)) is None:
            raise
        print(error_line(line), file=sys.stderr)
        code = 2
    sys.exit(code)
