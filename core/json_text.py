"""JSON text read as data: every text that is not JSON, nested too deep for the parser included,
or an object giving one key twice (which `json` reads as the last), is a ValueError, so a reader
has one failure to answer."""

from __future__ import annotations

import json
from typing import Any


class DuplicateKey(ValueError):
    """An object that gives one key twice (`{"verb": "launch", "verb": "stop"}`)."""


def _unique(pairs: list[tuple[str, Any]]) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise DuplicateKey(f"the key {json.dumps(twice)[:60]} is given twice")
    return out


def loads(text: str | bytes, *, unique_keys: bool = True) -> Any:
    """`json.loads`, with nesting deeper than the parser's stack (a RecursionError) a ValueError,
    and an object giving a key twice a `DuplicateKey` (json keeps the last; every file this project
    writes gives each once, so a second is damage: a `"state"` given twice showed a finished sweep
    as interrupted). `unique_keys=False` reads as `json` does."""
    try:
        return json.loads(text, object_pairs_hook=_unique if unique_keys else None)
    except RecursionError:
        raise ValueError("JSON nested too deep to read") from None
