"""`show` and `diff` tables off a terminal, without rich.

Off a terminal with no $COLUMNS, rich lays the tables of render/text.py out
in a way simple enough to write directly: no colours, no wrapping, each
column as wide as its widest cell, one space of padding between columns and
none at the edges, the last column padded to its width. This module writes
exactly that, and says when it cannot (a terminal, $COLUMNS, text that is
not plain ASCII, a value type that rich would read as markup, a line near
rich's width): render/text.py then does it with rich. Importing rich costs
more than the rest of rendering, and these commands are often piped.
"""

from __future__ import annotations

import os

from jaxmemprof.analysis.groups import Breakdown, Diff
from jaxmemprof.facts.devices import display
from jaxmemprof.render.escape import safe
from jaxmemprof.units import counted, format_bytes

_PLURAL = {"site": "sites", "function": "functions", "file": "files", "stack": "stacks", "device": "devices", "kind": "kinds",
           "owner": "owners"}
_WIDTH = 100_000  # render.text.console's width off a terminal with no $COLUMNS
_MARKUP = ("[", "]", ":")  # what rich could read in a line it is given as a string


def applies(out) -> bool:
    """Whether ``out`` gets rich's plain layout: not a terminal, no $COLUMNS."""
    try:
        if out.isatty():
            return False
    except (AttributeError, ValueError, OSError):
        pass
    columns = os.environ.get("COLUMNS", "")
    return not (columns.isdigit() and int(columns) > 0)


def _ok(lines: list[str]) -> bool:
    return all(line.isascii() and line.isprintable() and len(line) < _WIDTH - 1 for line in lines)


def _table(headers, right, rows) -> list[str]:
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    last = len(headers) - 1
    out = []
    for cells in [headers, *rows]:
        parts = []
        for i, c in enumerate(cells):
            s = c.rjust(widths[i]) if right[i] else c.ljust(widths[i])
            parts.append(("" if i == 0 else " ") + s + ("" if i == last else " "))
        out.append("".join(parts))
    return out


def aligned(headers, right, rows) -> list[str]:
    """``rows`` (tuples of text) under ``headers`` in columns as wide as their widest cell, right-aligned
    where ``right`` says (the tables of show and diff off a terminal; diff of two runs everywhere)."""
    return _table(headers, right, rows)


def owner_label(owner: str, role: str) -> str:
    """``show --by owner``'s key: the owner and its role (a line alone when no call names its arrays)."""
    return safe(owner) if role == "by line" else f"{safe(owner)} ({role})"


def _key_texts(rows, result) -> list[str]:
    if result.by == "site":
        return [safe(v) for v in rows.column("site")]
    if result.by == "owner":
        return [owner_label(o, r) for o, r in zip(rows.column("owner"), rows.column("role"))]
    return [safe(display(v)) if v != "" else "(none)" for v in rows.column(result.key_columns[0])]


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def breakdown_footer(summary, shown: int, value_type: str) -> list[str]:
    """What a show left out, and its total (both outputs, rich's and plain)."""
    lines = []
    if summary.omitted_rows:
        lines.append(
            f"... {counted(summary.omitted_rows, 'more ' + summary.by, 'more ' + _PLURAL[summary.by])} hold "
            f"{format_bytes(summary.omitted_bytes)} ({summary.omitted_count} allocations); --top 0 shows all"
        )
    lines.append(
        f"total: {format_bytes(summary.total_bytes)} in {summary.total_count} allocations "
        f"({value_type}, {counted(shown + summary.omitted_rows, summary.by, _PLURAL[summary.by])})"
    )
    return lines


def diff_left_out(d) -> list[str]:
    """The groups a diff did not list: those cut by --top, and those unchanged."""
    lines = []
    if d.omitted_rows:
        lines.append(
            f"... {counted(d.omitted_rows, 'more ' + d.by, 'more ' + _PLURAL[d.by])} change by "
            f"{format_bytes(d.omitted_bytes, signed=True)}; --top 0 shows all"
        )
    if d.unchanged_rows:
        lines.append(f"{d.unchanged_rows} unchanged {_PLURAL[d.by]} not shown")
    return lines


def breakdown(label: str, rows, key: str) -> list[str]:
    """``by device: cpu:0 14.60 MiB (136), ...``: a show's or diff's totals
    per device or kind, in one line (none for a single unnamed group)."""
    keys = rows.column(key)
    if len(keys) <= 1 and (len(keys) == 0 or keys[0] == ""):
        return []
    parts = []
    for r in rows.records():
        name = safe(display(r[key])) or f"(no {key})"
        if "delta_bytes" in r:
            parts.append(
                f"{name} {format_bytes(r['base_bytes'])} -> {format_bytes(r['new_bytes'])} "
                f"({format_bytes(r['delta_bytes'], signed=True)})"
            )
        else:
            parts.append(f"{name} {format_bytes(r['bytes'])} ({r['count']})")
    return [f"{label}: " + ", ".join(parts)]


def breakdown_lines(summary: Breakdown, *, title: str, value_type: str) -> list[str] | None:
    """render_breakdown's lines, or None when rich must lay them out."""
    if any(c in value_type for c in _MARKUP):
        return None
    rows = summary.table()
    cells = [
        (format_bytes(b), str(c), _pct(s), _pct(cs), key)
        for b, c, s, cs, key in zip(*(rows.column(n) for n in ("bytes", "count", "share", "cum_share")),
                                    _key_texts(rows, summary))
    ]
    lines = [safe(title)] + _table(("bytes", "count", "%", "cum %", summary.by), (1, 1, 1, 1, 0), cells)
    lines += breakdown_footer(summary, len(rows), value_type)
    lines += breakdown("by device", summary.table("devices"), "device")
    lines += breakdown("by kind", summary.table("kinds"), "kind")
    return lines if _ok(lines) else None


def diff_lines(d: Diff, *, title: str, value_type: str) -> list[str] | None:
    """render_diff's lines, or None when rich must lay them out."""
    rows = d.table()
    cells = [
        (format_bytes(int(delta), signed=True), format_bytes(base), format_bytes(new), f"{int(dc):+d}", key)
        for delta, base, new, dc, key in zip(*(rows.column(n) for n in ("delta_bytes", "base_bytes", "new_bytes",
                                                                        "delta_count")), _key_texts(rows, d))
    ]
    lines = [safe(title)] + _table(("delta", "base", "new", "delta count", d.by), (1, 1, 1, 1, 0), cells)
    lines += diff_left_out(d)
    t = d.totals
    lines.append(f"total: {format_bytes(t['base_bytes'])} -> {format_bytes(t['new_bytes'])} "
                 f"({format_bytes(t['delta_bytes'], signed=True)}, {t['delta_count']:+d} allocations; {value_type})")
    lines += breakdown("by device", d.table("devices"), "device")
    lines += breakdown("by kind", d.table("kinds"), "kind")
    return lines if _ok(lines) else None
