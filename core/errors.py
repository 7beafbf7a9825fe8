"""User mistakes as one bounded line.

Every error a user can cause (a config file, a search space, a CLI flag) is a `ConfigError`
whose message names the file, the key, the rule and the value. Values are shown through
`brief`, so a message never embeds a whole document: a long string is cut, a collection is
described by its size (`<list of 9 items>`). `one_line` is the last guard the CLI applies.
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path
from typing import Any

MAX_LINE = 300  # characters of an error line, at most
MAX_DEPTH = 20  # levels of nested containers a value's stand-in shows


class ConfigError(ValueError):
    """A user mistake in a config file or value; its message is one line."""


def brief(value: Any, limit: int = 60) -> str:
    """A short, printable stand-in for `value`: its repr when short, else a cut or a size."""
    if isinstance(value, dict):
        text = repr_cut(value, limit + 1)
        return f"<mapping of {len(value)} key{'s' * (len(value) != 1)}>" if len(text) > limit else text
    if isinstance(value, (list, tuple, set, frozenset)):
        text = repr_cut(value, limit + 1)
        kind = type(value).__name__
        return f"<{kind} of {len(value)} item{'s' * (len(value) != 1)}>" if len(text) > limit else text
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**18:
        return "<integer of more than 1000 digits>" if abs(value) >= 10**1000 else f"<integer of {len(str(abs(value)))} digits>"
    return repr_cut(value, limit)


def repr_cut(value: Any, limit: int, depth: int = 0) -> str:
    """repr(value), cut to `limit` characters with an ellipsis; never builds a huge string for
    a container (its items are visited only until the limit is reached), nor follows one deeper
    than `MAX_DEPTH` (`[...]` stands for what is below)."""
    if isinstance(value, (dict, list, tuple, set, frozenset)):
        return _container_repr(value, limit, depth)
    if isinstance(value, str) and len(value) > limit:
        value = value[: limit + 2]
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**1000:
        return "<integer of more than 1000 digits>"
    text = repr(value).replace("\n", "\\n")
    return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."


def _container_repr(value: Any, limit: int, depth: int) -> str:
    brackets = {dict: "{}", list: "[]", tuple: "()"}.get(type(value), "{}")
    if not value:
        return repr(value)  # `[]`, `()`, `set()`
    if depth >= MAX_DEPTH:
        return f"{brackets[0]}...{brackets[1]}"
    parts, used = [], 2
    items = value.items() if isinstance(value, dict) else value
    for item in items:
        if isinstance(item, tuple) and isinstance(value, dict):
            part = f"{repr_cut(item[0], limit, depth + 1)}: {repr_cut(item[1], limit, depth + 1)}"
        else:
            part = repr_cut(item, limit, depth + 1)
        used += len(part) + 2
        parts.append(part)
        if used > limit:
            break
    text = brackets[0] + ", ".join(parts) + ("," if isinstance(value, tuple) and len(value) == 1 else "") + brackets[1]
    return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."


def cut(text: str, limit: int) -> str:
    """Plain text (a message, a key) on one line, control characters escaped (see `visible`), cut
    to `limit` characters with an ellipsis."""
    text = " ".join(str(text).split()) if len(str(text)) <= 100 * limit else str(text)[: 2 * limit].replace("\n", " ")
    text = visible(text)
    return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."


def visible(text: str, keep: str = "") -> str:
    """`text` with each control character (a terminal escape, NUL, a line break but those in
    `keep`) written as its escape, `\\x1b`, and each byte of a file name that was not UTF-8 as
    `\\xff`: a name someone else chose, safe to print on any terminal and in any encoding."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in keep else _escape(c) for c in text)


def _escape(char: str) -> str:
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte os.fsdecode could not decode (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    return repr(char)[1:-1]  # repr escapes every character that is not printable


def short_path(path, limit: int = 100) -> str:
    """A file name for an error line: the end of a long path, which names the file."""
    text = " ".join(str(path).split())
    return text if len(text) <= limit else "..." + text[-(limit - 3):]


def one_line(message: str, limit: int = MAX_LINE) -> str:
    """The message on one line of at most `limit` characters. A line too long first gives up
    the start of its long paths (their ends name the files), so the advice after them stays."""
    text = visible(" ".join(message.split()))
    if len(text) > limit:
        text = " ".join(short_path(word, 60) if "/" in word and len(word) > 60 else word for word in text.split(" "))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def path_refusal(err: BaseException) -> str | None:
    """The one line for a path the system refused where no check named it first (a name too long,
    a loop of symbolic links, no permission); None for any other failure. The last guard of the
    command line and of the service, as `error_line` is of every message."""
    if isinstance(err, OSError) and err.filename is not None:
        name = err.filename if isinstance(err.filename, str) else repr(err.filename)
        return f"{short_path(name, 120)}: {err.strerror or err}"
    if isinstance(err, RuntimeError) and str(err).startswith("Symlink loop from "):  # pathlib's resolve()
        return f"{short_path(str(err).removeprefix('Symlink loop from ').strip(chr(39)), 120)}: a loop of symbolic links"
    if isinstance(err, RuntimeError) and str(err) == "Could not determine home directory.":  # pathlib's expanduser()
        return "a path begins with ~NAME, and NAME is no user of this machine; write the path out (~/ is your own home)"
    return None


def why_absent(path: str | os.PathLike) -> str:
    """Why no regular file stands at `path`, for a refusal: "no such file", "a dangling link (to
    TARGET)", "a loop of symbolic links", "a path through a file", or "not a regular file" (a
    folder, a FIFO) when something does stand there."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return f"a dangling link (to {cut(os.readlink(path), 80)})" if os.path.islink(path) else "no such file"
    except OSError as err:
        return {errno.ELOOP: "a loop of symbolic links", errno.ENOTDIR: "a path through a file"}.get(
            err.errno, f"cannot be read ({err.strerror or err})")
    return "not a regular file"


def expand_user(path: str | os.PathLike) -> Path:
    """`path` with a leading `~` or `~NAME` expanded; one ConfigError line where NAME is no user."""
    try:
        return Path(path).expanduser()
    except RuntimeError:
        head = os.fspath(path).split(os.sep, 1)[0]
        raise ConfigError(f"{short_path(os.fspath(path), 120)}: {cut(head, 40)} names no user of this machine; "
                          "write the path out (~/ is your own home)") from None


def control_character(text: str) -> str | None:
    """The first control character of `text` (a line break, a terminal escape: a line showing it
    would show another text), or None. A byte the locale did not decode (a surrogate escape) is
    not one: each reader says what it makes of those."""
    return next((c for c in text if not c.isprintable() and not "\udc80" <= c <= "\udcff"), None)


def check_folder_variable(name: str) -> None:
    """An environment variable naming a folder (`$RAY_TMPDIR`, `$XDG_STATE_HOME`, ...) holds no
    control character: a folder would be made under a name no one typed, and a refusal would show
    another one. One ConfigError line otherwise."""
    value = os.environ.get(name, "")
    if (char := control_character(value)) is not None:
        raise ConfigError(f"${name} {brief(value, 60)}: holds {char!a}, a control character; name a folder without one")


def warnings_as_errors() -> str | None:
    """The option that makes Python raise warnings as errors (`PYTHONWARNINGS=error`, `-W error`),
    under which the libraries' own warnings (deprecations deep in MLflow's SQLAlchemy) fail calls
    that are sound; None when warnings are only warnings."""
    for option in sys.warnoptions:
        action = option.split(":")[0].strip().lower()
        if action and "error".startswith(action):
            return option
    return None


def check_warnings_are_warnings(doing: str) -> None:
    """Refuse, before it starts, work that would fail midway under warnings raised as errors: Ray's
    node, MLflow and Optuna warn as they run (`doing`: what would fail, "the sweep")."""
    if option := warnings_as_errors():
        raise ConfigError(f"PYTHONWARNINGS or -W {cut(option, 40)}: warnings raised as errors would end {doing} midway "
                          "(Ray, MLflow and Optuna warn as they run); unset it and run this again")


def error_line(message: str) -> str:
    """`error: MESSAGE` on one line of at most MAX_LINE characters, the prefix included."""
    return f"error: {one_line(message, MAX_LINE - len('error: '))}"
