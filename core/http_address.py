"""The form of a server's HTTP address (an MLflow tracking server, a Ray job server), checked before
anything is asked of it: a port out of range or a bracket left open is the user's typo, not a
server that does not answer."""

from __future__ import annotations

import urllib.parse


def address_problem(url: str) -> str | None:
    """Why `url` (http:// or https://) names no server a request could reach, or None."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port  # a ValueError past 65535 or not a number
    except ValueError as err:
        return f"not a URL ({err})"
    if not parts.hostname:
        return "no host in it"
    if port == 0:
        return "port 0 names no server"
    return None
