"""MLflow's settings of an SQL store's engine ($MLFLOW_SQLALCHEMYSTORE_*), held to what SQLAlchemy
takes before the store is opened: MLflow reads them as it opens one and fails deep in a sweep on a
bad one. Imports no MLflow."""

from __future__ import annotations

import os
from typing import Mapping

from core.errors import brief
from trainables.config import ConfigError

# what every MLflow client of the sweeper runs with, unless the user's environment sets it (adapters/mlflow_store.client):
# no retries of MLflow's HTTP client (the sweeper's own decide how long to wait), 20 s a call
MLFLOW_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}
QUIET = {"MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}  # a "View run" line per ended run, off unless $SWEEPER_VERBOSE
SQL_SCHEMES = ("postgresql", "mysql", "mssql")  # MLflow's SQLAlchemy stores beside SQLite
STORE_SETTINGS = "MLFLOW_SQLALCHEMYSTORE_"  # MLflow's settings of its SQL store's engine (mlflow/environment_variables.py)
# the pool classes MLflow names that fit its store, with the sizes SQLAlchemy takes beside each; the others, and why not
POOLS = {"QueuePool": ("POOL_SIZE", "MAX_OVERFLOW"), "SingletonThreadPool": ("POOL_SIZE",), "NullPool": (), "StaticPool": ()}
UNFIT = {"AssertionPool": "allows one connection at a time, and MLflow's store holds several",
         **dict.fromkeys(("AsyncAdaptedQueuePool", "FallbackAsyncAdaptedQueuePool"), "is for asyncio drivers, and MLflow's are not")}


def is_sql_store(uri: str) -> bool:
    """Whether MLflow opens the store through SQLAlchemy: an SQLite file or a database server."""
    return uri.startswith("sqlite:///") or uri.split("://")[0].split("+")[0] in SQL_SCHEMES


def check_store_settings(uri: str, environ: Mapping[str, str] | None = None) -> None:
    """MLflow's settings of an SQL store's engine as MLflow reads them, held to what SQLAlchemy takes."""
    if not is_sql_store(uri):
        return
    given = {k[len(STORE_SETTINGS):]: v for k, v in (os.environ if environ is None else environ).items() if k.startswith(STORE_SETTINGS)}

    def refuse(name: str, rule: str, advice: str = "unset it or set a number") -> ConfigError:
        return ConfigError(f"${STORE_SETTINGS}{name} {brief(given[name], 40)}: {rule} (MLflow's SQL store setting); {advice}")

    for name, low in (("POOL_SIZE", 1), ("MAX_OVERFLOW", -1), ("POOL_RECYCLE", None)):
        try:
            number = int(given.get(name, 0))  # as MLflow converts it (a 0 it leaves unset)
        except ValueError:
            number = None
        if number is None or low is not None and number and number < low:
            raise refuse(name, "must be a whole number" + (f" >= {low}" if low is not None else ""))
    if given.get("ECHO", "0").lower() not in ("true", "false", "1", "0"):
        raise refuse("ECHO", "must be true, false, 1 or 0", "unset it or set one of those")
    pool, fits = given.get("POOLCLASS") or "QueuePool", ", ".join(POOLS)  # QueuePool: SQLAlchemy's for a file or server
    if pool not in POOLS:
        raise refuse("POOLCLASS", UNFIT.get(pool, "must be a pool class MLflow names"), f"unset it or name one of {fits}")
    if unfit := [n for n in POOLS["QueuePool"] if int(given.get(n, 0)) and n not in POOLS[pool]]:
        raise refuse("POOLCLASS", f"keeps no pool for ${STORE_SETTINGS}{unfit[0]} {brief(given[unfit[0]], 20)} to size, "
                     "and SQLAlchemy refuses the two together", "unset one, or name QueuePool")
