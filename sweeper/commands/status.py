"""`sweeper status NAME [--watch]`: a sweep's state from its files, once or as a live view."""

from __future__ import annotations

from dataclasses import dataclass


from sweeper.status import SPACE_FILE, STATUS_FILE, load_records
from sweeper.views import ensure_status, status_lines
from sweeper.sweep_dir import find_sweep_dir
from core.errors import ConfigError

@dataclass(frozen=True)
class Options:
    """What the command line gives `sweeper status`."""

    name: str | None
    storage: str | None
    watch: bool
    every: int


def run(options: Options) -> int:
    if options.name is None:  # the sweeps of the resident service
        from sweeper.commands.serve import status

        return status()
    sweep_dir = find_sweep_dir(options.name, options.storage, SPACE_FILE)
    if not (sweep_dir / STATUS_FILE).exists() and not (sweep_dir / SPACE_FILE).exists():
        raise ConfigError(f"{sweep_dir}: no sweep here (no {STATUS_FILE}, no {SPACE_FILE}); `sweeper launch FILE` starts one")
    if not (sweep_dir / STATUS_FILE).exists():
        if not ensure_status(sweep_dir):
            print(f"sweep {sweep_dir.name}: starting (no report yet); run this again in a moment")
            return 0
        print(f"(rebuilt {sweep_dir / STATUS_FILE} from the sweep's study and its trials' folders)")
    if not options.watch:
        print("\n".join(status_lines(sweep_dir)))
        return 0
    from sweeper.live import LiveView

    load_records(sweep_dir)  # a damaged status.json is one line here, not a view that never draws
    return LiveView.of_sweep(sweep_dir, options.every).watch()
