"""The form of a server's HTTP address (an MLflow tracking server, a Ray job server), checked before
anything is asked of it: a port out of range or a bracket left open is the user's typo, not a
server that does not answer."""

from __future__ import annotations

import urllib.parse


def address_problem(url: str) -> str | None:
    """Why `url` (http:// or https://) names no server a request could reach, or None."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # its text may hold the password: not shown
        return "not a URL (a bracket of an IPv6 host left open?)"
    try:
        port = parts.port
    except ValueError:
        return "its port is not a number from 1 to 65535"
    if not parts.hostname:
        return "no host in it"
    if port == 0:
        return "port 0 names no server"
    return None
