"""The live view and the final table as a user sees them on an 80-column terminal: a real
`sweeper launch` of search_spaces/smoke.yaml on a pseudo-terminal, its bytes replayed by a
terminal emulator (tests/pty_screen.py). Nothing it draws is wider than the terminal: replayed on
a screen far wider, no line passes column 80, so no header or value was wrapped into two pieces."""

import pytest

from conftest import ROOT, sweeper_cmd, sweeper_env
from pty_screen import WIDE, run_on_terminal

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def on_80_columns(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("pty")
    capture = run_on_terminal(sweeper_cmd("launch", ROOT / "search_spaces" / "smoke.yaml"), workdir, sweeper_env(),
                              cols=80, rows=50, timeout_s=600)
    assert capture.code == 0, "\n".join(capture.screen())
    return capture


def test_nothing_drawn_is_wider_than_the_terminal(on_80_columns):
    drawn = on_80_columns.screen(cols=WIDE, rows=200)
    wide = [line for line in drawn if len(line) > 80 and len(line.split()) > 1]  # a path alone may pass it, whole
    assert not wide, "\n".join(wide)
    assert any(line.startswith("plan: ") for line in drawn) and any(line.startswith("  ") for line in drawn[:4])


def test_the_live_view_was_a_table_with_the_eta_and_the_speed(on_80_columns):
    live = [frame for frame in on_80_columns.frames if any(line.startswith("sweep smoke  running") for line in frame)]
    assert live, "no frame of the live view"
    assert any("steps/s per trial" in line for frame in live for line in frame)
    assert any(line.startswith("steps: ") for frame in live for line in frame)


def test_the_final_table_ends_the_screen_whole(on_80_columns):
    screen = [line for line in on_80_columns.screen() if line]
    header = next(i for i, line in enumerate(screen) if line.startswith("trial "))
    assert "acc_3x" in screen[header].split()  # the scored metric's header, whole
    rows = screen[header + 2:]
    trials = [line for line in rows if line.startswith("t0")]
    assert len(trials) == 6 and all(len(line.split()) == len(screen[header].split()) for line in trials), rows
    assert screen[-1].startswith("summary: ")
