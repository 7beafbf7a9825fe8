"""Warm trial workers: the resident service's trials start with torch and the trainer imported.

Ray Tune runs each trial in an actor of its own, a fresh process that would import torch and the
trainer again (about 2 s here). The service (sweeper/service_host.py) keeps `TrialWorker` actors
alive instead, each holding no CPU of its own and the imports done; a trial of a sweep on the
service is a thin Tune trial (it keeps the trial's CPUs) that claims a free worker and has it
train, forwarding every report to Ray Tune as the worker streams it back. The worker trains the
same `run_trial` as a cold trial (sweeper/adapters/ray_trainable.py), in the trial's own folder.

The worker trains in step with Ray Tune, as a trial in its own process does: after each report it
waits until the trial has handed it to Tune and Tune has asked for more. A trial Tune stops (ASHA
at a rung, an interrupt) or whose process is gone never gets that answer, and the worker stops
there, its folder holding nothing past the report Tune judged. A GPU trial, or one that finds every worker busy, trains in
its own process, as without the service.
"""

from __future__ import annotations

import os
import queue
import threading
import uuid
from typing import Any, Callable

import ray
from ray import tune

from sweeper.adapters.ray_trainable import run_trial
from trainables.config import TrialConfig

_DONE = object()


class Stopped(Exception):
    """Raised inside a worker's training when its trial no longer wants it."""


@ray.remote(num_cpus=0, max_concurrency=4)  # one trial trains while claims and stops are answered
class TrialWorker:
    def __init__(self):
        import torch  # noqa: F401  (the point of a warm worker)

        import trainables.train  # noqa: F401

        self._lock = threading.Lock()
        self._owner: tuple[int, float, str] | None = None  # the trial that claimed this worker
        self._training = False
        self._stop = threading.Event()
        self._acked = threading.Event()
        self._trained = 0

    def pid(self) -> int:
        return os.getpid()

    def info(self) -> dict:
        """This worker's process and how many trials it has trained (the service's status shows them)."""
        return {"pid": os.getpid(), "trained": self._trained, "busy": self._owner is not None}

    def claim(self, owner: tuple[int, float, str]) -> bool:
        """Take this worker for the trial `owner` (its process: pid, start time; and a claim of its
        own); False while another trial has it (a trial that claimed it and died before training frees it)."""
        with self._lock:
            if self._owner is not None and (self._training or not _gone(self._owner)):
                return False
            self._owner = owner
            self._stop.clear()
            return True

    def stop(self, owner: tuple[int, float, str]) -> None:
        """The trial `owner` no longer wants this worker. A stop that arrives after another trial
        claimed the worker (calls to an actor of several threads are not ordered) is not its."""
        with self._lock:
            if self._owner == owner:
                self._stop.set()

    def ack(self) -> None:
        """The trial handed the last report to Ray Tune, which asked for more: train on."""
        self._acked.set()

    def train(self, config: dict, to_config: Callable[[dict[str, Any]], TrialConfig], threads: int, trials_root: str,
              owner: tuple[int, float, str]):
        """Train the trial (its reports streamed back), then free the worker. `owner`: the claiming
        trial's process (pid, start time), watched at every report."""
        with self._lock:
            if self._owner != owner:
                raise RuntimeError("this warm worker was not claimed by the trial asking it to train")
            self._training = True
        reports: queue.Queue = queue.Queue()
        failure: list[BaseException] = []

        def report_to(metrics: dict) -> None:
            # in step with Ray Tune, as a trial in its own process is: the next steps train only once
            # Tune has taken this report and not stopped the trial (ASHA may stop it right here)
            if self._stop.is_set() or _gone(owner):
                raise Stopped()
            self._acked.clear()
            reports.put(metrics)
            while not self._acked.wait(0.2):
                if self._stop.is_set() or _gone(owner):
                    raise Stopped()

        def work() -> None:
            try:
                run_trial(config, to_config, threads, trials_root, report_to)
            except Stopped:
                pass
            except BaseException as err:  # noqa: BLE001 - handed to the trial, which fails (and Tune retries)
                failure.append(err)
            finally:
                reports.put(_DONE)

        thread = threading.Thread(target=work, name="sweeper-warm-trial", daemon=True)
        thread.start()
        self._trained += 1
        try:
            while (item := reports.get()) is not _DONE:
                yield item
            if failure:
                raise failure[0]
        finally:
            self._stop.set()
            thread.join()
            with self._lock:
                self._owner, self._training = None, False


def _gone(process: tuple) -> bool:
    """Whether the process (pid, start time, ...) has ended (or its pid is now another process's)."""
    import psutil

    try:
        proc = psutil.Process(process[0])
        return abs(proc.create_time() - process[1]) > 0.01 or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def start_workers(n: int) -> list:
    """`n` warm workers, their imports done when this returns."""
    workers = [TrialWorker.remote() for _ in range(n)]
    ray.get([w.pid.remote() for w in workers])
    return workers


def workers_info(workers: list) -> list[dict]:
    """Each worker's pid, trials trained and whether it trains now ([] if they do not answer)."""
    try:
        return ray.get([w.info.remote() for w in workers], timeout=10)
    except (ray.exceptions.RayError, TimeoutError):
        return []


def claim(workers: list, owner: tuple[int, float, str]) -> Any | None:
    for worker in workers:
        try:
            if ray.get(worker.claim.remote(owner), timeout=10):
                return worker
        except (ray.exceptions.RayError, TimeoutError):
            continue
    return None


def make_warm_trainable(workers: list, to_config: Callable[[dict[str, Any]], TrialConfig], threads: int,
                        trials_root: str) -> Callable[[dict], None]:
    """A trainable that trains on a free warm worker, or in its own process when none is free."""

    def trainable(config: dict) -> None:
        import psutil

        me = psutil.Process()
        owner = (me.pid, me.create_time(), uuid.uuid4().hex)  # a trial's process may run the next trial too
        worker = claim(workers, owner)
        if worker is None:
            run_trial(config, to_config, threads, trials_root, tune.report)
            return
        stream = worker.train.options(num_returns="streaming").remote(config, to_config, threads, trials_root, owner)
        try:
            for ref in stream:
                tune.report(ray.get(ref))  # returns once Tune wants the next report
                worker.ack.remote()
        finally:
            worker.stop.remote(owner)

    return trainable
