"""A process pool whose workers end with the process that made it.

`multiprocessing`'s pool ends its workers when its maker exits or is interrupted, but a maker
killed with SIGKILL cannot, and each worker then trains on, alone, until its job ends (for a
reproduction run, up to half an hour of every CPU). Each worker of `pool` watches its parent and
exits once the parent is gone.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time

WATCH_EVERY_S = 1.0


def _exit_with_parent(parent: int) -> None:
    """Pool initializer: a daemon thread that ends this worker once `parent` no longer is its parent."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(WATCH_EVERY_S)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def pool(workers: int):
    """A spawned pool of `workers` processes that end with this one, however it ends."""
    return mp.get_context("spawn").Pool(workers, initializer=_exit_with_parent, initargs=(os.getpid(),))
