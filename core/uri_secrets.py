"""The secrets a URI or address may carry, and the URI as an error line may show it.

A secret sits in a URI's user part (`postgresql://user:PASSWORD@host/db`, `ray://user:PASSWORD@head:10001`,
`https://TOKEN@host`: a user part without a password is hidden whole) or in a query, path or fragment
parameter named like one (`?password=...`, `;jsessionid=...`, `&api_key=...`, `#token=...`).
"""

from __future__ import annotations

import base64
import re
import urllib.parse

from core.errors import cut

SECRET_KEY = re.compile(r"pass|pwd|token|secret|key|auth|credential|signature|sig$|session", re.IGNORECASE)
_QUERY_PAIR = re.compile(r"(?P<sep>[?&;#])(?P<key>[^=&;#?]*)=(?P<value>[^&;#]*)")  # in the query or the fragment
_LONE_USER = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*:)?//(?P<user>[^/?#@:]+)@")
_USER_PART = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*:)?//[^/?#@:]*:(?P<password>[^/?#@]*)@")


def _password(uri: str) -> str | None:
    """The password of `uri`'s user part (also of a `user:password@host` written without a scheme,
    and of a URI urllib cannot split: an unclosed `[`, a port that is no number)."""
    written = uri if "://" in uri else f"//{uri}"
    try:
        return urllib.parse.urlsplit(written).password
    except ValueError:
        return match["password"] if (match := _USER_PART.match(written)) else None


def _lone_user(uri: str) -> str | None:
    """A user part without a password (`https://TOKEN@host`): where tokens are often written, so a secret."""
    match = _LONE_USER.match(uri if "://" in uri else f"//{uri}")
    return match["user"] if match else None


def secrets(uri: str) -> set[str]:
    """Every secret in `uri`, as written and percent-decoded (empty ones left out)."""
    found = {_password(uri) or "", _lone_user(uri) or ""}
    found |= {m["value"] for m in _QUERY_PAIR.finditer(uri) if SECRET_KEY.search(urllib.parse.unquote(m["key"]))}
    return {form for secret in found for form in (secret, urllib.parse.unquote(secret))} - {""}


def hide_password(uri: str) -> str:
    """`uri` with the password of its user part and the value of every secret-named query parameter
    replaced by ***."""
    password, user = _password(uri), _lone_user(uri)
    shown = uri.replace(f":{password}@", ":***@", 1) if password else uri.replace(f"{user}@", "***@", 1) if user else uri
    return _QUERY_PAIR.sub(lambda m: f"{m['sep']}{m['key']}=***" if SECRET_KEY.search(urllib.parse.unquote(m["key"]))
                           else m[0], shown)


def split_user(url: str) -> tuple[str, dict[str, str]]:
    """An HTTP(S) URL without its user part, and the Basic Authorization header that part stands for
    (as an HTTP client sends it); the URL as it is, and no header, when it has none."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return url, {}
    if "@" not in parts.netloc:
        return url, {}
    user, password = (urllib.parse.unquote(part or "") for part in (parts.username, parts.password))
    header = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment)), {"Authorization": header}


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
