"""The experiments' own entry points on damaged inputs and out-of-range numbers: one line, exit 2,
nothing written. `python -m experiments.dat_reproduction report` rebuilds a results page from the
sweeps' status.json files; `python -m trainables.othello sample` prints random games.

(Only `report` and argument errors are run here: `run` launches the real sweeps.)
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from experiments import dat_reproduction as rep
from tests.hostile import assert_refused, module, snapshot
from core.errors import MAX_LINE, ConfigError

PAGE = "# t\n\n## Results\n\nPending.\n"


def _trial(**change) -> dict:
    t = {"status": "completed", "step": 6000, "params": {"dat.mode": "fixed", "curriculum.state_only_steps": 0, "seed": 2027},
         "metrics": {"acc_1x": 0.9, "acc_3x": 0.5}}
    return {**t, **change}


def _workdir(tmp_path: Path, status) -> Path:
    d = tmp_path / "sweeps" / rep.SWEEP_NAME["hybrids"]
    d.mkdir(parents=True)
    (d / "status.json").write_text(status if isinstance(status, str) else json.dumps(status))
    (tmp_path / "page.md").write_text(PAGE)
    return tmp_path


@pytest.mark.parametrize("status, expect", [
    ("{not json", "not JSON"),
    ("[" * 100_000, "nested too deep"),
    ("\xff", "not JSON"),
    ([1, 2], "must be a JSON object"),
    ({"trials": {"a": 1}}, "trials: must be a list"),
    ({"trials": [7]}, "trials[0]: must be a mapping"),
    ({"trials": [_trial(step=-1)]}, "trials[0].step"),
    ({"trials": [_trial(step=1e400)]}, "trials[0].step"),
    ({"trials": [_trial(params={"seed": -3})]}, "params.seed"),
    ({"trials": [_trial(params={"seed": 2**40})]}, "params.seed"),
    ({"trials": [_trial(params={"seed": "2027"})]}, "params.seed"),
    ({"trials": [_trial(metrics={"acc_3x": 7.0})]}, "[0, 1]"),
    ({"trials": [_trial(metrics={"acc_3x": "NaN"})]}, "finite number"),
    ({"trials": [_trial(metrics=[1])]}, "metrics: must be a mapping"),
    ({"started": 1e30, "trials": []}, "started"),
    ({"started": -5, "trials": []}, "started"),
])
def test_a_damaged_status_file_is_one_line_and_the_page_is_kept(tmp_path, status, expect):
    root = _workdir(tmp_path, status)
    before = snapshot(root)
    r = module("experiments.dat_reproduction", "report", "--sweeps", "sweeps", "--out", "page.md", cwd=root)
    assert_refused(r, "status.json", expect, root=root, before=before)


@pytest.mark.parametrize("setup, args, expect", [
    (lambda d: None, ("--sweeps", "missing"), "no such folder"),
    (lambda d: (d / "afile").write_text("x"), ("--sweeps", "afile"), "not a folder"),
    (lambda d: None, ("--out", "missing.md"), "no such file"),
    (lambda d: None, ("--out", "sweeps"), "is a folder"),
    (lambda d: (d / "page.md").write_text(rep.BEGIN + "\nno end\n"), (), "damaged"),
    (lambda d: (d / "page.md").write_bytes(b"\xff\xfe"), (), "not UTF-8"),
    (lambda d: os.truncate(d / "page.md", 2**36), (), "at most"),
    (lambda d: (d / "dat_reproduction_runs.json").mkdir(), (), "is a folder"),
    (lambda d: (d / "page.png").symlink_to(d / "elsewhere.png"), (), "not a regular file"),
    # a page that is not a results page had the section appended; a link to one was written through
    (lambda d: (d / "notes.txt").write_text("mine\n"), ("--out", "notes.txt"), "not a results page"),
    (lambda d: (d / "link.md").symlink_to(d / "page.md"), ("--out", "link.md"), "link.md: not a regular file"),
    (lambda d: os.link(d / "page.md", d / "hard.md"), ("--out", "hard.md"), "hard.md: hard-linked with another file"),
    (lambda d: (d / "nosweeps").mkdir(), ("--sweeps", "nosweeps"), "no sweep of this experiment there"),  # exit 0
])
def test_report_checks_its_folder_and_page_before_writing(tmp_path, setup, args, expect):
    root = _workdir(tmp_path, {"trials": [_trial()]})
    (root / "page.md").write_text(PAGE)
    setup(root)
    before = snapshot(root)
    argv = {"--sweeps": "sweeps", "--out": "page.md"}
    argv.update(dict(zip(args[::2], args[1::2])))
    r = module("experiments.dat_reproduction", "report", *[x for kv in argv.items() for x in kv], cwd=root)
    assert_refused(r, expect, root=root, before=before)


@pytest.mark.parametrize("argv", [("report", "--bogus"), (), ("run", "--groups", "no_such_group")])
def test_argument_errors_are_one_line(tmp_path, argv):
    before = snapshot(tmp_path)
    assert_refused(module("experiments.dat_reproduction", *argv, cwd=tmp_path), "dat_reproduction", root=tmp_path, before=before)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                        st.sampled_from(["trials", "status", "step", "params", "seed", "metrics", "acc_3x", "started"]),
                        inner, max_size=4), max_leaves=12))
def test_any_status_document_is_read_whole_or_refused_in_one_line(tmp_path, doc):
    path = tmp_path / "status.json"
    path.write_text(json.dumps(doc))
    try:
        status = rep.read_status(path)
    except ConfigError as err:
        assert "\n" not in str(err) and len(str(err)) <= MAX_LINE
        return
    for t in status.get("trials", []):  # what the report reads of a counted trial is there and of its kind
        if t.get("status") == "completed":
            assert isinstance(t["params"]["seed"], int) and all(isinstance(v, (int, float)) for v in t["metrics"].values())


# --------------------------------------------------------------------------- othello sample


@pytest.mark.parametrize("argv, expect", [
    (("sample", "--n", "-1"), "--n"), (("sample", "--n", "10000001"), "--n"), (("sample", "--n", "1e9"), "whole number"),
    (("sample", "--n", "9" * 5000), "--n"), (("sample", "--seed", "-1"), "--seed"),
    (("sample", "--seed", str(2**64)), "--seed"), (("sample", "--bogus"), "unrecognized"), ((), "required"),
])
def test_othello_sample_out_of_range_is_one_line(tmp_path, argv, expect):
    before = snapshot(tmp_path)
    r = module("trainables.othello", *argv, cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == "" and "Traceback" not in r.stderr
    line = r.stderr.strip()
    assert "\n" not in line and len(line) <= MAX_LINE + 10 and expect in line, line
    assert snapshot(tmp_path) == before


def test_the_tools_beside_the_sweeper_answer_bad_options_and_inputs_in_one_line(tmp_path):
    import gzip
    import subprocess
    import sys

    from tests.conftest import ROOT

    good = gzip.compress(json.dumps({"grid": {"metric": "acc_3x"}, "runs": []}).encode())
    (tmp_path / "cut.json.gz").write_bytes(good[: len(good) // 2])
    os.mkfifo(tmp_path / "fifo")
    before = snapshot(tmp_path)
    replay = [sys.executable, str(ROOT / "bench" / "search_replay.py"), "--samples", "4", "--jobs", "1", "--out", "o"]
    for argv, said in (([*replay, "--seeds", "0"], "--seeds: must be >= 1"),
                       ([*replay, "--data", "cut.json.gz"], "not a record of a learning-curve grid"),
                       ([*replay, "--data", "fifo"], "not a regular file"),
                       ([sys.executable, "-m", "experiments.othello_report", "--paired-only", "fifo"], "not a regular file"),
                       ([sys.executable, "-m", "experiments.othello_report", "--paired-only", "cut.json.gz"], "not Othello runs"),
                       ([sys.executable, "-m", "experiments.ssm_runs", "bogus", "x"], "invalid choice: 'bogus'")):
        r = subprocess.run(argv, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                           text=True, timeout=120)
        assert_refused(r, said, root=tmp_path, before=before)


TOOL_MISUSE = [
    (("bench/interrupt_latency.py", "--rounds", "0"), "--rounds: must be >= 1"),
    (("bench/cli_startup.py", "--baseline", "no-such-revision"), "names no commit"),
    (("bench/othello_speed.py", "--threads", "0"), "--threads"),
    (("bench/trainer_overhead.py", "--steps", "-5"), "--steps"),
    (("bench/gpu_share.py", "--device", "cpu", "--procs", "0"), "--procs"),
    (("bench/gpu_sweep.py", "--gpus", "nan"), "--gpus: must be a finite number > 0"),
    (("bench/search_replay.py", "--data", "deep.json", "--out", "o"), "nested too deep"),
    (("bench/search_replay.py", "--seeds", "1", "--out", ""), "--out: must not be empty"),  # failed after the replays
    (("bench/search_replay.py", "--seeds", "1", "--out", "."), "not a folder"),  # wrote ..md beside it
    (("bench/search_replay.py", "--seeds", "1", "--out", "taken"), "taken.json"),  # failed after the replays
    (("bench/search_replay.py", "--samples", "1000000000"), "--samples: must be at most"),  # a pydantic traceback
    (("bench/search_replay.py", "--seeds", "99999999999999999999"), "--seeds: must be at most"),  # replayed on and on
    (("bench/interrupt_latency.py", "--rounds", "-3"), "--rounds: must be >= 1"),  # a whole number: the rule it breaks
    (("-m", "experiments.switch_grid", "run", "--concurrent", "0"), "--concurrent"),
    (("-m", "experiments.adaptive_grid", "bogus"), "invalid choice: 'bogus'"),
    (("-m", "experiments.othello_report", "--paired-only", "deep.json"), "nested too deep"),
    (("-m", "experiments.othello_report", "--paired-only", "unnamed.json"), "not named GROUP_sSEED"),  # AttributeError
    (("-m", "experiments.othello_report", "--paired-only", "acc7.json"), "acc_3x 7.0 is not an accuracy"),
    (("-m", "experiments.othello_report", "noacc3.json", "--out", "o"), "acc_3x None is not"),  # o.json written, then KeyError
    (("-m", "experiments.othello_run", "nameless.json", "out"), "a name and a set of overrides"),
    (("-m", "experiments.othello_run", "setlist.json", "out"), "a name and a set of overrides"),  # a worker's traceback
    (("-m", "experiments.othello_run", "badkey.json", "out"), "a: model.nope: unknown key"),  # out/ made, then a traceback
    (("-m", "experiments.othello_run", "fifo", "out"), "not a regular file"),  # the read blocked for ever
    (("-m", "experiments.othello_run", "longname.json", "out"), "at most 200 bytes"),  # out/ made, then "File name too long"
    # outputs: nothing written over a file that is not the tool's own, nor through a link
    (("-m", "experiments.othello_report", "emptydir"), "no Othello runs there"),  # exit 0, `{}` over the committed record
    (("-m", "experiments.othello_report", "good.json", "--out", "precious"), "precious.json: not an Othello record"),
    (("-m", "experiments.othello_report", "good.json", "--out", "link"), "link.json: not a regular file"),
    (("-m", "experiments.othello_report", "good.json", "--out", "fifo"), "names a stem"),
    (("-m", "experiments.othello_run", "runs.json", "linked"), "a.jsonl: not a regular file"),  # the reports went through it
    (("-m", "experiments.othello_run", "runs.json", "hardlinked"), "a.jsonl: hard-linked with another file"),
    (("-m", "experiments.othello_run", "escape.json", "out"), "without `/` or a control character"),
    (("-m", "experiments.othello_run", "runs.json", "precious.json"), "not a folder"),  # "File exists"
    (("bench/ssm_speed.py", "--layers", "1000000000", "--repeats", "1"), "--layers: must be at most 64"),  # a pydantic traceback
    (("bench/trainer_speed.py", "--steps", "1000", "--rounds", "1"), "nothing to measure"),  # exit 0, nothing measured
    (("bench/trainer_speed.py", "--memory", "--steps", "1500"), "--steps: must be a multiple of 1000"),
    (("bench/sweep_scale.py", "--schedulers", "fifo", "fifo"), "'fifo' given twice"),  # ran (and counted) fifo twice
    (("bench/sweep_scale.py", "--json", "/proc/rows.json"), "--json /proc: cannot write there"),  # refused after the sweeps
    (("bench/gpu_sweep.py", "--out", "/proc/out.json"), "--out /proc: cannot write there"),  # refused after the trials
    (("docs/terminal.py", "--cols", "-5"), "--cols: must be >= 1"),  # exit 1, nothing said
    (("docs/screenshots.py", "--samples", "-1"), "--samples: must be >= 1"),  # MLflow and a launch started, then a traceback
    (("-m", "experiments.ssm_runs", "table", "nope"), "invalid choice: 'nope'"),
    (("-m", "experiments.device_runs", "train", "a", "b", "--deadline", "0", "--pack", "p"), "--deadline"),
    (("-m", "trainables.othello", "sample", "--n", " 5"), "whole number"),
    (("-m", "sweeper.server_guard", "²"), "usage"),
    (("bench/sweep_scale.py", "--sizes", "10", "10"), "--sizes: 10 given twice"),  # ran (and counted) size 10 twice
]


@pytest.mark.parametrize("argv, said", TOOL_MISUSE, ids=[" ".join(a[:2]) + f"-{i}" for i, (a, _) in enumerate(TOOL_MISUSE)])
def test_a_tool_s_bad_option_or_input_is_one_line_before_any_work(tmp_path, argv, said):
    import subprocess
    import sys

    from tests.conftest import ROOT

    (tmp_path / "deep.json").write_text("[" * 100_000)
    (tmp_path / "nameless.json").write_text('[{"seed": 1}]')
    (tmp_path / "setlist.json").write_text('[{"name": "a", "set": [1, 2]}]')
    (tmp_path / "badkey.json").write_text('[{"name": "a", "set": {"model.nope": 1}}]')
    (tmp_path / "longname.json").write_text(json.dumps([{"name": "a" * 300, "set": {"seed": 1}}]))
    final = {f"{n}_{k}x": 0.5 for n in ("acc", "tv", "illegal_mass") for k in (1, 2, 3)}
    (tmp_path / "unnamed.json").write_text(json.dumps({"foo": {"final": final, "curve": []}}))
    (tmp_path / "acc7.json").write_text(json.dumps({"g_s1": {"final": {**final, "acc_3x": 7.0}, "curve": []}}))
    (tmp_path / "noacc3.json").write_text(json.dumps({"g_s1": {"final": {k: v for k, v in final.items() if k != "acc_3x"},
                                                              "curve": []}}))
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "taken.json").mkdir()
    (tmp_path / "emptydir").mkdir()
    (tmp_path / "good.json").write_text(json.dumps({"g_s1": {"final": final, "curve": []}}))
    (tmp_path / "precious.json").write_text('{"mine": true}\n')
    (tmp_path / "link.json").symlink_to(tmp_path / "precious.json")
    (tmp_path / "runs.json").write_text(json.dumps([{"name": "a", "set": {"steps": 2, "seed": 1}}]))
    (tmp_path / "escape.json").write_text(json.dumps([{"name": "a\x1b[31m", "set": {"steps": 2, "seed": 1}}]))
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "a.jsonl").symlink_to(tmp_path / "precious.json")
    (tmp_path / "hardlinked").mkdir()
    (tmp_path / "mine.txt").write_text("mine\n")
    os.link(tmp_path / "mine.txt", tmp_path / "hardlinked" / "a.jsonl")
    before = snapshot(tmp_path)
    args = [str(ROOT / a) if a.startswith(("bench/", "docs/")) else a for a in argv]
    r = subprocess.run([sys.executable, *args], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
                       capture_output=True, text=True, timeout=120)
    assert r.stdout == ""
    assert_refused(r, said, root=tmp_path, before=before)


@pytest.mark.parametrize("tool", [("-m", "trainables.othello", "sample", "--n", "3"),
                                  ("bench/othello_speed.py", "--games", "1", "--repeats", "1")])
def test_a_tool_started_with_stdout_closed_says_so_in_one_line(tmp_path, tool):
    import shlex
    import subprocess
    import sys

    from tests.conftest import ROOT

    args = " ".join(shlex.quote(str(ROOT / a) if a.startswith("bench/") else a) for a in tool)
    r = subprocess.run(["sh", "-c", f"exec {shlex.quote(sys.executable)} {args} >&-"], cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=None, stderr=subprocess.PIPE, text=True,
                       timeout=120)
    r.stdout = ""
    assert_refused(r, "stdout is closed")


def test_an_othello_report_input_past_its_size_is_refused_not_read_whole(tmp_path, monkeypatch):
    import gzip

    from experiments import othello_report

    monkeypatch.setattr(othello_report, "MAX_TEXT", 1000)
    (tmp_path / "bomb.json.gz").write_bytes(gzip.compress(b"[" + b" " * 10_000 + b"]"))  # 20 bytes that unpack to 10 KB
    with pytest.raises(ConfigError, match="more than"):
        othello_report.read([tmp_path / "bomb.json.gz"])
    (tmp_path / "small.json").write_text("[" + " " * 900 + "]")
    with pytest.raises(ConfigError, match="not Othello runs"):  # read, then refused for what it holds
        othello_report.read([tmp_path / "small.json"])
    runs = tmp_path / "runs"
    runs.mkdir()
    for i in range(4):  # each under the limit, together past it
        (runs / f"r{i}.jsonl").write_text('{"step": 1}\n' * 30)
    with pytest.raises(ConfigError, match="together"):
        othello_report.read([runs])



def _grid_damage(data: dict, how: str) -> None:
    runs = data["runs"]
    if how == "metric":
        data["grid"]["metric"] = "acc_9x"
    elif how == "mode":
        data["grid"]["mode"] = "foo"
    elif how == "max_steps":
        data["grid"]["max_steps"] = 1e300
    elif how == "no runs":
        data["runs"] = []
    elif how == "stray point":
        runs[0]["params"]["optim.lr"] = 0.5
    elif how == "reports text":
        runs[0]["reports"] = "x"
    elif how == "flat steps":
        for report in runs[0]["reports"]:
            report["step"] = 250
    elif how == "nan":
        for run in runs:
            for report in run["reports"]:
                report["acc_3x"] = float("nan")


GRID_DAMAGE = [("metric", "must be metric acc_3x"), ("mode", "must be metric acc_3x"), ("max_steps", "must be metric acc_3x"),
               ("no runs", "holds 0 of the switch grid's 52 points; a replay needs every point"),
               ("stray point", "no point of the switch grid"), ("reports text", "whole, rising steps"),
               ("flat steps", "whole, rising steps"), ("nan", "`acc_3x` must be a finite number")]


@pytest.mark.parametrize("how, said", GRID_DAMAGE, ids=[h for h, _ in GRID_DAMAGE])
def test_a_damaged_grid_given_to_search_replay_is_one_line_before_any_replay_or_file(tmp_path, how, said):
    """A traceback (KeyError, TypeError, IndexError) after o.md and o.json were written, or results
    published from NaN, or `run experiments.switch_grid` as the advice for the user's own file."""
    import gzip
    import subprocess
    import sys

    from tests.conftest import ROOT

    with gzip.open(ROOT / "docs" / "results" / "switch_grid.json.gz", "rt") as f:
        data = json.load(f)
    _grid_damage(data, how)
    (tmp_path / "g.json.gz").write_bytes(gzip.compress(json.dumps(data).encode()))
    before = snapshot(tmp_path)
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "search_replay.py"), "--data", "g.json.gz", "--seeds", "1",
                        "--samples", "4", "--jobs", "1", "--out", "o"], cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300)
    assert_refused(r, "--data g.json.gz", said, root=tmp_path, before=before)


def test_search_replay_writes_each_result_at_out_with_its_suffix_never_beside_it(tmp_path):
    """`--out res.v2` writes res.v2.md, .json and .png; a res.md beside them (once replaced: the suffix
    was swapped for .md) is left as it was."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    (tmp_path / "res.md").write_text("someone's notes\n")
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "search_replay.py"), "--lr", "0.003", "--seeds", "1",
                        "--samples", "2", "--jobs", "1", "--out", str(tmp_path / "res.v2")], cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "res.md").read_text() == "someone's notes\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res.md", "res.v2.json", "res.v2.md", "res.v2.png"]
    assert "(res.v2.png)" in (tmp_path / "res.v2.md").read_text()


@pytest.mark.parametrize("name", ["dat_plain_switch", "dat_paper_depth", "dat_ssm_depth", "device_runs"])
def test_an_experiment_s_help_says_what_it_is_in_whole_sentences_and_every_verb_has_a_line(tmp_path, name):
    import re

    r = module(f"experiments.{name}", "--help", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    description = " ".join(r.stdout.split("\n\n")[1].split())
    assert description.endswith("."), description  # the docstring's first paragraph, not its first line
    if (verbs := re.search(r"\{([a-z,-]+)\}", r.stdout)) is not None:
        listed = r.stdout.split("positional arguments:")[1]
        for verb in verbs.group(1).split(","):
            assert re.search(rf"^\s+{verb}\s+\S", listed, re.M), (verb, listed)  # a help line beside it


@pytest.mark.parametrize("text, said", [
    ("<<<<<<< HEAD\n{}\n=======\n", "not JSON"),  # a merge left its markers
    ("[" * 100_000, "not JSON"),
    ('{"a 1": [1]}', "not a results file of this tool"),
    ('{"a 1": {"metrics": {}}}', "each an object with metrics, wall_s"),
    ('{"a 1": {"metrics": {}, "wall_s": NaN}}', "each an object with metrics, wall_s"),  # JSON's NaN is no result
    ("fifo", "not a regular file"),
])
def test_a_damaged_committed_results_file_is_one_line_naming_how_to_restore_it(tmp_path, monkeypatch, text, said):
    from experiments import ssm_runs

    monkeypatch.setattr(ssm_runs, "ROOT", tmp_path)
    path = ssm_runs.results_path("explore")
    path.parent.mkdir(parents=True)
    os.mkfifo(path) if text == "fifo" else path.write_text(text)
    before = snapshot(tmp_path)
    with pytest.raises(ConfigError) as refused:
        ssm_runs.table("explore")
    line = str(refused.value)
    assert said in line and "\n" not in line and len(line) <= MAX_LINE, line
    assert "git checkout -- " in line or said == "not a regular file"
    assert snapshot(tmp_path) == before


def test_the_transformer_selection_refuses_a_recall_that_is_no_accuracy_before_it_chooses(tmp_path, monkeypatch):
    from experiments import transformer_selection as ts

    monkeypatch.setattr(ts, "OUT", tmp_path / "baseline.json")
    row = {"positional": "rope", "n_layers": 2, "lr": 3e-3, "recall_acc_1x": 7.0}  # would be chosen at once
    ts.OUT.write_text(json.dumps([{**row, "seed": s} for s in ts.SEEDS]))
    monkeypatch.setattr("sys.argv", ["transformer_selection"])
    before = snapshot(tmp_path)
    with pytest.raises(ConfigError, match="recall_acc_1x 7.0 of seed 100 is not an accuracy in \\[0, 1\\]"):
        ts.main()
    assert snapshot(tmp_path) == before
