"""Values that read as something else or as nothing: booleans and base-60 numbers where a number
goes, paths the system refuses (a loop of links, a name too long), URLs with a user part or a
control character, and numbers in a status file no run makes."""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.hostile import ROOT, assert_refused, snapshot, sweeper

SMOKE = ROOT / "search_spaces" / "smoke.yaml"


@pytest.mark.parametrize("old, new, key", [
    ("max_concurrent: 2", "max_concurrent: on", "max_concurrent"),
    ("seed: 0", "seed: true", "seed"),
    ("num_samples: 6", "num_samples: 1:30", "num_samples"),  # YAML 1.1 would read 90
    ("num_samples: 6", "num_samples: 010", "num_samples"),  # YAML 1.1 would read 8
    ("num_samples: 6", "num_samples: 0x6", "num_samples"),
    ("num_samples: 6", "num_samples: 1_0", "num_samples"),  # YAML 1.1 would read 10, YAML 1.2 a string
    ("num_samples: 6", 'num_samples: "1_0"', "num_samples"),  # text pydantic read as the number 10
    ("num_samples: 6", "num_samples: '06'", "num_samples"),
    ("seed: 0", "seed: !!str 7", "seed"),
])
def test_a_boolean_or_a_base_60_number_where_a_number_goes_is_refused(tmp_path, old, new, key):
    text = SMOKE.read_text()
    assert old in text
    (tmp_path / "space.yaml").write_text(text.replace(old, new))
    assert_refused(sweeper("validate", "space.yaml", cwd=tmp_path), key)
    assert_refused(sweeper("trial", "tiny", "--set", "steps=yes", "--out", "run", cwd=tmp_path), "steps", "must be a number")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("value, rule", [("010", "another base"), ("0x10", "another base"), ("1_000", "`_`"),
                                         ("1:30", "base-60")])
def test_a_set_value_yaml_would_read_as_another_number_is_refused_not_read_as_text(tmp_path, value, rule):
    r = sweeper("trial", "tiny", "--set", f"seed={value}", "--out", "run", cwd=tmp_path)
    assert_refused(r, "--set seed", value, rule)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("item", ["model.d_model=\udcff", "model.mixer=lstm\udcff", "seed=[\udcff]"])
def test_a_set_value_with_a_byte_that_is_not_utf8_is_one_line(tmp_path, item):
    """The byte reaches Python as a surrogate, which the YAML reader could not encode (a traceback)."""
    r = sweeper("trial", "tiny", "--set", item, "--out", "run", cwd=tmp_path, env={"LC_ALL": "C.UTF-8"})
    assert_refused(r, "--set", item.partition("=")[0], "\\udcff")
    assert not (tmp_path / "run").exists()


def test_a_space_file_whose_size_says_nothing_is_read_no_further_than_the_limit(tmp_path):
    """/proc's files say size 0 whatever they hold (here over 5 MB): the read stops past the limit."""
    if not os.access("/proc/kallsyms", os.R_OK):
        pytest.skip("no /proc/kallsyms to read")
    r = sweeper("validate", "/proc/kallsyms", cwd=tmp_path)
    assert_refused(r, "/proc/kallsyms", "over 262,144 bytes")


def test_paths_the_system_refuses_are_one_line_naming_them(tmp_path):
    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    before = snapshot(tmp_path)
    for args, said in ((["status", "x", "--storage", "loop1"], "a loop of symbolic links"),
                       (["status", "--storage", "loop1"], "a loop of symbolic links"),
                       (["trial", "tiny", "--steps", "20", "--out", "d" * 300], "File name too long"),
                       (["report", "x", "--tracking-uri", f"sqlite:///{tmp_path / ('a' * 300)}"], "File name too long")):
        assert_refused(sweeper(*args, cwd=tmp_path, env={"SWEEPER_SERVICE_DIR": str(tmp_path / "svc")}), said,
                       root=tmp_path, before=before)


def test_a_file_that_is_not_there_says_why_not_no_such_file(tmp_path):
    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    (tmp_path / "gone.yaml").symlink_to("moved.yaml")
    (tmp_path / "plain").write_text("a file\n")
    before = snapshot(tmp_path)
    for name, said in (("loop1", "a loop of symbolic links"), ("gone.yaml", "a dangling link (to moved.yaml)"),
                       ("plain/space.yaml", "a path through a file"), ("absent.yaml", "no such file")):
        for verb in ("validate", "launch", "trial"):
            assert_refused(sweeper(verb, name, cwd=tmp_path, env={"SWEEPER_SERVICE_DIR": str(tmp_path / "svc")}),
                           f"{name}: {said}", root=tmp_path, before=before)


def test_a_launch_from_a_folder_whose_name_is_not_utf8_is_one_line(tmp_path):
    folder = os.path.join(os.fsencode(tmp_path), b"d\xff")
    os.mkdir(folder)
    with open(os.path.join(folder, b"s.yaml"), "w") as f:
        f.write((ROOT / "search_spaces" / "smoke.yaml").read_text())
    before = snapshot(tmp_path)
    for extra in ([], ["--in-process"]):
        r = sweeper("launch", "s.yaml", "--progress", "none", *extra, cwd=folder,
                    env={"SWEEPER_SERVICE_DIR": str(tmp_path / "svc")})
        assert_refused(r, "a byte that is not UTF-8", root=tmp_path, before=before)


def test_a_path_under_the_home_of_no_user_is_one_line_in_every_verb(tmp_path):
    (tmp_path / "s.yaml").write_text((ROOT / "search_spaces" / "smoke.yaml").read_text())
    before = snapshot(tmp_path)
    no_user = "~no-such-user-here/x"
    for args in (["launch", "s.yaml", "--in-process", "--storage", no_user], ["launch", no_user + ".yaml", "--in-process"],
                 ["trial", "tiny", "--steps", "20", "--out", no_user], ["status", "--storage", no_user],
                 ["report", "smoke", "--storage", no_user], ["report", "smoke", "--markdown", no_user + ".md"],
                 ["replay", "s.yaml", "--curves", "smoke", "--storage", no_user]):
        assert_refused(sweeper(*args, cwd=tmp_path, env={"SWEEPER_SERVICE_DIR": str(tmp_path / "svc")}),
                       "~no-such-user-here names no user", root=tmp_path, before=before)


def test_a_tracking_store_that_is_another_programs_database_is_refused_and_left_as_it_was(tmp_path):
    import sqlite3

    import optuna

    with sqlite3.connect(tmp_path / "app.db") as db:
        db.execute("CREATE TABLE users (id INTEGER, name TEXT)")
    optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    (tmp_path / "s.yaml").write_text((ROOT / "search_spaces" / "smoke.yaml").read_text())
    before = snapshot(tmp_path)
    env = {"SWEEPER_SERVICE_DIR": str(tmp_path / "svc")}
    for args in (["ui", "--tracking-uri", f"sqlite:///{tmp_path / 'app.db'}"],
                 ["launch", "s.yaml", "--in-process", "--storage", "st", "--tracking-uri", f"sqlite:///{tmp_path / 'optuna.db'}"]):
        assert_refused(sweeper(*args, cwd=tmp_path, env=env), "a database that is no MLflow store", root=tmp_path, before=before)


class _Health(BaseHTTPRequestHandler):
    """Answers 404 to all, recording the Authorization header each request carried."""

    seen: list = []

    def do_GET(self):  # noqa: N802 - http.server's name
        self.seen.append(self.headers.get("Authorization"))
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_a_server_named_with_credentials_is_reached_with_them_and_they_are_not_shown(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        line = assert_refused(sweeper("report", "x", "--tracking-uri", f"http://bob:S3cr3tPw@127.0.0.1:{port}", cwd=tmp_path),
                              "not an MLflow tracking server", "HTTP 404")
        assert "S3cr3tPw" not in line and _Health.seen == ["Basic Ym9iOlMzY3IzdFB3"]  # reached, as bob
    finally:
        server.shutdown()


@pytest.mark.parametrize("address", ["http://127.0.0.1:1/\x1b[2J", "http://127.0.0.1:1/a b"])
def test_a_job_server_address_with_a_control_character_or_a_space_is_one_line(tmp_path, address):
    line = assert_refused(sweeper("job", "status", "x", "--address", address, cwd=tmp_path), "no spaces or control characters")
    assert "\x1b" not in line


def test_numbers_no_run_makes_are_shown_in_a_bounded_width(tmp_path):
    trial = {"trial_id": "t0000", "params": {"seed": 0}, "status": "completed", "step": 10,
             "metrics": {"step": 10, "acc_3x": 1e308}, "path": ""}
    sweep = tmp_path / "sweeps" / "s"
    sweep.mkdir(parents=True)
    (sweep / "status.json").write_text(json.dumps({"name": "N" * 100_000, "metric": "acc_3x", "mode": "max",
                                                   "state": "finished", "updated": -1e308, "num_samples": 1,
                                                   "trials": [trial]}))
    for args in (["status", "s"], ["status"]):
        r = sweeper(*args, cwd=tmp_path, env={"SWEEPER_SERVICE_DIR": str(tmp_path / "svc")})
        assert r.returncode == 0, r.stderr[-2000:]
        assert max(map(len, r.stdout.splitlines())) <= 200, max(map(len, r.stdout.splitlines()))
        assert "1e+308" in r.stdout


def test_a_report_never_replaces_a_file_that_is_no_report(tmp_path):
    (tmp_path / "mlflow.db").write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)  # `--markdown mlflow.db`, for mlflow.md
    before = snapshot(tmp_path)
    assert_refused(sweeper("report", "x", "--markdown", "mlflow.db", cwd=tmp_path), "no report this command wrote",
                   root=tmp_path, before=before)


def test_counts_past_any_use_are_one_line(tmp_path):
    assert_refused(sweeper("reproduce", "--quick", "--seeds", str(10**21), "--out", "o", cwd=tmp_path), "--seeds", "at most")
    record = tmp_path / "many.json"  # more curves than a replay reads in reasonable time
    run = {"params": {"dat.switch_step": 0}, "reports": [{"step": 60, "acc_3x": 0.5}]}
    record.write_text(json.dumps({"runs": [run] * 5_001}))
    assert_refused(sweeper("replay", str(SMOKE), "--curves", "many.json", cwd=tmp_path), "more than 5,000 curves")


def test_a_cluster_address_whose_host_is_no_host_name_is_one_line(tmp_path):
    before = snapshot(tmp_path)
    for address in (f"ray://{'h' * 64}:10001", "ray://a..b:10001"):
        assert_refused(sweeper("launch", str(SMOKE), "--storage", "s", "--address", address, cwd=tmp_path,
                               env={"SWEEPER_SERVICE_DIR": str(tmp_path / "svc")}), "is no host name", root=tmp_path, before=before)


def test_an_empty_out_is_refused_not_taken_for_no_out(tmp_path):
    assert_refused(sweeper("trial", "tiny", "--steps", "20", "--out", "", cwd=tmp_path), "--out: must name a folder")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("value", ["0x9f3a77c1deadbeef", "0123", "12_345", "2:45"])
def test_a_file_s_unplain_number_is_named_by_its_key_never_quoted(tmp_path, value):
    """The file may be a credentials file given by mistake: its key names the value, the value
    (a secret) never reaches the terminal or a log."""
    (tmp_path / "env.yaml").write_text(f"AWS_SECRET_ACCESS_KEY: {value}\n")
    line = assert_refused(sweeper("validate", "env.yaml", cwd=tmp_path), "AWS_SECRET_ACCESS_KEY")
    assert value not in line


@pytest.mark.parametrize("args, expect", [
    (("status", "--every", "5"), "--every 5: only with --watch"),
    (("serve", "--status", "--workers", "1"), "--workers 1: only when the service starts"),
    (("serve", "--stop", "--workers", "2"), "--workers 2: only when the service starts"),
    (("trial", "tiny", "--set", "model=5", "--steps", "1"), "model: must be a mapping of keys, got 5"),
], ids=["every-without-watch", "workers-with-status", "workers-with-stop", "a-section-given-a-number"])
def test_an_option_that_would_be_ignored_or_a_section_given_a_value_is_one_line(tmp_path, args, expect):
    before = snapshot(tmp_path)
    r = sweeper(*args, cwd=tmp_path, env={"SWEEPER_SERVICE_DIR": str(tmp_path / "svc")})
    line = assert_refused(r, expect, root=tmp_path, before=before)
    assert "Config" not in line  # no class of the code's own


@pytest.mark.parametrize("args", [("report", "smoke", "--markdown=--"), ("report", "smoke", "--tracking-uri=--"),
                                  ("status", "--storage=--", "smoke"), ("ui", "--port=--"), ("trial", "tiny", "--set=--"),
                                  ("validate", str(SMOKE), "--samples=--"), ("launch", str(SMOKE), "--progress=--")])
def test_an_option_given_the_end_of_options_marker_as_its_value_is_one_line(tmp_path, args):
    # argparse gave `--OPTION=--` an empty list, past its type and choices: tracebacks, or the default taken silently
    before = snapshot(tmp_path)
    assert_refused(sweeper(*args, cwd=tmp_path), args[-1] if args[-1].endswith("=--") else args[1], "not a value",
                   root=tmp_path, before=before)


@pytest.mark.parametrize("args, says", [(("--set", "model.d_model=8", "--set", "model.d_model=16"), "--set model.d_model: given twice"),
                                        (("--set", "steps=5", "--steps", "10"), "--steps and --set steps")])
def test_a_trial_value_given_twice_is_one_line_not_the_last_taken(tmp_path, args, says):
    assert_refused(sweeper("trial", "tiny", *args, "--out", "run", cwd=tmp_path), says)
    assert not (tmp_path / "run").exists()


def test_a_set_number_in_quotes_is_text_refused_not_read_as_the_number(tmp_path):
    r = sweeper("trial", "tiny", "--set", 'steps="1_0"', "--out", "run", cwd=tmp_path)  # was trained as 10 steps
    assert_refused(r, "--set", "steps: must be a number, got the text '1_0'")
    assert not (tmp_path / "run").exists()
