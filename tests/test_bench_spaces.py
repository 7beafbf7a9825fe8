"""The search spaces the benchmarks generate are valid spaces (a schema change would otherwise surface
only when a benchmark runs, on a GPU machine for bench/gpu_sweep.py)."""

import importlib.util

import pytest

from conftest import ROOT
from sweeper.space_file import load_space


def _bench(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("gpu", [1, 0.5, 0.25, 0.125])
def test_gpu_sweep_space_packs_trials_on_one_gpu(tmp_path, gpu):
    path = _bench("gpu_sweep").gpu_space_file(tmp_path, "g", trials=8, steps=1000, gpu=gpu)
    spec = load_space(path, n_samples=0)
    assert spec.resources.gpu == gpu and spec.budget.num_samples == 8 and spec.budget.max_steps == 1000
    assert [p["seed"] for p in spec.searcher.baseline] == list(range(8))  # the N fixed trials


def test_sweep_overhead_space_is_valid(tmp_path):
    spec = load_space(_bench("sweep_overhead").overhead_space_file(tmp_path, trials=4, steps=500, concurrent=2), n_samples=0)
    assert spec.budget.max_concurrent == 2 and spec.resources.gpu == 0


def test_cli_startup_bench_times_both_commands_of_the_target():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "cli_startup.py"), "--rounds", "1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [ln for ln in proc.stdout.splitlines() if "target <= 1 s" in ln]
    assert [ln.split(" new ")[0].strip() for ln in lines] == ["sweeper --help", "sweeper validate search_spaces/switch_time.yaml"]


def test_sweep_overhead_dates_the_first_trial_from_its_process_and_ray_time():
    import os

    import psutil

    bench = _bench("sweep_overhead")
    born = psutil.Process().create_time()
    marks = bench.first_trial_marks({"metrics": {"pid": os.getpid(), "time_total_s": 2.0}}, launched_epoch=born - 1.0,
                                    first_report=5.0)
    assert marks["worker"] == pytest.approx(1.0, abs=0.02)  # this process started 1 s after the "launch"
    assert marks["trainable"] == pytest.approx(3.0)  # Ray's time_total_s counts back from the report
    assert bench.first_trial_marks({"metrics": {}}, launched_epoch=born, first_report=5.0) == {}  # no pid: no marks


def test_sweep_overhead_counts_the_cpu_of_a_process_and_its_children():
    import os
    import subprocess
    import sys
    import time

    bench = _bench("sweep_overhead")

    def beside_us() -> float:  # all that tree_cpu_s counts but this process's own CPU
        return bench.tree_cpu_s(os.getpid()) - sum(os.times()[:2])

    before = beside_us()  # children this process already waited for count too
    busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\ntime.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", busy])
    try:
        deadline = time.monotonic() + 20
        while beside_us() - before < 0.25:  # the running child's 0.3 s of CPU, counted under us
            assert time.monotonic() < deadline, "the busy child's CPU never showed in tree_cpu_s"
            time.sleep(0.1)
    finally:
        child.kill()
        child.wait()


def test_trainer_speed_reads_mallocs_live_bytes():
    # the memory run tells growth of live allocations from RSS the allocator keeps: the reading must
    # follow a tensor's allocation and its release
    import torch

    heap_mib = _bench("trainer_speed")._heap_mib
    if heap_mib() is None:
        pytest.skip("glibc 2.33+'s mallinfo2 is not available here")
    before = heap_mib()
    block = torch.ones(64 * 2**20 // 4)  # 64 MiB of float32, touched
    held = heap_mib()
    del block
    after = heap_mib()
    assert 60 < held - before < 70, (before, held)
    assert abs(after - before) < 4, (before, after)
