"""The layout keeps its promises: frameworks only in their adapters, a trainer that runs without
them, one module per CLI verb, and no private part of a library used anywhere."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path


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
    expected = {"ray_tune": "ray", "ray_search": "ray", "ray_trainable": "ray", "ray_jobs": "ray", "ray_warm": "ray",
                "optuna_search": "optuna",
                "optuna_ledger": "optuna", "mlflow_store": "mlflow", "mlflow_tracking": "mlflow",
                "mlflow_summary": "mlflow"}
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


FOREIGN_LIBRARIES = ("ray", "optuna", "mlflow")
PRIVATE_FILES = ("tuner.pkl", "experiment_state", "searcher-state", "search_gen_state", "driver_artifacts",
                 "alembic_version", "trial_values", "trial_intermediate_values", "study_user_attributes")
RAW_SQL = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE)\b.+\b(FROM|INTO|SET)\b", re.IGNORECASE | re.DOTALL)
SOURCE_FILES = sorted(p for folder in ("sweeper", "trainables", "experiments", "bench", "docker", "docs", "k8s")
                      for p in (ROOT / folder).rglob("*.py"))


def own_private_names(files: list[Path]) -> set[str]:
    """Every `_name` the project defines: its functions, classes, attributes, variables and arguments."""
    names = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
    return {n for n in names if n.startswith("_")}


def private_uses(files: list[Path], own: set[str]) -> list[str]:
    """`x._name` the project did not define, a private keyword argument, a private import from a
    library, SQL, or a library's private file named in a string."""
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{path.name}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                stdlib = isinstance(node.value, ast.Name) and node.value.id in sys.stdlib_module_names
                if node.attr not in own and not stdlib:
                    found.append(f"{where}: .{node.attr}")
            elif isinstance(node, ast.keyword) and node.arg and node.arg.startswith("_"):
                found.append(f"{where}: keyword {node.arg}=")
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in FOREIGN_LIBRARIES:
                if any(part.startswith("_") for part in node.module.split(".")) or any(a.name.startswith("_") for a in node.names):
                    found.append(f"{where}: from {node.module} import {', '.join(a.name for a in node.names)}")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                if RAW_SQL.search(node.value) or any(name in node.value for name in PRIVATE_FILES):
                    found.append(f"{where}: {node.value[:60]!r}")
    return found


def test_no_private_part_of_ray_optuna_or_mlflow_is_used():
    """Public APIs only, in the service, the trainer, the experiments, the benchmarks and the scripts."""
    found = private_uses(SOURCE_FILES, own_private_names(SOURCE_FILES))
    assert not found, "private parts of a library: " + "; ".join(found)


def test_the_private_part_scan_finds_what_it_looks_for(tmp_path):
    """The scan above can fail: each kind of private use it names is found in a planted file."""
    planted = tmp_path / "planted.py"
    planted.write_text("import optuna\nfrom ray._private import utils\nstudy._storage.get_trial(1)\n"
                       "ray.init(_node_ip_address='127.0.0.1')\nq = 'SELECT study_id FROM studies'\np = 'tuner.pkl'\n")
    found = " ".join(private_uses([planted], own_private_names(SOURCE_FILES)))
    for expected in ("._storage", "_node_ip_address=", "ray._private", "SELECT study_id", "tuner.pkl"):
        assert expected in found, expected
