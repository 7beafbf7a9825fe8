"""The tracking store's address, checked before anything starts: where it is (`--tracking-uri`,
else $MLFLOW_TRACKING_URI, else an embedded SQLite store `./mlflow.db` that needs no server),
whether it answers and can be written, and one line naming it, its password hidden, when not.
Imports no MLflow: a launch refuses a bad store before Ray or MLflow load.
"""

from __future__ import annotations

import base64
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

from sweeper.store_settings import SQL_SCHEMES, check_store_settings
from sweeper.fs import check_writable, read_limited, roll_back, sqlite_read_only_uri
from trainables.config import ConfigError
from core import json_text
from core.errors import brief, cut, warnings_as_errors
from core.http_address import address_problem
from core.uri_secrets import hide_password, reason, shown as shown_uri, split_user

DEFAULT_DB = "mlflow.db"
MAX_DATABRICKS_CONFIG = 1 << 20  # bytes of a Databricks config file read to find a profile


def resolve_uri(cli_value: str | None, cwd: str | Path | None = None, environ: Mapping[str, str] | None = None) -> str:
    """--tracking-uri, else $MLFLOW_TRACKING_URI, else sqlite:///<cwd>/mlflow.db; a relative SQLite or
    file path made absolute against `cwd` (default: this process's folder), so the store is the
    caller's wherever the sweep runs."""
    environ = os.environ if environ is None else environ
    where = Path(cwd if cwd is not None else os.getcwd())
    if cli_value == "":
        return cli_value  # said on the command line, blank: the preflight refuses it in one line
    uri = cli_value or environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        return f"sqlite:///{where / DEFAULT_DB}"
    if uri != uri.strip():
        return uri  # as written: the preflight refuses it in one line
    if uri == "sqlite:///:memory:":
        return uri  # not a file: the preflight refuses it
    if uri.startswith("sqlite:///") and uri.removeprefix("sqlite:///"):  # the one path SQLite, the checks and the lock use
        return f"sqlite:///{caller_path(where, uri.removeprefix('sqlite:///'))}"
    if uri.startswith("file:") and not uri.startswith("file:/"):
        return f"file:{os.path.normpath(where / uri.removeprefix('file:'))}"
    if "://" not in uri and not uri.startswith(("file:", "databricks")) and not os.path.isabs(uri):
        return os.path.normpath(where / os.path.expanduser(uri))
    return uri


PROCESS_OWN = ("/proc/self/", "/proc/thread-self/", "/dev/fd/", "/dev/stdin", "/dev/stdout", "/dev/stderr")


def caller_path(where: Path, path: str) -> str:
    """`path` made absolute against `where` and free of `.` and `..`, as SQLite reads a name (by its
    text: `link/..` is `where`, not the link's parent), so every check looks at the file it opens. A
    path through this process's own entries (`/proc/self/cwd`, `/dev/fd/3`) is made the file it names
    here, where it exists: the sweep may run in another process, the service."""
    joined = os.path.join(where, path)
    if joined.startswith(PROCESS_OWN) and not (real := os.path.realpath(joined)).startswith(("/proc/", "/dev/")):
        return real  # (a pipe or a socket stays as written: refused as no regular file, in either process)
    return os.path.normpath(joined)


def is_server(uri: str) -> bool:
    """Whether the store is a tracking server (http or https) rather than a database MLflow opens itself."""
    return uri.startswith(("http://", "https://"))


def sqlite_path(uri: str) -> Path | None:
    """The database file of an embedded SQLite store's URI; None for any other store."""
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def artifacts_folder(uri: str, cwd: str | Path) -> Path | None:
    """Where a store's artifacts go: `mlartifacts` beside an embedded SQLite store's file, in the
    caller's folder `cwd` for a database's (never MLflow's default, the process's own folder);
    None for a tracking server, which keeps its own."""
    if is_server(uri):
        return None
    store = sqlite_path(uri)
    return (store.parent if store is not None else Path(cwd)) / "mlartifacts"


def uri_source(cli_value: str | None, environ: Mapping[str, str] | None = None) -> str:
    """Where `resolve_uri` took the URI from, as a user would name it in an error."""
    if cli_value is not None:
        return "--tracking-uri"
    environ = os.environ if environ is None else environ
    return "$MLFLOW_TRACKING_URI" if environ.get("MLFLOW_TRACKING_URI") else "the default tracking URI"


def preflight(uri: str, timeout_s: float = 5.0, source: str = "--tracking-uri") -> None:
    """Fail fast, in one line, when the tracking store cannot be reached or written; `source`
    names where the URI came from (see `uri_source`). A password in the URI is never shown."""
    shown = shown_uri(uri)
    if uri != uri.strip() or not uri:
        raise ConfigError(f"{source} {brief(hide_password(uri), 60)}: blank or with spaces around it; name a store "
                          f"(http(s)://HOST:PORT, sqlite:///PATH), or unset it to log to ./{DEFAULT_DB}")
    if any("\udc80" <= c <= "\udcff" for c in uri):  # a byte that is not UTF-8, as Python reads it from the environment
        raise ConfigError(f"{source} {brief(hide_password(uri), 60)}: holds a byte that is not UTF-8; the stores need "
                          "UTF-8 names: name the store in UTF-8")
    if not uri.isprintable():  # as `--tracking-uri` refuses it: a store made with it would have a name no one typed
        raise ConfigError(f"{source} {brief(hide_password(uri), 60)}: holds a control character (a line break, an "
                          "escape); name the store as typed")
    check_store_settings(uri)  # before the store is touched: MLflow reads them as it opens one
    if is_server(uri):
        check_server(uri, shown, source, timeout_s)
    elif uri == "databricks" or uri.startswith(("databricks://", "databricks-uc")):
        check_databricks(uri, shown, source)
    elif uri.startswith("sqlite:///"):
        path = Path(uri.removeprefix("sqlite:///"))
        if "?" in uri:  # SQLAlchemy drops what it does not take, and the store's lock would be named after it
            raise ConfigError(f"{source} {shown}: query arguments on an SQLite store are not taken (every process of the "
                              "sweep reads and writes it; a ? in a folder's name reads as one); name the file alone, "
                              "sqlite:///PATH/mlflow.db, in a folder without ?")
        if "%" in uri:  # SQLAlchemy unquotes %XX, MLflow makes the quoted name's folder beside the real one
            raise ConfigError(f"{source} {shown}: a % in an SQLite store's path, which SQLAlchemy reads as an escape and "
                              "MLflow as a folder's name; name a store in a folder without %, sqlite:///PATH/mlflow.db")
        if uri.removeprefix("sqlite:///") in ("", "/", ":memory:") or path.is_dir():
            raise ConfigError(f"{source} {shown}: not a database file (the store must outlive the sweep and be "
                              "shared by its processes); name one, sqlite:///PATH/mlflow.db")
        if not path.parent.is_dir():
            what = "is there but is no folder" if path.parent.exists() else "does not exist"
            raise ConfigError(f"{source} {shown}: folder {cut(str(path.parent), 120)} {what}")
        check_writable(path.parent, f"{source} {shown}: folder")
        check_sqlite_file(path, shown, source)
    elif uri.startswith("file:") or "://" not in uri:
        if os.environ.get(FILE_STORE_ENV, "").lower() not in ("true", "1"):
            raise ConfigError(f"{source} {shown}: a folder store, which this MLflow refuses (its file backend is "
                              f"retired); use sqlite:///{cut(uri.removeprefix('file://').removeprefix('file:'), 80)}/mlflow.db, "
                              f"or set {FILE_STORE_ENV}=true to keep it")
        check_writable(uri.removeprefix("file://").removeprefix("file:"), source)
    elif uri.split("://")[0].split("+")[0] in SQL_SCHEMES:
        check_database(uri, shown, source, 2 * timeout_s)
    else:
        raise ConfigError(f"{source} {shown}: unknown scheme; use http(s)://HOST:PORT or sqlite:///PATH")


FILE_STORE_ENV = "MLFLOW_ALLOW_FILE_STORE"  # MLflow's own switch: a folder store is refused unless it is true
SEARCH = "/api/2.0/mlflow/experiments/search?max_results=1"  # a read every MLflow server answers with JSON
def check_server(uri: str, shown: str, source: str, timeout_s: float) -> None:
    """An MLflow server answers OK on /health; anything else there (nothing, another web server) is one line."""
    if (problem := address_problem(uri)) is not None:
        raise ConfigError(f"{source} {shown}: {problem}; an MLflow server's address is http(s)://HOST:PORT")
    url, credentials = split_user(uri)  # urllib takes no user part in a URL: it goes as the header a client sends
    try:
        with urllib.request.urlopen(urllib.request.Request(f"{url.rstrip('/')}/health", headers=credentials),
                                    timeout=timeout_s) as response:
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
    check_api(url, credentials, shown, source, timeout_s)


def check_api(url: str, credentials: dict[str, str], shown: str, source: str, timeout_s: float) -> None:
    """A server whose /health says OK must also answer MLflow's REST API (many web servers have a
    /health): one search of experiments, read-only, with the credentials MLflow's client would send
    (its environment's, else the URL's user part, split off as `credentials`)."""
    request = urllib.request.Request(f"{url.rstrip('/')}{SEARCH}", headers=_auth_headers() or credentials)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = response.read(1 << 20)
    except urllib.error.HTTPError as err:
        if err.code in (401, 403):
            raise ConfigError(f"{source} {shown}: the MLflow server refused this client (HTTP {err.code}); set "
                              "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, or MLFLOW_TRACKING_TOKEN") from None
        raise ConfigError(f"{source} {shown}: not an MLflow tracking server (HTTP {err.code} on its REST API, "
                          "though /health answered OK); check the host, port and path") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as err:
        raise ConfigError(f"{source} {shown}: MLflow tracking server unreachable on its REST API "
                          f"({cut(str(getattr(err, 'reason', err)), 80)})") from None
    try:
        parsed = json_text.loads(body)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise ConfigError(f"{source} {shown}: not an MLflow tracking server (its REST API answered "
                          f"{brief(body[:40].decode('utf-8', 'replace'))}, not MLflow's JSON); check the host, port and path")


def _auth_headers() -> dict[str, str]:
    """The Authorization MLflow's client sends from its environment variables, if any."""
    if token := os.environ.get("MLFLOW_TRACKING_TOKEN"):
        return {"Authorization": f"Bearer {token}"}
    user, password = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if user and password:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}
    return {}


def check_databricks(uri: str, shown: str, source: str) -> None:
    """A Databricks workspace needs credentials MLflow can find: DATABRICKS_HOST in the environment,
    or the URI's profile (DEFAULT for plain `databricks`) in the Databricks config file."""
    import configparser

    if os.environ.get("DATABRICKS_HOST"):
        return
    profile = uri.split("://", 1)[1].split(":", 1)[0] if "://" in uri else ""
    profile = profile or "DEFAULT"
    named = os.environ.get("DATABRICKS_CONFIG_FILE")
    config = Path(named or Path.home() / ".databrickscfg")
    text = b""  # a FIFO, a device or a huge file there is one line, never a read that blocks or fills memory
    if os.path.lexists(config):
        text = read_limited(config, "$DATABRICKS_CONFIG_FILE" if named else "Databricks config", MAX_DATABRICKS_CONFIG)
    parser = configparser.ConfigParser()
    try:
        parser.read_string(text.decode("utf-8"))
        found = profile == "DEFAULT" and parser.defaults().get("host") or parser.has_option(profile, "host")
    except (configparser.Error, OSError, UnicodeDecodeError):
        found = False
    if not found:
        raise ConfigError(f"{source} {shown}: no Databricks credentials (set DATABRICKS_HOST and DATABRICKS_TOKEN, or "
                          f"a [{cut(profile, 40)}] profile with a host in {cut(str(config), 80)})")


def check_sqlite_file(path: Path, shown: str, source: str) -> None:
    """An existing SQLite store must open as a database (MLflow would fail on it only once Ray runs;
    that it is an MLflow store is `mlflow_store.check_store`'s); read-only, so nothing is
    written to it. A missing or empty file MLflow makes a store of; anything else there (a FIFO, a
    device) is one line: reading it would block or never end."""
    if os.path.lexists(path) and not path.is_file():
        raise ConfigError(f"{source} {shown}: not a regular file (a FIFO, a device, a folder); name a database file")
    if not path.is_file() or path.stat().st_size == 0:
        return
    try:
        with contextlib.closing(sqlite3.connect(sqlite_read_only_uri(path), uri=True, timeout=5.0)) as db:
            db.execute("PRAGMA table_list").fetchall()  # reads the header and the schema
    except sqlite3.Error as err:
        if "locked" in str(err):  # a sweep writing to it now: readable, only busy
            return
        with contextlib.suppress(sqlite3.Error):
            if roll_back(path):  # a killed writer's half-done write, rolled back as MLflow's open would
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


def store_failure(uri: str, source: str, err: BaseException) -> ConfigError:
    """One line for a store that passed the preflight and then failed a call no retry mends (a damaged
    page deep in an SQLite file, a server that only looks like MLflow's, one down past the retries)."""
    if option := warnings_as_errors():  # the store is likely sound: a library's warning, raised
        return ConfigError(f"{source} {shown_uri(uri)}: a call failed with warnings raised as errors (-W "
                           f"{cut(option, 40)}; {type(err).__name__}: {cut(reason(err, uri), 80)}); the store's "
                           "libraries warn as they work: unset PYTHONWARNINGS (or -W) and run this again")
    if "out-of-date database schema" in str(err):  # a store of an older MLflow: its own command brings it up to date
        return ConfigError(f"{source}: the store's schema is an older MLflow's; back it up, then "
                           f"`mlflow db upgrade {shown_uri(uri)}`, and run this again")
    return ConfigError(f"{source} {shown_uri(uri)}: the tracking store failed ({type(err).__name__}: "
                       f"{cut(reason(err, uri), 100)}); mend or move it away and run this again (the sweep's files are kept)")
