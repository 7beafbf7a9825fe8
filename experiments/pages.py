"""A results page's generated section: the text between two marker lines, rewritten in place."""

from __future__ import annotations


import sys
from pathlib import Path
from typing import Callable


class DamagedSection(ValueError):
    """The page's markers are not one begin before one end (or neither)."""


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
