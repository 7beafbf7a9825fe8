"""experiments/device_runs.py with real `python -m sweeper trial` processes on tiny configs: the
pack it brings back, the deadline rule stopping the last group first, and a paused run carried
back with its checkpoint and resumed to the same reports."""

from __future__ import annotations

import json
import tarfile
import time

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments import device_runs
from trainables.config import load_trial_config


def tiny(folder, name: str, steps: int) -> None:
    config = load_trial_config("tiny").model_dump(mode="json")
    config.update(steps=steps, device="cpu")
    config["eval"].update(every=10, n_sequences=8, mid_run_sequences=8, multipliers=[1, 2])
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(config))


@pytest.mark.slow  # trains in `sweeper trial` processes
def test_finished_runs_come_back_packed_with_the_machine_and_without_checkpoints(tmp_path):
    configs = tmp_path / "configs"
    configs.mkdir()
    for name in ("a_0", "a_1", "b_0", "c_0"):
        tiny(configs, name, 20)
    runs = device_runs.train(configs, tmp_path / "runs", deadline_s=600, groups=2, check_every=0.5, warmup_s=0)
    assert [r.config.stem for r in runs] == ["a_0", "a_1", "b_0"]  # group c is not started
    assert all(r.process.returncode == 0 and r.stopped_at is None and r.step() == 20 for r in runs)
    device_runs.pack(runs, tmp_path / "out" / "runs.tar.gz")
    with tarfile.open(tmp_path / "out" / "runs.tar.gz") as tar:
        names = set(tar.getnames())
        assert json.loads(tar.extractfile("machine.json").read())["accelerator"] == "cpu"
    assert {f"{r}/{f}" for r in ("a_0", "a_1", "b_0") for f in (*device_runs.KEPT, "log.txt")} | {"machine.json"} == names
    assert device_runs.summary(runs).count("exit 0") == 3


@pytest.mark.slow  # trains in `sweeper trial` processes
def test_the_deadline_stops_the_last_group_first_then_everything(tmp_path):
    configs = tmp_path / "configs"
    configs.mkdir()
    for name in ("a_0", "b_0", "b_1"):
        tiny(configs, name, 1_000_000)  # none can finish: the rule must stop them
    # the deadline leaves the processes ample time to start and report on a loaded machine (under a full
    # `make test` beside other training, their first reports came 24 s after the start)
    runs = {r.config.stem: r for r in device_runs.train(configs, tmp_path / "runs", deadline_s=60, check_every=1,
                                                          warmup_s=0, margin_s=0)}
    assert all(r.stopped_at is not None for r in runs.values())
    assert runs["b_0"].stopped_at == runs["b_1"].stopped_at < runs["a_0"].stopped_at
    assert runs["a_0"].stopped_at >= 60
    assert "stopped at" in device_runs.summary(list(runs.values()))


def test_the_finish_rule_stops_every_group_that_cannot_fit_at_once():
    # measured on an H200: 9 single-run groups at 33 steps/s, 21,500 steps to go, 380 s left; one group
    # cut a minute left 0 of 9 finished, while 2 alone ran at 67 steps/s (21,500 steps in 321 s)
    assert device_runs.groups_that_fit([[(21_500, 33.0)]] * 9, 380) == 2
    assert device_runs.groups_that_fit([[(1_000, 10.0)]] * 4, 200) == 4  # all fit as they are
    assert device_runs.groups_that_fit([[(1_000_000, 10.0)]] * 4, 200) == 1  # none would: the first goes on
    # a group's slowest run decides: the second group's second run is far behind
    assert device_runs.groups_that_fit([[(100, 1.0)], [(100, 1.0), (10_000, 1.0)], [(100, 1.0)]], 150) == 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 50_000), st.floats(1.0, 500.0)), min_size=1, max_size=3),
                min_size=1, max_size=12), st.floats(1.0, 2_000.0), st.floats(1.0, 2_000.0))
def test_more_time_left_never_keeps_fewer_groups(groups, left_a, left_b):
    short, long = sorted((left_a, left_b))
    kept = device_runs.groups_that_fit(groups, short)
    assert 1 <= kept <= device_runs.groups_that_fit(groups, long) <= len(groups)


@pytest.mark.slow  # trains in `sweeper trial` processes
def test_a_paused_run_comes_back_with_its_checkpoint_and_resumes_to_the_same_result(tmp_path):
    import subprocess
    import sys

    configs = tmp_path / "configs"
    configs.mkdir()
    tiny(configs, "a_0", 800)
    reference = device_runs.train(configs, tmp_path / "reference", deadline_s=600, check_every=0.5)[0]
    assert reference.finished()

    runs_dir = tmp_path / "runs"
    out = runs_dir / "a_0"
    process = subprocess.Popen([sys.executable, "-m", "sweeper", "trial", str(configs / "a_0.yaml"), "--out", str(out),
                                "--threads", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    paused = device_runs.Run(configs / "a_0.yaml", out, 800, process)
    while paused.step() < 30 and process.poll() is None:  # paused once it has a checkpoint past its first report
        time.sleep(0.05)
    device_runs.stop([paused], 0.0)
    assert 30 <= paused.step() < 800
    packs = tmp_path / "packs"
    assert device_runs.pack([paused], packs / "runs.tar.gz", checkpoints=True) == []
    assert (packs / "ckpt-0.tar").is_file()
    (packs / "ckpt-1.tar").write_bytes(b"a stale file of an earlier call")  # not this pack's: never read

    again = tmp_path / "again"
    assert device_runs.restore(packs, again) == (["a_0"], [])
    resumed = device_runs.train(configs, again, deadline_s=600, check_every=0.5)[0]
    assert resumed.finished() and resumed.process.returncode == 0
    final = [json.loads(line) for line in (again / "a_0" / "metrics.jsonl").read_text().splitlines()]
    expected = [json.loads(line) for line in (reference.out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in final] == [r["step"] for r in expected]
    timing = {"steps_per_s"}
    assert [{k: v for k, v in r.items() if k not in timing} for r in final] == \
           [{k: v for k, v in r.items() if k not in timing} for r in expected]


def write_pack(packs, machine: dict, runs: dict[str, tuple[int, list[int]]], checkpoints: dict[str, list[str]]) -> None:
    """A pack as `pack` writes it: runs {name: (steps, the steps it reported)}; checkpoints
    {ckpt file: the runs whose checkpoint folder it holds}."""
    packs.mkdir(exist_ok=True)
    for name, members in checkpoints.items():
        with tarfile.open(packs / name, "w") as tar:
            for run in members:
                device_runs._add_bytes(tar, f"{run}/checkpoint-000001/model.pt", b"weights")
    with tarfile.open(packs / "runs.tar.gz", "w:gz") as tar:
        device_runs._add_bytes(tar, device_runs.MACHINE, json.dumps({**machine, "checkpoints": list(checkpoints)}).encode())
        for run, (steps, reported) in runs.items():
            device_runs._add_bytes(tar, f"{run}/config.yaml", yaml.safe_dump({"steps": steps}).encode())
            device_runs._add_bytes(tar, f"{run}/metrics.jsonl", "".join(json.dumps({"step": s}) + "\n" for s in reported).encode())


def test_a_restore_on_another_accelerator_is_refused_before_anything_is_unpacked(tmp_path):
    packs = tmp_path / "packs"
    write_pack(packs, {"accelerator": "NVIDIA H200", "torch": "2.11.0"}, {"a_0": (100, [10, 20]), "b_0": (20, [10, 20])},
               {"ckpt-0.tar": ["a_0"]})
    with pytest.raises(device_runs.DeviceRunsError, match="trained on NVIDIA H200"):
        device_runs.restore(packs, tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


def test_a_missing_checkpoint_file_or_a_cut_report_line_costs_only_those_runs(tmp_path):
    packs = tmp_path / "packs"
    runs = {"a_0": (100, [10, 20]), "b_0": (20, [10, 20]), "c_0": (100, [10]), "d_0": (30, [10, 30])}
    write_pack(packs, device_runs.machine(), runs, {"ckpt-0.tar": ["a_0"], "ckpt-1.tar": ["c_0"]})
    (packs / "ckpt-1.tar").unlink()  # a file that did not come back
    restored, notes = device_runs.restore(packs, tmp_path / "runs")
    assert restored == ["a_0", "b_0", "d_0"]  # paused with its checkpoint; finished; finished
    assert notes == ["ckpt-1.tar: unreadable (FileNotFoundError); its runs start afresh"]
    assert (tmp_path / "runs" / "a_0" / "checkpoint-000001" / "model.pt").is_file()
    assert not (tmp_path / "runs" / "c_0").exists()
    assert not any(p.name.startswith(".unpacking") for p in (tmp_path / "runs").iterdir())


def test_a_cut_pack_is_one_line_and_exit_2(tmp_path, capsys):
    packs = tmp_path / "packs"
    write_pack(packs, device_runs.machine(), {"b_0": (20, [10, 20])}, {})
    data = (packs / "runs.tar.gz").read_bytes()
    (packs / "runs.tar.gz").write_bytes(data[: len(data) // 2])
    (tmp_path / "configs").mkdir()
    tiny(tmp_path / "configs", "b_0", 20)
    args = ["train", str(tmp_path / "configs"), str(tmp_path / "runs"), "--deadline", "60", "--pack",
            str(tmp_path / "out" / "p.tar.gz"), "--restore", str(packs)]
    assert device_runs.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: device_runs: --restore {packs}: not a pack of this tool") and err.count("\n") == 1
    assert not (tmp_path / "out" / "p.tar.gz").exists()


def test_a_run_folder_of_another_config_is_refused_not_resumed_or_skipped(tmp_path, capsys):
    configs = tmp_path / "configs"
    configs.mkdir()
    tiny(configs, "a_0", 20)
    runs = device_runs.train(configs, tmp_path / "runs", deadline_s=600, check_every=0.5)
    assert runs[0].finished()
    tiny(configs, "a_0", 40)  # a later call's config of the same name
    args = ["train", str(configs), str(tmp_path / "runs"), "--deadline", "60", "--pack", str(tmp_path / "p.tar.gz")]
    assert device_runs.main(args) == 2
    assert "a_0.yaml: " in capsys.readouterr().err
    assert not (tmp_path / "p.tar.gz").exists()
    tiny(configs, "a_0", 20)  # the config it was made from: finished before, packed again
    assert device_runs.main(args) == 0
    assert "finished before" in capsys.readouterr().out


@pytest.mark.parametrize("bad", [["--groups", "0"], ["--pack", "{tmp}"]])
def test_a_bad_groups_or_pack_is_refused_before_training(tmp_path, capsys, bad):
    (tmp_path / "configs").mkdir()
    tiny(tmp_path / "configs", "a_0", 20)
    args = ["train", str(tmp_path / "configs"), str(tmp_path / "runs"), "--deadline", "60", "--pack",
            str(tmp_path / "p.tar.gz"), *[b.format(tmp=tmp_path) for b in bad]]
    try:
        code = device_runs.main(args)
    except SystemExit as refused:  # an argument's type refuses it in the parser (one line, exit 2)
        code = refused.code
    assert code == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert not (tmp_path / "runs").exists()


def test_a_folder_without_configs_or_with_a_broken_one_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    args = ["train", str(tmp_path / "empty"), str(tmp_path / "runs"), "--deadline", "60", "--pack", str(tmp_path / "p.tar.gz")]
    assert device_runs.main(args) == 2
    assert "no trial configs" in capsys.readouterr().err
    (tmp_path / "empty" / "a_0.yaml").write_text("steps: [")
    assert device_runs.main(args) == 2
    assert "a_0.yaml: not a trial config" in capsys.readouterr().err
    assert not (tmp_path / "p.tar.gz").exists()


DEEP_JSON = "[" * 100_000 + "]" * 100_000
DEEP_YAML = "[" * 20_000 + "]" * 20_000


def call(tmp_path, capsys, *extra, configs=None) -> tuple[int, str, str]:
    """`main` on a folder of one tiny config (unless `configs`), as a user would call it."""
    if configs is None:
        configs = tmp_path / "configs"
        configs.mkdir(exist_ok=True)
        tiny(configs, "a_0", 20)
    args = ["train", str(configs), str(tmp_path / "runs"), "--deadline", "60", "--pack", str(tmp_path / "out" / "p.tar.gz"),
            *extra]
    code = device_runs.main(args)
    out, err = capsys.readouterr()
    return code, out, err


def assert_refused(tmp_path, code, out, err, *words) -> None:
    assert code == 2 and out == "" and err.startswith("error: device_runs: ") and err.count("\n") == 1, (code, out, err)
    assert "Traceback" not in err and len(err) <= 301 and all(w in err for w in words), err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("damage", ["fifo", "deep-machine", "machine-a-list"])
def test_a_pack_to_restore_that_blocks_or_is_nested_past_the_parser_is_one_line_before_anything(tmp_path, capsys, damage):
    import os

    packs = tmp_path / "packs"
    packs.mkdir()
    if damage == "fifo":
        os.mkfifo(packs / "runs.tar.gz")  # read, it would block for ever
    else:
        with tarfile.open(packs / "runs.tar.gz", "w:gz") as tar:
            device_runs._add_bytes(tar, device_runs.MACHINE, (DEEP_JSON if damage == "deep-machine" else "[1, 2]").encode())
    code, out, err = call(tmp_path, capsys, "--restore", str(packs))
    assert_refused(tmp_path, code, out, err, "--restore", "not a regular file" if damage == "fifo" else "not a pack")


def test_a_run_config_in_the_pack_nested_past_the_parser_costs_only_that_run(tmp_path):
    packs = tmp_path / "packs"
    write_pack(packs, device_runs.machine(), {"a_0": (20, [10, 20]), "b_0": (20, [10, 20])}, {})
    with tarfile.open(packs / "runs.tar.gz", "r:gz") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    members["a_0/config.yaml"] = DEEP_YAML.encode()
    with tarfile.open(packs / "runs.tar.gz", "w:gz") as tar:
        for name, data in members.items():
            device_runs._add_bytes(tar, name, data)
    restored, notes = device_runs.restore(packs, tmp_path / "runs")
    assert restored == ["b_0"]
    assert len(notes) == 1 and notes[0].startswith("a_0: unreadable in the pack") and "start" in notes[0]


@pytest.mark.parametrize("damage", ["fifo", "deep", "steps-text"])
def test_a_config_that_blocks_nests_past_the_parser_or_has_no_whole_steps_is_one_line(tmp_path, capsys, damage):
    import os

    configs = tmp_path / "configs"
    configs.mkdir()
    tiny(configs, "a_0", 20)
    if damage == "fifo":
        os.mkfifo(configs / "b_0.yaml")
    else:
        (configs / "b_0.yaml").write_text(DEEP_YAML if damage == "deep" else "steps: twenty\n")
    code, out, err = call(tmp_path, capsys, configs=configs)
    assert_refused(tmp_path, code, out, err, "b_0.yaml", "not a trial config")


@pytest.mark.parametrize("provenance", [DEEP_JSON, "{\"commit\": 7}", "<<<<<<< HEAD\n{}\n"])
def test_a_damaged_provenance_file_is_refused_before_any_run_trains(tmp_path, capsys, provenance):
    configs = tmp_path / "configs"
    configs.mkdir()
    tiny(configs, "a_0", 20)
    (configs / device_runs.PROVENANCE).write_text(provenance)
    code, out, err = call(tmp_path, capsys, configs=configs)
    assert_refused(tmp_path, code, out, err, device_runs.PROVENANCE)


def test_a_pack_that_cannot_be_written_is_refused_before_any_run_trains(tmp_path, capsys):
    configs = tmp_path / "configs"
    configs.mkdir()
    tiny(configs, "a_0", 20)
    args = ["train", str(configs), str(tmp_path / "runs"), "--deadline", "60", "--pack", "/proc/p.tar.gz"]
    assert device_runs.main(args) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: device_runs: --pack /proc: cannot write there") and err.count("\n") == 1
    assert not (tmp_path / "runs").exists()


def test_configs_asking_for_cuda_on_a_machine_without_it_are_refused_before_any_run_starts(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    configs = tmp_path / "configs"
    configs.mkdir()
    tiny(configs, "a_0", 20)
    config = yaml.safe_load((configs / "a_0.yaml").read_text())
    (configs / "a_0.yaml").write_text(yaml.safe_dump({**config, "device": "cuda"}))
    code, out, err = call(tmp_path, capsys, configs=configs)
    assert_refused(tmp_path, code, out, err, "a_0.yaml", "no CUDA device")


@pytest.mark.parametrize("name", ["..", ""])
def test_a_pack_s_run_named_to_reach_above_its_folder_is_left_out_and_nothing_removed(tmp_path, name):
    # `../config.yaml` (a run named `..`) that failed to read was removed as `runs/..`: every file beside the
    # runs folder, the configs included; `/config.yaml` named the runs folder itself
    packs = tmp_path / "packs"
    write_pack(packs, device_runs.machine(), {"b_0": (20, [10, 20])}, {})
    with tarfile.open(packs / "runs.tar.gz", "r:gz") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    members[f"{name}/config.yaml"] = b"\xff\xfe"  # unreadable: the run would be cleared
    members[f"{name}/metrics.jsonl"] = b""
    with tarfile.open(packs / "runs.tar.gz", "w:gz") as tar:
        for member, data in members.items():
            device_runs._add_bytes(tar, member, data)
    runs = tmp_path / "work" / "runs"
    runs.mkdir(parents=True)
    (runs / "kept.txt").write_text("a run's file\n")
    (tmp_path / "work" / "precious.txt").write_text("beside the runs\n")
    restored, notes = device_runs.restore(packs, runs)
    assert restored == ["b_0"] and (tmp_path / "work" / "precious.txt").is_file() and (runs / "kept.txt").is_file()
    assert any("not a run's name" in note for note in notes), notes
