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
    for package in ("core", "sweeper", "trainables", "experiments"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if ADAPTERS in path.parents:
                continue
            used = imported_roots(path) & set(FRAMEWORKS)
            if used:
                offenders.append(f"{path.relative_to(ROOT)}: {sorted(used)}")
    assert not offenders, "framework imports outside sweeper/adapters/: " + "; ".join(offenders)


def test_each_adapter_imports_its_framework():
    expected = {"ray_tune": "ray", "ray_search": "ray", "ray_trainable": "ray", "ray_jobs": "ray", "ray_warm": "ray",
                "optuna_search": "optuna", "optuna_trial": "optuna",
                "optuna_ledger": "optuna", "optuna_study": "optuna", "optuna_checks": "optuna", "mlflow_store": "mlflow", "mlflow_tracking": "mlflow",
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
SOURCE_FILES = sorted(p for folder in ("core", "sweeper", "trainables", "experiments", "bench", "docker", "docs", "k8s")
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


SWEEPER_FILES = sorted((ROOT / "sweeper").rglob("*.py"))
CLI_LAYER = ("cli.py", "commands")  # where a verb talks to the terminal


def _in_cli_layer(path: Path) -> bool:
    rel = path.relative_to(ROOT / "sweeper").parts
    return rel[0] in CLI_LAYER


def test_no_module_of_the_service_is_over_300_lines():
    long = [f"{p.relative_to(ROOT)}: {n}" for p in SWEEPER_FILES if (n := len(p.read_text().splitlines())) > 300]
    assert not long, long


def import_graph(files: list[Path], package: str) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, at module level or inside functions."""
    names = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p for p in files}
    graph = {}
    for name, path in names.items():
        graph[name] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                continue
            graph[name] |= {t for t in targets if t in names and t != name and t.startswith(package)}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of `graph`: each a path that comes back to where it started."""
    found, done = [], set()

    def visit(node: str, path: list[str]) -> None:
        for nxt in sorted(graph[node]):
            if nxt in path:
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in done:
                visit(nxt, path + [nxt])
        done.add(node)

    for start in sorted(graph):
        if start not in done:
            visit(start, [start])
    return found


def test_no_import_circle_in_the_service_counting_imports_inside_functions():
    assert cycles(import_graph(SWEEPER_FILES, "sweeper")) == []


def test_the_circle_finder_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


PROGRAMS = {"server_guard.py"}  # a program of its own (`python -I`, standard library only): its usage line is its CLI


def test_library_code_neither_prints_nor_swaps_the_process_streams_nor_takes_a_namespace():
    """A sweep speaks through events; only the command line (cli.py, commands/) and the terminal
    views (live*.py) write to the terminal, and only the command line holds argparse's Namespace."""
    found = []
    for path in SWEEPER_FILES:
        terminal = _in_cli_layer(path) or path.name.startswith("live") or path.name in PROGRAMS
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print" and not terminal:
                found.append(f"{where}: print")
            elif isinstance(node, (ast.Assign, ast.AugAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(target, ast.Attribute) and target.attr in ("stdout", "stderr"):
                        found.append(f"{where}: sys.{target.attr} reassigned")
            elif isinstance(node, ast.Attribute) and node.attr == "Namespace" and path.name != "cli.py":
                found.append(f"{where}: argparse.Namespace")
    assert not found, found


def test_no_module_level_mutable_state_in_the_service():
    """Nothing one sweep could leave for another in the same process: no `global`, and no
    module-level list, dict or set that is not a constant (an UPPER_CASE name never mutated)."""
    found = []
    for path in SWEEPER_FILES:
        tree = ast.parse(path.read_text())
        constants = set()
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            value = getattr(node, "value", None)
            container = isinstance(value, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)) or (
                isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in ("list", "dict", "set"))
            for target in targets:
                if isinstance(target, ast.Name) and container:
                    if not target.id.isupper():
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {target.id}")
                    constants.add(target.id)
        for node in ast.walk(tree):
            if isinstance(node, ast.Global):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: global {', '.join(node.names)}")
            mutated = (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                       and node.func.attr in ("append", "extend", "update", "clear", "pop", "setdefault", "add", "remove")
                       and isinstance(node.func.value, ast.Name) and node.func.value.id in constants)
            stored = (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store)
                      and isinstance(node.value, ast.Name) and node.value.id in constants)
            if mutated or stored:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: a module-level container mutated")
    assert not found, found


def test_the_service_imports_no_experiment_and_the_core_imports_neither_of_its_users():
    """experiments/ build on the service (and add their verbs through the `sweeper.verbs` entry
    point), never the other way round; core/ sits below sweeper/ and trainables/."""
    wrong = [f"{p.relative_to(ROOT)}" for p in SWEEPER_FILES if "experiments" in imported_roots(p)]
    wrong += [f"{p.relative_to(ROOT)}" for p in (ROOT / "core").rglob("*.py")
              if imported_roots(p) & {"sweeper", "trainables", "experiments"}]
    assert not wrong, wrong
