"""The tracking store's address, checked before anything starts: where it is (`--tracking-uri`,
else $MLFLOW_TRACKING_URI, else an embedded SQLite store `./mlflow.db` that needs no server),
whether it answers and can be written, and one line naming it, its password hidden, when not.
Imports no MLflow: a launch refuses a bad store before Ray or MLflow load.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import sqlite3
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Mapping

from sweeper.fs import check_writable
from trainables.config import ConfigError
from core.errors import brief, cut

DEFAULT_DB = "mlflow.db"


def resolve_uri(cli_value: str | None, cwd: str | Path | None = None, environ: Mapping[str, str] | None = None) -> str:
    """--tracking-uri, else $MLFLOW_TRACKING_URI, else sqlite:///<cwd>/mlflow.db; a relative SQLite or
    file path made absolute against `cwd` (default: this process's folder), so the store is the
    caller's wherever the sweep runs."""
    environ = os.environ if environ is None else environ
    where = Path(cwd if cwd is not None else os.getcwd())
    uri = cli_value or environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        return f"sqlite:///{where / DEFAULT_DB}"
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return f"sqlite:///{os.path.normpath(where / uri.removeprefix('sqlite:///'))}"
    if uri.startswith("file:") and not uri.startswith("file:/"):
        return f"file:{os.path.normpath(where / uri.removeprefix('file:'))}"
    if "://" not in uri and not uri.startswith(("file:", "databricks")) and not os.path.isabs(uri):
        return os.path.normpath(where / os.path.expanduser(uri))
    return uri


def sqlite_path(uri: str) -> Path | None:
    """The database file of an embedded SQLite store's URI; None for any other store."""
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def uri_source(cli_value: str | None, environ: Mapping[str, str] | None = None) -> str:
    """Where `resolve_uri` took the URI from, as a user would name it in an error."""
    if cli_value:
        return "--tracking-uri"
    environ = os.environ if environ is None else environ
    return "$MLFLOW_TRACKING_URI" if environ.get("MLFLOW_TRACKING_URI") else "the default tracking URI"


def preflight(uri: str, timeout_s: float = 5.0, source: str = "--tracking-uri") -> None:
    """Fail fast, in one line, when the tracking store cannot be reached or written; `source`
    names where the URI came from (see `uri_source`). A password in the URI is never shown."""
    shown = cut(hide_password(uri), 120)
    if uri.startswith(("http://", "https://")):
        check_server(uri, shown, source, timeout_s)
    elif uri.startswith("sqlite:///"):
        path = Path(uri.removeprefix("sqlite:///"))
        if not path.parent.is_dir():
            raise ConfigError(f"{source} {shown}: folder {cut(str(path.parent), 120)} does not exist")
        check_writable(path.parent, f"{source} {shown}: folder")
        check_sqlite_file(path, shown, source)
    elif uri.startswith("file:") or "://" not in uri:
        check_writable(uri.removeprefix("file://").removeprefix("file:"), source)
    elif uri.split("://")[0].split("+")[0] in SQL_SCHEMES:
        check_database(uri, shown, source, 2 * timeout_s)
    elif uri.split("://")[0] != "databricks":
        raise ConfigError(f"{source} {shown}: unknown scheme; use http(s)://HOST:PORT or sqlite:///PATH")


SQL_SCHEMES = ("postgresql", "mysql", "mssql")  # MLflow's SQLAlchemy stores beside SQLite


def hide_password(uri: str) -> str:
    """The URI with the password of its user part, if any, replaced by ***."""
    try:
        password = urllib.parse.urlsplit(uri).password
    except ValueError:
        return uri
    return uri.replace(f":{password}@", ":***@", 1) if password else uri


def check_server(uri: str, shown: str, source: str, timeout_s: float) -> None:
    """An MLflow server answers OK on /health; anything else there (nothing, another web server) is one line."""
    try:
        with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout_s) as response:
            body = response.read(64)
    except urllib.error.HTTPError as err:
        raise ConfigError(f"{source} {shown}: not an MLflow tracking server (HTTP {err.code} on /health, where MLflow "
                          "answers OK); check the host, port and path") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        raise ConfigError(f"{source} {shown}: MLflow tracking server unreachable ({cut(str(reason), 80)}); start it "
                          f"(on a cluster: is the mlflow Service up?), or, on one machine, "
                          f"unset it to log to ./{DEFAULT_DB}") from None
    answer = body[:40].decode("utf-8", "replace")
    if answer.strip() != "OK":
        raise ConfigError(f"{source} {shown}: not an MLflow tracking server (/health answered {brief(answer)}, "
                          "where MLflow answers OK); check the host, port and path")


def check_sqlite_file(path: Path, shown: str, source: str) -> None:
    """An existing SQLite store must open as a database (MLflow would fail on it only once Ray runs);
    read-only, so nothing is written to it. A missing or empty file MLflow makes a store of."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    url = f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro"
    try:
        with contextlib.closing(sqlite3.connect(url, uri=True, timeout=5.0)) as db:
            db.execute("PRAGMA table_list").fetchall()  # reads the header and the schema
    except sqlite3.Error as err:
        if "locked" in str(err):  # a sweep writing to it now: readable, only busy
            return
        raise ConfigError(f"{source} {shown}: not a readable SQLite database ({cut(str(err), 60)}); move "
                          f"{cut(path.name, 60)} away (a new store is made) or put back a good copy") from None


def check_database(uri: str, shown: str, source: str, timeout_s: float) -> None:
    """One connection to an SQL store (PostgreSQL, MySQL), bounded by `timeout_s`: MLflow retries a
    failed one for minutes. Refused, unknown user, no driver: one line, the password hidden."""
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    failed: list[BaseException] = []

    def connect() -> None:
        try:
            engine = sqlalchemy.create_engine(uri, poolclass=NullPool)
            with engine.connect():
                pass
            engine.dispose()
        except Exception as err:  # noqa: BLE001 - whatever the driver raises: one line below
            failed.append(err)

    thread = threading.Thread(target=connect, name="tracking-preflight", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise ConfigError(f"{source} {shown}: the database did not answer within {timeout_s:.0f} s; "
                          "check the host and port, and that it is up")
    if failed:
        err = getattr(failed[0], "orig", None) or failed[0]
        raise ConfigError(f"{source} {shown}: cannot connect to the tracking database ({cut(reason(err, uri), 100)}); "
                          "start it, or check the URI") from None


def reason(err: BaseException, uri: str) -> str:
    """The first line of an error, without the URI's password (as written, or as the driver saw it)."""
    text = (str(err).strip().splitlines() or [type(err).__name__])[0]
    try:
        password = urllib.parse.urlsplit(uri).password or ""
    except ValueError:
        password = ""
    for secret in {password, urllib.parse.unquote(password)} - {""}:
        text = text.replace(secret, "***")
    return text


def store_failure(uri: str, source: str, err: BaseException) -> ConfigError:
    """One line for a store that passed the preflight and then failed a call no retry mends (a damaged
    page deep in an SQLite file, a server that only looks like MLflow's, one down past the retries)."""
    return ConfigError(f"{source} {cut(hide_password(uri), 120)}: the tracking store failed ({type(err).__name__}: "
                       f"{cut(reason(err, uri), 100)}); mend or move it away and run this again (the sweep's files are kept)")
