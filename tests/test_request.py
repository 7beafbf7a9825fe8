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
