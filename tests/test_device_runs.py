"""experiments/device_runs.py with real `python -m sweeper trial` processes on tiny configs: the
pack it brings back, and the deadline rule stopping the last group first."""

from __future__ import annotations

import json
import tarfile

import yaml

from experiments import device_runs
from trainables.config import load_trial_config


def tiny(folder, name: str, steps: int) -> None:
    config = load_trial_config("tiny").model_dump(mode="json")
    config.update(steps=steps, device="cpu")
    config["eval"].update(every=10, n_sequences=8, mid_run_sequences=8, multipliers=[1, 2])
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(config))


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


def test_the_deadline_stops_the_last_group_first_then_everything(tmp_path):
    configs = tmp_path / "configs"
    configs.mkdir()
    for name in ("a_0", "b_0", "b_1"):
        tiny(configs, name, 1_000_000)  # none can finish: the rule must stop them
    runs = {r.config.stem: r for r in device_runs.train(configs, tmp_path / "runs", deadline_s=8, check_every=1,
                                                          warmup_s=0, margin_s=0)}
    assert all(r.stopped_at is not None for r in runs.values())
    assert runs["b_0"].stopped_at == runs["b_1"].stopped_at < runs["a_0"].stopped_at
    assert runs["a_0"].stopped_at >= 8
    assert "stopped at" in device_runs.summary(list(runs.values()))
