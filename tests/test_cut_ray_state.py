"""A kill while Ray copies its snapshot into the sweep folder leaves a file cut short; the relaunch mends it
from Ray's whole staging copy (seen in the fault matrix: verdict-KILL, 2026-11-23), or says so in one line."""

from __future__ import annotations

import json
import pickle

import pytest

from sweeper.sweep_dir import _intact, mend_cut_ray_state
from trainables.errors import ConfigError

STAMP = "2026-11-23_04-34-32"
NAMES = (f"experiment_state-{STAMP}.json", f"search_gen_state-{STAMP}.json", f"searcher-state-{STAMP}.pkl")


def _snapshot(folder, version: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / NAMES[0]).write_text(json.dumps({"trial_data": [], "version": version}))
    (folder / NAMES[1]).write_bytes(pickle.dumps({"counter": version}))  # Ray pickles it, under a .json name
    (folder / NAMES[2]).write_bytes(pickle.dumps({"_ot_trials": {"a": version}, "pad": list(range(100))}))


def test_whole_and_cut_files_are_told_apart(tmp_path):
    _snapshot(tmp_path, 1)
    assert all(_intact(tmp_path / n) for n in NAMES)
    for n in NAMES:
        data = (tmp_path / n).read_bytes()
        (tmp_path / n).write_bytes(data[: len(data) // 2])
        assert not _intact(tmp_path / n)
    (tmp_path / NAMES[2]).write_bytes(b"")
    assert not _intact(tmp_path / NAMES[2])


def test_a_cut_snapshot_gets_the_newest_whole_staging_copy(tmp_path):
    sweep, ray_temp = tmp_path / "sweeps" / "faults", tmp_path / "ray"
    _snapshot(sweep, 2)
    cut = sweep / NAMES[2]
    cut.write_bytes(cut.read_bytes()[:40])  # the kill came mid-copy
    _snapshot(ray_temp / "session_old" / "artifacts" / STAMP / "faults" / "driver_artifacts", 1)
    newest = ray_temp / "session_new" / "artifacts" / STAMP / "faults" / "driver_artifacts"
    _snapshot(newest, 3)
    (newest / NAMES[2]).write_bytes(b"\x80\x04")  # also cut there (Ray's write): not taken
    _snapshot(ray_temp / "session_mid" / "artifacts" / STAMP / "faults" / "driver_artifacts", 2)
    import os
    for i, s in enumerate(("session_old", "session_mid", "session_new")):  # newest by its files, not the folder
        for f in (ray_temp / s / "artifacts" / STAMP / "faults" / "driver_artifacts").iterdir():
            os.utime(f, (i, i))
    mended = mend_cut_ray_state(sweep, "faults", ray_temp)
    assert sorted(p.name for p in mended) == sorted(NAMES)
    assert all(_intact(sweep / n) for n in NAMES)
    assert pickle.loads(cut.read_bytes())["_ot_trials"] == {"a": 2}  # every file from the one whole set
    assert json.loads((sweep / NAMES[0]).read_text())["version"] == 2
    assert not list(sweep.glob(".mend-*"))


def test_a_whole_snapshot_is_left_alone_and_an_unmendable_one_is_one_line(tmp_path):
    sweep = tmp_path / "faults"
    _snapshot(sweep, 1)
    before = {n: (sweep / n).read_bytes() for n in NAMES}
    assert mend_cut_ray_state(sweep, "faults", tmp_path / "no-ray") == []
    assert {n: (sweep / n).read_bytes() for n in NAMES} == before
    (sweep / NAMES[0]).write_text('{"trial_data": [')
    with pytest.raises(ConfigError, match="cut short.*--restart") as err:
        mend_cut_ray_state(sweep, "faults", tmp_path / "no-ray")
    assert "\n" not in str(err.value)


def test_a_moved_sweep_folder_is_one_line(tmp_path):
    from sweeper.records import TrialRecord
    from sweeper.sweep_dir import check_not_moved

    made, moved = tmp_path / "made" / "faults", tmp_path / "moved" / "faults"
    records = [TrialRecord("a", {}, "running", 10, {}, str(made / "trainable_a")), TrialRecord("b", {}, "pending", 0, {}, "")]
    check_not_moved(records, made)  # in place: nothing to say
    check_not_moved([], moved)  # nothing recorded yet: nothing to compare
    with pytest.raises(ConfigError, match="has been moved.*--restart") as err:
        check_not_moved(records, moved)
    assert "\n" not in str(err.value)
