"""`sweeper reproduce --quick`: the plumbing of the reproduction (not the science)."""

import json

import pytest


def test_quick_reproduction_writes_table_plot_and_json(tmp_path, run_sweeper):
    out = tmp_path / "results"
    r = run_sweeper("reproduce", "--quick", "--seeds", "1", "--workers", "2", "--out", out, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    md = (out / "dat_reproduction_quick.md").read_text()
    for system in ("pure LSTM", "pure Transformer", "hybrid, joint", "hybrid + DAT"):
        assert f"| {system} | all |" in md
    assert "![accuracy against evaluation length](dat_reproduction_quick.png)" in md
    assert (out / "dat_reproduction_quick.png").stat().st_size > 10_000
    data = json.loads((out / "dat_reproduction_quick.json").read_text())
    assert len(data["results"]) == 4 and all(r["status"] == "completed" for r in data["results"])
    # every evaluation during training is kept: the quick budget evaluates at steps 20 and 40
    assert all([h["step"] for h in r["history"]] == [20, 40] and "acc_3x" in r["history"][-1] for r in data["results"])
    assert all(h["eval_sequences"] == 32 for r in data["results"] for h in r["history"])  # QUICK: 32 sequences, all
    assert "| DAT's lead |" in md
    # the bar is checked and printed, pass or miss
    assert "hybrid + DAT: mean acc at 3x >= 0.90" in r.stdout


def test_reproduce_rejects_a_bad_override(run_sweeper):
    r = run_sweeper("reproduce", "--quick", "--set", "model.d_model=3", timeout=120)
    assert r.returncode == 2 and "model.d_model" in r.stderr and "Traceback" not in r.stderr


def test_reproduce_refuses_a_seed_override_that_would_train_one_seed_as_every_seed(tmp_path, run_sweeper):
    r = run_sweeper("reproduce", "--quick", "--seeds", "2", "--systems", "lstm", "--set", "seed=3", "--out", str(tmp_path / "o"),
                    timeout=120)
    assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1, (r.returncode, r.stdout, r.stderr)
    assert "--set seed=3" in r.stderr and "--seeds" in r.stderr
    assert not (tmp_path / "o").exists()


def test_reproduce_refuses_a_model_its_runs_at_once_cannot_hold_before_training(tmp_path, run_sweeper):
    # `--set model.d_model=4096 --set model.n_layers=64` (a model of ~240 GB): it printed its plan and began
    # training, where `sweeper trial` and a sweep refuse it in one line
    r = run_sweeper("reproduce", "--quick", "--systems", "transformer", "--set", "model.d_model=4096", "--set",
                    "model.n_layers=64", "--out", str(tmp_path / "o"), timeout=120)
    assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1, (r.returncode, r.stdout, r.stderr)
    assert "GB of memory" in r.stderr and "available" in r.stderr and not (tmp_path / "o").exists()


def test_gap_table_reads_both_hybrids_at_every_interval_and_the_end():
    from experiments.reproduce import curves, gap_table

    def run(system, seed, accs):
        return {"system": system, "seed": seed, "history": [{"step": 500 * (i + 1), "acc_3x": a} for i, a in enumerate(accs)]}

    results = [run("hybrid_joint", 0, [0.2, 0.5, 0.6]), run("hybrid_joint", 1, [0.4, 0.7, 0.8]),
               run("hybrid_dat", 0, [0.1, 0.9, 1.0]), run("hybrid_dat", 1, [0.3, 0.9, 0.96])]
    assert curves(results)["hybrid_joint"] == [(500, pytest.approx(0.3)), (1000, pytest.approx(0.6)), (1500, pytest.approx(0.7))]
    table = gap_table(results, every=1000).splitlines()
    assert table[0] == "| training step | 1000 | 1500 |"
    assert table[2] == "| hybrid, joint: acc 3x | 0.600 | 0.700 |"
    assert table[3] == "| hybrid + DAT: acc 3x | 0.900 | 0.980 |"
    assert table[4] == "| DAT's lead | +0.300 | +0.280 |"
    assert len(table) == 5  # no evaluation counts recorded: no row for them
    for r in results:  # the mid-run subsets, then the full sets at the end
        for h, n in zip(r["history"], (64, 64, 256)):
            h["eval_sequences"] = float(n)
    assert gap_table(results, every=1000).splitlines()[5] == "| sequences per length evaluated | 64 | 256 |"
    # a step not every seed reached (a diverged seed) is left out of the mean
    results[1]["history"].pop()
    assert [s for s, _ in curves(results)["hybrid_joint"]] == [500, 1000]


def test_a_reproduction_killed_with_sigkill_leaves_no_worker_training(tmp_path):
    """Its pool's workers end with it: a SIGKILLed driver cannot end them itself."""
    import contextlib
    import os
    import signal
    import subprocess
    import time

    import psutil

    from tests.conftest import ROOT, sweeper_cmd

    driver = subprocess.Popen(sweeper_cmd("reproduce", "--seeds", "2", "--systems", "lstm", "--workers", "2",
                                          "--set", "steps=1000000"),
                              cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    workers: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 240
        while len(workers) < 2 and driver.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
            with contextlib.suppress(psutil.Error):  # a child that ended between the listing and its reading
                workers = [p for p in psutil.Process(driver.pid).children() if "spawn_main" in " ".join(p.cmdline())]
        assert len(workers) == 2, driver.stderr.read() if driver.poll() is not None else "the pool's two workers never started"
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        gone, alive = psutil.wait_procs(workers, timeout=60)
        assert alive == [], f"workers {[p.pid for p in alive]} still train after their driver was killed"
    finally:  # what is left of the driver and of its workers, orphaned or not; nothing else this process started
        with contextlib.suppress(psutil.Error):
            workers += psutil.Process(driver.pid).children(recursive=True)
        for p in workers:
            with contextlib.suppress(psutil.Error):
                p.kill()
        driver.kill()
        driver.wait()
