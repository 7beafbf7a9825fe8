"""`sweeper launch`: run (or resume) a sweep of a search-space file on Ray Tune.

    the flags as a request (sweeper/request.py)  ->  attached to this user's service, if one runs
    (sweeper/commands/attach.py)  ->  else the sweep in this process (sweeper/sweep.py): open,
    run, finish, its events on this terminal (sweeper/live_events.py)

A sweep whose folder holds its study is resumed: finished trials are kept, unended ones continue
from their own folder's checkpoint, then new ones are drawn until num_samples. Ctrl-C or SIGTERM
stop it cleanly for a later resume; so does a SIGKILL, with at most a report's training repeated.
"""

from __future__ import annotations

from dataclasses import dataclass

import os
import signal
import sys

from sweeper.faults import Faults
from sweeper.live_events import Terminal
from sweeper.request import SweepRequest
from sweeper.sweep import Sweep


@dataclass(frozen=True)
class Options:
    """What the command line gives `sweeper launch`."""

    file: str
    address: str | None
    storage: str | None
    shared_storage: bool
    restart: bool
    tracking_uri: str | None
    experiment: str | None
    in_process: bool
    progress: str
    progress_every: int
    exit_at_once: bool


def run(options: Options) -> int:
    """`sweeper launch`: attached to this user's running service if there is one (and the sweep is
    local), else the sweep in this process."""
    request = SweepRequest.from_caller(options.file, options.storage, options.tracking_uri, options.experiment, options.restart,
                                       options.address, options.shared_storage)
    if options.address is None and not options.in_process:
        from sweeper.commands.attach import attach

        code = attach(request, options.progress, options.progress_every)
        if code is not None:
            return code
    with Terminal(options.progress, options.progress_every) as terminal, \
            Sweep(request, terminal, faults=Faults.from_env()) as sweep:
        sweep.open()
        _graceful_sigterm()
        _interrupt_at_once()
        sweep.run()
        for sig in (signal.SIGINT, signal.SIGTERM):  # Ray's handlers outlive fit() and ignore both: during the finish
            signal.signal(sig, signal.default_int_handler)  # they interrupt it (exit 130; the same command finishes it)
        code = sweep.finish()
        if not options.exit_at_once:  # the CLI's own process ends its local Ray faster (cli.exit_at_once)
            from sweeper.adapters import ray_tune

            ray_tune.shutdown_ray()  # after the state is written: a Ctrl-C during the shutdown loses nothing
    return code


def _graceful_sigterm() -> None:
    """Ray Tune stops gracefully (saving state for a resume) on SIGINT and SIGUSR1, but ray.init
    makes SIGTERM exit at once; route SIGTERM to the graceful path. Call after ray.init."""
    signal.signal(signal.SIGTERM, lambda *_: os.kill(os.getpid(), signal.SIGUSR1))


INTERRUPTING = "interrupting: stopping the trials and saving the sweep for a resume (Ctrl-C again to leave at once)"


def _interrupt_at_once() -> None:
    """Ctrl-C says so at once, then stops the sweep through Ray Tune's graceful path (its SIGUSR1
    handler: trials checkpointed, the state saved), which takes seconds; a second Ctrl-C leaves at
    once (KeyboardInterrupt). Ray Tune's own SIGINT handler, which says nothing, is turned off with
    its documented switch; this is the command line's own process. Call after ray.init."""
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"

    def on_interrupt(*_) -> None:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        print(f"\n{INTERRUPTING}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGUSR1)

    signal.signal(signal.SIGINT, on_interrupt)

