"""What a caller asks of one sweep: a typed, frozen request, every path resolved against its folder.

`sweeper launch` builds one from its flags and its own process (`from_caller`); the resident
service builds one from an attached launch's message (`from_message`), whose fields the launch
filled the same way in its own folder and environment. A sweep (sweeper/sweep.py) reads nothing
else of its caller: not the process's working folder, umask or environment.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from sweeper.sweep_dir import DEFAULT_STORAGE, is_uri
from sweeper.tracking_uri import caller_path, resolve_uri, uri_source
from core.errors import ConfigError, brief, control_character, cut, expand_user

MAX_FIELD = 4096  # characters of a path or URI in a request
TrackingSource = Literal["--tracking-uri", "$MLFLOW_TRACKING_URI", "the default tracking URI"]  # tracking_uri.uri_source


def path_text(value: str) -> str:
    """A path or URI a request may carry: not empty, not huge, no NUL, UTF-8 text (ValueError
    otherwise). A folder named with a byte that is not UTF-8 reaches Python as a surrogate
    (`os.fsdecode`); MLflow's and SQLite's URIs and every file the sweep writes its paths into
    need UTF-8, so such a path is refused here, named, not failed on later."""
    if not value or len(value) > MAX_FIELD or "\0" in value:
        raise ValueError(f"must be a non-empty text of at most {MAX_FIELD} characters with no NUL")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        char = err.object[err.start]
        what = ("a byte that is not UTF-8 in a file name; the sweep's stores need UTF-8 names: rename it"
                if "\udc80" <= char <= "\udcff" else "a character no file name can hold")
        raise ValueError(f"holds {char!a}, {what}") from None
    return value


def printable_path(value: str) -> str:
    """A path with no control character, as the command line takes it: a line break or a terminal
    escape would make a refusal or a log line show another value (ValueError otherwise)."""
    if (char := control_character(path_text(value))) is not None:
        raise ValueError(f"holds {char!a}, a control character; the command line takes no such name either")
    return value


def absolute_path(value: str) -> str:
    """A path a request may carry, absolute and as the launch sends it (`caller_path`): a relative one,
    or one through `/proc/self`, would be the service's, not the caller's; `..` not the one file checked."""
    if not os.path.isabs(path_text(value)):
        raise ValueError("must be an absolute path")
    if caller_path(Path("/"), value) != value:
        raise ValueError("must be an absolute path without . or .., not through /proc/self or /dev/fd")
    return value


class SweepRequest(BaseModel):
    """One sweep as its caller asked for it; paths absolute, the tracking URI resolved."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    file: str  # the search-space file, absolute
    storage: str  # the folder of the sweep's folder (absolute), or a URI (refused by the checks)
    tracking_uri: str  # MLflow's store, a relative SQLite or file path made absolute
    tracking_source: TrackingSource = "--tracking-uri"  # where the URI came from, as an error line names it
    experiment: str | None = None  # MLflow experiment (default: the sweep's name)
    restart: bool = False
    address: str | None = None  # an existing Ray cluster; None: local
    shared_storage: bool = False  # the caller confirmed every node sees `storage`
    cwd: str  # the caller's folder
    umask: int  # the caller's umask: what the sweep creates is no more open than it allows

    @field_validator("file", "storage", "tracking_uri", "cwd")
    @classmethod
    def no_empty_or_huge_text(cls, value: str) -> str:
        return path_text(value)

    @field_validator("file", "storage", "cwd")  # the tracking URI's own check names where it came from
    @classmethod
    def no_control_character(cls, value: str) -> str:
        return printable_path(value)

    @field_validator("file", "cwd")
    @classmethod
    def an_absolute_path(cls, value: str) -> str:
        return absolute_path(value)

    @field_validator("cwd")
    @classmethod
    def an_existing_folder(cls, value: str) -> str:
        if not os.path.isdir(value):  # relative paths, the default store and its artifacts are made against it
            raise ValueError("must be an existing folder")
        return value

    @field_validator("storage")
    @classmethod
    def storage_absolute_unless_a_uri(cls, value: str) -> str:
        return value if is_uri(value) else absolute_path(value)

    @field_validator("tracking_uri")
    @classmethod
    def uri_resolved(cls, value: str) -> str:
        if resolve_uri(value, "/", {}) != value:  # a relative path would be the service's, not the caller's
            raise ValueError("must be resolved (an absolute path for a SQLite or file store)")
        return value

    @field_validator("experiment")
    @classmethod
    def experiment_named_as_a_sweep(cls, value: str | None) -> str | None:
        from sweeper.space import check_name

        return None if value is None else check_name(value)

    @field_validator("address")
    @classmethod
    def an_address_text(cls, value: str | None) -> str | None:
        return None if value is None else path_text(value)

    @field_validator("umask")
    @classmethod
    def a_umask(cls, value: int) -> int:
        if not 0 <= value <= 0o777:
            raise ValueError("must be a umask (0 to 0o777)")
        return value

    @classmethod
    def from_caller(cls, file: str, storage: str | None = None, tracking_uri: str | None = None,
                    experiment: str | None = None, restart: bool = False, address: str | None = None,
                    shared_storage: bool = False, cwd: str | Path | None = None, umask: int | None = None,
                    environ: Mapping[str, str] | None = None) -> "SweepRequest":
        """A request as `sweeper launch` makes it: paths against `cwd` (default: this process's),
        the URI from the flag, else `environ`'s $MLFLOW_TRACKING_URI, else `<cwd>/mlflow.db`."""
        where = Path(cwd if cwd is not None else os.getcwd())
        environ = os.environ if environ is None else environ
        storage = storage or DEFAULT_STORAGE
        return cls.checked({
            "file": str(_against(where, file)),
            "storage": storage if is_uri(storage) else str(_against(where, storage)),
            "tracking_uri": resolve_uri(tracking_uri, where, environ),
            "tracking_source": uri_source(tracking_uri, environ),
            "experiment": experiment, "restart": restart, "address": address, "shared_storage": shared_storage,
            "cwd": str(where), "umask": current_umask() if umask is None else umask,
        }, "sweeper launch")

    @classmethod
    def from_message(cls, message: Mapping[str, Any]) -> "SweepRequest":
        """The request an attached launch sent (its `verb`, `code` and `root` are the service's)."""
        fields = {k: v for k, v in message.items() if k not in ("verb", "code", "root", "tracking_env", "progress_every")}
        return cls.checked(fields, "launch request")

    @classmethod
    def checked(cls, fields: Mapping[str, Any], source: str) -> "SweepRequest":
        """The request, or one ConfigError line naming the first field that breaks a rule."""
        try:
            return cls(**fields)
        except ValidationError as err:
            from trainables.config import format_validation_error

            raise ConfigError(format_validation_error(err, source, value_shown=True)) from None
        except TypeError as err:  # a message that is not a mapping of names
            raise ConfigError(f"{source}: {err}") from None

    def message(self) -> dict[str, Any]:
        """The request as the attached launch sends it to the service."""
        return self.model_dump()


def _against(cwd: Path, path: str) -> Path:
    """`path` (a user's `~` expanded) made absolute against `cwd`, not against this process's folder
    (`tracking_uri.caller_path`: `/dev/fd/3` and `/proc/self/cwd` are the caller's, not the service's)."""
    return Path(caller_path(cwd, str(expand_user(path))))


def current_umask() -> int:
    """This process's umask, read without setting it (Linux: /proc); elsewhere set and restored."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


TRACKING_ENV = re.compile(r"(MLFLOW|DATABRICKS|AWS|AZURE|GOOGLE)_[A-Z0-9_]*")  # what MLflow and its stores read
MAX_TRACKING_ENV = 500


def tracking_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of `environ` that MLflow and its artifact stores read from their process
    ($MLFLOW_ALLOW_FILE_STORE, credentials; $MLFLOW_TRACKING_URI aside: a request carries it
    resolved), each as a hash of its value. A sweep on the service runs with the service's."""
    import hashlib

    from sweeper.store_settings import MLFLOW_DEFAULTS, QUIET

    given = {**MLFLOW_DEFAULTS, **environ}  # as every MLflow client of the sweeper runs, in whichever process
    return {k: hashlib.sha256(v.encode(errors="surrogateescape")).hexdigest()[:16] for k, v in sorted(given.items())
            if TRACKING_ENV.fullmatch(k) and k != "MLFLOW_TRACKING_URI" and k not in QUIET}


def launch_origin(message: Mapping[str, Any]) -> tuple[str, str, dict[str, str]]:
    """An attached launch's `code` (the hash of its checkout's modules), `root` (that checkout) and
    `tracking_env` (`tracking_environment` of its own), checked: a service acts on them (runs the
    sweep, refers it back, or restarts on new code)."""
    code, root, env = message.get("code"), message.get("root"), message.get("tracking_env", {})
    if not isinstance(code, str) or not re.fullmatch(r"[0-9a-f]{16}", code):
        raise ConfigError(f"launch request: code: must be the 16 hex digits of a checkout's code hash, got {brief(code, 40)}")
    if not (isinstance(env, dict) and len(env) <= MAX_TRACKING_ENV and all(
            isinstance(k, str) and TRACKING_ENV.fullmatch(k) and isinstance(v, str) and re.fullmatch(r"[0-9a-f]{16}", v)
            for k, v in env.items())):
        raise ConfigError(f"launch request: tracking_env: must map at most {MAX_TRACKING_ENV} variable names MLflow reads "
                          f"to 16 hex digits, got {brief(env, 60)}")
    try:
        return code, absolute_path(root if isinstance(root, str) else ""), env
    except ValueError as err:
        raise ConfigError(f"launch request: root: {err} (the launch's checkout), got {brief(root, 60)}") from None


def other_checkout(message: Mapping[str, Any], root: str) -> str | None:
    """Why an attached launch's sweep runs in the launch's own process rather than on the service of
    checkout `root` (None: the same checkout); the launch's origin checked (`launch_origin`)."""
    _, theirs, _ = launch_origin(message)
    if theirs != root:
        return f"the sweep service runs the checkout at {cut(root, 120)}, this launch is from {cut(theirs, 120)}: it runs in its own process"
    return None


def other_environment(message: Mapping[str, Any], environ: Mapping[str, str]) -> str | None:
    """Why an attached launch's sweep runs in the launch's own process rather than on the service of
    environment `environ` (None: it runs on the service): what MLflow reads from the environment,
    set otherwise (one process has one environment), the variables named, never their values."""
    _, _, env = launch_origin(message)
    mine = tracking_environment(environ)
    if differ := sorted(k for k in set(env) | set(mine) if env.get(k) != mine.get(k)):
        return (f"this launch's environment sets {cut(', '.join(differ), 120)} otherwise than the sweep service's (MLflow "
                "reads them from its process): it runs in its own process; a service started in this environment shares them")
    return None


def request_verb(message: Mapping[str, Any]) -> Any:
    """A request's verb; `status` and `stop` are of the whole service and take no other field (a
    stop naming one sweep would stop every sweep on it)."""
    verb = message.get("verb")
    if verb in ("status", "stop") and (extra := sorted(map(str, set(message) - {"verb"}))):
        raise ConfigError(f"{verb} request: takes no field but `verb`, got {brief(extra, 60)} "
                          f"(`{verb}` is of the whole service, never of one sweep)")
    return verb
