"""An older commit of this repository, checked out beside it, for side-by-side benchmarks."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def baseline_tree(rev: str) -> Path:
    """`/tmp/baseline-<sha7>`: a detached `git worktree` of `rev`, added on first use and kept for the next."""
    sha = subprocess.run(["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.strip()
    tree = Path(f"/tmp/baseline-{sha[:7]}")
    if not (tree / "trainables").is_dir():
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), sha], cwd=ROOT, check=True,
                       capture_output=True)
    return tree
