"""A local Ray listens on 127.0.0.1 only: the setting Ray reads when it is imported.

Ray binds its servers (GCS, raylet, workers, agents) to the node IP; with LOOPBACK_ENV set to 0,
read when ray is imported and inherited by every Ray process, the node IP of a single-machine
instance is loopback. Stdlib only: call `loopback_only` before anything imports ray.
"""

from __future__ import annotations

import os
import sys

LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def loopback_only() -> bool:
    """Ask Ray for a loopback-only local instance. False when ray was imported before the setting
    (the local Ray may then listen beyond 127.0.0.1: the caller says so)."""
    late = "ray" in sys.modules and os.environ.get(LOOPBACK_ENV) != "0"
    os.environ.setdefault(LOOPBACK_ENV, "0")
    return not late


LATE_NOTE = "note: ray was imported before the loopback setting; the local Ray may listen beyond 127.0.0.1"
