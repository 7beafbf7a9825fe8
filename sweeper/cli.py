"""`sweeper`: the command line. One verb, one function; user mistakes exit 2 with one line.

Building the parser imports nothing heavy (no torch, Ray, Optuna or MLflow): `--help` and
`validate` answer in well under a second; each verb imports what it needs when it runs.
"""

from __future__ import annotations

import sys

try:  # Ctrl-C while the command line loads gets the word a later one gets, not a traceback
    import argparse
    import contextlib
    from typing import Callable

    from trainables.config import preset_names
    from core.tool_cli import Parser, closed_stdout, say
    from sweeper.cli_types import (cpus, experiment_name, file_name, folder, plain, port, positive_int, progress_seconds,
                                   replay_count, sample_count, tolerance, top_count)
    from sweeper.cli_process import adopt_orphans, check_working_dir, exit_at_once
    from sweeper.sweep_dir import DEFAULT_STORAGE
except KeyboardInterrupt:
    print("interrupted", file=sys.stderr)
    raise SystemExit(130) from None


def verb(module: str, function: str = "run") -> Callable[[argparse.Namespace], int]:
    """The verb's function, imported when the verb runs, called with its module's `Options` (a
    frozen dataclass) filled from the parsed arguments: argparse stays in this module."""

    def call(args: argparse.Namespace) -> int:
        import dataclasses
        import importlib

        command = importlib.import_module(module)
        given = vars(args)
        options = command.Options(**{f.name: given[f.name] for f in dataclasses.fields(command.Options) if f.name in given})
        return getattr(command, function)(options)

    call.module = module  # type: ignore[attr-defined]  (the layout test reads it)
    return call


def _add_trial(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trial", help="train one configuration, without Ray",
                       description="Train one trial config (a YAML file or a preset name) and print its metrics.")
    p.add_argument("config", type=file_name, help="trial config YAML, or a preset: " + ", ".join(preset_names()))
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a field by dotted path, e.g. --set dat.switch_step=500 (repeatable)")
    p.add_argument("--steps", type=positive_int, help="shorthand for --set steps=N")
    p.add_argument("--out", type=folder, help="directory for metrics.jsonl, result.json and the latest checkpoint")
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    p.add_argument("--threads", type=cpus, default=None, help="torch CPU threads, at most this machine's CPUs (default: torch's choice)")
    p.set_defaults(func=verb("sweeper.commands.trial"))


def _add_validate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="check a search-space file and show what it searches; runs nothing")
    p.add_argument("file", type=file_name, help="search-space YAML (search_spaces/*.yaml)")
    p.add_argument("--samples", type=sample_count, default=3, help="sampled configs to print (default 3; 0 for none; at most 10,000)")
    p.set_defaults(func=verb("sweeper.commands.validate"))


def _add_replay(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("replay", help="try a space's search and early stopping on curves already recorded; trains nothing")
    p.add_argument("file", type=file_name, help="search-space YAML to try (search_spaces/*.yaml)")
    p.add_argument("--curves", type=plain, action="append", required=True, metavar="SWEEP_OR_RECORD",
                   help="a sweep's name under --storage or its folder, or a record file (.json, .json.gz); repeatable")
    p.add_argument("--storage", type=folder, help=f"where named sweeps are (default ./{DEFAULT_STORAGE})")
    p.add_argument("--replays", type=replay_count, default=100, help="replays per method (default 100; at most 10,000)")
    p.add_argument("--tolerance", type=tolerance, default=0.01, help="how close to the best counts as found (default 0.01)")
    p.add_argument("--top", type=top_count, default=3, help="the best points whose stopped trials are counted (default 3)")
    p.set_defaults(func=verb("sweeper.commands.replay"))


def _add_launch(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("launch", help="run a sweep (or resume it, if its directory exists)",
                       description="Run the sweep a search-space file describes: Optuna search, ASHA early "
                                   "stopping, on a local Ray instance or an existing cluster. A sweep whose "
                                   "directory exists is resumed. Starts with one line of plan (trials, steps, "
                                   "concurrency, the estimate), then a live table on a terminal or a progress "
                                   "line with the ETA elsewhere; Ctrl-C stops, the same command resumes.")
    p.add_argument("file", type=file_name, help="search-space YAML (search_spaces/*.yaml)")
    p.add_argument("--address", help="an existing Ray cluster: auto, or ray://HOST:10001 (default: a local Ray)")
    p.add_argument("--storage", type=folder, help=f"the folder of the sweep and its trials, one every node sees (default ./{DEFAULT_STORAGE})")
    p.add_argument("--shared-storage", action="store_true", help="confirm that a local --storage path is shared by all nodes")
    p.add_argument("--restart", action="store_true", help="delete the sweep's directory and start over")
    p.add_argument("--tracking-uri", help="MLflow tracking server (http://HOST:5000); default $MLFLOW_TRACKING_URI "
                                          "or the embedded ./mlflow.db")
    p.add_argument("--experiment", type=experiment_name, help="MLflow experiment name (default: the sweep's name)")
    p.add_argument("--in-process", action="store_true",
                   help="run the sweep in this process even when a sweep service (`sweeper serve`) runs")
    _add_progress(p)
    p.set_defaults(func=verb("sweeper.commands.launch"), exit_at_once=True)


def _add_serve(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="the resident sweep service: launches attach to it and start at once",
                       description="Run the resident sweep service: one local Ray, warm trial workers with torch and "
                                   "the trainer imported, sweeps side by side. `sweeper launch` attaches to it when "
                                   "it runs (and says so); Ctrl-C in an attached launch stops that sweep only. "
                                   "It answers this user only, on a Unix socket (mode 0600). In the foreground "
                                   "until Ctrl-C, or in the background with --detach.")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--detach", action="store_true", help="start it in the background (log: <service dir>/service.log)")
    how.add_argument("--status", action="store_true", help="whether it runs, and the sweeps it runs (exit 1: none)")
    how.add_argument("--stop", action="store_true", help="stop it; its sweeps are interrupted, resumable")
    p.add_argument("--workers", type=cpus, default=None, help="warm trial workers (default: this machine's CPUs)")
    p.set_defaults(func=verb("sweeper.commands.serve"))


def _add_progress(p: argparse.ArgumentParser) -> None:
    p.add_argument("--progress", choices=["auto", "table", "lines", "none"], default="auto",
                   help="how progress is shown: a live table, plain lines with the ETA, or nothing "
                        "(default auto: the table on a terminal, lines anywhere else)")
    p.add_argument("--progress-every", type=progress_seconds, default=30, metavar="SECONDS",
                   help="seconds between plain progress lines (default 30; a trial starting or ending prints one too)")


def _add_submit(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("submit", help="run a sweep on a remote Ray cluster as a Ray job",
                       description="Submit a sweep to a remote Ray cluster as a Ray job (the space file travels "
                                   "with it; the code comes from the cluster's image). Prints the job id; "
                                   "`sweeper job status|logs|stop JOB` looks after it.")
    p.add_argument("file", nargs="?", type=file_name, help="search-space YAML to submit")
    p.add_argument("--address", help="the cluster's Ray dashboard, http://HEAD:8265 (default $RAY_ADDRESS)")
    p.add_argument("--storage", type=folder, help="the folder of the sweep and its trials: an absolute path every node of the cluster mounts")
    p.add_argument("--shared-storage", action="store_true", help="confirm that a --storage path is shared by all nodes")
    p.add_argument("--tracking-uri", help="MLflow server the cluster reaches (default $MLFLOW_TRACKING_URI)")
    p.add_argument("--experiment", type=experiment_name, help="MLflow experiment name (default: the sweep's name)")
    p.add_argument("--restart", action="store_true", help="start the sweep over instead of resuming it")
    p.add_argument("--follow", action="store_true", help="print the job's logs until it ends; exit with its outcome")
    for old in ("status", "logs", "stop"):  # moved to `sweeper job`; kept to say so in one line
        p.add_argument(f"--{old}", dest=f"old_{old}", metavar="JOB", help=argparse.SUPPRESS)
    p.set_defaults(func=verb("sweeper.commands.submit"))


def _add_job(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("job", help="a sweep submitted as a Ray job: its status, logs, or stop it",
                       description="Look after a sweep that `sweeper submit` sent to a Ray cluster, by its job id.")
    verbs = p.add_subparsers(dest="job_verb", metavar="ACTION", required=True)
    for name, text in (("status", "print the job's state (PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED)"),
                       ("logs", "print the job's logs (the sweep's output)"),
                       ("stop", "stop the job (the sweep stops; `sweeper submit` of the same file resumes it)")):
        q = verbs.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        q.add_argument("job", type=plain, metavar="JOB", help="the job id `sweeper submit` printed, e.g. sweep-layers-3f9c2a1b")
        q.add_argument("--address", help="the cluster's Ray dashboard, http://HEAD:8265 (default $RAY_ADDRESS)")
        if name == "logs":
            q.add_argument("--follow", action="store_true", help="keep printing until the job ends; exit with its outcome")
        q.set_defaults(func=verb("sweeper.commands.job", name))


def _add_status(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="the progress of a running or finished sweep, from its directory",
                       description="The state of a sweep from its directory (status.json): trial counts, the best "
                                   "trial, the top trials, the ETA. With --watch, the live view of `sweeper launch`, "
                                   "redrawn until the sweep ends. (A remote Ray job: `sweeper job status JOB`.)")
    p.add_argument("name", nargs="?", type=plain, help="the sweep's name (its directory under --storage), or a path to it; "
                                           "without it, every sweep under --storage and the sweep service's "
                                           "(exit 1: neither)")
    p.add_argument("--storage", type=folder, help=f"the storage the sweep ran with (default ./{DEFAULT_STORAGE})")
    p.add_argument("--watch", action="store_true", help="keep redrawing the live view until the sweep ends (Ctrl-C to stop)")
    p.add_argument("--every", type=positive_int, default=None, metavar="SECONDS",
                   help="with --watch away from a terminal: seconds between progress lines (default 30)")
    p.set_defaults(func=verb("sweeper.commands.status"))


def _add_dashboard(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dashboard", help="open optuna-dashboard on a sweep's Optuna study",
                       description="Serve optuna-dashboard for the sweep's study (sweeps/NAME/optuna.db): trials, "
                                   "their parameters and states (ASHA-stopped trials are PRUNED), the "
                                   "intermediate values by training step, importances. Ctrl-C stops it.")
    p.add_argument("name", type=plain, help="the sweep's name (its directory under --storage), or a path to it")
    p.add_argument("--storage", type=folder, help=f"the storage the sweep ran with (default ./{DEFAULT_STORAGE})")
    p.add_argument("--host", type=plain, default="127.0.0.1", help="interface to serve on (default loopback only)")
    p.add_argument("--port", type=port, default=8080, help="port to serve on (default 8080)")
    p.set_defaults(func=verb("sweeper.commands.dashboard"))


def _add_report(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="compare a sweep's trials from MLflow: top trials, parameter effects, importances")
    p.add_argument("name", type=plain, help="the sweep's name, or a path to its directory")
    p.add_argument("--storage", type=folder, help=f"the storage the sweep ran with (default ./{DEFAULT_STORAGE})")
    p.add_argument("--tracking-uri", help="default: the one the sweep logged to")
    p.add_argument("--experiment", type=experiment_name, help="MLflow experiment (default: the sweep's name)")
    p.add_argument("--top", type=top_count, default=10, help="trials in the table (default 10)")
    p.add_argument("--markdown", type=file_name, metavar="FILE", help="also write the report as Markdown")
    p.set_defaults(func=verb("sweeper.commands.report"))


def _add_ui(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ui", help="open the MLflow UI on the tracking store in use")
    p.add_argument("name", nargs="?", type=plain, help="a sweep whose experiment page to print")
    p.add_argument("--tracking-uri", help="default $MLFLOW_TRACKING_URI or ./mlflow.db")
    p.add_argument("--host", type=plain, default="127.0.0.1", help="interface to serve on (default loopback only)")
    p.add_argument("--port", type=port, default=5000, help="port to serve on (default 5000)")
    p.set_defaults(func=verb("sweeper.commands.ui"))


PARSERS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (
    _add_trial, _add_validate, _add_replay, _add_launch, _add_serve, _add_status, _add_report, _add_ui, _add_dashboard, _add_submit,
    _add_job)
VERB_PLUGINS = "sweeper.verbs"  # entry points that add verbs (the project's experiments add `reproduce`)


def plugin_verbs() -> list[Callable[[argparse._SubParsersAction], None]]:
    """The `add(sub)` functions installed packages declare under VERB_PLUGINS, by name; the sweeper
    imports no package of theirs itself."""
    from importlib.metadata import entry_points

    return [entry.load() for entry in sorted(entry_points(group=VERB_PLUGINS), key=lambda e: e.name)]


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as package_version

    try:
        return package_version("dat-sweeper")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="sweeper", description="Hyperparameter sweeps for Delayed Attention Training in Transformer-RNN hybrids.")
    parser.add_argument("--version", action="version", version=f"sweeper {version()}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for add in (*PARSERS, *plugin_verbs()):
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is None and (refused := closed_stdout()) is not None:
        return refused
    try:
        args = build_parser().parse_args(argv)
    except KeyboardInterrupt as err:
        return say(err)
    args.exit_at_once = argv is None and getattr(args, "exit_at_once", False)  # the CLI's own process only
    if args.exit_at_once:
        adopt_orphans()
    if argv is None:  # the CLI's own output: a character its encoding lacks is escaped, not a traceback
        with contextlib.suppress(AttributeError, ValueError):
            sys.stdout.reconfigure(errors="backslashreplace")
    try:
        check_working_dir()
        code = args.func(args) or 0
        if sys.stdout is not None:
            sys.stdout.flush()  # output a full disk refuses is said here, not lost
        if args.exit_at_once:
            exit_at_once(code)
        return code
    except (Exception, KeyboardInterrupt) as err:  # noqa: BLE001 - `say` answers it or raises it again
        return say(err)


if __name__ == "__main__":
    sys.exit(main())
