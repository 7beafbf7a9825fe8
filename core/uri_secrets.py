"""The secrets a URI or address may carry, and the URI as an error line may show it.

A secret sits in a URI's user part (`postgresql://user:PASSWORD@host/db`, `ray://user:PASSWORD@head:10001`)
or in a query parameter named like one (`?password=...`, `?token=...`, `&api_key=...`).
"""

from __future__ import annotations

import re
import urllib.parse

from core.errors import cut

SECRET_KEY = re.compile(r"pass|pwd|token|secret|key|auth|credential|signature|sig$", re.IGNORECASE)
_QUERY_PAIR = re.compile(r"(?P<sep>[?&;#])(?P<key>[^=&;#?]*)=(?P<value>[^&;#]*)")  # in the query or the fragment
_USER_PART = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*:)?//[^/?#@:]*:(?P<password>[^/?#@]*)@")


def _password(uri: str) -> str | None:
    """The password of `uri`'s user part (also of a `user:password@host` written without a scheme,
    and of a URI urllib cannot split: an unclosed `[`, a port that is no number)."""
    written = uri if "://" in uri else f"//{uri}"
    try:
        return urllib.parse.urlsplit(written).password
    except ValueError:
        return match["password"] if (match := _USER_PART.match(written)) else None


def secrets(uri: str) -> set[str]:
    """Every secret in `uri`, as written and percent-decoded (empty ones left out)."""
    found = {_password(uri) or ""}
    found |= {m["value"] for m in _QUERY_PAIR.finditer(uri) if SECRET_KEY.search(urllib.parse.unquote(m["key"]))}
    return {form for secret in found for form in (secret, urllib.parse.unquote(secret))} - {""}


def hide_password(uri: str) -> str:
    """`uri` with the password of its user part and the value of every secret-named query parameter
    replaced by ***."""
    password = _password(uri)
    shown = uri.replace(f":{password}@", ":***@", 1) if password else uri
    return _QUERY_PAIR.sub(lambda m: f"{m['sep']}{m['key']}=***" if SECRET_KEY.search(urllib.parse.unquote(m["key"]))
                           else m[0], shown)


def shown(uri: str, width: int = 120) -> str:
    """`uri` as an error line shows it: its secrets hidden, cut to `width` characters."""
    return cut(hide_password(uri), width)


def reason(err: BaseException, uri: str) -> str:
    """The first line of an error, without the URI's secrets (as written, or as the driver saw them)."""
    text = (str(err).strip().splitlines() or [type(err).__name__])[0]
    for secret in secrets(uri):
        # a short password would also match inside words ("a" in "connection refused"): there, only whole tokens
        pattern = re.escape(secret) if len(secret) >= 6 else rf"(?<![A-Za-z0-9]){re.escape(secret)}(?![A-Za-z0-9])"
        text = re.sub(pattern, "***", text)
    return text
