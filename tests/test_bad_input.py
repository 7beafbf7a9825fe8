"""Bad input costs one short line: a corpus of malformed files and CLI misuse, run for real.

Every case runs the real `sweeper` entry point in a fresh directory, in a process of its own (a
fork of a warm interpreter, tests/forked_cli.py), and must end with exit code 2, exactly one line on stderr (at most MAX_LINE characters) naming what is wrong, no
traceback, nothing on stdout, and nothing written: the directory is as empty afterwards as
before. Files live in tests/malformed/ (first line: `# expect: <text the error must contain>`);
inputs that are too big, binary or generated are made here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, sweeper_cmd, sweeper_env
from tests.forked_cli import ForkedCli
from core.errors import MAX_LINE

CORPUS = Path(__file__).parent / "malformed"
SPACES = sorted((CORPUS / "spaces").glob("*.yaml"))
TRIALS = sorted((CORPUS / "trials").glob("*.yaml"))
ENV = sweeper_env()


def expected(path: Path) -> str:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# expect: "), path
    return first.removeprefix("# expect: ")


@pytest.fixture(scope="module")
def run_in():
    """`run_in(workdir, *args)`: `sweeper ARGS` in workdir, a process of its own (tests/forked_cli.py).
    Its own warm interpreter, without torch (tests/hostile.py's preloads it): no refusal here trains,
    and a child that inherited torch takes several times longer to end."""
    cli = ForkedCli(ENV)
    yield lambda workdir, *args, timeout=60: cli.run(*args, cwd=workdir, timeout=timeout)
    cli.close()


def assert_one_line_refusal(r: subprocess.CompletedProcess, must_contain: str, workdir: Path, before: set) -> None:
    err = r.stderr.strip()
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr and r.stdout == "", r.stderr[-2000:]
    assert err.count("\n") == 0, err[:2000]
    assert len(err) <= MAX_LINE + len("error: "), len(err)
    assert must_contain in err, err
    assert set(workdir.iterdir()) == before, "bad input wrote files"


@pytest.fixture
def workdir(tmp_path):
    d = tmp_path / "cwd"
    d.mkdir()
    return d


def test_the_corpus_is_big_enough():
    assert len(SPACES) + len(TRIALS) + len(CLI_MISUSE) + len(GENERATED) >= 40


@pytest.mark.parametrize("path", SPACES, ids=lambda p: p.stem)
@pytest.mark.parametrize("verb", ["validate", "launch"])
def test_malformed_space_is_one_line(run_in, path, verb, workdir):
    r = run_in(workdir, verb, path)
    assert_one_line_refusal(r, expected(path), workdir, set())


@pytest.mark.parametrize("path", TRIALS, ids=lambda p: p.stem)
def test_malformed_trial_config_is_one_line(run_in, path, workdir):
    r = run_in(workdir, "trial", path, "--out", workdir / "run")
    assert_one_line_refusal(r, expected(path), workdir, set())


# --------------------------------------------------------------------------- generated inputs

GOOD_SPACE = (ROOT / "search_spaces" / "smoke.yaml").read_text()


def _nested(depth: int) -> bytes:
    return ("a: " + "[" * depth + "]" * depth + "\n").encode()


def _laughs(levels: int = 9) -> bytes:
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return ("\n".join(lines) + "\n" + GOOD_SPACE).encode()


GENERATED = {
    # name: (file bytes, text the error must contain)
    "latin1": (("# caf\xe9\n" + GOOD_SPACE).encode("latin-1"), "not UTF-8 text"),
    "utf16": (GOOD_SPACE.encode("utf-16"), "not UTF-8 text"),
    "nul_bytes": (b"name: smoke\x00\x00\n", "invalid YAML"),
    "too_big": (GOOD_SPACE.encode() + b"#" * (300 * 1024) + b"\n", "a config file may have at most"),
    "deeply_nested_100k": (_nested(100_000), "nested deeper than"),
    "nested_40": (_nested(40), "nested deeper than"),
    "billion_laughs": (_laughs(), "expands to more than"),
    "empty_file": (b"", "name:"),
    "only_comments": (b"# nothing here\n", "name:"),
    "binary_garbage": (bytes(range(256)) * 4, "not UTF-8 text"),
    "whole_number_of_5000_digits": (GOOD_SPACE.replace("num_samples: 6", "num_samples: " + "9" * 5000).encode(),
                                    "budget.num_samples: a number of 5,000 characters"),
}


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_generated_bad_space_is_one_line(run_in, name, tmp_path, workdir):
    data, must = GENERATED[name]
    path = tmp_path / f"{name}.yaml"
    path.write_bytes(data)
    r = run_in(workdir, "validate", path)
    assert_one_line_refusal(r, must, workdir, set())


@pytest.mark.parametrize("name", ["latin1", "billion_laughs", "deeply_nested_100k"])
def test_generated_bad_trial_config_is_one_line(run_in, name, tmp_path, workdir):
    data, must = GENERATED[name]
    path = tmp_path / f"{name}.yaml"
    path.write_bytes(data)
    r = run_in(workdir, "trial", path)
    assert_one_line_refusal(r, must, workdir, set())


# --------------------------------------------------------------------------- CLI misuse

SMOKE = str(ROOT / "search_spaces" / "smoke.yaml")
CLI_MISUSE = {
    "no_verb": ([], "required"),
    "unknown_verb": (["lanch", SMOKE], "invalid choice"),
    "unknown_flag": (["validate", SMOKE, "--bogus", "3"], "unrecognized arguments"),
    "missing_file": (["validate", "no/such/file.yaml"], "no such file"),
    "directory_as_file": (["validate", "/tmp"], "not a regular file"),
    "negative_samples": (["validate", SMOKE, "--samples", "-1"], "--samples: must be >= 0, got -1"),
    "samples_not_a_number": (["validate", SMOKE, "--samples", "many"], "--samples"),
    "negative_threads": (["trial", "tiny", "--threads", "-3"], "--threads"),
    "zero_steps": (["trial", "tiny", "--steps", "0"], "--steps"),
    "unknown_preset": (["trial", "no_such_preset"], "not a preset"),
    "set_without_equals": (["trial", "tiny", "--set", "dat.switch_step"], "must be KEY=VALUE"),
    "set_unknown_key": (["trial", "tiny", "--set", "model.width=3"], "model.width: unknown key"),
    "set_through_a_value": (["trial", "tiny", "--set", "steps.x=3"], "is a value, not a section"),
    "set_billion_laughs": (["trial", "tiny", "--set", "model.d_model=" + "[" * 5000], "model.d_model"),
    "resume_without_out": (["trial", "tiny", "--resume"], "--resume"),
    "status_of_nothing": (["status", "no_such_sweep"], "no sweep here"),
    "report_of_nothing": (["report", "no_such_sweep"], "no_such_sweep"),
    # a path is never joined to the storage folder, nor read as an MLflow experiment of its last part
    "status_of_a_path_not_a_sweep": (["status", "sub/no_such_sweep"], "error: sub/no_such_sweep: no sweep here"),
    "report_of_a_folder_not_a_sweep": (["report", "/etc"], "/etc: no sweep here (no space.yaml, no optuna.db)"),
    # an option of one value given twice: argparse took the last silently
    "trial_out_given_twice": (["trial", "tiny", "--out", "a", "--out", "b"], "--out: given twice; give it once"),
    "tracking_uri_given_twice": (["launch", SMOKE, "--tracking-uri", "http://u:S3cret@h:1", "--tracking-uri=x"],
                                 "--tracking-uri: given twice"),
    "validate_samples_given_twice": (["validate", SMOKE, "--samples", "3", "--samples=5"], "--samples: given twice"),
    "status_storage_given_twice": (["status", "--storage", "a", "--storage", "b"], "--storage: given twice"),
    "status_of_the_working_folder_not_a_sweep": (["status", "."], "error: .: no sweep here"),  # said sweeps/ was not one
    "storage_unwritable": (["launch", SMOKE, "--storage", "/proc/sweeps"], "cannot write there"),
    "storage_under_a_file": (["launch", SMOKE, "--storage", "/etc/hostname/sweeps"], "--storage"),
    "storage_a_bucket": (["launch", SMOKE, "--storage", "s3://bucket/sweeps"], "a path every node sees"),
    "storage_empty": (["launch", SMOKE, "--storage", ""], "--storage: must name a folder"),
    "tracking_folder_store": (["launch", SMOKE, "--tracking-uri", "file:/proc/mlruns"], "a folder store"),
    "tracking_blank": (["launch", SMOKE, "--tracking-uri", " "], "blank or with spaces around it"),
    "tracking_spaces_around": (["launch", SMOKE, "--tracking-uri", " sqlite:///m.db"], "blank or with spaces around it"),
    "tracking_databricks_without_credentials": (["launch", SMOKE, "--tracking-uri", "databricks"], "no Databricks credentials"),
    "tracking_empty": (["launch", SMOKE, "--tracking-uri", ""], "tracking_uri"),
    "tracking_sqlite_in_memory": (["launch", SMOKE, "--tracking-uri", "sqlite:///:memory:"], "not a database file"),
    "tracking_sqlite_no_path": (["launch", SMOKE, "--tracking-uri", "sqlite:///"], "not a database file"),
    "tracking_sqlite_query": (["launch", SMOKE, "--tracking-uri", "sqlite:///m.db?mode=ro"], "query arguments"),
    "ui_tracking_empty": (["ui", "--tracking-uri", ""], "blank or with spaces around it"),
    "validate_samples_huge": (["validate", SMOKE, "--samples", "99999999999"], "at most 10,000"),
    "trial_name_too_long": (["trial", "a" * 300], "not a file or preset"),
    "status_storage_a_file": (["status", "--storage", "/etc/hostname"], "not a folder"),
    "tracking_unknown_scheme": (["launch", SMOKE, "--tracking-uri", "bogus://x"], "unknown scheme"),
    "tracking_sqlite_missing_folder": (["launch", SMOKE, "--tracking-uri", "sqlite:////no/such/dir/m.db"], "does not exist"),
    "ui_port_out_of_range": (["ui", "--port", "99999"], "--port"),
    "ui_port_with_a_space": (["ui", "--port", " 8080"], "must be a whole number"),
    "dashboard_port_in_other_digits": (["dashboard", "s", "--port", "\uff18\uff10\uff18\uff10"], "must be a whole number"),
    "samples_with_an_underscore": (["validate", SMOKE, "--samples", "1_0"], "must be a whole number"),
    "reproduce_zero_seeds": (["reproduce", "--seeds", "0"], "--seeds"),
    "reproduce_a_dat_setting_no_system_takes": (["reproduce", "--quick", "--systems", "lstm", "--set", "dat.switch_step=5"],
                                                "--set dat.switch_step: no system of --systems (lstm) takes it"),
    # a value a refusal would show as another one (spaces around it, a line break), or a file named so
    "validate_file_with_a_space_before": (["validate", " " + str(SMOKE)], "no spaces around it"),
    "trial_blank": (["trial", " "], "must not be empty or blank"),
    "trial_empty": (["trial", ""], "must not be empty or blank"),
    "dashboard_host_with_a_space_after": (["dashboard", "s", "--host", "localhost "], "--host"),
    "ui_host_with_a_carriage_return": (["ui", "--host", "127.0.0.1\r"], "\\r"),
    "ui_host_half_bracketed": (["ui", "--host", "[::1"], "brackets only around a whole IPv6 address"),
    "report_markdown_blank": (["report", "s", "--markdown", " "], "--markdown"),
    "report_markdown_empty": (["report", "s", "--markdown", ""], "--markdown"),
    "report_markdown_a_folder_name": (["report", "s", "--markdown", "new.md/"], "names a folder"),
    # a space file named as a folder: pathlib dropped the slash and the file was read
    "validate_file_with_a_trailing_slash": (["validate", f"{SMOKE}/"], "argument file: names a folder, not a file"),
    "launch_file_with_a_trailing_slash_dot": (["launch", f"{SMOKE}/."], "argument file: names a folder, not a file"),
    "trial_config_with_a_trailing_slash": (["trial", "tiny/"], "argument config: names a folder, not a file"),
    "report_markdown_an_escape": (["report", "s", "--markdown", "\x1b[31mr.md"], "\\x1b"),
    "report_experiment_empty": (["report", "s", "--experiment", ""], "--experiment"),
    "report_tracking_empty": (["report", "s", "--tracking-uri", ""], "blank or with spaces around it"),
    "launch_storage_with_a_line_break": (["launch", SMOKE, "--storage", "a\nb"], "--storage"),
    "replay_tolerance_with_a_space": (["replay", SMOKE, "--curves", "x.json", "--tolerance", " 5"], "must be a number"),
    "replay_tolerance_in_other_digits": (["replay", SMOKE, "--curves", "x.json", "--tolerance", "\u0663"], "must be a number"),
    "trial_set_a_blank_key": (["trial", "tiny", "--set", " =5"], "must be KEY=VALUE"),
    "status_storage_under_a_file": (["status", "--storage", "/etc/hostname/sub"], "/etc/hostname is a file"),
    # a server's address of the wrong form: said as such, not as a server that does not answer
    "job_address_port_out_of_range": (["job", "status", "x", "--address", "http://127.0.0.1:99999"], "port is not a number from 1 to 65535"),
    "job_address_half_bracketed": (["job", "status", "x", "--address", "http://[::1"], "not a URL (a bracket"),
    "tracking_port_zero": (["launch", SMOKE, "--tracking-uri", "http://127.0.0.1:0"], "port 0 names no server"),
    # counts with no use past a bound
    "report_top_past_a_table": (["report", "s", "--top", str(10**30)], "--top: must be at most 10,000"),
    "replay_top_past_a_table": (["replay", SMOKE, "--curves", "x.json", "--top", "10001"], "--top: must be at most 10,000"),
    "launch_progress_every_past_a_day": (["launch", SMOKE, "--progress-every", "86401"], "--progress-every: must be at most"),
}


@pytest.mark.parametrize("name", sorted(CLI_MISUSE))
def test_cli_misuse_is_one_line(run_in, name, workdir):
    args, must = CLI_MISUSE[name]
    r = run_in(workdir, *args)
    assert_one_line_refusal(r, must, workdir, set())
    assert not Path("/proc/sweeps").exists()
    assert "S3cret" not in r.stderr  # a password given on the command line is never shown


def test_resources_beyond_this_machine_are_refused_before_ray(run_in, tmp_path, workdir):
    path = tmp_path / "greedy.yaml"
    path.write_text(GOOD_SPACE.replace("resources: {cpu: 1, gpu: 0}", f"resources: {{cpu: {(os.cpu_count() or 1) + 1}, gpu: 0}}"))
    r = run_in(workdir, "launch", path)
    assert_one_line_refusal(r, "resources.cpu: a trial asks for", workdir, set())


def test_a_bad_file_answers_without_importing_torch_ray_or_mlflow(workdir):
    code = ("import sys; from sweeper.cli import main\n"
            "try:\n    main(['validate', sys.argv[1]])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('torch', 'ray', 'mlflow') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code, str(SPACES[0])], cwd=workdir, env=ENV, capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "[]", r.stdout + r.stderr


@pytest.mark.parametrize("content", ['{"name": "s", "trials": [', "[1, 2]", '{"name": "s"}', "\xff\xfe"])
def test_a_damaged_status_file_is_one_line(run_in, content, workdir):
    sweep = workdir / "sweeps" / "s"
    sweep.mkdir(parents=True)
    (sweep / "status.json").write_text(content, encoding="latin-1")
    before = set(workdir.iterdir())
    r = run_in(workdir, "status", "s")
    assert_one_line_refusal(r, "status.json", workdir, before)


def test_a_very_long_file_name_still_shows_the_rule(run_in, tmp_path, workdir):
    deep = tmp_path / ("d" * 200) / ("e" * 200)
    deep.mkdir(parents=True)
    path = deep / "space.yaml"
    path.write_text(GOOD_SPACE.replace("num_samples: 6", "num_samples: -6"))
    r = run_in(workdir, "validate", path)
    assert_one_line_refusal(r, "budget.num_samples: must be greater than or equal to 1", workdir, set())


def test_a_reader_that_leaves_early_is_not_an_error(workdir):
    # `sweeper validate FILE --samples N | head -1`: the pipe closes under the writer
    cmd = " ".join(map(str, sweeper_cmd("validate", SMOKE, "--samples", "5000"))) + " | head -1; exit ${PIPESTATUS[0]}"
    r = subprocess.run(["bash", "-c", cmd], cwd=workdir, env=ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr, r.stderr[-2000:]


HOSTILE_ENV = {
    # variable: (value, verb's arguments, text the line must contain): each refused before anything is written
    "XDG_STATE_HOME": ("/etc/hostname/state", ["launch", SMOKE], "/etc/hostname is a file, not a folder"),
    "RAY_TMPDIR": ("/etc/hostname", ["launch", SMOKE], "$RAY_TMPDIR /etc/hostname"),
    "XDG_RUNTIME_DIR": ("/etc/hostname", ["status", "--storage", "."], "cannot be the service's folder"),
}


@pytest.mark.parametrize("variable", sorted(HOSTILE_ENV))
def test_a_folder_variable_naming_a_file_is_one_line_before_anything_is_written(variable, workdir):
    value, args, must = HOSTILE_ENV[variable]
    env = {k: v for k, v in ENV.items() if k not in ("SWEEPER_SERVICE_DIR", "RAY_TMPDIR")} | {variable: value}
    r = subprocess.run(sweeper_cmd(*args), cwd=workdir, env=env, capture_output=True, text=True, timeout=120)
    assert_one_line_refusal(r, must, workdir, set())
