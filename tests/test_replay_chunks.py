"""bench/replay_chunks.py: a long replay's finished chunks are kept and read back only by the same code."""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.replay_chunks import Chunks, code_fingerprint  # noqa: E402

TASKS = [({"method": "a", "seeds": [0, 3]}, (range(0, 3),)), ({"method": "a", "seeds": [3, 5]}, (range(3, 5),)),
         ({"method": "b", "seeds": [0, 3]}, (range(10, 13),))]


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_rerun_reads_every_kept_chunk_and_gives_the_same_rows(tmp_path, jobs):
    first = Chunks(tmp_path, "code-1")
    rows = first.run(list, TASKS, jobs)
    assert rows == [[0, 1, 2], [3, 4], [10, 11, 12]]
    assert (first.kept, first.replayed) == (0, 3)
    assert len(list(tmp_path.glob("*.json.gz"))) == 3
    again = Chunks(tmp_path, "code-1")
    assert again.run(list, TASKS, jobs) == rows
    assert (again.kept, again.replayed) == (3, 0)


def test_an_interrupted_run_replays_only_what_it_had_not_kept(tmp_path):
    Chunks(tmp_path, "code-1").run(list, TASKS[:2], 1)
    resumed = Chunks(tmp_path, "code-1")
    assert resumed.run(list, TASKS, 1) == [[0, 1, 2], [3, 4], [10, 11, 12]]
    assert (resumed.kept, resumed.replayed) == (2, 1)


def test_a_chunk_of_other_code_or_another_task_is_never_read(tmp_path):
    Chunks(tmp_path, "code-1").run(list, TASKS, 1)
    other_code = Chunks(tmp_path, "code-2")
    other_code.run(list, TASKS, 1)
    assert other_code.kept == 0
    moved = [({**task, "grid": "another"}, args) for task, args in TASKS]
    other_task = Chunks(tmp_path, "code-1")
    other_task.run(list, moved, 1)
    assert other_task.kept == 0


@pytest.mark.parametrize("damage", [b"", b"\x1f\x8b\x08\x00cut", b"not gzip", gzip.compress(b'{"rows": 3}', mtime=0),
                                    gzip.compress(b"[1, 2]", mtime=0)],
                         ids=["empty", "cut", "not-gzip", "rows-not-a-list", "a-list"])
def test_a_chunk_cut_short_or_damaged_is_replayed_not_trusted(tmp_path, damage):
    Chunks(tmp_path, "code-1").run(list, TASKS[:1], 1)
    (kept,) = tmp_path.glob("*.json.gz")
    kept.write_bytes(damage)
    again = Chunks(tmp_path, "code-1")
    assert again.run(list, TASKS[:1], 1) == [[0, 1, 2]]
    assert again.replayed == 1
    assert Chunks(tmp_path, "code-1").run(list, TASKS[:1], 1) == [[0, 1, 2]]  # and kept again, whole


@pytest.mark.parametrize("rows", [["x"], [[None, 1]], [], [{"to_best": "x", "final": 0.5, "top_trials": 0, "top_stopped": 0,
                                                             "top_paused": 0, "paused": 0}]])
def test_search_replay_replays_a_kept_chunk_whose_rows_are_not_its_replays(tmp_path, rows):
    import importlib.util

    spec = importlib.util.spec_from_file_location("search_replay", ROOT / "bench" / "search_replay.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    task = {"seeds": [0, 1]}
    good = [{"to_best": 500, "final": 0.5, "top_trials": 1, "top_stopped": 0, "top_paused": 0, "paused": 0, "curve": []}]
    assert bench.whole_chunk(task, good)
    Chunks(tmp_path, "code-1").write(task, rows)
    assert Chunks(tmp_path, "code-1", bench.whole_chunk).read(task) is None  # a TypeError or ValueError once summed


def test_the_code_fingerprint_follows_the_replay_s_own_modules_only():
    replay = code_fingerprint(("sweeper.replay",))
    assert replay == code_fingerprint(("sweeper.replay",))
    assert replay == code_fingerprint(("sweeper.replay", "sweeper.pasha"))  # pasha: already imported by replay
    assert replay != code_fingerprint(("sweeper.replay", "sweeper.status"))  # another module: another fingerprint
