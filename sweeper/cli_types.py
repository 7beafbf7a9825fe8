"""The command line's value types: each parses one flag's text or says, in one line, what it must be.

Stdlib only (argparse raises their ArgumentTypeError as the usage error `sweeper` prints).
"""

from __future__ import annotations

import argparse
import os

from core.errors import brief, control_character


def positive_int(text: str, least: int = 1) -> int:
    """A whole number >= `least` in ASCII digits (Python's int() would also take spaces, underscores
    and other scripts' digits: ' 8080', '8_080', '８０８０')."""
    digits = text.removeprefix("-")  # -1 is a whole number: it is told the rule it breaks, >= 1
    if not (digits.isascii() and digits.isdigit() and len(digits) <= 100):
        raise argparse.ArgumentTypeError(f"must be a whole number, got {brief(text, 40)}")
    value = int(text)
    if value < least:
        raise argparse.ArgumentTypeError(f"must be >= {least}, got {value}")
    return value


MAX_SEEDS = 1000  # training seeds a command trains per system: past it, a typo (a job list of gigabytes)


def seed_count(text: str) -> int:
    """A number of training seeds, 1 to MAX_SEEDS."""
    value = positive_int(text)
    if value > MAX_SEEDS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_SEEDS}, got {brief(value, 40)}")
    return value


def count(text: str) -> int:
    """A whole number >= 0."""
    return positive_int(text, least=0)


def sample_count(text: str) -> int:
    """A whole number of configs to sample and print, 0 to MAX_SAMPLES."""
    value = count(text)
    if value > MAX_SAMPLES:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_SAMPLES:,}, got {brief(text, 40)}")
    return value


MAX_SAMPLES = 10_000  # `validate --samples`: each is drawn, built and printed
MAX_REPLAYS = 10_000  # `replay --replays`: each replays a whole sweep


def replay_count(text: str) -> int:
    """A whole number of replays, 1 to MAX_REPLAYS."""
    value = positive_int(text)
    if value > MAX_REPLAYS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_REPLAYS:,}, got {brief(text, 40)}")
    return value


MAX_TOP = 10_000  # `--top`: rows of a table, points of a replay


def top_count(text: str) -> int:
    """A number of best trials or points to show or count, 1 to MAX_TOP."""
    value = positive_int(text)
    if value > MAX_TOP:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_TOP:,}, got {brief(text, 40)}")
    return value


MAX_PROGRESS_S = 86_400  # `--progress-every`: past a day, no line would ever come


def progress_seconds(text: str) -> int:
    """Seconds between progress lines, 1 to MAX_PROGRESS_S."""
    value = positive_int(text)
    if value > MAX_PROGRESS_S:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_PROGRESS_S:,} seconds (a day), got {brief(text, 40)}")
    return value


def tolerance(text: str) -> float:
    """A finite number >= 0 (a difference in the metric's units)."""
    try:  # ASCII as typed: float() would also take spaces, underscores and other scripts' digits
        if not text.isascii() or text != text.strip() or "_" in text:
            raise ValueError(text)
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {brief(text, 40)}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {brief(text, 40)}")
    return value


def positive_number(text: str) -> float:
    """A finite number > 0 (a fraction of a GPU, seconds)."""
    try:
        value = tolerance(text)
    except argparse.ArgumentTypeError:
        value = 0.0
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {brief(text, 40)}")
    return value


def plain(text: str) -> str:
    """A name, path or host as typed: not empty, no spaces around it, no control characters (a
    refusal that named it would show another value, and a file made with it a name no one typed)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"must not be empty or blank, got {brief(text, 40)}")
    if undecoded := [c for c in text if "\udc80" <= c <= "\udcff"]:  # a byte the locale's encoding does not decode
        import codecs
        import locale

        byte, encoding = chr(ord(undecoded[0]) - 0xDC00), locale.getpreferredencoding(False)
        if codecs.lookup(encoding).name == "utf-8":
            raise argparse.ArgumentTypeError(f"holds the byte {byte!a}, not UTF-8 (a name in another encoding: the "
                                             f"sweep's stores need UTF-8 names), got {brief(text, 40)}")
        raise argparse.ArgumentTypeError(f"holds the byte {byte!a}, which this locale's encoding ({encoding}) does not "
                                         f"read; under a UTF-8 locale (LANG=C.UTF-8) it is read, got {brief(text, 40)}")
    if text != text.strip() or control_character(text) is not None:
        raise argparse.ArgumentTypeError(f"must have no spaces around it and no control characters, got {brief(text, 40)}")
    return text


def folder(text: str) -> str:
    """A folder's path, not empty (an empty one would quietly mean the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"must name a folder, got {brief(text, 40)}")
    return plain(text)


def file_name(text: str) -> str:
    """A file's path, to read or write (`plain`), not one that names a folder: a trailing / (which
    pathlib and os.path.abspath drop, reading `smoke.yaml/` as `smoke.yaml`)."""
    if plain(text).endswith(("/", "/.", "/..")) or text in (".", ".."):
        raise argparse.ArgumentTypeError(f"names a folder, not a file, got {brief(text, 40)}")
    return text


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, which a container's cpuset narrows)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cpus(text: str) -> int:
    """A whole number from 1 to the CPUs this machine gives the process (threads, worker processes)."""
    value = positive_int(text)
    have = usable_cpus()
    if value > have:
        raise argparse.ArgumentTypeError(f"must be at most the {have} CPU{'s' * (have != 1)} of this machine, got {value}")
    return value


def experiment_name(text: str) -> str:
    """An MLflow experiment name under the sweep-name rules (it lands in folders and search filters)."""
    from sweeper.space import check_name

    try:
        return check_name(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def port(text: str) -> int:
    value = positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be a TCP port (1-65535), got {value}")
    return value


class Distinct(argparse.Action):
    """`nargs="+"` values, each given once: a value repeated would run (and count) its work twice."""

    def __call__(self, parser, namespace, values, option_string=None):
        seen = []
        for value in values:
            if value in seen:
                parser.error(f"{option_string or self.dest}: {brief(value, 40)} given twice; name each once")
            seen.append(value)
        setattr(namespace, self.dest, values)
