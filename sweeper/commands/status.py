"""`sweeper status NAME [--watch]`: a sweep's state from its files, once or as a live view."""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass

from sweeper.fs import nearest_existing
from sweeper.status import STATUS_FILE, load_records
from sweeper.views import TABLE_WIDTH, ensure_status, status_lines, sweep_list_lines
from sweeper.sweep_dir import DEFAULT_STORAGE, SPACE_FILE, find_sweep_dir, is_uri
from core.errors import ConfigError, cut, expand_user


@dataclass(frozen=True)
class Options:
    """What the command line gives `sweeper status`."""

    name: str | None
    storage: str | None
    watch: bool
    every: int | None  # with --watch only (default 30)


def run(options: Options) -> int:
    if options.every is not None and not options.watch:
        raise ConfigError(f"--every {options.every}: only with --watch (the seconds between its progress lines)")
    if options.name is None:
        return list_sweeps(options.storage)
    sweep_dir = find_sweep_dir(options.name, options.storage, SPACE_FILE)
    if not (sweep_dir / STATUS_FILE).exists() and not (sweep_dir / SPACE_FILE).exists():
        raise ConfigError(f"{sweep_dir}: no sweep here (no {STATUS_FILE}, no {SPACE_FILE}); `sweeper launch FILE` starts one")
    if not (sweep_dir / STATUS_FILE).exists():
        if not ensure_status(sweep_dir):
            print(f"sweep {cut(sweep_dir.name, 80)}: starting (no report yet); run this again in a moment")
            return 0
        print(f"(rebuilt {cut(str(sweep_dir / STATUS_FILE), 200)} from the sweep's study and its trials' folders)")
    if not options.watch:
        width = shutil.get_terminal_size().columns if sys.stdout.isatty() else TABLE_WIDTH
        print("\n".join(status_lines(sweep_dir, width=max(width, 40))))
        return 0
    from sweeper.live import LiveView

    load_records(sweep_dir)  # a damaged status.json is one line here, not a view that never draws
    return LiveView.of_sweep(sweep_dir, options.every or 30).watch()


def list_sweeps(storage: str | None) -> int:
    """The sweeps under the storage folder, then the sweep service's, if one runs; exit 1 when there is neither."""
    from sweeper.commands.serve import service_status, show_status
    from sweeper.service_folder import folder_info, service_dir

    folder_info(service_dir())  # a service folder that cannot be one is said before anything is listed
    folder = storage or DEFAULT_STORAGE
    if is_uri(folder):
        raise ConfigError(f"--storage {cut(folder, 80)}: sweeps are listed from a local folder; name the sweep instead")
    path = expand_user(folder)
    try:
        first = nearest_existing(path)  # what stands there, or above it
        not_a_folder = storage is not None and not first.is_dir() and not first.is_symlink()
    except OSError as err:  # a name the file system refuses
        raise ConfigError(f"--storage {cut(folder, 80)}: not a folder ({err.strerror})") from None
    if not_a_folder:
        raise ConfigError(f"--storage {cut(folder, 80)}: not a folder" + (f" ({cut(str(first), 80)} is a file)" if first != path else ""))
    # a service that cannot answer is said before anything is listed: one line, as every refusal
    service = service_status(then="`sweeper status` again once it answers (`sweeper status NAME` reads a sweep without it)")
    lines = sweep_list_lines(path)
    print(f"{'sweeps' if lines else 'no sweep'} in {cut(str(path.resolve()), 120)}{':' * bool(lines)}")
    if lines:
        print("\n".join(lines))
    served = show_status(service) == 0
    return 0 if lines or served else 1

