"""What the live view draws: the plan line, the plain progress line and the table of a sweep.

    plain_line(...): one line, for CI, a log file, `ray job logs`
    table(...):      a rich renderable for a terminal (rich is imported only to draw it)

Width: the table fits the terminal. When it is too wide it gives up, in this order, until it fits:
  1. the budget bar narrows from 20 to 10 characters;
  2. parameter headers shorten to their shortest distinct dotted tail (optim.lr -> lr);
  3. the budget bar goes (the step column says the same);
  4. steps/s;
  5. the accuracies at 1x, 2x, 4x, then 3x, the scored one excepted;
  6. status;
  7. the parameters, the last first.
The trial, its step and the scored metric always stay. A header or a value is never cut (no `…`),
a header never wraps, and a line under the table names what was hidden.
"""

from __future__ import annotations

from dataclasses import dataclass

from sweeper.eta import Plan, Progress, clock, progress
from sweeper.records import TrialRecord, length_metrics, shortest_names
from sweeper.status import best_line, counts_line




# -- text ------------------------------------------------------------------------------------


def _eta(p: Progress, age: float = 0.0, state: str = "running") -> str:
    """The ETA, counted down by `age`: seconds since the records were written (the trials trained on);
    for a sweep that is not running, the time it needs once resumed."""
    if p.left == 0:
        return "nothing left to train"
    if p.eta_s is None:
        return "ETA after the first report"
    return f"ETA {clock(max(0.0, p.eta_s - age))}" if state == "running" else f"~{clock(p.eta_s)} more once resumed"


def _speed(p: Progress) -> str:
    return "" if p.speed is None else f" | {p.speed:.1f} steps/s per trial"


def _elapsed(elapsed: float | None, since_resume: bool) -> str:
    return clock(elapsed) + (" since resume" if since_resume and elapsed is not None else "")


def plan_line(plan: Plan, records: list[TrialRecord] = ()) -> str:
    """The line `sweeper launch` starts with: what will run and, from earlier reports (a resume), how long."""
    each = plan.expected_steps(0)
    phases = (f", each trial judged by {plan.pre_phase_metric} before its switch" if plan.pre_phase_metric else
              ", each trial judged only after its switch" if plan.not_before_of is not None else "")
    stopping = (f"ASHA (rungs {', '.join(map(str, plan.rungs))}, eta {plan.reduction_factor:g}{phases}) "
                f"expects ~{each:,.0f} steps a trial" if plan.rungs else "every trial runs its full budget")
    p = progress(list(records), plan)
    left = "" if not records else f", ~{p.left:,.0f} left"
    return (f"plan: {plan.num_samples} trials of up to {plan.max_steps:,} steps, {plan.max_concurrent} at a time; "
            f"{stopping}, ~{plan.num_samples * each:,.0f} steps in all{left}; {_eta(p)}{_speed(p)}. "
            "Ctrl-C stops; the same command resumes.")


def plain_line(records: list[TrialRecord], plan: Plan, elapsed: float | None, *, best: dict | None = None,
               speed: float | None = None, age: float = 0.0, since_resume: bool = False, state: str = "running") -> str:
    """One progress line: `[name elapsed] counts | best | steps | speed | ETA`; `speed`: this launch's."""
    p = progress(records, plan, speed)
    return (f"[{plan.name} {_elapsed(elapsed, since_resume)}] {counts_line(records, plan.num_samples)} | "
            f"{best_line(records, plan.metric, plan.mode, best)} | {p.done:,} steps done, ~{p.left:,.0f} to go"
            f"{_speed(p)} | {_eta(p, age, state)}")


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1e-2 and v != 0 else f"{v:.3f}" if abs(v) < 10 else f"{v:.4g}"
    return "" if v is None else str(v)


def running_rows(records: list[TrialRecord], plan: Plan) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the running and waiting trials: params, step of the budget, acc at 1x-4x, speed."""
    live = [r for r in records if r.status in ("running", "pending")]
    keys = sorted({k for r in live for k in r.params})
    lengths = length_metrics(plan.metric)
    header = ["trial", *keys, "step", *lengths, "steps/s", "status"]
    rows = []
    for r in sorted(live, key=lambda r: (r.status != "running", -r.step, r.trial_id)):
        rate = r.metrics.get("steps_per_s")
        rows.append([r.trial_id, *(_fmt(r.params.get(k)) for k in keys), f"{r.step}/{plan.max_steps}",
                     *(_fmt(r.metrics.get(m)) for m in lengths), "" if rate is None else f"{rate:.1f}", r.status])
    return header, rows


# -- fitting the table to the terminal ---------------------------------------------------------

BAR_WIDE, BAR_NARROW = 20, 10  # the budget bar's characters, and when the terminal is narrow
GAP = 2  # characters between two columns (rich's padding of one on each side; none at the edges)


@dataclass(frozen=True)
class Layout:
    """The columns of the running table that fit: in order, with their headers, and the bar's width (0: none)."""

    columns: list[str]  # keys of running_rows' header that stay
    labels: dict[str, str]  # key -> the header drawn
    widths: dict[str, int]  # key -> characters
    bar: int
    hidden: list[str]  # what was given up, in the order of giving it up

    @property
    def width(self) -> int:
        parts = [*self.widths.values(), *([self.bar] if self.bar else [])]
        return sum(parts) + GAP * (len(parts) - 1)


def layout(header: list[str], rows: list[list[str]], metric: str, width: int | None, measure=len) -> Layout:
    """The running table at `width` characters (None: no limit), giving up columns in the order of
    the module's docstring until it fits. `measure`: a string's width in terminal cells."""
    params = header[1:header.index("step")]
    lengths = [h for h in header if h not in ("trial", "step", "steps/s", "status") and h not in params]
    lengths = [lengths[i] for i in (0, 1, 3, 2) if i < len(lengths) and lengths[i] != metric]  # 1x, 2x, 4x, 3x
    steps = [("narrow", "budget"), ("shorten", None), ("hide", "budget"), ("hide", "steps/s"),
             *(("hide", h) for h in lengths), ("hide", "status"), *(("hide", p) for p in reversed(params))]
    labels, bar, hidden = {h: h for h in header}, BAR_WIDE, []

    def current() -> Layout:
        shown = [h for h in header if h not in hidden]
        widths = {h: max([measure(labels[h]), *(measure(r[header.index(h)]) for r in rows)]) for h in shown}
        return Layout(shown, dict(labels), widths, bar, list(hidden))

    for action, name in steps:
        if width is None or current().width <= width:
            break
        if action == "narrow":
            bar = BAR_NARROW
        elif action == "shorten":
            labels.update(zip(params, shortest_names(params)))
        else:
            hidden.append(name)
            bar = 0 if name == "budget" else bar
    return current()


def table(records: list[TrialRecord], plan: Plan, elapsed: float | None, state: str = "running", *,
          best: dict | None = None, speed: float | None = None, age: float = 0.0, since_resume: bool = False,
          width: int | None = None):
    """The terminal view (a rich renderable): a title line, one row per running trial with a bar
    for the step of its budget, the best trial so far, steps and the ETA; at most `width` wide."""
    from rich.cells import cell_len
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    p = progress(records, plan, speed)
    parts = [Text(f"sweep {plan.name}", "bold"), Text(state), Text(f"elapsed {_elapsed(elapsed, since_resume)}"),
             Text(_eta(p, age, state), "bold cyan"), *([Text(f"{p.speed:.1f} steps/s per trial")] if p.speed is not None else [])]
    title = _packed(parts, width)
    header, rows = running_rows(records, plan)
    fit = layout(header, rows, plan.metric, width, cell_len)
    grid = Table(box=None, pad_edge=False, header_style="bold")
    for h in fit.columns:
        right = h not in ("trial", *header[1:header.index("step")])  # names left, numbers right
        grid.add_column(fit.labels[h], justify="right" if right else "left", width=fit.widths[h], no_wrap=True, overflow="fold")
        if h == "step" and fit.bar:
            grid.add_column("budget", width=fit.bar, no_wrap=True)
    steps = {r.trial_id: r.step for r in records}
    for row in rows:
        cells = []
        for h in fit.columns:
            cells.append(row[header.index(h)])
            if h == "step" and fit.bar:
                cells.append(ProgressBar(total=plan.max_steps, completed=steps[row[0]], width=fit.bar))
        grid.add_row(*cells)
    lines = [*title, Text(f"trials: {counts_line(records, plan.num_samples)}"),
             grid if rows else Text("(no trial running)")]
    if rows and fit.hidden:
        lines.append(Text(f"hidden to fit {width} columns: {', '.join(fit.hidden)}", style="dim"))
    lines += [Text(best_line(records, plan.metric, plan.mode, best))]
    lines += _packed([Text(f"steps: {p.done:,} done,"), Text(f"~{p.left:,.0f} expected to go"),
                      Text(f"(ASHA rungs {', '.join(map(str, plan.rungs)) or 'none'},"),
                      Text(f"1/{plan.reduction_factor:g} pass each)")], width, gap=" ")
    return Group(*lines)


def _packed(parts: list, width: int | None, gap: str = "  ") -> list:
    """Rich Texts joined by `gap` on as few lines as `width` allows, each part whole."""
    from rich.cells import cell_len
    from rich.text import Text

    lines = [parts[0]]
    for part in parts[1:]:
        if width is None or cell_len(lines[-1].plain) + len(gap) + cell_len(part.plain) <= width:
            lines[-1] = Text.assemble(lines[-1], gap, part)
        else:
            lines.append(part)
    return lines
