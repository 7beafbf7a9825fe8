"""A sweep's study read without a write: the checks of a resume and what the views and `replay` read.

Each reader opens the SQLite file read-only (`sqlite_read_only_url`: no table is created, no journal left
beside it), and anything that fails while reading it (a damaged, empty or foreign file) is one
ConfigError line.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from sweeper.adapters.optuna_ledger import FORMAT, FORMAT_ATTR, storage_for
from sweeper.fs import half_done, journal_left, sqlite_read_only_url, why_unreadable
from sweeper.space import SearchSpace
from trainables.config import ConfigError
from core.errors import cut, short_path

RESTART_ADVICE = "; move it away, or pass --restart to start the sweep over"


@contextmanager
def reading(db: str | Path, what: str = "Optuna study", where: str | None = None,
            advice: str = "") -> Iterator[optuna.storages.BaseStorage]:
    """A sweep's SQLite study opened read-only; anything that fails while reading it (a damaged,
    empty or foreign file) is one ConfigError line naming `where` (default: the file). Only a
    regular file is opened: SQLite would wait for ever on a FIFO."""
    try:
        if not stat.S_ISREG(os.stat(db).st_mode):
            raise ValueError("not a regular file (a folder, a FIFO or a device)")
        yield storage_for(sqlite_read_only_url(db))
    except Exception as err:  # noqa: BLE001 - a damaged or foreign database: one line
        if journal_left(db):  # a killed writer's: SQLite's read-only open fails where a writer would roll it back
            raise half_done(str(where or db), "the sweep's next `sweeper launch`") from None
        raise ConfigError(f"{where or db}: not a readable {what} ({why_unreadable(db, err)}){advice}") from None


def made_by_a_sweep(user_attrs: dict) -> bool:
    """Whether a study's attributes are a sweep's (every sweep's study holds `sweeper.*` ones)."""
    return any(str(key).startswith("sweeper.") for key in user_attrs)


def sweep_study(db: str | Path, name: str) -> tuple[int, dict[str, Any]]:
    """Read-only: the id and attributes of sweep `name`'s study in its folder's file; one ConfigError
    line when the file holds no study of that name, or one no sweep made (a view would show a
    stranger's trials as the sweep's)."""
    with reading(db) as storage:
        summaries = optuna.study.get_all_study_summaries(storage=storage)
        sid = storage.get_study_id_from_name(name) if name in {s.study_name for s in summaries} else None
    return sid, dict(_the_only_sweep_s(summaries, name, str(db)).user_attrs)


def _the_only_sweep_s(summaries: list, name: str, where: str) -> Any:
    """`_the_sweep_s`, in a file holding no other study: a view (the dashboard, a replay) would show
    the others' trials beside the sweep's."""
    advice = "put the sweep's study back"
    mine = _the_sweep_s(summaries, name, where, advice)
    if len(summaries) > 1:
        raise ConfigError(f"{where}: holds {len(summaries)} studies, a sweep's holds one; {advice}")
    return mine


def _the_sweep_s(summaries: list, name: str, where: str, advice: str) -> Any:
    """The summary of sweep `name`'s study among `summaries`; one ConfigError line when there is none,
    or when the study of that name was not made by a sweep."""
    mine = [s for s in summaries if s.study_name == name]
    if not mine and len(summaries) == 1 and made_by_a_sweep(summaries[0].user_attrs):  # its folder renamed, or copied
        raise ConfigError(f"{where}: holds sweep `{cut(summaries[0].study_name, 60)}`'s study, not `{cut(name, 60)}`'s; "
                          "a sweep's folder keeps its sweep's name (name it so again)")
    if not mine:
        raise ConfigError(f"{where}: holds no study `{cut(name, 80)}`; {advice}")
    if not made_by_a_sweep(mine[0].user_attrs):
        raise ConfigError(f"{where}: study `{cut(name, 60)}` was not made by a sweep (it has no sweeper attributes); "
                          f"{advice}")
    return mine[0]


def check_ledger(db: str | Path, spec: SearchSpace, where: str) -> tuple[dict[int, dict[str, Any]], str | None]:
    """One line when the study of a sweep folder is not this project's ledger of `spec` (its format,
    and what it holds: `optuna_checks`); read-only, in one read. Else what a resume continues: the
    trials started and not ended (duplicate draws left out), oldest first, each with its drawn
    parameters, and the tracking URI the sweep started with."""
    from sweeper.adapters.optuna_checks import ledger_problem

    problem = started_with = None  # read only of a study of this sweeper's format (the lines below say why not)
    with reading(db, where=where, advice=RESTART_ADVICE) as storage:
        summaries = optuna.study.get_all_study_summaries(storage=storage)
        if ours := spec.name in {s.study_name for s in summaries}:
            study = optuna.load_study(study_name=spec.name, storage=storage)
            trials = study.get_trials(deepcopy=False)
            rows = storage.get_n_trials(storage.get_study_id_from_name(spec.name))  # Optuna keeps one trial per number
            if made_by_a_sweep(study.user_attrs) and study.user_attrs.get(FORMAT_ATTR) == FORMAT:
                problem, started_with = ledger_problem(study, trials, spec), study.user_attrs.get("sweeper.tracking_uri")
    folder = Path(db).parent
    if not ours and folder.name != spec.name and folder.name in {s.study_name for s in summaries}:
        raise ConfigError(f"{short_path(folder / 'space.yaml', 100)}: names sweep `{cut(spec.name, 60)}`, but its folder "
                          f"and study are `{cut(folder.name, 60)}`: the saved copy was changed; put it back, or pass --restart")
    version = _the_sweep_s(summaries, spec.name, where,
                           "put the sweep's study back, or pass --restart").user_attrs.get(FORMAT_ATTR)
    if version != FORMAT:
        raise ConfigError(f"{where}: a sweep of folder format {version or 1} (this sweeper reads format {FORMAT}: "
                          "the study is the ledger, each trial's folder its own); pass --restart to start it over, "
                          "or finish it with the sweeper version that started it")
    if problem:
        raise ConfigError(f"{where}: {problem}")
    if rows != len(trials):
        raise ConfigError(f"{where}: {rows} trial rows hold {len(trials)} trial numbers (a number given twice); the "
                          "study was changed outside the sweeper: put the sweep's own back, or pass --restart to start "
                          "the sweep over")
    running = [t for t in trials if t.state == TrialState.RUNNING and "duplicate_of" not in t.user_attrs]
    return {t.number: t.params for t in sorted(running, key=lambda t: t.number)}, started_with


def trial_points(db: str | Path, name: str, limit: int | None = None) -> list[tuple[int, dict[str, Any]]]:
    """Read-only, of sweep `name`'s SQLite study (the one study it holds): each trial's number and
    point, duplicate draws left out; one ConfigError line for a file that is not a readable study of
    that sweep, or that holds more than `limit` trials (counted before any is read)."""
    with reading(db, what="sweep study") as storage:
        summaries = optuna.study.get_all_study_summaries(storage=storage)
        ours = len(summaries) == 1 and summaries[0].study_name == name and made_by_a_sweep(summaries[0].user_attrs)
        if ours:
            n_trials = storage.get_n_trials(storage.get_study_id_from_name(name))
            if limit is None or n_trials <= limit:
                trials = optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)
    if not ours:  # said in its own line, not as an unreadable study
        _the_only_sweep_s(summaries, name, str(db))
    if limit is not None and n_trials > limit:
        raise ConfigError(f"{db}: {n_trials:,} trials, more than the {limit:,} a replay reads; replay a part of them")
    return [(t.number, dict(t.params)) for t in trials if "duplicate_of" not in t.user_attrs]
