"""Sweep names that would escape their folder, break an MLflow filter or run on: one line naming
the file, the key, the rule and a cut value; nothing written. A name that passes is safe as a
folder name, a lock-file name and a quoted filter value."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sweeper.space import MAX_NAME, check_name
from tests.hostile import assert_refused, snapshot, sweeper

SPACE = "name: {name}\nspace:\n  optim.lr: {{type: float, low: 0.001, high: 0.01}}\n"


@pytest.mark.parametrize("name, rule", [
    ('"it\'s"', "only ASCII letters and digits"),
    ('"a\\"b"', "only ASCII letters and digits"),
    ("a/b", "only ASCII letters and digits"),
    ("../up", "only ASCII letters and digits"),
    ("'.hidden'", "must start with"),
    ("'-flag'", "must start with"),
    ('"a b"', "only ASCII letters and digits"),
    ('"tab\\there"', "only ASCII letters and digits"),
    ('"nul\\0"', "only ASCII letters and digits"),
    ("sweep\u00e9", "only ASCII letters and digits"),
    ("x" * 5000, f"1 to {MAX_NAME} characters"),
    ("''", f"1 to {MAX_NAME} characters"),
    ("123", "must be a string"),
    ("[a, b]", "must be a string"),
])
def test_an_unsafe_name_is_one_line_through_validate_and_launch(tmp_path, name, rule):
    (tmp_path / "s.yaml").write_text(SPACE.format(name=name), encoding="utf-8")
    for verb in ("validate", "launch"):
        before = snapshot(tmp_path)
        line = assert_refused(sweeper(verb, "s.yaml", cwd=tmp_path), "s.yaml", "name:", rule, root=tmp_path, before=before)
        assert len(line) < 200  # the value is cut, never the whole name


def test_an_unsafe_experiment_flag_is_one_line(tmp_path):
    (tmp_path / "s.yaml").write_text(SPACE.format(name="ok"))
    before = snapshot(tmp_path)
    assert_refused(sweeper("launch", "s.yaml", "--experiment", "x' OR name LIKE '%", cwd=tmp_path), "--experiment",
                   root=tmp_path, before=before)


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=120))
def test_a_name_either_is_refused_or_is_a_safe_folder_and_filter_value(name):
    try:
        check_name(name)
    except ValueError as err:
        assert "\n" not in str(err) and len(str(err)) < 250
        return
    assert 1 <= len(name) <= MAX_NAME
    assert set(name) <= set(string.ascii_letters + string.digits + "_-.")
    assert name[0] not in ".-" and name not in (".", "..")
    assert len(f".{name}.lock".encode()) <= 255


@pytest.mark.parametrize("locale_env, name, said", [
    ({"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}, "sp\u00e5ce.yaml", "LANG=C.UTF-8"),
    ({}, "sp\udcffce.yaml", "not UTF-8"),
], ids=["utf8-name-under-a-c-locale", "latin1-byte-under-utf8"])
def test_a_path_the_locale_cannot_read_is_named_by_its_byte_not_called_a_control_character(tmp_path, locale_env, name, said):
    # under a strict C locale a UTF-8 name reaches Python as undecoded bytes; the refusal used to say
    # "no spaces around it and no control characters", which the name has neither of
    import os
    import subprocess

    from tests.hostile import ENV, SWEEPER

    path = tmp_path / name
    path.write_text(SPACE.format(name="fine"))
    before = snapshot(tmp_path)
    for args in (["validate", os.fsencode(path)], ["status", "--storage", os.fsencode(path)]):
        r = subprocess.run([str(SWEEPER), *args], cwd=tmp_path, env={**ENV, **locale_env}, capture_output=True,
                           text=True, errors="backslashreplace", timeout=120)
        assert_refused(r, said, root=tmp_path, before=before)
        assert "control characters" not in r.stderr, r.stderr


@pytest.mark.parametrize("name", ["\u00e9" * 127, "a b", "-flag"], ids=["254-bytes-of-accents", "a-space", "a-dash-first"])
def test_a_name_no_sweep_can_have_is_said_so_by_every_view_not_looked_up(tmp_path, name):
    # `report` advised reading such a name from an MLflow server, and `dashboard`'s line lost its advice to the cut
    before = snapshot(tmp_path)
    for verb in ("status", "report", "dashboard"):
        r = sweeper(verb, "--", name, cwd=tmp_path)
        assert_refused(r, "no sweep of that name or folder here (a sweep's name", root=tmp_path, before=before)
        assert "--tracking-uri" not in r.stderr, r.stderr
