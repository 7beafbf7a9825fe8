"""The CLI's surface: every verb and option has help, every help answers without heavy imports,
one meaning of "status", and the README lists every verb and preset."""

import argparse
import re
import subprocess
import sys

import pytest

from conftest import ROOT
from sweeper.cli import build_parser
from trainables.config import preset_names

HEAVY = ("torch", "ray", "optuna", "mlflow", "rich", "optuna_dashboard", "matplotlib")


def _subparsers(parser: argparse.ArgumentParser, prefix=()):
    """(argv prefix, parser) for the parser and every sub-parser under it, depth first."""
    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _subparsers(sub, (*prefix, name))


PARSERS = list(_subparsers(build_parser()))
VERBS = [p for p, _ in PARSERS if len(p) == 1]


def test_every_verb_and_option_has_help():
    for argv, parser in PARSERS:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    assert choice.help, (argv, choice.dest)
            elif action.help != argparse.SUPPRESS:  # the moved `submit --status/--logs/--stop` say so when used
                assert action.help and len(action.help) > 10, (argv, action.option_strings or action.dest)


def test_status_means_a_sweeps_progress_and_jobs_have_their_own_verb():
    assert ("job", "status") in {p for p, _ in PARSERS} and ("job", "logs") in {p for p, _ in PARSERS}
    submit = dict(PARSERS)[("submit",)]
    visible = {o for a in submit._actions if a.help != argparse.SUPPRESS for o in a.option_strings}
    assert not visible & {"--status", "--logs", "--stop"}


@pytest.mark.parametrize("argv", [p for p, _ in PARSERS], ids=lambda p: " ".join(p) or "sweeper")
def test_help_answers_without_heavy_imports(argv, tmp_path):
    # `-X importtime` names every module the process imported; the CLI start-up time itself is a
    # benchmark (bench/cli_startup.py), not a test
    cmd = [sys.executable, "-X", "importtime", "-m", "sweeper.cli", *argv, "--help"]
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "usage: sweeper" in r.stdout, r.stderr
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in r.stderr.splitlines() if "|" in line}
    assert "argparse" in imported, r.stderr[-500:]  # the trace is there
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))


def test_building_the_parser_imports_nothing_heavy():
    code = ("import sys; from sweeper.cli import build_parser; build_parser(); "
            f"print([m for m in {HEAVY!r} if m in sys.modules])")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


def test_the_readme_lists_every_verb_and_preset():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## The CLI", 1)[1].split("```", 2)[1]
    listed = set(re.findall(r"^sweeper (\w+)", block, re.M))
    assert listed == {v[0] for v in VERBS}, listed ^ {v[0] for v in VERBS}
    presets = readme.split("Presets for `sweeper trial`:", 1)[1].split("\n\n", 1)[0]
    assert set(preset_names()) <= set(re.findall(r"`(\w+)`", presets)), preset_names()


def test_the_sweep_drivers_modules_do_not_import_torch():
    """The driver builds the trainable but does not train: torch (and the trainer) load in the trial's process.
    (A local sweep with resources.gpu > 0 imports torch to count the GPUs, and a resume to read checkpoints.)"""
    code = ("import sys; import sweeper.adapters.ray_tune, sweeper.adapters.mlflow_tracking, sweeper.commands.launch; "
            "print('torch' in sys.modules, 'trainables.train' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.split() == ["False", "False"], r.stdout + r.stderr


INTERRUPT_AT_IMPORT = """
import runpy, sys
module, sys.argv = sys.argv[1], ["sweeper", *sys.argv[2:]]
class Interrupt:  # Ctrl-C arriving while `module` loads, at the same point every run
    def find_spec(self, name, path=None, target=None):
        if name == module:
            raise KeyboardInterrupt
sys.meta_path.insert(0, Interrupt())
runpy.run_module("sweeper.cli", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("module, argv", [("trainables.config", ["validate", "x.yaml"]),  # the CLI's own imports
                                          ("sweeper.commands.status", ["status"])])  # a verb's, as it runs
def test_ctrl_c_while_the_command_line_loads_is_one_word_not_a_traceback(tmp_path, module, argv):
    r = subprocess.run([sys.executable, "-c", INTERRUPT_AT_IMPORT, module, *argv], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert (r.returncode, r.stderr, r.stdout) == (130, "interrupted\n", ""), r.stderr[-2000:]
