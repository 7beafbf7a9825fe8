"""A results page's generated section: the text between two marker lines, rewritten in place."""

from __future__ import annotations


import sys
from pathlib import Path
from typing import Callable


MAX_PAGE_BYTES = 16 * 2**20  # a results page, a preset or a picture the experiments write


class DamagedSection(ValueError):
    """The page's markers are not one begin before one end (or neither)."""


def read_page(path: Path) -> str:
    """A committed page's text: a regular file of one name (never through a link, never a FIFO that
    would block), of bounded size, UTF-8; one ConfigError line otherwise, naming how to restore it."""
    from core.errors import ConfigError
    from core.files import check_output
    from experiments.record import git_restore
    from sweeper.fs import read_limited

    check_output(path, "the page")  # a link or a hard link would carry the rewrite to another file
    data = read_limited(path, "the page", MAX_PAGE_BYTES)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"the page {path.name}: not UTF-8 (byte {data[err.start]:#04x} at {err.start}); "
                          f"restore it with {git_restore(path)}") from None


def write_page(path: Path, data: str | bytes) -> None:
    """Write a page, preset or picture whole, as a regular file of its own: what stands at its name is
    checked first (a link there is refused, never written through)."""
    from core.files import check_output, write_atomic

    check_output(path, "the page")
    write_atomic(path, data)


def figure_bytes(fig, **savefig) -> bytes:
    """A matplotlib figure as PNG bytes, for `write_page`."""
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", **savefig)
    return buffer.getvalue()


def rebuild_command(label: str, page: Path, rebuild: Callable[[], str]) -> int:
    """A `report` verb: print the section `rebuild()` writes into `page`; a damaged page is one line and 2."""
    try:
        print(rebuild())
    except DamagedSection as err:
        print(f"{label}: {page}: its results section is damaged ({err}); nothing written", file=sys.stderr)
        return 2
    return 0


def replace_section(text: str, begin: str, end: str, section: str) -> str:
    """`text` with its begin..end span replaced by `section` (which carries the markers), or with
    `section` appended once where the page has neither marker."""
    begins, ends = text.count(begin), text.count(end)
    if (begins, ends) not in ((0, 0), (1, 1)) or (begins and text.index(end) < text.index(begin)):
        raise DamagedSection("each marker once, begin before end")
    if begins:
        return text[: text.index(begin)] + section + text[text.index(end) + len(end):]
    return text.rstrip("\n") + "\n\n" + section + "\n"
