"""The folders the environment names: a relative $XDG_STATE_HOME or $XDG_RUNTIME_DIR is ignored
(the XDG spec), a relative $SWEEPER_SERVICE_DIR is one line (a service found only from one working
folder), and reading a sweep's record of its local Ray never makes the signing key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import ConfigError
from sweeper import orphans, service_folder


@pytest.mark.parametrize("value", [" ", "relative/state", "\x1b[31mX"])
def test_a_relative_state_home_is_ignored(monkeypatch, tmp_path, value):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_STATE_HOME", value)
    assert orphans.key_path() == tmp_path / ".local" / "state" / "dat-sweeper" / "process-record.key"
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert orphans.key_path() == tmp_path / "state" / "dat-sweeper" / "process-record.key"


def test_a_relative_runtime_folder_is_ignored(monkeypatch, tmp_path):
    monkeypatch.delenv("SWEEPER_SERVICE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_RUNTIME_DIR", "run")
    assert service_folder.service_dir() == tmp_path / ".cache" / "dat-sweeper" / "service"
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    assert service_folder.service_dir() == tmp_path / "run" / "dat-sweeper"


@pytest.mark.parametrize("value, expect", [(" ", "a relative path; give an absolute one"),
                                           ("svc", "a relative path; give an absolute one"),
                                           ("\x1b[31mX", "holds '\\\\x1b', a control character")])
def test_a_relative_service_folder_is_one_line(monkeypatch, value, expect):
    monkeypatch.setenv("SWEEPER_SERVICE_DIR", value)
    with pytest.raises(ConfigError, match=expect) as err:
        service_folder.service_dir()
    assert "\n" not in str(err.value) and "\x1b" not in str(err.value)


def test_reading_a_record_makes_no_signing_key(monkeypatch, tmp_path):
    # a launch refused after it looked for an earlier driver's Ray leaves the user's state folder as it was
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / orphans.PROCESSES_FILE).write_text(json.dumps(
        {"driver": 1, "driver_started": 0.0, "processes": [{"pid": 1, "started": 0.0, "name": "init"}], "signature": "x"}))
    assert orphans.end_orphans(sweep, grace_s=0.1) == []
    assert not Path(tmp_path / "state").exists()
