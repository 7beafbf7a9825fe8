"""An older commit of this repository, checked out beside it, for side-by-side benchmarks."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from core.errors import ConfigError, brief

ROOT = Path(__file__).resolve().parent.parent


def baseline_tree(rev: str) -> Path:
    """`$TMPDIR/baseline-<sha7>`: a detached `git worktree` of `rev`, added on first use and kept for
    the next. A `rev` that names no commit of this repository is one line (ConfigError)."""
    found = subprocess.run(["git", "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"],
                           cwd=ROOT, capture_output=True, text=True)
    if found.returncode != 0:
        raise ConfigError(f"--baseline {brief(rev, 60)}: names no commit of this repository")
    sha = found.stdout.strip()
    tree = Path(tempfile.gettempdir()) / f"baseline-{sha[:7]}"
    if not (tree / "trainables").is_dir():
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), sha], cwd=ROOT, check=True,
                       capture_output=True)
    return tree
