"""What decides where an attached launch's sweep runs (sweeper/request.py), without a service."""

from __future__ import annotations

import pytest

from core.errors import ConfigError
from sweeper.request import other_checkout, other_environment, tracking_environment

ROOT = "/checkout"


def _message(environ: dict, root: str = ROOT) -> dict:
    return {"code": "0" * 16, "root": root, "tracking_env": tracking_environment(environ)}


def test_a_launch_from_the_service_s_checkout_and_mlflow_environment_runs_on_it():
    service = {"AWS_CA_BUNDLE": "/etc/ca.pem", "PATH": "/bin", "MLFLOW_TRACKING_URI": "sqlite:///a.db"}
    launch = {"AWS_CA_BUNDLE": "/etc/ca.pem", "PATH": "/usr/bin", "MLFLOW_TRACKING_URI": "sqlite:///b.db",  # carried resolved
              "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}  # the sweeper's own default, set in one process and not yet the other
    assert other_checkout(_message(launch), ROOT) is None and other_environment(_message(launch), service) is None


@pytest.mark.parametrize("launch, named", [
    ({"MLFLOW_ALLOW_FILE_STORE": "Tru3"}, "MLFLOW_ALLOW_FILE_STORE"),
    ({"MLFLOW_TRACKING_TOKEN": "s3cr3t-Tru3"}, "MLFLOW_TRACKING_TOKEN"),
    ({"MLFLOW_HTTP_REQUEST_TIMEOUT": "Tru3"}, "MLFLOW_HTTP_REQUEST_TIMEOUT"),
])
def test_a_launch_whose_mlflow_environment_differs_runs_in_its_own_process_and_names_it(launch, named):
    why = other_environment(_message(launch), {})
    assert why is not None and named in why and "runs in its own process" in why
    assert "Tru3" not in why  # names, never values


def test_a_launch_from_another_checkout_runs_in_its_own_process():
    assert "this launch is from /elsewhere" in other_checkout(_message({}, "/elsewhere"), ROOT)


@pytest.mark.parametrize("field", [[1], {"PATH": "0" * 16}, {"MLFLOW_X": "not hex"}, {f"MLFLOW_{i}": "0" * 16 for i in range(501)}])
def test_a_tracking_environment_of_the_wrong_form_is_one_line(field):
    with pytest.raises(ConfigError, match="tracking_env: must map"):
        other_checkout({"code": "0" * 16, "root": ROOT, "tracking_env": field}, ROOT)


def test_a_store_path_through_a_link_and_dot_dot_is_the_one_file_sqlalchemy_opens(tmp_path):
    """SQLAlchemy opens an SQLite URI's path made absolute by its text (`os.path.abspath`: `L/..` is the
    folder holding L); the checks, the store's lock and its artifacts followed the link, then `..`: they
    looked at another folder (a store made in the service's own folder passed its check)."""
    import os

    from sweeper.request import SweepRequest
    from sweeper.tracking_uri import sqlite_path

    (tmp_path / "far" / "x").mkdir(parents=True)
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "L").symlink_to(tmp_path / "far" / "x")
    (tmp_path / "space.yaml").write_text("name: s\n")
    uri = f"sqlite:///{tmp_path}/w/L/../m.db"
    request = SweepRequest.from_caller(str(tmp_path / "space.yaml"), tracking_uri=uri, cwd=tmp_path)
    opened = os.path.abspath(uri.removeprefix("sqlite:///"))  # what SQLAlchemy's SQLite dialect opens
    assert str(sqlite_path(request.tracking_uri)) == opened == str(tmp_path / "w" / "m.db")


def test_paths_through_the_launch_s_own_process_entries_are_the_files_they_name_for_the_service(tmp_path):
    """`/dev/fd/3` and `/proc/self/cwd` name the caller's file and folder; sent as written, the service
    read its own (fd 3 was its lock file)."""
    import os

    from sweeper.request import SweepRequest

    space = tmp_path / "space.yaml"
    space.write_text("name: s\n")
    with open(space) as f:
        request = SweepRequest.from_caller(f"/dev/fd/{f.fileno()}", storage="/proc/self/cwd/no-such-yet", cwd=tmp_path)
    assert request.file == str(space)
    assert request.storage == os.path.join(os.getcwd(), "no-such-yet")
