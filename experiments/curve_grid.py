"""A grid of learning curves recorded once for the search replay: every cell trained to the end
(no early stopping), every report of every run kept in a committed data file.

The runs go through the service: a sweep (`sweeper launch`) whose baseline points are the cells not
yet recorded. `export` copies each finished run's reports into the data file; `run` exports after
its sweep and skips what the file already has, so a grid interrupted in any way resumes where it
stopped (in a new checkout too: the data file is the record, the sweep folder only a cache).
experiments/switch_grid.py and experiments/adaptive_grid.py are two such grids.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from core.tool_cli import Parser
from experiments.launching import sweeper_launch
from sweeper.cli_types import cpus
from core.errors import ConfigError, brief, cut, short_path
from experiments.record import append_new, finished_trials, git_restore, read_record, write_record

ROOT = Path(__file__).resolve().parent.parent
SWEEPS = ROOT / "sweeps"


@dataclass(frozen=True)
class CurveGrid:
    """One grid: its cells (each a point of `axes`, every axis given), what every run shares, and
    where its record lives."""

    name: str  # its sweeps are `<name>_<digest of the cells to train>`
    data: Path
    axes: tuple[str, ...]
    cells: tuple[dict, ...]  # in the order they train: the first seed's whole grid first
    fixed: dict
    max_steps: int
    eval_every: int
    description: dict  # what the data file says of the grid beside its axes
    cell_of: Callable[[dict], dict]  # a trained trial's config -> its cell
    reads: tuple[str, ...] = ("acc_3x",)  # the metrics its report reads of every report

    def key(self, cell: dict) -> tuple:
        return tuple(cell[a] for a in self.axes)

    def load(self) -> dict:
        """The data file: {"grid": ..., "runs": [{"params": cell, "reports": [report, ...]}, ...]}."""
        axes = {a: sorted({c[a] for c in self.cells}, key=str) for a in self.axes}
        data = read_record(self.data, lambda: {"grid": {"axes": axes, "fixed": self.fixed, "max_steps": self.max_steps,
                                                        "eval_every": self.eval_every, "metric": "acc_3x", "mode": "max",
                                                        **self.description}, "runs": []})
        if problem := self.not_its_record(data):
            raise ConfigError(f"{short_path(self.data, 100)}: {problem}; restore it with {git_restore(self.data)}")
        return data

    def not_its_record(self, data: dict) -> str | None:
        """Why `data` is not this grid's record, or None: every run a cell of the grid, once, with
        the reports of a run finished at `max_steps` (`sweep_chunks.reports_problem`)."""
        from experiments.sweep_chunks import reports_problem

        if not isinstance(data.get("grid"), dict) or data["grid"].get("max_steps") != self.max_steps:
            return f"`grid` is not this grid's description (max_steps {self.max_steps:,})"
        planned, seen = {self.key(c) for c in self.cells}, set()
        for i, run in enumerate(data["runs"]):
            params, reports = run.get("params"), run.get("reports")
            if not isinstance(params, dict) or set(params) != set(self.axes):
                return f"run {i}: `params` must give exactly the grid's axes ({cut(', '.join(self.axes), 80)})"
            if any(isinstance(v, (dict, list)) for v in params.values()) or (key := self.key(params)) not in planned:
                return f"run {i}: {brief(params, 80)} is no cell of the grid"
            if key in seen:
                return f"run {i}: cell {brief(params, 60)} recorded twice"
            seen.add(key)
            if not isinstance(reports, list) or not reports or not all(isinstance(r, dict) for r in reports):
                return f"run {i}: `reports` must be a list of report objects"
            if problem := reports_problem(reports, self.max_steps, self.reads):
                return f"run {i}: reports: {problem}"
        return None

    def save(self, data: dict) -> None:
        data["runs"].sort(key=lambda r: [(isinstance(v, str), v) for v in self.key(r["params"])])
        write_record(self.data, data)

    def missing(self, data: dict) -> list[dict]:
        have = {self.key(r["params"]) for r in data["runs"]}
        return [c for c in self.cells if self.key(c) not in have]

    def space_for(self, todo: list[dict], concurrent: int) -> tuple[str, dict]:
        """A sweep that runs exactly the cells in `todo` (as baseline points), every run to the end."""
        digest = hashlib.sha256(json.dumps([self.key(c) for c in todo]).encode()).hexdigest()[:8]
        name = f"{self.name}_{digest}"
        choices = {a: sorted({c[a] for c in self.cells}, key=str) for a in self.axes}
        space = {
            "name": name,
            "description": f"learning-curve grid {self.name} (experiments/)",
            "metric": "acc_3x", "mode": "max",
            "fixed": self.fixed,
            "space": {a: {"type": "categorical", "choices": choices[a]} for a in self.axes},
            "budget": {"num_samples": len(todo), "max_concurrent": concurrent, "max_steps": self.max_steps,
                       "eval_every": self.eval_every},
            "scheduler": {"type": "fifo"},
            "searcher": {"sampler": "random", "seed": 0, "baseline": todo},
            "resources": {"cpu": 1},
        }
        return name, space

    def finished_runs(self, sweep: Path) -> list[dict]:
        """Each run of the sweep folder that trained every step: its cell and every report."""
        return [{"params": self.cell_of(config), "reports": reports}
                for config, reports, _ in finished_trials(sweep) if config["steps"] == self.max_steps]

    def export(self, sweep_dirs: list[Path] | None = None) -> int:
        """Copy every finished run of the grid's sweep folders into the data file; the number added."""
        data = self.load()
        have = {self.key(r["params"]) for r in data["runs"]}
        planned = {self.key(c) for c in self.cells}
        sweeps = [p for p in (sweep_dirs if sweep_dirs is not None else sorted(SWEEPS.glob(f"{self.name}_*")))
                  if p.is_dir()]
        found = ((self.key(run["params"]), run) for sweep in sweeps for run in self.finished_runs(sweep))
        added = append_new(data["runs"], have, ((k, run) for k, run in found if k in planned))
        if added:
            self.save(data)
        return added

    def run(self, concurrent: int) -> int:
        """Train the cells the data file lacks (one sweep), then export them."""
        import yaml

        todo = self.missing(self.load())
        if not todo:
            print(f"{self.name}: all {len(self.cells)} cells recorded in {self.data.relative_to(ROOT)}")
            return 0
        name, space = self.space_for(todo, concurrent)
        SWEEPS.mkdir(exist_ok=True)
        path = SWEEPS / f"{name}.yaml"
        path.write_text(yaml.safe_dump(space, sort_keys=False))
        print(f"{self.name}: {len(todo)} of {len(self.cells)} cells to train, sweep {name}", flush=True)
        rc = sweeper_launch(path, "--storage", str(SWEEPS), "--progress", "lines", "--progress-every", "300", cwd=ROOT)
        added = self.export([SWEEPS / name])
        print(f"{self.name}: {added} runs added to {self.data.relative_to(ROOT)}; {len(self.missing(self.load()))} cells "
              "left", flush=True)
        return rc

    def status(self) -> str:
        return f"{self.name}: {len(self.load()['runs'])} of {len(self.cells)} cells recorded"


def write_report(path: Path, fig, lines: list[str], alt: str) -> str:
    """A grid's report: its picture at `path`.png, its text (with the picture) at `path`.md; returns the text."""
    fig.tight_layout()
    fig.savefig(path.with_suffix(".png"), dpi=100)
    text = "\n".join([*lines, f"![{alt}]({path.name}.png)", ""])
    path.with_suffix(".md").write_text(text)
    return text


def main(grid: CurveGrid, argv: list[str] | None, prog: str, description: str,
         report: Callable[[], str] | None = None) -> int:
    """A grid's verbs: run, export, status, and report where the grid has one."""
    parser = Parser(prog=prog, description=description)
    sub = parser.add_subparsers(dest="verb", required=True)
    r = sub.add_parser("run", help="train the cells the data file lacks, then export them")
    r.add_argument("--concurrent", type=cpus, default=1, help="runs at once (one core each)")
    sub.add_parser("export", help=f"copy finished runs of sweeps/{grid.name}_* into the data file")
    sub.add_parser("status", help="cells recorded / planned")
    if report is not None:
        sub.add_parser("report", help="the grid's own question: its table and picture")
    args = parser.parse_args(argv)
    if args.verb == "run":
        return grid.run(args.concurrent)
    if args.verb == "report":
        print(report())
    elif args.verb == "export":
        print(f"{grid.name}: {grid.export()} runs added")
    else:
        print(grid.status())
    return 0
