"""`sweeper status NAME [--watch]`: a sweep's state from its files, once or as a live view."""

from __future__ import annotations

import argparse

from sweeper.status import STATUS_FILE, load_records, print_status
from sweeper.sweep_dir import find_sweep_dir


def run(args: argparse.Namespace) -> int:
    sweep_dir = find_sweep_dir(args.name, args.storage, STATUS_FILE,
                               missing=f"no sweep here (no {STATUS_FILE}); `sweeper launch FILE` starts one")
    if not args.watch:
        print_status(sweep_dir)
        return 0
    from sweeper.live import LiveView

    load_records(sweep_dir)  # a damaged status.json is one line here, not a view that never draws
    return LiveView.of_sweep(sweep_dir, args.every).watch()
