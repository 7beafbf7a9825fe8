"""An experiment's committed record and the sweep files it is exported from, damaged or planted:
every verb of the experiment answers in one line (never a traceback, never a hang), and a file
planted where the record is written is not written through. A refused verb leaves the record's
folder as it was: not a byte changed, no file made (the record's lock is its folder)."""

from __future__ import annotations

import gzip
import json
import os
import threading

import pytest
import yaml

from core.errors import ConfigError
from experiments import dat_plain_switch as dps
from experiments.record import write_record
from tests.test_parking import a_stopped_sweep, chunks  # noqa: F401 - the fixture


def folder_state(folder) -> dict:
    """Each entry of `folder` and its bytes (None for what is not a regular file)."""
    return {p.name: (p.read_bytes() if p.is_file() and not p.is_symlink() else None) for p in folder.iterdir()}


def verbs_refuse(match: str) -> None:
    """`status`, `export`, `park` and `report` each raise one ConfigError line matching `match`,
    and leave the record's folder as it was."""
    before = folder_state(dps.DATA.parent)
    for verb in ("status", "export", "park", "report"):
        with pytest.raises(ConfigError, match=match) as err:
            dps.main([verb])
        assert "\n" not in str(err.value) and len(str(err.value)) <= 300, (verb, str(err.value))
        assert folder_state(dps.DATA.parent) == before, verb


@pytest.mark.parametrize("content, expect", [
    (b"not gzip", "not a readable record"),
    (gzip.compress(b'{"runs": []}')[:12], "not a readable record"),
    (gzip.compress(b"{not json"), "not a readable record"),
    (gzip.compress(b"[" * 100_000), "not a readable record"),
    (gzip.compress(b"[1, 2]"), "not a record"),
    (gzip.compress(b'{"runs": [1]}'), "not a record"),
    (gzip.compress(b'{"runs": [{"budget": 100, "reports": []}]}'), "run 0: not a recorded run"),
    # 18 MB of text that parses to gigabytes (a MemoryError traceback, or the OOM killer)
    (gzip.compress(b'{"runs": [' + b"{}," * 6_000_000 + b"{}]}"), "values, more than a record holds"),
    # `runs` given twice: JSON kept the last (3 of 80 runs), and the plan would have trained the rest again
    (gzip.compress(b'{"runs": [], "runs": []}'), 'the key "runs" is given twice'),
], ids=["not-gzip", "cut", "not-json", "deep", "a-list", "run-not-object", "run-without-params", "many-tiny-values",
        "a-key-twice"])
def test_a_damaged_record_is_one_line_for_every_verb(chunks, content, expect):  # noqa: F811
    dps.DATA.write_bytes(content)
    verbs_refuse(expect)


PARAMS = {"dat.mode": "none", "dat.switch_step": 0, "curriculum.state_only_steps": 0, "seed": 5301, "optim.lr": 0.001,
          "eval.seed": 20261128}


def _reports(steps=(250, 24000), **metrics) -> list[dict]:
    """Reports holding every metric the experiment reads of a run (0.5 each, unless given)."""
    names = dps.chunks().reads
    return [{**dict.fromkeys(names, 0.5), "step": s, **metrics} for s in steps]


RUN = {"budget": 24000, "params": PARAMS, "reports": _reports()}


def _with(**changes) -> dict:
    return {**RUN, **changes}


@pytest.mark.parametrize("run, expect", [
    (_with(params={}), "run 0: params: lacks 'dat.mode'"),
    (_with(params={**RUN["params"], "seed": [1]}), "run 0: params: every value must be a text or a number"),
    (_with(reports=[]), "run 0: reports: none"),
    (_with(reports=[1, 2]), "run 0: reports: 1 is not a report"),
    (_with(reports=[{"step": 24000, "ood_acc_3x": "x"}]), "run 0: reports: .* is not a report"),
    (_with(reports=[{"step": "24000", "ood_acc_3x": 0.5}]), "run 0: reports: .* is not a report"),
    # values of the right outer kind that no trial config holds as they are: the plan read them as other cells
    (_with(params={**RUN["params"], "dat.switch_step": "3000"}), "run 0: dat: switch_step: must be a number, got the text '3000'"),
    (_with(params={**RUN["params"], "optim.lr": float("nan")}), "run 0: optim.lr: .*finite"),
    (_with(params={**RUN["params"], "seed": -1}), "run 0: seed: .*greater than or equal to 0"),
    (_with(budget=10**400), "run 0: steps: .*less than or equal to"),
    # reports no finished run of the cell makes: the plan and the report read them as results
    (_with(reports=[{k: v for k, v in r.items() if k != "ood_acc_3x"} for r in RUN["reports"]]), "run 0: reports: step 250 lacks ood_acc_3x, which the experiment reads"),
    # what the report reads of a report before the switch, and of the last one beside the plan's metrics
    (_with(reports=[{k: v for k, v in r.items() if k != "ood_state_acc_3x" or r["step"] == 24000} for r in RUN["reports"]]),
     "run 0: reports: step 250 lacks ood_state_acc_3x"),
    (_with(reports=[{k: v for k, v in r.items() if k != "curve_acc_s075" or r["step"] == 250} for r in RUN["reports"]]),
     "run 0: reports: step 24000 lacks curve_acc_s075"),
    (_with(reports=_reports(ood_acc_3x=7.0)), "run 0: reports: ood_acc_3x 7.0 .* not an accuracy in \\[0, 1\\]"),
    (_with(reports=_reports(steps=(24000, 250))), "run 0: reports: steps .* do not rise"),
    (_with(reports=_reports(steps=(-5, 24000))), "run 0: reports: steps .* do not rise from above 0"),
    (_with(reports=_reports(steps=(250, 2500))), "run 0: reports: the last is at step 2500, not the budget 24000"),
    # provenance the pages print as it is: a traceback (a list, a number) or a terminal escape on the page
    (_with(commit=5), "run 0: commit: 5 is not of the form"),
    (_with(config_hash="x" * 64), "run 0: config_hash: .* is not of the form"),
    (_with(started_utc="2026-12-04T10:00:00Z\x1b]0;pwned\x07"), "run 0: started_utc: .* is not of the form"),
    (_with(trained_on=[]), "run 0: trained_on: .* is not a machine's name"),
    (_with(trained_on="GPU\x1b[2J\nfake line"), "run 0: trained_on: .* is not a machine's name"),
    (_with(reports=_reports(steps_per_s=1e-300)), "run 0: reports: steps_per_s .* is not a training speed"),
], ids=["params-empty", "seed-a-list", "no-reports", "reports-not-objects", "metric-text", "step-text",
        "switch-a-text", "lr-nan", "seed-negative", "budget-huge", "a-metric-missing", "early-state-missing",
        "curve-point-missing", "accuracy-7", "steps-back",
        "step-negative", "unfinished", "commit-a-number", "hash-not-hex", "time-with-escapes", "machine-a-list",
        "machine-with-escapes", "speed-tiny"])
def test_a_record_run_of_the_wrong_inner_kind_is_one_line_for_every_verb(chunks, run, expect):  # noqa: F811
    dps.DATA.write_bytes(gzip.compress(json.dumps({"runs": [run]}).encode(), mtime=0))
    verbs_refuse(expect)


def test_a_run_recorded_twice_is_one_line_not_counted_twice(chunks):  # noqa: F811
    dps.DATA.write_bytes(gzip.compress(json.dumps({"runs": [RUN, RUN]}).encode(), mtime=0))
    verbs_refuse("run 1: the same run as run 0")
    dps.DATA.write_bytes(gzip.compress(json.dumps({"runs": [RUN]}).encode(), mtime=0))
    assert len(chunks.load()["runs"]) == 1


def test_a_record_that_is_a_fifo_is_one_line_not_a_hang(chunks):  # noqa: F811
    os.mkfifo(dps.DATA)
    verbs_refuse("not a regular file")


@pytest.mark.parametrize("kind", ["fifo", "link"])
def test_a_fifo_or_link_planted_at_a_lock_s_name_beside_the_record_is_neither_waited_on_nor_written(chunks, tmp_path, kind):  # noqa: F811
    lock = dps.DATA.with_name(dps.DATA.name + ".lock")
    if kind == "fifo":
        os.mkfifo(lock)
    else:
        (tmp_path / "victim").write_bytes(b"keep")
        lock.symlink_to(tmp_path / "victim")
    outcome: list = []
    worker = threading.Thread(target=lambda: outcome.append(_raised(lambda: dps.main(["export"]))), daemon=True)
    worker.start()
    worker.join(60)
    assert outcome == [None]  # an answer, not a wait on the FIFO; nothing to export is not an error
    assert kind != "link" or (tmp_path / "victim").read_bytes() == b"keep"


def test_two_writers_of_a_record_take_turns_on_its_folder_s_lock(tmp_path):
    from experiments.record import RecordBusy, record_lock

    path = tmp_path / "r_runs.json.gz"
    with record_lock(path):
        with pytest.raises(RecordBusy, match="being written by another process"):
            with record_lock(path, wait_s=0.3):
                pass
    with record_lock(path, wait_s=0.3):  # free again once the first writer is done
        pass
    assert list(tmp_path.iterdir()) == []  # no lock file made


def _raised(call) -> BaseException | None:
    try:
        call()
    except BaseException as err:  # noqa: BLE001 - returned to the test
        return err
    return None


def test_a_record_is_never_written_through_a_link_planted_beside_it(tmp_path):
    path = tmp_path / "r_runs.json.gz"
    (tmp_path / "victim").write_bytes(b"keep")
    path.with_suffix(".tmp").symlink_to(tmp_path / "victim")  # where the record's next copy was once written
    write_record(path, {"runs": []})
    assert (tmp_path / "victim").read_bytes() == b"keep"
    assert gzip.decompress(path.read_bytes()) == b'{"runs":[]}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r_runs.json.gz", "r_runs.json.tmp", "victim"]


@pytest.mark.parametrize("plant, expect", [
    (lambda cfg: (cfg.unlink(), os.mkfifo(cfg)), None),  # skipped as unfinished, never waited on
    (lambda cfg: cfg.write_text(yaml.safe_dump({"steps": 500, "seed": 1})), "lacks 'dat'"),
    (lambda cfg: cfg.write_text("steps: 500\nx: " + "[" * 50_000), None),  # past the YAML reader's depth: skipped
], ids=["fifo", "not-this-experiment-s", "deep"])
def test_a_finished_trial_s_damaged_config_is_skipped_or_one_line_on_export(chunks, tmp_path, plant, expect):  # noqa: F811
    folder = a_stopped_sweep(chunks, tmp_path)
    trial = folder / "trials" / "t0000"
    config = trial / "checkpoint" / "config.yaml"
    config.write_text(yaml.safe_dump({"steps": 500}))
    plant(config)
    if expect is None:
        assert chunks.export() == 0
    else:
        with pytest.raises(ConfigError, match=expect) as err:
            chunks.export()
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("damage", [None, "an accuracy of 7", "a metric the plan reads missing"])
def test_export_adds_a_finished_trial_only_if_the_record_s_reader_takes_it(chunks, tmp_path, damage):  # noqa: F811
    # `export` (and `run`, after each sweep) appended a run the record's own reader then refused: every verb
    # after was one line advising to restore the record, which dropped every run exported since its commit
    import copy

    from trainables.config import set_dotted, trial_config_from_dict
    from trainables.run_dir import RunDir

    folder = a_stopped_sweep(chunks, tmp_path)
    space = yaml.safe_load((folder.parent / f"{folder.name}.yaml").read_text())
    data = copy.deepcopy(chunks.fixed)
    for key, value in {"steps": 500, **space["searcher"]["baseline"][0]}.items():
        set_dotted(data, key, value, "trial")
    trial = folder / "trials" / "t0000"
    (trial / "checkpoint" / "config.yaml").write_text(yaml.safe_dump(trial_config_from_dict(data, "trial").model_dump(mode="json")))
    if damage is not None:
        reports = RunDir(trial).reports()
        if damage == "an accuracy of 7":
            reports[-1]["acc_1x"] = 7.0
        else:
            del reports[-1]["recall_acc_1x"]
        (trial / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in reports))
    if damage is None:
        assert chunks.export() == 1 and len(chunks.load()["runs"]) == 1
        return
    with pytest.raises(ConfigError, match="a finished trial is not a run of") as err:
        chunks.export()
    assert "\n" not in str(err.value) and len(str(err.value)) <= 300, str(err.value)
    assert not dps.DATA.exists()  # nothing recorded


# --------------------------------------------------------------------------- packs from a lent GPU


def _pack(tmp_path, files: dict[str, bytes]):
    import io
    import tarfile

    path = tmp_path / "runs.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


MACHINE = b'{"accelerator": "NVIDIA H200", "torch": "2.11.0+cu130"}'


@pytest.mark.parametrize("machine", [b"[" * 100_000, b'{"accelerator": "\\u001b[2J' + b"x" * 100_000 + b'", "torch": "2"}',
                                     b'{"accelerator": "H200", "torch": "2", "commit": "\\u001b]0;title\\u0007"}'],
                         ids=["deep", "escapes-and-long", "commit-not-one"])
def test_a_pack_whose_machine_file_is_damaged_is_one_line_and_adds_nothing(chunks, tmp_path, capsys, machine):  # noqa: F811
    assert dps.main(["import", str(_pack(tmp_path, {"machine.json": machine}))]) == 2
    out = capsys.readouterr()
    err = out.err.strip()
    assert err.startswith("error: ") and "machine.json" in err and "\n" not in err and "\x1b" not in err
    assert not dps.DATA.exists()


def test_a_pack_s_damaged_runs_are_left_out_in_bounded_escaped_lines(chunks, tmp_path, capsys):  # noqa: F811
    files = {"machine.json": MACHINE, "deep/config.yaml": b"x: " + b"[" * 50_000, "deep/metrics.jsonl": b"",
             "bad\x1b[2Jname/config.yaml": b"steps: 1", "bad\x1b[2Jname/metrics.jsonl": b"",
             **{f"stray{i:03d}/config.yaml": b"steps: 1" for i in range(60)}}
    assert dps.main(["import", str(_pack(tmp_path, files))]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "\x1b" not in "".join(lines) and len(lines) <= 22, lines[:3]
    assert any("deep" in line and "nested deeper" in line for line in lines)
    assert lines[-2].endswith("more") and lines[-1].endswith(f"0 runs added from {tmp_path / 'runs.tar.gz'}")


def test_a_pack_s_name_with_escapes_is_one_escaped_line(chunks, tmp_path, capsys):  # noqa: F811
    assert dps.main(["import", str(tmp_path / "no\nsuch\x1b[2J.tar.gz")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "\x1b" not in err


@pytest.mark.parametrize("option", [("--device", "tpu"), ("--phase", "bogus\n\x1b[31m")], ids=["device", "phase"])
def test_configs_for_a_device_or_phase_no_trial_takes_is_refused_before_any_file(chunks, tmp_path, option):  # noqa: F811
    with pytest.raises(SystemExit) as exit_:
        dps.main(["configs", str(tmp_path / "out"), "--seeds", "0", *option])
    assert exit_.value.code == 2 and not (tmp_path / "out").exists()
