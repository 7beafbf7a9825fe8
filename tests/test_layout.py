"""The layout keeps its promises: frameworks only in their adapters, a trainer that runs without
them, one module per CLI verb, and the framework internals the adapters rely on still there."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FRAMEWORKS = ("ray", "optuna", "mlflow", "optuna_dashboard")
ADAPTERS = ROOT / "sweeper" / "adapters"


def imported_roots(path: Path) -> set[str]:
    """Top-level packages a module imports anywhere (module level or inside functions)."""
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_only_the_adapters_import_ray_optuna_or_mlflow():
    offenders = []
    for package in ("sweeper", "trainables", "experiments"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if ADAPTERS in path.parents:
                continue
            used = imported_roots(path) & set(FRAMEWORKS)
            if used:
                offenders.append(f"{path.relative_to(ROOT)}: {sorted(used)}")
    assert not offenders, "framework imports outside sweeper/adapters/: " + "; ".join(offenders)


def test_each_adapter_imports_its_framework():
    expected = {"ray_tune": "ray", "ray_trainable": "ray", "ray_jobs": "ray", "optuna_search": "optuna", "mlflow_tracking": "mlflow"}
    found = {p.stem: imported_roots(p) for p in ADAPTERS.glob("*.py") if p.stem != "__init__"}
    assert set(found) == set(expected), f"adapters changed: {sorted(found)}"
    for stem, framework in expected.items():
        assert framework in found[stem], f"sweeper/adapters/{stem}.py does not import {framework}"


def test_the_trainer_imports_and_trains_with_every_framework_blocked(tmp_path):
    """trainables/ on its own: importing ray, optuna or mlflow would raise; a tiny run resumes
    from its checkpoint and a finished run resumed reports nothing new."""
    script = f"""
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {FRAMEWORKS!r}:
            raise ImportError('blocked: ' + name)
sys.meta_path.insert(0, Block())
import pkgutil, importlib, trainables
for m in pkgutil.iter_modules(trainables.__path__):
    importlib.import_module('trainables.' + m.name)
from trainables.config import load_trial_config, with_overrides
from trainables.train import train
cfg = with_overrides(load_trial_config('tiny'), {{'steps': 20, 'eval.every': 10}})
seen = []
def report(metrics, ckpt):
    seen.append(metrics['step'])
    if ckpt:
        import shutil; shutil.copytree(ckpt, {str(tmp_path / 'ckpt')!r}, dirs_exist_ok=True)
train(cfg, report=report)
assert seen and seen[-1] == 20, seen
again = []
train(cfg, report=lambda m, c: again.append(m['step']), resume_from={str(tmp_path / 'ckpt')!r})
print('reports after resuming a finished run:', again)
assert again == [], again
print('ok', sorted(k for k in sys.modules if k.split('.')[0] in {FRAMEWORKS!r}))
"""
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("ok []"), out.stdout


def test_every_verb_is_one_module_under_commands():
    from sweeper.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "verb")  # argparse keeps subparsers here
    modules = {p.stem for p in (ROOT / "sweeper" / "commands").glob("*.py")} - {"__init__"}
    for verb, verb_parser in sub.choices.items():
        func = verb_parser.get_default("func")
        if func is None:  # `job` has sub-verbs of its own
            inner = next(a for a in verb_parser._actions if a.choices)
            func = next(iter(inner.choices.values())).get_default("func")
        owner = getattr(func, "module", func.__module__)
        assert owner.startswith(("sweeper.commands.", "experiments.")), f"{verb}: handled by {owner}"
        if owner.startswith("sweeper.commands."):
            assert owner.split(".")[-1] in modules


def test_the_optuna_and_ray_internals_the_adapters_use_still_exist():
    """The pinned Ray and Optuna have no public API for these; when an upgrade moves them, this fails
    here instead of in the middle of a sweep (sweeper/adapters/ray_tune.py, optuna_search.py)."""
    optuna = pytest.importorskip("optuna")
    from sweeper.adapters.ray_tune import StepAwareOptunaSearch

    search = StepAwareOptunaSearch(space=lambda trial: {"x": trial.suggest_float("x", 0, 1)}, metric="m", mode="max",
                                   max_steps=10, storage=optuna.storages.InMemoryStorage())
    assert search.suggest("t0") is not None
    for name in ("_ot_trials", "_ot_study", "_completed_trials"):
        assert hasattr(search, name), f"OptunaSearch.{name} is gone"
    ot_trial = search._ot_trials["t0"]
    assert isinstance(ot_trial._trial_id, int)
    assert search._ot_study._storage.get_trial(ot_trial._trial_id).state == optuna.trial.TrialState.RUNNING
    dist = optuna.distributions.IntDistribution(0, 10, step=2)
    assert dist._contains(dist.to_internal_repr(4)) and not dist._contains(dist.to_internal_repr(5))


def _one_float(trial) -> dict:  # a space that pickles, as the searcher's snapshot needs
    return {"x": trial.suggest_float("x", 0, 1)}


def test_a_retrained_step_is_told_to_the_study_once_and_without_a_warning(tmp_path, recwarn):
    """A resumed trial repeats the steps since its last checkpoint (a large sweep's period, or a snapshot
    older than its last report): the study keeps the first value, and Optuna is not asked again."""
    optuna = pytest.importorskip("optuna")
    from sweeper.adapters.ray_tune import StepAwareOptunaSearch

    def searcher():
        return StepAwareOptunaSearch(space=_one_float, metric="m", mode="max", max_steps=40, storage=optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/s.db"),
                                     study_name="s")

    search = searcher()
    search.suggest("t0")
    for step, m in ((10, 0.1), (20, 0.2)):
        search.on_trial_result("t0", {"m": m, "step": step})
    search.save(str(tmp_path / "searcher.pkl"))
    search.on_trial_result("t0", {"m": 0.3, "step": 30})  # after the snapshot, then a kill

    resumed = searcher()
    resumed.restore(str(tmp_path / "searcher.pkl"))
    for step, m in ((20, 0.2), (30, 0.3), (40, 0.4)):  # retrained from the step-10 checkpoint's successor
        resumed.on_trial_result("t0", {"m": m, "step": step})
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path}/s.db")
    assert study.trials[0].intermediate_values == {10: 0.1, 20: 0.2, 30: 0.3, 40: 0.4}
    assert not [w for w in recwarn if "already reported" in str(w.message)]
