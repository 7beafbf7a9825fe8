"""An experiment's missing cells as trial configs to train elsewhere, and the packs that come back.

`write_configs` writes the trial configs of cells the record misses, exactly as the experiment's
sweeps would train them but for `device`, one file each, for experiments/device_runs.py on a
machine with only torch (a lent GPU); `import_pack` adds the finished runs of the pack it returns
to the record, each only if its config is the plan's for a cell still missing, and a seed only
whole: a seed's runs of a phase train on one machine.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from core.errors import ConfigError, brief, cut, error_line, short_path, visible
from experiments.record import RecordBusy, head_commit, provenance, record_lock
from experiments.sweep_chunks import ROOT, Chunks, Planned, sweep_cells
from trainables.run_dir import UTC


@dataclass(frozen=True)
class Experiment:
    """What the device path reads of an experiment."""

    chunks: Chunks  # its sweeps and record
    plan: Callable[[dict], Planned]  # record -> its plan
    determined: Callable[[Planned], dict[str, list[dict]]]  # plan -> {phase: cells} of every phase already determined


def plan_only(p: Planned) -> dict[str, list[dict]]:
    """`determined` for an experiment whose next phase hangs on the current one: the plan's own cells."""
    return {p.phase: p.todo} if p.todo else {}


def trial_config(chunks: Chunks, p: Planned, c: dict, device: str = "cpu") -> dict:
    """The trial config a sweep of this plan trains `c` with, on `device`."""
    from sweeper.space import SearchSpace, trial_config_for

    spec = SearchSpace.model_validate(chunks.space_for(p.phase, p.budget, [c])[1])
    return {**trial_config_for(spec, c).model_dump(mode="json"), "device": device}


def open_cells(exp: Experiment, data: dict) -> dict[tuple, tuple[str, dict]]:
    """The cells of determined phases that the record misses: {key: (phase, cell)}."""
    p = exp.plan(data)
    have = exp.chunks.recorded(data)
    return {exp.chunks.key(p.budget, c): (phase, c) for phase, cells in exp.determined(p).items() for c in cells
            if exp.chunks.key(p.budget, c) not in have}


def write_configs(exp: Experiment, folder: Path, seeds: list[int], device: str,
                  phase: str | None = None) -> tuple[int, list[int]]:
    """The trial configs of the missing cells of `seeds` in `phase` (default: the plan's), one file
    each, named s{seed}_{phase}-{n}.yaml (one group per seed for experiments/device_runs.py); the
    number, and the seeds among them that a local sweep is training too (they would train twice)."""
    import yaml

    chunks = exp.chunks
    data = chunks.load()
    p = exp.plan(data)
    phase = phase or p.phase
    cells = [c for ph, c in open_cells(exp, data).values() if ph == phase and c["seed"] in seeds]
    if not cells:
        return 0, []
    if idle := [s for s in seeds if s not in {c["seed"] for c in cells}]:  # never dropped without a word
        raise ConfigError(f"{chunks.label}: configs: --seeds {brief(idle, 40)}: no cell of phase {phase} to train (recorded already, or not "
                          "a seed of it); leave them out")
    folder.mkdir(parents=True, exist_ok=True)
    from experiments.device_runs import PROVENANCE

    (folder / PROVENANCE).write_text(json.dumps({"commit": head_commit(ROOT)}))
    for n, c in enumerate(cells):
        (folder / f"s{c['seed']}_{phase}-{n}.yaml").write_text(yaml.safe_dump(trial_config(chunks, p, c, device), sort_keys=False))
    local = chunks.unfinished_sweep(p.budget, p.todo, chunks.folder) if chunks.folder.is_dir() else None
    busy = {chunks.key(p.budget, c) for c in sweep_cells(local)} if local else set()
    return len(cells), sorted({c["seed"] for c in cells if chunks.key(p.budget, c) in busy})


IMPORT_WAIT_S = 60.0  # an export holds the record's lock for seconds; longer is a writer to wait out by hand


class PackError(Exception):
    """A pack that cannot be read as one from experiments/device_runs.py (one line)."""


MAX_PACK_FILE = 64 * 2**20  # a member read from a pack: config, reports, machine.json
MAX_TEXT = 100  # the accelerator's and torch's names in machine.json
COMMIT = re.compile(r"[0-9a-f]{7,64}(?:-dirty)?")  # whole or abbreviated
MAX_LEFT_OUT = 20  # lines naming the runs an import leaves out; the rest counted


def _plain_text(value) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_TEXT and value.isprintable()


def import_pack(exp: Experiment, path: Path) -> tuple[int, list[str]]:
    """Add the finished runs of a pack from experiments/device_runs.py to the record: each one whose
    config is exactly what the plan trains for a cell it misses (the device aside) and whose final
    report holds every metric the recorded runs' do, one run per cell, a seed only when every cell
    of it to train is there. Returns the number added and a line for each run left out;
    PackError when the pack itself is unreadable."""
    if not path.is_file():  # said before the record's lock is taken (a FIFO would block the read)
        raise PackError("no such file" if not path.exists() else "not a regular file")
    try:
        with record_lock(exp.chunks.record, wait_s=IMPORT_WAIT_S):
            return _import_pack(exp, path)
    except RecordBusy as err:
        raise PackError(f"{err} (a running experiment's export?); try again when it ends") from None


def _import_pack(exp: Experiment, path: Path) -> tuple[int, list[str]]:
    import tarfile
    import zlib

    import yaml

    from core import json_text
    from experiments.device_runs import MACHINE
    from trainables.run_dir import strict_reports
    from trainables.config import ConfigError, trial_config_from_dict
    from trainables.safe_yaml import load_yaml_text
    from trainables.run_dir import is_number

    chunks = exp.chunks
    data, skipped, added, finished = chunks.load(), [], 0, {}
    p = exp.plan(data)
    todo = {k: c for k, (_, c) in open_cells(exp, data).items()}
    needed = final_metrics(data)
    names = {}  # key -> the pack's run name that finished it
    try:
        with tarfile.open(path, "r:gz") as tar:
            files = {m.name: m for m in tar.getmembers() if m.isfile() and m.size <= MAX_PACK_FILE}

            def read(name: str) -> bytes:
                return tar.extractfile(files[name]).read()

            try:
                where = json_text.loads(read(MACHINE))
                if not all(_plain_text(where[k]) for k in ("accelerator", "torch")):
                    raise TypeError
                trained_on = f"{where['accelerator']}, torch {where['torch']}"
                commit = where.get("commit") if isinstance(where.get("commit"), str) else None
                if commit is not None and not COMMIT.fullmatch(commit):
                    raise TypeError
            except (KeyError, TypeError, ValueError):
                raise PackError(f"{MACHINE}: missing, or not a JSON object with accelerator and torch (plain text of at "
                                f"most {MAX_TEXT} characters) and perhaps a commit") from None
            for run in sorted({n.split("/")[0] for n in files if "/" in n}):
                try:
                    config = load_yaml_text(read(f"{run}/config.yaml").decode("utf-8"), f"{run}/config.yaml")
                    valid = trial_config_from_dict(config, f"{run}/config.yaml").model_dump(mode="json")
                    reports = [r.metrics for r in strict_reports(read(f"{run}/metrics.jsonl"), f"{run}/metrics.jsonl")[0]]
                except KeyError:
                    skipped.append(f"{run}: no config.yaml or metrics.jsonl")
                    continue
                except UnicodeDecodeError:
                    skipped.append(f"{run}: config.yaml is not UTF-8 text")
                    continue
                except (yaml.YAMLError, ConfigError) as err:
                    skipped.append(f"{run}: {str(err).splitlines()[0][:200]}")
                    continue
                k = chunks.key(valid["steps"], chunks.params_of(valid))
                if not reports or reports[-1]["step"] != valid["steps"]:
                    skipped.append(f"{run}: unfinished ({reports[-1]['step'] if reports else 0} of {valid['steps']} steps)")
                elif k not in todo:
                    skipped.append(f"{run}: not a cell the plan misses")
                elif config != trial_config(chunks, p, todo[k], valid["device"]):
                    skipped.append(f"{run}: its config differs from the plan's for this cell")
                elif why := chunks.not_its_reports(p.budget, reports):
                    skipped.append(f"{run}: {why}")
                elif missing := sorted(m for m in needed if not is_number(reports[-1].get(m))):
                    skipped.append(f"{run}: its final report lacks {', '.join(missing[:4])}"
                                   + (f" and {len(missing) - 4} more" if len(missing) > 4 else ""))
                elif k in finished:
                    skipped.append(f"{run}: the same cell as {names[k]}, which is kept")
                else:
                    try:
                        times = json_text.loads(read(f"{run}/times.json"))
                    except (KeyError, ValueError):
                        times = {}
                    times = {t: v for t, v in times.items() if isinstance(v, str) and UTC.fullmatch(v)} \
                        if isinstance(times, dict) else {}  # a time the record can vouch for, or none
                    finished[k], names[k] = (reports, provenance(config, times, commit)), run
    except (OSError, EOFError, tarfile.TarError, zlib.error) as err:
        raise PackError(f"not a readable tar.gz ({type(err).__name__})") from None
    have = chunks.recorded(data)
    groups = {(phase, c["seed"]): [chunks.key(p.budget, x) for x in cells if x["seed"] == c["seed"]]
              for phase, cells in exp.determined(p).items() for c in cells}
    for (phase, seed), group in sorted(groups.items(), key=lambda g: (g[0][0], g[0][1])):
        if not any(k in finished for k in group):
            continue
        if any(k in have for k in group) or any(k not in finished for k in group):
            skipped.append(f"seed {seed} ({phase}): the pack does not hold every run of it, finished, and a seed's "
                           "runs of a phase train on one machine")
            continue
        for k in group:
            reports, made = finished[k]
            data["runs"].append({"budget": p.budget, "params": todo[k], "reports": reports, "trained_on": trained_on, **made})
            added += 1
    if added:
        chunks.save(data)
    return added, skipped


def final_metrics(data: dict) -> set[str]:
    """The metrics that every recorded run's final report holds (what the plan and the report may
    read of a run), as numbers; none before the first run."""
    from trainables.run_dir import is_number

    finals = [{m for m, v in r["reports"][-1].items() if is_number(v)} for r in data["runs"] if r["reports"]]
    return set.intersection(*finals) if finals else set()


def configs_command(exp: Experiment, folder: Path, seeds: list[int], device: str, phase: str | None) -> int:
    """The `configs` verb: write the configs, or one line and 2."""
    label = exp.chunks.label
    if os.path.islink(folder) and not folder.exists():
        return _refuse(f"{label}: {short_path(folder, 100)}: a link to nothing; name a new or empty folder")
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        return _refuse(f"{label}: {short_path(folder, 100)}: not an empty folder; its configs would all train there")
    written, busy = write_configs(exp, folder, seeds, device, phase)
    if not written:
        return _refuse(f"{label}: configs: no open cell of seeds {cut(' '.join(map(str, seeds)), 60)} in phase "
                       f"{cut(phase or exp.plan(exp.chunks.load()).phase, 40)} (recorded already, or the phase is not "
                       "determined yet)")
    if busy:
        print(f"{label}: note: seeds {' '.join(map(str, busy))} are in the local sweep too; pause it there, or they train twice")
    print(f"{label}: {written} trial configs in {visible(str(folder))}")
    return 0


def import_command(exp: Experiment, pack: Path) -> int:
    """The `import` verb: add a pack's runs, naming each one left out (the first MAX_LEFT_OUT); an
    unreadable pack is one line and 2."""
    label = exp.chunks.label
    try:
        added, skipped = import_pack(exp, pack)
    except PackError as err:
        return _refuse(f"{label}: {short_path(pack, 100)}: {err}; nothing added")
    for line in skipped[:MAX_LEFT_OUT]:
        print(f"{label}: left out {cut(line, 300)}")
    if len(skipped) > MAX_LEFT_OUT:
        print(f"{label}: left out {len(skipped) - MAX_LEFT_OUT} more")
    print(f"{label}: {added} runs added from {visible(str(pack))}")
    return 0


def _refuse(message: str) -> int:
    """A verb's refusal: its one line on stderr, as every tool's; the exit code 2."""
    print(error_line(message), file=sys.stderr)
    return 2
