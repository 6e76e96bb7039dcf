"""``jaxmemprof report`` in the terminal: sections of small tables."""

from __future__ import annotations

import math

import pandas as pd
from rich.console import Console
from rich.table import Table
from rich.text import Text

from jaxmemprof.analysis.report import Report, peak_devices
from jaxmemprof.render.text import safe
from jaxmemprof.units import format_bytes

_BLOCKS = "▁▂▃▄▅▆▇█"


def sparkline(values, width: int = 64) -> str:
    """The series in at most ``width`` block characters (each the maximum of
    the values it covers), scaled from 0 to the series' maximum."""
    v = [float(x) for x in values if x == x]
    if not v:
        return ""
    n = len(v)
    if n > width:
        v = [max(v[i * n // width:(i + 1) * n // width] or [0.0]) for i in range(width)]
    hi = max(v)
    if hi <= 0:
        return _BLOCKS[0] * len(v)
    return "".join(_BLOCKS[min(len(_BLOCKS) - 1, int(x / hi * (len(_BLOCKS) - 1) + 0.5))] for x in v)


def _seconds(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)) or x is pd.NA:
        return "-"
    return f"{float(x):.2f} s"


def _table(*columns: str) -> Table:
    t = Table(box=None, pad_edge=False, header_style="bold")
    for c in columns:
        t.add_column(c, justify="left" if c in ("site", "device", "name", "rule", "finding", "fix") else "right",
                     overflow="fold")
    return t


def _heading(con: Console, text: str) -> None:
    con.print()
    con.print(Text(text, style="bold underline"))


def render_report(rep: Report, con: Console, *, top: int) -> None:
    s = rep.summary
    con.print(Text(f"jaxmemprof report: {safe(rep.path)}", style="bold"))
    for w in rep.warnings:
        con.print(Text(f"warning: {safe(w)}", style="yellow"))

    _heading(con, "Summary")
    lines = [
        f"command: {safe(s['command']) or '-'}",
        f"ran {_seconds(s['duration_s'])}, ended by {safe(s['ended_by'] or '?')} (exit status {s['exit_status']}); "
        f"backend {safe(s['backend'] or '?')}, {s['devices']} device(s)",
        f"{s['snapshots']} snapshots, {s['markers']} markers, {s['arrays_seen']} arrays seen; "
        f"sampling took {s['sampling_cpu_s']:.2f} s of CPU",
    ]
    if s["peak_snapshot"] is not None:
        lines.append(f"peak: {format_bytes(s['peak_bytes'])} live at {s['peak_t']:.2f} s (snapshot {s['peak_snapshot']})")
        per_dev = peak_devices(rep)
        if len(per_dev) > 1:
            lines.append("at the peak by device: " + ", ".join(
                f"{safe(d)} {format_bytes(b)}" for d, b in zip(per_dev["device"], per_dev["live_bytes"])))
    if s["estimated_true_peak_bytes"] is not None:
        lines.append(f"estimated true peak, with XLA's temporaries inside jitted calls: "
                     f"{format_bytes(s['estimated_true_peak_bytes'])} ({s['estimated_true_peak_where']})")
    if s["peak_unattributed_bytes"] is not None:
        lines.append(f"unattributed at the peak (in use by the allocator, not by live arrays): "
                     f"{format_bytes(s['peak_unattributed_bytes'])}")
    for line in lines:
        con.print(Text(line))

    if rep.peak_sites is not None and len(rep.peak_sites.rows):
        _heading(con, f"What held the peak (snapshot {s['peak_snapshot']})")
        t = _table("bytes", "count", "%", "site")
        for _, r in rep.peak_sites.rows.iterrows():
            t.add_row(format_bytes(r["bytes"]), str(r["count"]), f"{100 * r['share']:.1f}%", Text(safe(r["site"])))
        con.print(t)

    _render_timeline(rep, con)
    _render_jit(rep, con, top)
    _render_lifetimes(rep, con, top)
    _render_reuse(rep, con, top)
    _render_leaks(rep, con, top)
    _render_findings(rep, con)


def _render_timeline(rep: Report, con: Console) -> None:
    tl = rep.timeline
    totals = tl.totals
    if totals.empty:
        return
    _heading(con, "Timeline")
    con.print(Text(f"live bytes  {sparkline(totals['live_bytes'])}  max {format_bytes(tl.peak_bytes)}"))
    t = _table("snapshot", "t", "trigger", "live", "arrays", "markers", *(
        ["in use", "unattributed"] if totals["bytes_in_use"].notna().any() else []))
    picks = _sample_rows(totals, tl.peak_snapshot, 12)
    for _, r in totals.loc[picks].iterrows():
        # Text, not str: rich would read a label's [brackets] as markup (a [link=...] emits an escape).
        cells = [str(r["snapshot"]), f"{r['t']:.2f}",
                 Text(safe(r["trigger"]) + (f" ({safe(r['label'])})" if isinstance(r["label"], str) else "")),
                 format_bytes(r["live_bytes"]), str(r["arrays"]), str(r["markers_seen"])]
        if totals["bytes_in_use"].notna().any():
            cells += [_maybe_bytes(r["bytes_in_use"]), _maybe_bytes(r["unattributed_bytes"])]
        style = "bold" if r["snapshot"] == tl.peak_snapshot else ""
        t.add_row(*cells, style=style)
    con.print(t)
    if len(picks) < len(totals):
        con.print(Text(f"({len(picks)} of {len(totals)} snapshots shown; export --csv writes them all)"))


def _maybe_bytes(v) -> str:
    return "-" if pd.isna(v) else format_bytes(v)


def _sample_rows(totals: pd.DataFrame, peak, n: int) -> list:
    """Row labels of about ``n`` snapshots evenly spread, with the first,
    the peak and the last always in."""
    idx = list(totals.index)
    if len(idx) <= n:
        return idx
    chosen = {idx[round(i * (len(idx) - 1) / (n - 1))] for i in range(n)}
    if peak is not None:
        chosen |= set(totals.index[totals["snapshot"] == peak])
    return sorted(chosen)


def _render_jit(rep: Report, con: Console, top: int) -> None:
    jm = rep.jit_memory
    if jm.empty:
        return
    _heading(con, "Memory inside jitted functions (XLA's memory analysis, largest signature)")
    t = _table("calls", "compiles", "arguments", "outputs", "aliased", "temporaries", "call peak", "donated",
               "function", "site")
    for _, r in jm.head(top).iterrows():
        calls = "-" if pd.isna(r["calls"]) else ("" if r["calls_complete"] else "≥") + str(r["calls"])
        t.add_row(calls, "-" if pd.isna(r["compiles"]) else str(r["compiles"]),
                  format_bytes(r["argument_bytes"]), format_bytes(r["output_bytes"]), format_bytes(r["alias_bytes"]),
                  format_bytes(r["temp_bytes"]), format_bytes(r["call_peak_bytes"]), Text(safe(r["donated"]) or "-"),
                  Text(safe(r["function"])), Text(safe(r["jitted_at"])))
    con.print(t)
    con.print(Text("call peak = arguments + outputs - aliased (donation that took effect) + temporaries + code; "
                   "snapshots, taken between calls, never see it. ≥N calls: the probe stops counting a "
                   "function's calls once its samples are taken, so that it costs nothing per call."))
    _render_jit_peak(rep, con, top)


def _render_jit_peak(rep: Report, con: Console, top: int, lines: int = 4) -> None:
    """Per function XLA dumped, what its buffers live at its own peak are, by line."""
    peak = rep.jit_peak
    if peak.empty:
        return
    con.print(Text("At each function's own peak, in program order (XLA's buffer live ranges), by line:"))
    functions = list(peak.groupby("function_id", sort=False))
    for fid, rows in functions[:top]:
        parts = [f"{format_bytes(r['bytes'])} {safe(r['site'])}" if r["site"].startswith("argument ")
                 else f"{format_bytes(r['bytes'])} {r['kind']} at {safe(r['site'])}"
                 for _, r in rows.head(lines).iterrows()]
        more = len(rows) - lines
        con.print(Text(f"  {safe(rows['function'].iloc[0])} {format_bytes(rows['program_peak_bytes'].iloc[0])}: "
                       + "; ".join(parts) + (f"; {more} more in jit_peak.csv" if more > 0 else "")))
    if len(functions) > top:
        con.print(Text(f"  {len(functions) - top} more functions in jit_peak.csv"))


def _render_lifetimes(rep: Report, con: Console, top: int) -> None:
    if rep.has_arrays and not rep.lifetimes.empty:
        _heading(con, "Lifetimes by site (memory x time held)")
        t = _table("arrays", "bytes born", "at peak", "median", "p90", "max", "byte·s", "alive at end", "site")
        for _, r in rep.lifetimes.head(top).iterrows():
            t.add_row(str(r["arrays_born"]), format_bytes(r["bytes_born"]), format_bytes(r["live_bytes_at_peak"]),
                      _seconds(r["median_lifetime_s"]), _seconds(r["p90_lifetime_s"]), _seconds(r["max_lifetime_s"]),
                      f"{format_bytes(r['byte_seconds'])}·s", str(r["alive_at_end"]), Text(safe(r["site"])))
        con.print(t)
        con.print(Text("Lifetimes are measured between snapshots: an array is seen from the first snapshot it is "
                       "alive in to the first it is gone from; arrays living between two snapshots are not seen."))
    elif not rep.churn.empty:
        _heading(con, "Births and deaths by site (estimated: no per-array data)")
        con.print(Text(", ".join(safe(c) for c in rep.churn.columns)))
        for _, r in rep.churn.head(top).iterrows():
            con.print(Text("  ".join(safe(v) for v in r.tolist())))


def _render_reuse(rep: Report, con: Console, top: int) -> None:
    if not rep.has_arrays or rep.reuse_by_device.empty:
        return
    _heading(con, "Buffer reuse")
    t = _table("device", "buffers born", "address reused", "same size", "donated in place")
    for _, r in rep.reuse_by_device.iterrows():
        t.add_row(Text(safe(r["device"])), str(r["buffers_born"]), str(r["reused_address"]),
                  str(r["reused_same_size"]), str(r["donated_in_place"]))
    con.print(t)
    by_site = rep.reuse_by_site
    if not by_site.empty:
        busy = by_site[(by_site["reused_address"] > 0) | (by_site["donated_in_place"] > 0)].head(top)
        if not busy.empty:
            t = _table("address reused", "same size", "donated in place", "site")
            for _, r in busy.iterrows():
                t.add_row(str(r["reused_address"]), str(r["reused_same_size"]), str(r["donated_in_place"]),
                          Text(safe(r["site"])))
            con.print(t)
    con.print(Text(safe(rep.reuse_note)))


def _render_leaks(rep: Report, con: Console, top: int) -> None:
    _heading(con, "Leaks and recompiles")
    if rep.leaks.empty:
        con.print("no site grows steadily across the run")
    else:
        t = _table("per step", "per second", "first", "last", "projected", "p", "site")
        for _, r in rep.leaks.head(top).iterrows():
            per_step = r["growth_bytes_per_step"]
            t.add_row(
                "-" if pd.isna(per_step) else format_bytes(per_step, signed=True),
                format_bytes(r["growth_bytes_per_s"], signed=True),
                format_bytes(r["live_bytes_first"]), format_bytes(r["live_bytes_last"]),
                format_bytes(r["projected_bytes_after"]), f"{r['p_value']:.0e}", Text(safe(r["site"]), style="red"),
            )
        con.print(t)
    suspects = rep.recompiles[rep.recompiles["suspect"]] if not rep.recompiles.empty else rep.recompiles
    others = len(rep.recompiles) - len(suspects)
    if suspects.empty:
        con.print("no function was compiled again and again" + (
            f" ({others} compiled for a few shapes each: recompiles.csv lists them)" if others else ""))
    else:
        t = _table("executables", "first", "last", "name", "site")
        for _, r in suspects.head(top).iterrows():
            t.add_row(str(r["max_count"]), str(r["first_count"]), str(r["last_count"]), Text(safe(r["name"])),
                      Text(safe(r["site"])))
        con.print(t)


def _render_findings(rep: Report, con: Console) -> None:
    _heading(con, "Findings")
    if rep.findings.empty:
        con.print("nothing to fix found")
        return
    colours = {"high": "red", "medium": "yellow", "low": "cyan", "info": ""}
    for i, r in enumerate(rep.findings.itertuples(index=False), start=1):
        line = Text(f"{i}. [{r.severity}] ", style=colours.get(r.severity, ""))
        line.append(safe(r.message))
        if pd.notna(r.saving_bytes) and r.saving_bytes:
            line.append(f" (saves {format_bytes(r.saving_bytes)})")
        con.print(line)
        if r.site:
            con.print(Text(f"   at {safe(r.site)}"))
        if r.fix:
            con.print(Text(f"   fix: {safe(r.fix)}"))
        if r.evidence:
            con.print(Text(f"   evidence: {safe(r.evidence)}"))
