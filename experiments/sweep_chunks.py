"""An experiment's runs trained through the sweep service, one chunk of cells per sweep, and
copied into its committed record as they finish.

An experiment is a plan (what the record still misses, from the record alone) and a `Chunks`:
where its sweeps and record live and how a cell becomes a sweep. `run` trains what the plan asks,
a sweep at a time, exporting after each; interrupted in any way, the same call resumes: a chunk's
sweep continues from its checkpoints, and what the record holds is not trained again.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from core.errors import ConfigError, brief, cut, short_path
from experiments.launching import sweeper_launch
from experiments.parking import park, unpark
from experiments.record import (append_new, finished_trials, git_restore, head_commit, provenance, provenance_problem,
                                read_commit, read_record, record_lock, write_record)
from trainables.safe_yaml import read_yaml

ROOT = Path(__file__).resolve().parent.parent
ACCURACY = re.compile(r"(^|_)acc(_|$)")  # a metric that is a share of targets right: in [0, 1]
COMMIT_SUFFIX = ".commit"  # beside a sweep's file: the commit it was first launched from


def reports_problem(reports: list[dict], budget: int, reads) -> str | None:
    """Why a run's reports (a non-empty list of objects) are not a finished run's, or None: steps
    that are numbers rising from above 0 to the budget, each report holding every metric read
    (`reads`) as a number, its accuracies within [0, 1]."""
    from trainables.run_dir import is_number

    steps = [rep.get("step") for rep in reports]
    if not all(is_number(s) for s in steps) or steps[0] < 1 or any(a >= b for a, b in zip(steps, steps[1:])):
        return f"steps {brief(steps, 40)} do not rise from above 0"
    if steps[-1] != budget:
        return f"the last is at step {brief(steps[-1], 20)}, not the budget {budget} (a recorded run is finished)"
    for rep in reports:
        if missing := [m for m in reads if m not in rep]:
            return f"step {rep['step']} lacks {cut(', '.join(missing), 60)}, which the experiment reads"
        if wrong := next((m for m in reads if not is_number(rep[m])), None):
            return f"step {rep['step']}: {cut(wrong, 40)} is {brief(rep[wrong], 20)}, not a number"
    for rep in reports:
        if wrong := next((m for m, v in rep.items() if ACCURACY.search(m) and not (is_number(v) and 0 <= v <= 1)), None):
            return f"{cut(wrong, 40)} {brief(rep[wrong], 20)} at step {rep['step']} is not an accuracy in [0, 1]"
        if "steps_per_s" in rep and not (is_number(rep["steps_per_s"]) and 1e-3 <= rep["steps_per_s"] <= 1e7):
            return f"steps_per_s {brief(rep['steps_per_s'], 20)} at step {rep['step']} is not a training speed"
    return None


class Planned(Protocol):
    """What the driver reads of an experiment's plan."""

    phase: str  # "done" when nothing is left
    budget: int  # the chunk's training steps
    switch: int | None  # the switch step the rules chose, None before
    todo: list  # the cells still to train in this phase
    notes: list  # what the rules decided so far, one line each


@dataclass(frozen=True)
class Chunks:
    """Where an experiment's sweeps and record live, and how its cells become sweeps."""

    label: str  # the experiment's module in experiments/, which names it in messages
    title: str  # what it asks, in each sweep's description
    prefix: str  # each sweep is named prefix + a digest of its cells
    folder: Path  # the sweeps' storage (sweep files and folders)
    record: Path  # the committed record, gzipped JSON
    fixed: dict  # the trial config every cell shares
    axes: tuple[str, ...]  # the dotted keys a cell may set (each is searched, never fixed)
    eval_every: int
    concurrent: int  # runs at once, one CPU each
    key: Callable[[int, dict], tuple]  # (budget, cell) -> the run's identity
    params_of: Callable[[dict], dict]  # trial config -> its cell
    new_record: Callable[[], dict]  # the record before its first run: {"design": ..., "runs": []}
    reads: tuple[str, ...] = ()  # the metrics the plan and report read of every report of a run
    parked: Path | None = None  # the committed tarball of its unfinished sweeps (experiments/parking.py)

    def load(self) -> dict:
        """The record; one ConfigError line when a run of it is not one this experiment records."""
        data = read_record(self.record, self.new_record)
        seen: dict[tuple, int] = {}
        for i, r in enumerate(data.get("runs", [])):
            if (why := self._not_a_run(r)) is None and (first := seen.setdefault(self.key(r["budget"], r["params"]), i)) != i:
                why = f"the same run as run {first}"
            if why is not None:
                raise ConfigError(f"{short_path(self.record, 100)}: run {i}: {why}; restore it with {git_restore(self.record)}")
        return data

    def _not_a_run(self, r: dict) -> str | None:
        """Why a run of the record is not one this experiment records, or None: an integer `budget`,
        `params` of plain values that name every axis, `reports` a non-empty list of numbers by step."""
        if not (type(r.get("budget")) is int and isinstance(r.get("params"), dict) and isinstance(r.get("reports"), list)):
            return "not a recorded run (an integer `budget`, `params` an object, `reports` a list)"
        if any(not isinstance(v, (str, int, float)) for v in r["params"].values()):
            return "params: every value must be a text or a number"
        try:
            self.key(r["budget"], r["params"])
        except KeyError as err:
            return f"params: lacks {cut(str(err), 60)}"
        if (why := self._not_a_config(r["budget"], r["params"])) is not None:
            return why
        if not r["reports"]:
            return "reports: none"
        if (why := provenance_problem(r)) is not None:
            return why
        for report in r["reports"]:
            if not isinstance(report, dict) or type(report.get("step")) is not int or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in report.values()):
                return f"reports: {brief(report, 40)} is not a report (a whole `step` and finite numbers)"
        return self.not_its_reports(r["budget"], r["reports"])

    def not_its_reports(self, budget: int, reports: list[dict]) -> str | None:
        """Why the reports are not what a finished run of this experiment reports, or None (`reports_problem`)."""
        problem = reports_problem(reports, budget, self.reads)
        return problem and f"reports: {problem}"

    def _not_a_config(self, budget: int, params: dict) -> str | None:
        """Why a run's budget and cell make no trial config of this experiment, or None: each value of
        the kind and range the trainer takes, as it is (a text `'3000'` would be read as 3000 by the
        trainer, but names another run here, and the plan would train that cell again)."""
        import copy

        from trainables.config import flatten, set_dotted, trial_config_from_dict

        data, given = copy.deepcopy(self.fixed), {"steps": budget, **params}
        try:
            for dotted, value in given.items():
                set_dotted(data, dotted, value, "run")
            config = flatten(trial_config_from_dict(data, "run").model_dump())
        except ConfigError as err:
            return cut(str(err).removeprefix("run: "), 160)
        for dotted, value in given.items():
            if type(config.get(dotted)) is not type(value) or config.get(dotted) != value:
                return f"{cut(dotted, 40)}: {brief(value, 30)} is not the trainer's own value ({brief(config.get(dotted), 30)})"
        return None

    def save(self, data: dict) -> None:
        data["runs"].sort(key=lambda r: self.key(r["budget"], r["params"]))
        write_record(self.record, data)

    def recorded(self, data: dict) -> set[tuple]:
        """The keys of the runs the record holds."""
        return {self.key(r["budget"], r["params"]) for r in data["runs"]}

    def finished_runs(self, sweep: Path) -> list[dict]:
        """Each run of a sweep folder that trained its every step: its budget, cell, reports and
        provenance (the commit the sweep was first launched from: COMMIT_SUFFIX beside its file)."""
        commit = read_commit(sweep.parent / f"{sweep.name}{COMMIT_SUFFIX}")
        runs = []
        for config, reports, times in finished_trials(sweep):
            try:
                params = self.params_of(config)
            except (KeyError, TypeError, AttributeError) as err:
                raise ConfigError(f"{short_path(sweep, 80)}: a finished trial's config lacks {cut(str(err), 60)} "
                                  f"(not a config of {self.label}); move that trial's folder away") from None
            run = {"budget": config["steps"], "params": params, "reports": reports, **provenance(config, times, commit)}
            if (why := self._not_a_run(run)) is not None:  # the record's reader would refuse it, and every verb after
                raise ConfigError(f"{short_path(sweep, 80)}: a finished trial is not a run of {self.label} ({why}); "
                                  "move that trial's folder away")
            runs.append(run)
        return runs

    def export(self) -> int:
        """Copy every finished run of this experiment's sweeps into the record; the number added."""
        with record_lock(self.record):
            data = self.load()
            if added := self._collect(data):
                self.save(data)
            return added

    def _collect(self, data: dict) -> int:
        """Add to the record `data` (in memory) the finished runs of the sweeps it lacks; how many."""
        sweeps = sorted(p for p in self.folder.glob(f"{self.prefix}*") if p.is_dir())
        return append_new(data["runs"], self.recorded(data), ((self.key(run["budget"], run["params"]), run)
                                                            for sweep in sweeps for run in self.finished_runs(sweep)))

    def unfinished(self, sweep: Path, recorded: set[tuple]) -> bool:
        """Whether a sweep folder's runs are not all in the record (`recorded`: its keys), as its
        sweep file beside it names them; one ConfigError line when that file is missing or not one
        this experiment wrote."""
        path = sweep.parent / f"{sweep.name}.yaml"
        space = read_yaml(path)
        try:
            wanted = {self.key(space["budget"]["max_steps"], c) for c in space["searcher"]["baseline"]}
        except (KeyError, TypeError, AttributeError):
            raise ConfigError(f"{short_path(path, 100)}: not a sweep file of {self.label} (no budget.max_steps and "
                              "searcher.baseline cells); put it back, or move the sweep's folder away") from None
        return not wanted <= recorded

    def park(self) -> list[str]:
        """Pack the stopped, unfinished sweeps into `parked` (removed when there is none); their names."""
        if self.parked is None:
            raise ConfigError(f"{self.label}: keeps no parked sweeps")
        with record_lock(self.record):  # one park or unpark at a time (parking.py)
            data = self.load()
            added = self._collect(data)  # finished runs are recorded, not parked: written once the park is done
            recorded = self.recorded(data)
            names = park(self.folder, self.prefix, lambda sweep: self.unfinished(sweep, recorded), self.parked)
            if added:
                self.save(data)
            return names

    def unpark(self) -> list[str]:
        """Put the parked sweeps back where no sweep of their name is; their names."""
        if self.parked is None:
            return []
        with record_lock(self.record):
            return unpark(self.parked, self.folder, self.prefix)

    def space_for(self, phase: str, budget: int, cells: list[dict]) -> tuple[str, dict]:
        """A sweep that trains exactly `cells` (its baseline points) to the end, named by them."""
        digest = hashlib.sha256(json.dumps([self.key(budget, c) for c in cells]).encode()).hexdigest()[:8]
        name = f"{self.prefix}{digest}"
        searched = [a for a in self.axes if a in cells[0]]
        fixed = {section: {k: v for k, v in values.items() if f"{section}.{k}" not in searched}
                 if isinstance(values, dict) else values for section, values in self.fixed.items()}  # fixed or searched
        space = {
            "name": name,
            "description": f"{self.title}, {phase} (experiments/{self.label}.py)",
            "metric": "ood_acc_3x", "mode": "max",
            "fixed": fixed,
            "space": {a: {"type": "categorical", "choices": sorted({c[a] for c in cells}, key=str)} for a in searched},
            "budget": {"num_samples": len(cells), "max_concurrent": self.concurrent, "max_steps": budget,
                       "eval_every": self.eval_every},
            "scheduler": {"type": "fifo"},
            "searcher": {"sampler": "random", "seed": 0, "baseline": cells},
            "resources": {"cpu": 1},
        }
        return name, space

    def unfinished_sweep(self, budget: int, todo: list[dict], folder: Path) -> Path | None:
        """A sweep file in `folder` written for this budget that still holds a cell of `todo`: a chunk
        interrupted after some of its runs were recorded, to resume rather than start anew (its
        finished trials are kept, its interrupted ones go on from their checkpoints)."""
        wanted = {self.key(budget, c) for c in todo}
        for path in sorted(folder.glob(f"{self.prefix}*.yaml")):
            try:
                space = read_yaml(path)
                cells = space["searcher"]["baseline"] if space["budget"]["max_steps"] == budget else []
                if any(self.key(budget, c) in wanted for c in cells):
                    return path
            except (ConfigError, KeyError, TypeError):
                continue  # not one of this experiment's sweep files
        return None

    def run(self, plan: Callable[[dict], Planned], chunk: Callable[[Planned], list[dict]]) -> int:
        """Train what `plan` asks, one sweep of `chunk(plan)` cells at a time, exporting after
        each, until the plan is done; the sweep's exit code if one stops early."""
        import yaml

        for name in self.unpark():
            print(f"{self.label}: sweep {name} put back from {self.parked}", flush=True)
        self.export()
        while (p := plan(self.load())).phase != "done":
            for note in p.notes:
                print(f"{self.label}: {note}", flush=True)
            self.folder.mkdir(parents=True, exist_ok=True)
            if (path := self.unfinished_sweep(p.budget, p.todo, self.folder)) is not None:
                name, cells = path.stem, sweep_cells(path)
            else:
                cells = chunk(p)
                name, space = self.space_for(p.phase, p.budget, cells)
                path = self.folder / f"{name}.yaml"
                path.write_text(yaml.safe_dump(space, sort_keys=False))
                (self.folder / f"{name}{COMMIT_SUFFIX}").write_text(f"{head_commit(ROOT) or ''}\n")
            print(f"{self.label}: {p.phase}, budget {p.budget}: {len(cells)} runs, sweep {name}", flush=True)
            rc = sweeper_launch(path, "--storage", str(self.folder), "--progress", "lines", "--progress-every", "600",
                                cwd=ROOT)
            added = self.export()
            print(f"{self.label}: {added} runs added to {self.record}", flush=True)
            have = self.recorded(self.load())
            if rc != 0 or not {self.key(p.budget, c) for c in cells} <= have:  # recorded here or by an import meanwhile
                print(f"{self.label}: sweep {name} ended with {rc}; stopping (run again to resume)", flush=True)
                return rc or 1
        print(f"{self.label}: " + "; ".join(plan(self.load()).notes) + "; every run is recorded", flush=True)
        return 0


def status_command(label: str, data: dict, p: Planned) -> int:
    """A `status` verb: how many runs the record holds and where the plan stands, its notes one per line."""
    print(f"{label}: {len(data['runs'])} runs recorded; phase {p.phase}, budget {p.budget}, "
          f"switch {'not set yet' if p.switch is None else p.switch}, {len(p.todo)} runs to go")
    for note in p.notes:
        print(f"  {note}")
    return 0


def park_command(chunks: Chunks) -> int:
    """A `park` verb: the experiment's stopped, unfinished sweeps packed to be committed."""
    names = chunks.park()
    print(f"{chunks.label}: " + (f"parked {', '.join(names)} in {chunks.parked}; commit it, and `run` puts them back"
                                 if names else f"no unfinished sweep to park ({chunks.parked} removed)"))
    return 0


def sweep_cells(path: Path) -> list[dict]:
    """The cells a sweep file written by `Chunks.run` trains (its searcher's baseline points)."""
    return read_yaml(path)["searcher"]["baseline"]
