"""What `sweeper launch search_spaces/smoke.yaml` shows on an 80-column terminal, as text: a frame
of the live view while trials run, and the screen at the end (the last frame, the table of the best
trials). A real launch on a pseudo-terminal, replayed by a terminal emulator (tests/pty_screen.py);
docs/usage.md quotes the two screens.

    .venv/bin/python docs/terminal.py [--cols 80] [--rows 40]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from conftest import sweeper_cmd, sweeper_env  # noqa: E402
from pty_screen import run_on_terminal  # noqa: E402
from core.tool_cli import Parser, run_tool  # noqa: E402
from sweeper.cli_types import positive_int  # noqa: E402


def main() -> int:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--cols", type=positive_int, default=80)
    parser.add_argument("--rows", type=positive_int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        capture = run_on_terminal(sweeper_cmd("launch", ROOT / "search_spaces" / "smoke.yaml"), Path(workdir),
                                  sweeper_env(), cols=args.cols, rows=args.rows)
    live = [f for f in capture.frames if any(line.startswith("sweep smoke  running") and "ETA 0:" in line for line in f)
            and any(line.startswith("t0") and line.endswith(" running") for line in f)]
    frame = live[len(live) // 2] if live else []  # trials training, the ETA measured
    for title, screen in (("a frame of the live view", frame), ("the end", capture.screen())):
        shown = [line for line in screen if line.strip()]
        print(f"--- {title} ({args.cols} columns) ---")
        print("\n".join(shown).replace(workdir, "/home/you/work"))
    return 0 if capture.code == 0 else 1


if __name__ == "__main__":
    run_tool(main)
