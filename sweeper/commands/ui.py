"""`sweeper ui [NAME]`: the MLflow UI on the tracking store in use, at the sweep's runs.

A local store is served by `mlflow ui` started here (sweeper/commands/web_server.py): its address is
printed at once, the sweep's page when the server answers; Ctrl-C or SIGTERM stops it with all its
workers. A store that is not there yet is one line: a view never makes the store it shows.
A tracking server (http://...) is already serving: its page is printed and nothing starts.
"""

from __future__ import annotations

from dataclasses import dataclass

import sys

from core.errors import ConfigError, cut
from sweeper.commands.web_server import Server, check_address, exposure_warning, url_of


@dataclass(frozen=True)
class Options:
    """What the command line gives `sweeper ui`."""

    name: str | None
    tracking_uri: str | None
    host: str
    port: int


def run(options: Options) -> int:
    from sweeper.adapters import mlflow_store as store
    from sweeper.tracking_uri import hide_password, preflight, resolve_uri, uri_source

    uri = resolve_uri(options.tracking_uri)
    if uri.startswith("http"):
        preflight(uri, source=uri_source(options.tracking_uri))
        url = store.experiment_url(uri, options.name) if options.name else None
        print(f"MLflow UI: {url or hide_password(uri)}", flush=True)
        if url:
            print(f"as charts: {store.charts_url(url)}", flush=True)
        return 0
    check_address(options.host, options.port)  # a held port, a foreign host: one line before anything starts
    if uri == uri.strip() and uri.isprintable() and uri.startswith("sqlite:///") and "?" not in uri:
        check_store_exists(uri, uri_source(options.tracking_uri))  # no store: said so, not that its folder is read-only
    preflight(uri, source=uri_source(options.tracking_uri))
    check_store_exists(uri, uri_source(options.tracking_uri))
    store.check_store(uri, uri_source(options.tracking_uri))  # the server would migrate another program's database
    if warning := exposure_warning(options.host, options.port, "the MLflow UI"):
        print(warning, file=sys.stderr, flush=True)
    address = url_of(options.host, options.port)
    server = Server([sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", options.host,
                     "--port", str(options.port), "--workers", "1"], "mlflow ui")  # one user: one worker starts soonest
    return server.serve(address, f"{address}/health", f"MLflow UI on {hide_password(uri)}: {address}  (starting; Ctrl-C to stop)",
                        lambda: ready(uri, options.name, address))


def check_store_exists(uri: str, source: str) -> None:
    """A view shows a store, it never makes one or changes what lies beside it: MLflow's server would
    create the database (and its tables) where none is or in an empty file, and delete a file under
    SQLite's -journal or -wal name it did not write."""
    from sweeper.tracking_uri import hide_password, sqlite_path

    from sweeper.fs import check_beside

    path = sqlite_path(uri)
    if path is None:
        return
    if not path.exists():
        raise ConfigError(f"{source} {cut(hide_password(uri), 120)}: no tracking store there yet; a sweep makes it "
                          "(`sweeper launch FILE` here), or name an existing one with --tracking-uri")
    if path.is_file() and path.stat().st_size == 0:  # the server would write its schema into it
        raise ConfigError(f"{source} {cut(hide_password(uri), 120)}: an empty file, not an MLflow store; a sweep "
                          "makes one (`sweeper launch FILE` here), or name an existing one with --tracking-uri")
    check_beside(path, "the tracking store")  # MLflow's server opens it for writing


def ready(uri: str, name: str | None, address: str) -> str:
    """The line once the server answers: the sweep's runs (best first) and its charts, or the UI's address."""
    from sweeper.adapters import mlflow_store as store

    url = store.experiment_url(uri, name, address) if name else None
    if not url:
        missing = f" (no experiment `{name}` in this store yet)" if name else ""
        return f"ready: {address}{missing}"
    return f"ready: {url}\nas charts: {store.charts_url(url)}"
