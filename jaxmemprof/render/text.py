"""Terminal tables (rich). Names from profiles are data: control and
bidirectional-override characters are shown escaped, never interpreted."""

from __future__ import annotations

import errno
import os
import sys
from typing import TextIO

from collections.abc import Iterable

from rich.console import Console
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from jaxmemprof.analysis.groups import Breakdown, Diff
from jaxmemprof.analysis.groups import Table as Rows
from jaxmemprof.facts.devices import display
from jaxmemprof.render.escape import safe, terminal
from jaxmemprof.render.plain import breakdown, diff_left_out, owner_label, breakdown_footer
from jaxmemprof.units import counted, format_bytes



class EscapingConsole(Console):
    """rich exits with status 1 when the reader of its output goes away
    (`| head`); a closed pipe is no error, so raise it for the command line
    to end quietly with status 0 (or, on stderr, to carry on).

    Every text it writes is escaped (escape.terminal): the segments' text,
    not rich's own control codes and styles, so that program text a call
    site left as it was never reaches the terminal raw."""

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            s if s.control or (s.text.isascii() and s.text.isprintable()) else Segment(terminal(s.text), s.style)
            for s in buffer)

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")


def table(*columns: str) -> Table:
    """A report's table: no box, the names' columns left-aligned, the figures' right."""
    t = Table(box=None, pad_edge=False, collapse_padding=True, header_style="bold")
    for c in columns:
        t.add_column(c, justify="left" if c in ("site", "device", "name", "function", "role", "largest", "target")
                     else "right", overflow="fold")
    return t


def heading(con: Console, text: str) -> None:
    """A report section's heading, after a blank line."""
    con.print()
    con.print(Text(text, style="bold underline"))


def console(out: TextIO | None = None) -> Console:
    """A console for ``out``: colours only on a terminal (and never with
    NO_COLOR); off a terminal, lines are wrapped at $COLUMNS when it is set,
    else never wrapped or cut."""
    out = out or sys.stdout
    try:
        is_tty = out.isatty()
    except (AttributeError, ValueError, OSError):  # no isatty, or closed
        is_tty = False
    if is_tty:
        return EscapingConsole(file=out, highlight=False)
    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() and int(columns) > 0 else 100_000
    return EscapingConsole(file=out, highlight=False, width=width, no_color=True, color_system=None)


def _key_text(row, result) -> str:
    if result.by == "site":
        return safe(row["site"])
    if result.by == "owner":
        return owner_label(row["owner"], row["role"])
    value = row[result.key_columns[0]]
    return safe(value) if value != "" else "(none)"


def _key_texts(rows: Rows, result) -> list[str]:
    """:func:`_key_text` of each of a Table's rows."""
    if result.by == "site":
        return [safe(v) for v in rows.column("site")]
    if result.by == "owner":
        return [owner_label(o, r) for o, r in zip(rows.column("owner"), rows.column("role"))]
    return [safe(display(v)) if v != "" else "(none)" for v in rows.column(result.key_columns[0])]


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _delta_style(n: int) -> str:
    return "red" if n > 0 else "green" if n < 0 else ""


def render_breakdown(summary: Breakdown, con: Console, *, title: str, value_type: str) -> None:
    con.print(Text(safe(title)))
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("bytes", justify="right", no_wrap=True)
    table.add_column("count", justify="right", no_wrap=True)
    table.add_column("%", justify="right", no_wrap=True)
    table.add_column("cum %", justify="right", no_wrap=True)
    table.add_column(summary.by, overflow="fold")
    rows = summary.table()
    cols = [rows.column(c) for c in ("bytes", "count", "share", "cum_share")]
    for b, c, share, cum, key in zip(*cols, _key_texts(rows, summary)):
        table.add_row(format_bytes(b), str(c), _pct(share), _pct(cum), Text(key))
    con.print(table)
    for line in breakdown_footer(summary, len(rows), value_type):
        con.print(line)
    _render_breakdown(con, "by device", summary.table("devices"), "device")
    _render_breakdown(con, "by kind", summary.table("kinds"), "kind")


def _render_breakdown(con: Console, label: str, rows: Rows, key: str) -> None:
    for line in breakdown(label, rows, key):
        con.print(Text(line))


def render_diff(d: Diff, con: Console, *, title: str, value_type: str) -> None:
    con.print(Text(safe(title)))
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("delta", justify="right", no_wrap=True)
    table.add_column("base", justify="right", no_wrap=True)
    table.add_column("new", justify="right", no_wrap=True)
    table.add_column("delta count", justify="right", no_wrap=True)
    table.add_column(d.by, overflow="fold")
    rows = d.table()
    cols = [rows.column(c) for c in ("delta_bytes", "base_bytes", "new_bytes", "delta_count")]
    for delta, base, new, dcount, key in zip(*cols, _key_texts(rows, d)):
        delta, dcount = int(delta), int(dcount)
        table.add_row(
            Text(format_bytes(delta, signed=True), style=_delta_style(delta)),
            format_bytes(base),
            format_bytes(new),
            Text(f"{dcount:+d}", style=_delta_style(dcount)),
            Text(key),
        )
    con.print(table)
    for line in diff_left_out(d):
        con.print(line)
    t = d.totals
    total = Text(f"total: {format_bytes(t['base_bytes'])} -> {format_bytes(t['new_bytes'])} (")
    total.append(format_bytes(t["delta_bytes"], signed=True), style=_delta_style(t["delta_bytes"]))
    total.append(f", {t['delta_count']:+d} allocations; {value_type})")
    con.print(total)
    _render_breakdown(con, "by device", d.table("devices"), "device")
    _render_breakdown(con, "by kind", d.table("kinds"), "kind")


def render_closing(ov, con: Console, *, target: str, run_dir: str, warnings: list[str], answer=None,
                       previous: tuple | None = None) -> None:
    """The few lines ``jaxmemprof run`` prints on stderr when the target ends:
    the answer first (analysis/answer.py: the true peak, what it is), then
    the live peak and what held it; ``previous``: (its run directory, (its
    true peak, its live peak)) of the same command's run before this one, to
    say the change."""
    from jaxmemprof.render import answer as said

    took = f"{ov.duration_s:.1f} s" if ov.duration_s is not None else "?"
    share = f", {100 * ov.sampling_s / ov.duration_s:.1f}% CPU" if ov.duration_s else ""
    ended = "" if ov.ended_by == "exit" else f" ({safe(ov.ended_by)})"
    exited = "" if ov.exit_status is None and ov.ended_by == "exit" else f", exit {ov.exit_status}"  # profile()
    searched = f"; holder search {ov.holder_search_s:.2f} s" if ov.holder_searches else ""
    # what the snapshots taken in the program's own thread cost it, where it is paid (its wall time)
    own = (f"; {ov.program_thread[0]:.2f} s in its thread ({ov.program_thread[1]:.2f} s CPU)"
           if ov.program_thread is not None else "")
    con.print(Text(f"jaxmemprof: {safe(target)}: {took}{exited}{ended}; "
                   f"{counted(ov.snapshots, 'snapshot')}{share}{searched}{own}"))
    if ov.stretched is not None:
        interval, gap, budget = ov.stretched
        con.print(Text(
            f"jaxmemprof: snapshots came every {gap:.1f} s, not every {interval:g} s: --max-overhead {budget:g} "
            f"keeps them to {100 * budget / 2:g}% of the run (a larger --max-overhead gives more)"
        ))
    for w in warnings:
        con.print(Text(f"jaxmemprof: warning: {safe(w)}"))
    if ov.holders_unread:
        con.print(Text(f"jaxmemprof: holders: {safe(ov.holders_unread)}"))
    if ov.outside_jit:
        con.print(Text(f"jaxmemprof: {said.outside_jit_line(ov.outside_jit)}"))
    if ov.peak_snapshot is None:
        con.print("jaxmemprof: no snapshot: the program never put an array on a JAX device")
    else:
        for line in (said.true_peak_line(answer, con.width), said.composition_line(answer, con.width)) if answer else ():
            if line:
                con.print(Text(line))
        for line in said.counters_lines(answer, ov.outside_jit):  # the chip's own counters beside the true peak
            con.print(Text(line))
        shown = len(ov.peak_sites.rows)
        parts = [f"the largest {shown} of {shown + ov.peak_sites.omitted_rows} sites"] if ov.peak_sites.omitted_rows else []
        if ov.peak_holders and ov.peak_holders_at:
            parts.append(f"holders as searched at snapshot {ov.peak_holders_at}")
        of = f" ({'; '.join(parts)})" if parts else ""
        con.print(Text(f"live peak {format_bytes(ov.peak_bytes)} at {ov.peak_t:.1f} s (snapshot {ov.peak_snapshot}), "
                       f"held by{of}:"))
        held = ov.peak_holders or {}
        for _, row in ov.peak_sites.rows.iterrows():
            by = held.get(row["site"])
            con.print(Text(f"  {format_bytes(row['bytes']):>10}  {safe(row['site'])}"
                           + (f"  (kept alive by {safe(by)})" if by else "")))
    if ov.peak_snapshot is not None:
        con.print(Text(f"run: {safe(run_dir)}  (next: jaxmemprof report {safe(run_dir)})"))
    else:
        con.print(Text(f"run: {safe(run_dir)}"))
    if previous is not None and answer is not None:
        for line in said.change_lines(answer, previous[1], str(previous[0]), run_dir):
            con.print(Text(line))


def render_oom(summary: Breakdown, con: Console) -> None:
    """The top live sites when the target ran out of device memory."""
    con.print(Text(f"jaxmemprof: out of device memory; live at the failure: {format_bytes(summary.total_bytes)}, held by:"))
    for _, row in summary.rows.iterrows():
        con.print(Text(f"  {format_bytes(row['bytes']):>10}  {safe(row['site'])}"))
