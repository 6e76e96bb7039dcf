"""run --target's slices in words: the report's section and run's closing
lines (analysis/advice/targets.py computes every figure)."""

from __future__ import annotations

import pandas as pd
from rich.console import Console
from rich.text import Text

from jaxmemprof.render.text import heading, safe, table
from jaxmemprof.units import counted, format_bytes

_NOTE = (
    "Targets: at the end of a run --target SLICE, the planned step is compiled for that TPU slice by libtpu's "
    "XLA, with no TPU there: its arguments' shapes and shardings moved onto the slice's devices (one device's "
    "arrays to its first chip; a mesh of N devices to a mesh of the slice's N). peak: XLA:TPU's call peak "
    "(arguments + outputs - aliased + temporaries + code) plus the run's live bytes outside the call on its "
    "busiest device; beside it, the run's own backend's, counted the same way. fits: the peak within what "
    "XLA may use of one chip's HBM (docs/targets.md has each chip's size and its source). A static buffer assignment: no fragmentation, no other program's memory."
)


def _bytes(v) -> str:
    return "" if v is None or v is pd.NA else format_bytes(int(v))


def _fits(r) -> str:
    if r["fits"] is pd.NA or r["fits"] is None:
        return "not compiled"
    if r["peak_bytes"] is pd.NA:
        return "NO (XLA:TPU)"
    return f"{'yes' if r['fits'] else 'NO'} ({format_bytes(int(r['usable_bytes']))})"


def _refused(r) -> str:
    """XLA:TPU's own words where it refused the step as too large for the device."""
    return str(r["error"] or "").splitlines()[0][:300] if r["peak_bytes"] is pd.NA and r["fits"] is False else ""


def _batch(r, cut: str = "") -> str:
    """The largest batch that fits, in words; ``cut`` (Targets.cut): the
    compiles stopped part way, so it is no answer of the search."""
    largest, nxt = r["largest_batch"], r["next_batch"]
    if largest is pd.NA or largest is None:
        return ""
    if cut:
        return (f"search for the largest batch that fits cut short ({cut}): "
                + ("no batch compiled before it fits" if largest == 0 else
                   f"{int(largest):,} fits, the largest batch compiled before, a lower bound"))
    if largest == 0:
        return "no compiled batch fits" + ("" if nxt is pd.NA else f" ({int(nxt):,} does not)")
    if nxt is pd.NA:  # no compiled batch failed to fit: the search did not bracket the answer
        return f"largest batch that fits: at least {int(largest):,} (compiled, the largest compiled, which fits)"
    return f"largest batch that fits: {int(largest):,} (compiled; {int(nxt):,}, the next compiled, does not)"


def _lines(targets, r, n: int = 2) -> str:
    """The user lines holding the most at the peak of XLA:TPU's program."""
    mine = targets.lines[(targets.lines["target"] == r["target"]) & (targets.lines["function"] == r["function"])]
    if mine.empty:
        return ""
    shown = ", ".join(f"{x['site']} {format_bytes(int(x['bytes']))} {x['kind']}" for _, x in mine.head(n).iterrows())
    more = f", +{len(mine) - n} more (target_lines.csv)" if len(mine) > n else ""
    return f"at its peak ({format_bytes(int(mine['program_peak_bytes'].iloc[0]))} without code): {shown}{more}"


def render_targets(targets, con: Console, explain: bool = False) -> None:
    """The report's section on the slices (nothing without run --target)."""
    if targets is None:
        return
    heading(con, f"Compiled for TPU slices (run --target: XLA:TPU's figures per device, "
                 f"{counted(targets.compiles, 'compile')} in {targets.compile_s:.2f} s)")
    rows = targets.rows
    backend = next((b for b in rows["run_backend"] if b), "the run's backend") if len(rows) else ""
    if len(rows):
        t = table("target", "function", "batch", "peak", "arguments", "outputs", "aliased", "temporaries",
                  f"on {backend}", "fits (usable)")
        for _, r in rows.iterrows():
            t.add_row(safe(r["target"]), safe(r["function"]), "" if r["batch"] is pd.NA else f"{int(r['batch']):,}",
                      _bytes(r["peak_bytes"]), _bytes(r["argument_bytes"]), _bytes(r["output_bytes"]),
                      _bytes(r["alias_bytes"]), _bytes(r["temp_bytes"]), _bytes(r["run_peak_bytes"]), _fits(r))
        con.print(t)
    for _, r in rows.iterrows():
        fixes = [f"{name} {_bytes(r[c])} " + (f"(saves {_bytes(r['peak_bytes'] - r[c])})" if r["peak_bytes"] is not pd.NA
                                              else f"({'fits' if r[c] <= r['usable_bytes'] else 'does not fit'})")
                 for name, c in (("donated", "donated_peak_bytes"), ("bfloat16", "bfloat16_peak_bytes"))
                 if r[c] is not pd.NA]
        for said in (", ".join(fixes), _batch(r, targets.cut), _refused(r), _lines(targets, r)):
            if said:
                con.print(Text(f"{safe(r['target'])} {safe(r['function'])}: {safe(said)}"))
    for name in targets.asked:
        why = targets.not_compiled(name)
        if why is not None:
            con.print(Text(f"{safe(name)}: {safe(why)}", style="yellow"))
    if explain:
        con.print(Text(safe(_NOTE), style="dim"))


def render_targets_closing(targets, con: Console) -> None:
    """run's closing lines on its --target slices."""
    if targets is None:
        return
    for _, r in targets.rows.iterrows():
        if _refused(r):
            con.print(Text(f"target {safe(r['target'])}: {safe(r['function'])} does NOT fit a {safe(r['chip'])}"
                           + (f" at batch {int(r['batch']):,}" if r["batch"] is not pd.NA else "")
                           + f": {safe(_refused(r))}" + (f"; {_batch(r, targets.cut)}" if _batch(r) else "")))
        if r["peak_bytes"] is pd.NA:
            continue
        con.print(Text(f"target {safe(r['target'])}: {safe(r['function'])} {_bytes(r['peak_bytes'])} per device"
                       + ("" if r["batch"] is pd.NA else f" at batch {int(r['batch']):,}")
                       + f", {'fits' if r['fits'] else 'does NOT fit'} a {safe(r['chip'])} chip "
                       f"({format_bytes(int(r['usable_bytes']))} usable)"
                       + (f"; {_batch(r, targets.cut)}" if _batch(r) else "")))
    for name in targets.asked:
        why = targets.not_compiled(name)
        if why is not None:
            con.print(Text(f"target {safe(name)}: {safe(why)}"))
    con.print(Text(f"targets: {counted(targets.compiles, 'compile')}, {targets.compile_s:.2f} s "
                   f"(export --csv: targets.csv, target_points.csv, target_lines.csv)"))
