"""`sweeper replay FILE --curves ...`: a space's own search and early stopping on curves already
recorded (a record file, or the trials of a sweep: a real Optuna study and trial folders), beside
the same space without early stopping and random + FIFO; a point no curve holds trains on the
nearest one; bad curves are one line."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sweeper.curves import load_curves
from sweeper.nearest import Nearest, distance
from sweeper.replay import Grid, replay
from sweeper.space import SearchSpace
from tests.conftest import sweeper_cmd, sweeper_env

STEPS = 400
SWITCHES = (0, 200, 400)
LRS = (1e-3, 4e-3)


def curve(switch: int, lr: float, seed: int, until: int = STEPS) -> list[dict]:
    """Flat while attention is off, then rising to a final value that a switch at 200 and the
    larger learning rate maximise; the seed shifts it a little."""
    final = {0: 0.5, 200: 0.8, 400: 0.3}[switch] + (0.05 if lr == 4e-3 else 0.0) + 0.01 * seed
    out = []
    for step in range(50, until + 1, 50):
        on = switch < STEPS and step > switch
        value = 0.2 + (final - 0.2) * (step - switch) / (STEPS - switch) if on else 0.2
        out.append({"step": step, "acc_3x": value})
    return out


SPACE = f"""
name: tiny
metric: acc_3x
mode: max
fixed:
  dat: {{mode: fixed}}
space:
  dat.switch_step: {{type: int, low: 0, high: 400, step: 200}}
  optim.lr: {{type: float, low: 1.0e-3, high: 4.0e-3, log: true}}
budget: {{num_samples: 6, max_concurrent: 2, max_steps: {STEPS}, eval_every: 50}}
scheduler: {{type: asha, grace_period: 50, reduction_factor: 2, phase_margin: 50}}
searcher: {{sampler: tpe, seed: 0}}
resources: {{cpu: 1, gpu: 0}}
"""


def record(path, runs) -> None:
    with gzip.open(path, "wt") as f:
        json.dump({"grid": {"metric": "acc_3x", "mode": "max", "max_steps": STEPS}, "runs": runs}, f)


def full_record(tmp_path):
    runs = [{"params": {"dat.switch_step": s, "optim.lr": lr, "seed": seed}, "reports": curve(s, lr, seed)}
            for s in SWITCHES for lr in LRS for seed in (0, 1)]
    runs.append({"params": {"dat.switch_step": 200, "optim.lr": 4e-3, "seed": 2}, "reports": curve(200, 4e-3, 2, until=150)})
    path = tmp_path / "curves.json.gz"
    record(path, runs)
    space = tmp_path / "tiny.yaml"
    space.write_text(SPACE)
    return path, space


def sweeper(cwd, *args) -> subprocess.CompletedProcess:
    return subprocess.run(sweeper_cmd(*args), cwd=cwd, env=sweeper_env(), capture_output=True, text=True, timeout=300)


def spec() -> SearchSpace:
    import yaml

    return SearchSpace.model_validate(yaml.safe_load(SPACE))


def test_a_record_s_complete_curves_are_grouped_by_the_searched_point_and_the_cut_one_left_out(tmp_path):
    path, _ = full_record(tmp_path)
    curves = load_curves([str(path)], spec(), None)
    assert curves.complete == 12 and curves.left_out == 1
    assert curves.grid.axes == ("dat.switch_step", "optim.lr")
    assert sorted(curves.grid.runs) == sorted((s, lr) for s in SWITCHES for lr in LRS)
    assert all(len(runs) == 2 for runs in curves.grid.runs.values())  # two seeds each; the cut curve is not one
    assert curves.grid.ranked()[0] == (200, 4e-3)


@pytest.mark.parametrize("value", [{"a": 1}, [1, 2], 10 ** 400, float("inf")], ids=["mapping", "list", "huge", "inf"])
def test_a_curve_at_a_value_no_point_can_take_is_left_out_not_a_traceback(tmp_path, value):
    path, _ = full_record(tmp_path)
    odd = tmp_path / "odd.json.gz"
    record(odd, [{"params": {"dat.switch_step": value, "optim.lr": 1e-3, "seed": 0}, "reports": curve(0, 1e-3, 0)}])
    curves = load_curves([str(path), str(odd)], spec(), None)
    assert curves.complete == 12 and curves.left_out == 2 and len(curves.grid.runs) == 6


def test_a_point_no_curve_holds_trains_on_the_nearest_in_the_space_s_own_scale(tmp_path):
    path, _ = full_record(tmp_path)
    grid = load_curves([str(path)], spec(), None).grid
    assert grid.point({"dat.switch_step": 200, "optim.lr": 1.9e-3}) == (200, 1e-3)  # below the log midpoint 2e-3
    assert grid.point({"dat.switch_step": 200, "optim.lr": 2.1e-3}) == (200, 4e-3)
    assert grid.point({"dat.switch_step": 400, "optim.lr": 4e-3}) == (400, 4e-3)  # recorded: its own
    exact = Grid(grid.axes, grid.runs, grid.metric, grid.mode, grid.max_steps)
    with pytest.raises(KeyError):  # without scales, only recorded points may be drawn
        exact.runs[exact.point({"dat.switch_step": 200, "optim.lr": 2.1e-3})]


VALUES = st.one_of(st.integers(-3, 3), st.sampled_from([0.5, 1.0, 2.0, 1e-3, 4e-3, -1.0]), st.none(),
                   st.sampled_from(["lstm", "ssm"]))
SCALES = st.sampled_from([("num", 0, 3, False), ("num", 1e-3, 4.0, True), ("cat",)])


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 3).flatmap(lambda n: st.tuples(
    st.tuples(*[SCALES] * n), st.lists(st.tuples(*[VALUES] * n), min_size=1, max_size=30), st.tuples(*[VALUES] * n))))
def test_the_nearest_recorded_point_is_the_plain_minimum_to_the_bit(case):
    scales, keys, key = case
    keys = list(dict.fromkeys(keys))
    plain = min(keys, key=lambda k: (distance(key, k, scales), repr(k)))  # ties included, as the replay broke them
    assert Nearest(keys, scales).point(key) == plain


def test_the_verb_prints_what_the_replays_did_for_each_method(tmp_path):
    from sweeper.commands.replay import METHODS
    from sweeper.replay import outcome

    path, space = full_record(tmp_path)
    r = sweeper(tmp_path, "replay", space, "--curves", path, "--replays", "8")
    assert r.returncode == 0 and r.stderr == "", r.stderr[-2000:]
    grid = load_curves([str(path)], spec(), None).grid
    assert "on 12 curves at 6 points (1 left out: cut short" in r.stdout
    for name, variant in METHODS.items():  # each row's median is the library's own replays' median
        rows = [outcome(variant(spec()), grid, seed) for seed in range(8)]
        reach = sorted(x["to_best"] for x in rows if x["to_best"] is not None)
        line = next(line for line in r.stdout.splitlines() if line.startswith(f"{name} ") and "steps" in line or
                    line.startswith(f"{name} ") and "never" in line)
        if reach:
            import statistics

            assert f"{statistics.quantiles(reach, n=4, method='inclusive')[1] if len(reach) > 1 else reach[0]:,.0f} [" in line, line
        stopped = sum(x["top_stopped"] for x in rows)
        assert f" {stopped}/{sum(x['top_trials'] for x in rows)} " in line + " ", line
    fifo = [replay(METHODS["as written, FIFO"](spec()), grid, seed) for seed in range(3)]
    assert all(e["status"] == "completed" for t in fifo for e in t.ended)  # no early stopping there


def test_the_trials_of_a_sweep_are_read_from_its_study_and_folders_and_left_as_they_were(tmp_path):
    import optuna

    from trainables.run_dir import RunDir

    sweep = tmp_path / "sweeps" / "tiny"
    sweep.mkdir(parents=True)
    study = optuna.create_study(study_name="tiny", storage=f"sqlite:///{sweep / 'optuna.db'}", direction="maximize")
    study.set_user_attr("sweeper.version", 1)  # a sweep's study (every sweep's holds sweeper.* attributes)
    dists = {"dat.switch_step": optuna.distributions.IntDistribution(0, 400, step=200),
             "optim.lr": optuna.distributions.FloatDistribution(1e-3, 4e-3, log=True)}
    for number, (s, lr) in enumerate((s, lr) for s in SWITCHES for lr in LRS):
        reports = curve(s, lr, 0, until=STEPS if number != 1 else 100)  # trial 1 was stopped at step 100
        study.add_trial(optuna.trial.create_trial(params={"dat.switch_step": s, "optim.lr": lr}, distributions=dists,
                                                  value=reports[-1]["acc_3x"]))
        run = RunDir(sweep / "trials" / f"t{number:04d}")
        run.path.mkdir(parents=True)
        for report in reports:
            run.append(report)
    (tmp_path / "tiny.yaml").write_text(SPACE)
    (sweep / "space.yaml").write_text(SPACE)  # the sweep's own copy: its budget bounds the reports read
    with open(sweep / "trials" / "t0000" / "metrics.jsonl", "a") as f:  # a planted report past the budget
        f.write(json.dumps({"step": STEPS + 50, "acc_3x": 0.99}) + "\n")
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in sweep.rglob("*") if p.is_file()}
    r = sweeper(tmp_path, "replay", "tiny.yaml", "--curves", "tiny", "--replays", "4")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "on 5 curves at 5 points (1 left out: cut short" in r.stdout, r.stdout
    assert "best recorded point: dat.switch_step 200, optim.lr 0.004: acc_3x 0.850" in r.stdout, r.stdout
    assert {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in sweep.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("what, args, says", [
    ("no such source", ["--curves", "nowhere"], "no sweep (no optuna.db) and no record file here"),
    ("not a record", ["--curves", "{tmp}/bad.json.gz"], "not a record of learning curves"),
    ("a run without reports", ["--curves", "{tmp}/noreports.json.gz"], "not a record of learning curves (no key 'reports')"),
    ("only cut curves", ["--curves", "{tmp}/cut.json.gz"], "no curve reaches step 400"),
    ("steps that are not numbers", ["--curves", "{tmp}/textsteps.json.gz"], "no curve reaches step 400"),
    ("an axis never recorded", ["--curves", "{tmp}/nolr.json.gz"], "searches `optim.lr`, which none of the"),
    ("a FIFO", ["--curves", "{tmp}/fifo.json"], "not a regular file"),
    ("a damaged sweep study", ["--curves", "{tmp}/sweeps/tiny"], "optuna.db: not a readable sweep study"),
    ("a gzip bomb", ["--curves", "{tmp}/bomb.json.gz"], "more than 256 MiB of text"),
    ("the same curves twice", ["--curves", "{tmp}/curves.json.gz", "--curves", "{tmp}/./curves.json.gz"],
     "the same curves as --curves"),
    ("zero replays", ["--curves", "{tmp}/curves.json.gz", "--replays", "0"], "--replays: must be >= 1"),
    ("too many replays", ["--curves", "{tmp}/curves.json.gz", "--replays", "10001"], "at most 10,000"),
    ("a tolerance not a number", ["--curves", "{tmp}/curves.json.gz", "--tolerance", "nan"], "finite number >= 0"),
])
def test_bad_curves_or_flags_are_one_line(tmp_path, what, args, says):
    full_record(tmp_path)
    (tmp_path / "bad.json.gz").write_bytes(b"\x1f\x8b not gzip at all")
    record(tmp_path / "noreports.json.gz", [{"params": {"dat.switch_step": 0, "optim.lr": 1e-3}}])
    record(tmp_path / "cut.json.gz", [{"params": {"dat.switch_step": 0, "optim.lr": 1e-3}, "reports": curve(0, 1e-3, 0, 100)}])
    record(tmp_path / "textsteps.json.gz", [{"params": {"dat.switch_step": 0, "optim.lr": 1e-3},
                                             "reports": [{**r, "step": str(r["step"])} for r in curve(0, 1e-3, 0)]}])
    record(tmp_path / "nolr.json.gz", [{"params": {"dat.switch_step": s}, "reports": curve(s, 1e-3, 0)} for s in SWITCHES])
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "sweeps" / "tiny").mkdir(parents=True)
    (tmp_path / "sweeps" / "tiny" / "optuna.db").write_bytes(os.urandom(4096))
    if what == "a gzip bomb":
        with gzip.open(tmp_path / "bomb.json.gz", "wb", compresslevel=1) as f:  # 300 MiB of spaces in about 300 KiB
            for _ in range(300):
                f.write(b" " * (1 << 20))
    before = sorted(tmp_path.iterdir())
    r = sweeper(tmp_path, "replay", "tiny.yaml", *[a.replace("{tmp}", str(tmp_path)) for a in args])
    err = r.stderr.strip()
    assert r.returncode == 2 and r.stdout == "" and "\n" not in err and "Traceback" not in err, r.stderr[-2000:]
    assert says in err, err
    assert sorted(tmp_path.iterdir()) == before


def test_the_progress_bar_counts_every_replay_and_changes_no_result(tmp_path, capsys):
    from sweeper.commands.replay import METHODS, compare

    path, _ = full_record(tmp_path)
    grid = load_curves([str(path)], spec(), None).grid
    quiet = compare(spec(), grid, 3, 0.01, 3)
    shown = compare(spec(), grid, 3, 0.01, 3, progress=True)
    assert shown == quiet and list(shown) == list(METHODS) and all(len(rows) == 3 for rows in shown.values())
    assert capsys.readouterr().out == ""  # the bar is drawn on stderr only


@pytest.mark.parametrize("params", [{"dat.switch_step": -200, "optim.lr": 1e-3}, {"dat.switch_step": 600, "optim.lr": 1e-3},
                                    {"dat.switch_step": 200.5, "optim.lr": 1e-3}, {"dat.switch_step": True, "optim.lr": 1e-3},
                                    {"dat.switch_step": 200, "optim.lr": -1.0}, {"dat.switch_step": 200, "optim.lr": 0.5},
                                    {"dat.switch_step": "200", "optim.lr": 1e-3},
                                    {"dat.switch_step": 100, "optim.lr": 1e-3}])  # off the step of 200
def test_a_curve_at_a_point_the_space_cannot_draw_is_left_out_not_made_the_best(tmp_path, params):
    path, _ = full_record(tmp_path)
    with gzip.open(path, "rt") as f:
        data = json.load(f)
    data["runs"].append({"params": {**params, "seed": 9},
                         "reports": [{"step": s, "acc_3x": 0.99} for s in range(50, STEPS + 1, 50)]})  # the best, were it counted
    record(path, data["runs"])
    curves = load_curves([str(path)], spec(), None)
    assert curves.complete == 12 and curves.left_out == 2
    assert max(curves.grid.final(key) for key in curves.grid.runs) < 0.99


def test_a_whole_float_for_an_int_and_a_point_on_the_step_are_in_the_space(tmp_path):
    path, _ = full_record(tmp_path)
    with gzip.open(path, "rt") as f:
        data = json.load(f)
    data["runs"].append({"params": {"dat.switch_step": 200.0, "optim.lr": 4e-3, "seed": 9}, "reports": curve(200, 4e-3, 9)})
    record(path, data["runs"])
    assert load_curves([str(path)], spec(), None).complete == 13


@pytest.mark.parametrize("diverged, kept", [(1.0, True), (True, True), ("no", False), (0.5, False), (float("nan"), False),
                                            (0.0, False)])
def test_a_cut_curve_ends_a_run_only_when_it_diverged_as_the_trainer_says_it(tmp_path, diverged, kept):
    # any value that read as true ("no", 0.5, NaN) took a 100-step curve for a finished run, its last point the best
    path, _ = full_record(tmp_path)
    cut = curve(200, 4e-3, 0, until=100)
    cut[-1] = {**cut[-1], "acc_3x": 0.99, "diverged": diverged}
    odd = tmp_path / "odd.json.gz"
    record(odd, [{"params": {"dat.switch_step": 200, "optim.lr": 4e-3, "seed": 5}, "reports": cut}])
    curves = load_curves([str(path), str(odd)], spec(), None)
    assert (curves.complete, curves.left_out) == ((13, 1) if kept else (12, 2))


def test_a_sweep_named_by_its_name_and_by_its_folder_is_the_same_curves_once(tmp_path):
    import optuna

    sweep = tmp_path / "sweeps" / "tiny"
    sweep.mkdir(parents=True)
    optuna.create_study(study_name="tiny", storage=f"sqlite:///{sweep / 'optuna.db'}", direction="maximize")
    (tmp_path / "tiny.yaml").write_text(SPACE)
    for second in ("sweeps/tiny", "tiny/", str(sweep), "./sweeps/tiny/"):  # each was counted as a second set
        r = sweeper(tmp_path, "replay", "tiny.yaml", "--curves", "tiny", "--curves", second)
        assert r.returncode == 2 and "the same curves as --curves tiny" in r.stderr and r.stdout == "", (second, r.stderr)
