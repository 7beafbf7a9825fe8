"""Shared fixtures: the project root, and a `sweeper` subprocess runner."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def sweeper_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "sweeper.cli", *map(str, args)]


@pytest.fixture
def run_sweeper(tmp_path):
    """Run `sweeper ARGS` in tmp_path (so ./sweeps and ./mlflow.db land there)."""

    def run(*args, timeout=600, env=None):
        full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        return subprocess.run(sweeper_cmd(*args), cwd=tmp_path, capture_output=True, text=True, timeout=timeout, env=full_env)

    return run
