"""JSON text read as data: every text that is not JSON, nested too deep for the parser included,
is a ValueError, so a reader has one failure to answer."""

from __future__ import annotations

import json
from typing import Any


def loads(text: str | bytes) -> Any:
    """`json.loads`, with nesting deeper than the parser's stack (a RecursionError) a ValueError."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deep to read") from None
