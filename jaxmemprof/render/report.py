"""``jaxmemprof report`` in the terminal: sections of small tables.

Quiet by default: a section with nothing to say takes one line, identical
rows of several devices are one row, each finding takes three lines, and
the methods behind each section (render/notes.py) and every finding's full
words and figures (render/findings.py) come with ``--explain``."""

from __future__ import annotations

import math

import pandas as pd
from rich.console import Console
from rich.text import Text

from jaxmemprof.analysis.documents import RunDocument
from jaxmemprof.analysis.report import Report
from jaxmemprof.facts.devices import display
from jaxmemprof.facts import backends
from jaxmemprof.render import answer
from jaxmemprof.render import findings as said
from jaxmemprof.render import notes
from jaxmemprof.render.oom import lines as oom_lines
from jaxmemprof.render.oom import target_lines
from jaxmemprof.render.targets import render_targets
from jaxmemprof.render.text import heading as _heading
from jaxmemprof.render.text import safe
from jaxmemprof.render.text import table as _table
from jaxmemprof.units import counted, format_bytes, format_pair

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


def _quiet(con: Console, title: str, text: str) -> None:
    """A section with nothing to say: one line."""
    con.print()
    line = Text(title, style="bold underline")
    line.append(Text(f": {text}", style=""))
    con.print(line)


def _explained(con: Console, explain: bool, text: str) -> None:
    if explain:
        con.print(Text(safe(text), style="dim"))


def device_ranges(devices) -> str:
    """``cpu:0-7 (8 devices)`` for devices named with consecutive numbers,
    else the names; one device is its name."""
    names = [display(str(d)) for d in devices]
    if len(names) == 1:
        return names[0]
    parsed = []
    for n in names:
        stem, _, num = n.rpartition(":")
        parsed.append((stem, int(num)) if num.isdigit() and stem else None)
    if all(parsed) and len({s for s, _ in parsed}) == 1:
        nums = sorted(i for _, i in parsed)
        if nums == list(range(nums[0], nums[0] + len(nums))):
            return f"{parsed[0][0]}:{nums[0]}-{nums[-1]} ({len(nums)} devices)"
    return f"{', '.join(names)} ({len(names)} devices)"


def collapse_devices(rows: pd.DataFrame, columns: list[str]) -> list[tuple[str, pd.Series]]:
    """Rows per device, with devices whose ``columns`` are all equal as one
    row: (devices in words, the row)."""
    groups: dict[tuple, list] = {}
    first: dict[tuple, pd.Series] = {}
    for _, r in rows.iterrows():
        key = tuple(r[c] for c in columns)
        groups.setdefault(key, []).append(r["device"])
        first.setdefault(key, r)
    return [(device_ranges(devs), first[key]) for key, devs in groups.items()]


def render_report(doc: RunDocument, con: Console) -> None:
    """The run's report in the terminal (``doc``: analysis/page.py ``run_document``)."""
    rep, top, explain = doc.report, doc.top, doc.explain
    # out of memory: XLA's reason leads, then a --target slice's refusal
    for line in ([*oom_lines(doc.oom, doc.show)] if doc.oom is not None else []) + \
            [f"target {x}" for x in target_lines(doc.refusals, doc.show)]:
        con.print(line, markup=False, highlight=False)
    s = rep.headline
    con.print(Text(f"jaxmemprof report: {safe(rep.path)}", style="bold"))
    for w in rep.warnings:
        con.print(Text(f"warning: {safe(w)}", style="yellow"))
    _render_summary(rep, con, explain)
    if rep.peak_sites is not None and len(rep.peak_sites.rows):
        at = f"; holders as searched at snapshot {rep.peak_holders_at}" if rep.peak_holders_at else ""
        _heading(con, f"What held the live peak (snapshot {s['peak_snapshot']}{at})")
        held = rep.peak_holders
        t = _table("bytes", "count", "%", "site", *(("held by",) if held else ()))
        for _, r in rep.peak_sites.rows.iterrows():
            t.add_row(format_bytes(r["bytes"]), str(r["count"]), f"{100 * r['share']:.1f}%", Text(safe(r["site"])),
                      *((Text(safe(held.get(r["site"], ""))),) if held else ()))
        con.print(t)
    _render_roles(doc, con, explain)
    _render_timeline(doc, con)
    _render_jit(doc, con, top, explain)
    _render_plan(doc, con, explain)
    render_targets(rep.targets, con, explain)
    _render_lifetimes(rep, con, top, explain)
    _render_reuse(rep, con, top, explain)
    _render_leaks(rep, con, top, explain)
    _render_findings(rep, con, explain)


def _render_roles(doc: RunDocument, con: Console, explain: bool) -> None:
    """What the memory is at the largest sampled jitted call, per group of
    devices whose roles are the same: in a few lines, the roles of 1 % of the
    call's peak or more with their largest owners (the rest summed); with
    ``explain``, every role in a table."""
    what = doc.report.roles
    if not doc.role_groups:
        return
    for i, (devices, rows) in enumerate(doc.role_groups):
        on = "" if devices == ["all"] else f" on {device_ranges(devices)}" + (" each" if len(devices) > 1 else "")
        _heading(con, f"What the memory is ({safe(display(what.where))}{on}: {format_bytes(rows['bytes'].sum())})")
        if i == 0 and getattr(what, "unsampled", False):  # what cannot be told, said, not another call's in its place
            true = doc.report.headline.true_peak_bytes
            con.print(Text(f"(the true peak's call{'' if true is None else ', ' + format_bytes(true) + ','} was not "
                           "sampled: no sampled call ran its signature, so its inputs, and their roles, were not "
                           "seen)"))
        big, small = (rows, rows.iloc[0:0]) if explain else (rows[rows["share"] >= 0.01], rows[rows["share"] < 0.01])
        t = _table("bytes", "%", "role", "largest")
        for _, r in big.iterrows():
            t.add_row(format_bytes(r["bytes"]), f"{100 * r['share']:.0f}%", r["role"], Text(_largest(r)))
        if len(small):
            t.add_row(format_bytes(small["bytes"].sum()), f"{100 * small['share'].sum():.0f}%",
                      f"{len(small)} more", "roles.csv, owners.csv")
        con.print(t)
    _explained(con, explain, notes.ROLES)


def _largest(r) -> str:
    """A role's largest owner in words: ``params['w1'] 512.00 KiB, +2 more``."""
    if not r["largest_owner"]:
        return ""
    more = f", +{r['arrays'] - 1} more" if r["arrays"] > 1 else ""
    return f"{safe(r['largest_owner'])} {format_bytes(r['largest_owner_bytes'])}{more}"


def no_snapshot_text(s: dict) -> str:
    """Why a run has no snapshot, from its summary (running, killed, or an
    end with no array ever on a device)."""
    if s.get("running"):
        return "no snapshot yet: the run is still running"
    if not s.get("finished", True):
        return "no snapshot: the run was killed before its first"
    if s.get("no_snapshot_why") == "no-memory-events":
        return ""  # a profile without memory events: its reader's note said so, once (store/xprof_tables.py)
    return "no snapshot: the program never put an array on a JAX device"


# The unattributed bytes at the live peak, by what analysis/headline.py says they are.
_UNATTRIBUTED = {
    "queued": "unattributed at the live peak (in use by the allocator, not by live arrays): {}: buffers the runtime "
              "holds for steps queued ahead of the chip (a call was in flight)",
    "runtime": "unattributed at the live peak (in use by the allocator, not by live arrays): {}: the runtime's own "
               "(compiled programs, constants)",
    "profile": "in use at the live peak by the profile's memory events: {} (the allocator's bytes in use and "
               "reserved; a profile names allocations, not arrays: what held them below)",
}


def _render_summary(rep: Report, con: Console, explain: bool) -> None:
    s = rep.headline
    totals = rep.timeline.totals
    cells = s.get("cells") if s["ended_by"] in ("exit", "exception", "oom") and s["duration_s"] is not None else None
    if cells:  # a notebook's cells, recorded by its magic: they have no exit status, and one may have raised
        raised = s.get("raised")
        ran = f"raised {safe(raised)} after {_seconds(s['duration_s'])}" if raised else _seconds(s["duration_s"])
    elif s["exit_status"] is None and s["ended_by"] == "exit" and s["duration_s"] is not None:
        ran = f"{_seconds(s['duration_s'])}, recorded by jaxmemprof.profile()"  # a block of a program: no exit
    elif s["exit_status"] is None:  # killed, or still running: what the snapshots saw
        state = "still running" if s.get("running") else "killed" if not s.get("finished", True) else "no exit status"
        ran = f"{_seconds(totals['t'].max())} to its last snapshot, {state}" if len(totals) else state
    else:
        ended = "" if s["ended_by"] == "exit" else f" ({safe(s['ended_by'] or '?')})"
        ran = f"{_seconds(s['duration_s'])}, exit status {s['exit_status']}{ended}"
    devices = rep.timeline.devices["device"].dropna().astype(str).unique() if len(rep.timeline.devices) else []
    backend = s["backend"] or (display(str(devices[0])).split(":")[0] if len(devices) else "")
    lines = [
        (f"{safe(cells)}{' ' if s.get('raised') else ': '}{ran}" if cells else f"{safe(s['command']) or 'profile()'}: {ran}")
        + (f"; {safe(backend)}, {counted(s['devices'], 'device')}" if backend else ""),
    ]
    a = rep.answer
    if s["peak_snapshot"] is not None and a is not None:
        per_dev = rep.peak_devices
        by_device = ", ".join(f"{safe(d)} {format_bytes(r['live_bytes'])}"
                              for d, r in collapse_devices(per_dev, ["live_bytes"])) if len(per_dev) > 1 else ""
        lines += [line for line in (answer.true_peak_line(a, con.width), answer.live_peak_line(a, by_device=by_device),
                                    answer.inside_line(a, con.width),
                                    answer.fix_line(a, lambda f: said.saves(f, said.words(f))))
                  if line]
        lines[2:2] = answer.counters_lines(a, rep.outside_jit)  # the chip's own counters beside the true peak (backends/)
    if s["peak_snapshot"] is None and no_snapshot_text(s):
        lines.append(no_snapshot_text(s))
    if s["peak_unattributed_bytes"]:
        lines.append(_UNATTRIBUTED.get(s["peak_unattributed_what"], _UNATTRIBUTED["runtime"])
                     .format(format_bytes(s["peak_unattributed_bytes"])))
    lines.append(f"{counted(s['snapshots'], 'snapshot')}, {counted(s['markers'], 'marker')}, "
                 f"{counted(s['arrays_seen'], 'array')} seen; sampling took {s['sampling_cpu_s']:.2f} s of CPU; "
                 f"words: {answer.GLOSSARY}")
    if s["program_thread_wall_s"] is not None:  # what the snapshots in the program's thread cost it, where paid
        lines.append(f"snapshots in the program's thread took {s['program_thread_wall_s']:.2f} s of its time "
                     f"({s['program_thread_cpu_s']:.2f} s CPU)")
    if rep.holders_unread:
        lines.append(f"holders: {safe(rep.holders_unread)}")
    if rep.outside_jit:
        lines.append(answer.outside_jit_line(rep.outside_jit))
    if s.step_snapshots_slowed:
        lines.append(f"the snapshots at its steps took {s.step_snapshots_share:.0%} of the time between its first and last marked "
                     f"step, in the program's own thread: a loop that much faster under python (on an accelerator, "
                     f"fewer of its steps queued ahead of the chip: docs/tpu.md)")
    for line in lines:
        con.print(Text(line))
    if s["true_peak_total_bytes"] is not None:
        _explained(con, explain, notes.TRUE_PEAK)


def _render_timeline(doc: RunDocument, con: Console) -> None:
    tl = doc.report.timeline
    totals = tl.totals
    if totals.empty:
        return
    picks = doc.timeline_rows
    _heading(con, "Timeline" + (f" ({len(picks)} of {len(totals)} snapshots: export --csv has them all)"
                                if len(picks) < len(totals) else ""))
    con.print(Text(f"live bytes  {sparkline(totals['live_bytes'])}  max {format_bytes(tl.peak_bytes)}"))
    allocator = totals["bytes_in_use"].notna().any()
    t = _table("snapshot", "t", "trigger", "live", "arrays", "markers", *(
        ["in use", "unattributed"] if allocator else []))
    for _, r in totals.loc[picks].iterrows():
        # Text, not str: rich would read a label's [brackets] as markup (a [link=...] emits an escape).
        cells = [str(r["snapshot"]), f"{r['t']:.2f}",
                 Text(safe(r["trigger"]) + (f" ({safe(r['label'])})" if isinstance(r["label"], str) else "")),
                 format_bytes(r["live_bytes"]), str(r["arrays"]), str(r["markers_seen"])]
        if allocator:
            cells += [_maybe_bytes(r["bytes_in_use"]), _maybe_bytes(r["unattributed_bytes"])]
        t.add_row(*cells, style="bold" if r["snapshot"] == tl.peak_snapshot else "")
    con.print(t)


def _maybe_bytes(v) -> str:
    return "-" if pd.isna(v) else format_bytes(v)


def _render_jit(doc: RunDocument, con: Console, top: int, explain: bool) -> None:
    jm = doc.report.jit_memory
    if jm.empty:
        return
    _heading(con, "Memory inside jitted functions (XLA's memory analysis, largest signature)")
    recompiled = bool((jm["compiles"].fillna(0) > 1).any())
    # one signature compiled again (committed to a device or not, a weak type): both counts, side by side
    again = "signatures" in jm and bool((jm["signatures"].notna() & (jm["signatures"] != jm["compiles"])).any())
    t = _table("calls", *(["compiles"] if recompiled else []), *(["signatures"] if again else []), "arguments",
               "outputs", "aliased", "temporaries", "call peak", "function")
    for _, r in jm.head(top).iterrows():
        calls = "-" if pd.isna(r["calls"]) else ("" if r["calls_complete"] else "≥") + str(r["calls"])
        donated = f", donates {safe(r['donated'])}" if r["donated"] else ""
        t.add_row(calls, *([("-" if pd.isna(r["compiles"]) else str(r["compiles"]))] if recompiled else []),
                  *([("-" if pd.isna(r["signatures"]) else str(r["signatures"]))] if again else []),
                  format_bytes(r["argument_bytes"]), format_bytes(r["output_bytes"]), format_bytes(r["alias_bytes"]),
                  format_bytes(r["temp_bytes"]), format_bytes(r["call_peak_bytes"]),
                  Text(f"{safe(r['function'])} at {safe(r['jitted_at'])}{donated}"))
    con.print(t)
    if len(jm) > top:
        con.print(Text(f"({counted(len(jm) - top, 'more function')} in jit.csv)"))
    for _, r in jm.head(top).iterrows() if again else ():
        if pd.notna(r["signatures"]) and pd.notna(r["compiles"]) and r["compiles"] > r["signatures"]:
            con.print(Text(f"({safe(r['function'])}: {r['compiles']} compiles of {counted(r['signatures'], 'signature')}"
                           ": JAX compiles one again for what a signature does not tell apart, an argument committed "
                           "to a device or not, a weak type)"))
    _explained(con, explain, notes.JIT)
    if explain:  # by default, "What the memory is" names the lines inside the call that hold most
        _render_jit_peak(doc, con, top)


def _render_jit_peak(doc: RunDocument, con: Console, top: int, lines: int = 2) -> None:
    """Per function XLA dumped, what its buffers live at its own peak are, by line."""
    functions = doc.jit_peak
    if not functions:
        return
    con.print(Text("At each function's own peak (XLA's buffer live ranges), by your lines:"))
    for rows in functions[:top]:
        is_arg = rows["site"].str.startswith("argument ").to_numpy(dtype=bool)
        mine = rows[~is_arg]
        notes = [f"{format_bytes(rows.loc[is_arg, 'bytes'].sum())} arguments"] if is_arg.any() else []
        if len(mine) > lines:
            notes.append(f"{counted(len(mine) - lines, 'more line')} in jit_peak.csv")
        con.print(Text(f"  {safe(rows['function'].iloc[0])} {format_bytes(rows['program_peak_bytes'].iloc[0])}"
                       + (f" ({'; '.join(notes)})" if notes else "") + ":"))
        for _, r in mine.head(lines).iterrows():
            con.print(Text(f"    {format_bytes(r['bytes'])} {r['kind']} at {safe(r['site'])}"))
    if len(functions) > top:
        con.print(Text(f"  {counted(len(functions) - top, 'more function')} in jit_peak.csv"))


_PLAN_NOTE = (
    "Plan: at the end of a run --plan, the step with the run's largest XLA call peak is compiled again from its "
    "arguments' shapes (no array allocated) with the batch inputs' dimension scaled; each peak is the live bytes "
    "outside the call (before the recorded call, less its arguments) plus XLA's call peak (arguments + outputs - "
    "aliased + temporaries + code), per device. The largest batch is one XLA compiled and that fits, next to the "
    "next compiled one, which does not: never a batch read off a line (XLA may choose other algorithms at another "
    "batch: docs/plan.md); run --plan-device-memory SIZE compiles between them. A GPU's or TPU's compiles differ "
    "from the CPU's.")


def _render_plan(doc: RunDocument, con: Console, explain: bool) -> None:
    """run --plan: the planned steps' peak against the batch, and with --device-memory the largest batch."""
    plan = doc.report.plan
    if plan is None:
        return
    for line in plan.events:
        con.print(Text(f"plan: {safe(line)}", style="yellow"))
    for f in plan.functions:
        busiest = doc.plan_peaks[f.function_id]
        _heading(con, f"Plan by batch (run --plan: {safe(f.function)} compiled by XLA on {safe(f.backend or '?')}, "
                      f"{counted(f.compiles, 'compile')} in {f.compile_s:.2f} s)")
        flow = {"per-step": "new at every call", "held": "the same arrays at every call"}.get(f.batch_flow, "")
        devices = busiest.devices
        con.print(Text(f"the batch: {safe(', '.join(f.batch_inputs))}" + (f" ({flow})" if flow else "")
                       + f", dimension {f.axis}, recorded at {f.recorded_batch}; the peak per device"
                       + (f" (the busiest of {device_ranges(devices)})" if len(devices) > 1 else
                          f" on {safe(display(devices[0]))}" if devices else "")))
        if f.call_peak_bytes is not None:
            others = ", ".join(f"{safe(n)} {format_bytes(b)}" for n, b in f.not_planned[:3])
            con.print(Text(f"planned: the run's {'largest' if f.rank == 1 else 'second largest'} XLA call peak "
                           f"({format_bytes(f.call_peak_bytes)})" + (f"; not planned: {others}" if others else "")))
        variants = busiest.variants
        t = _table("batch", *variants)
        for b in busiest.batches:
            t.add_row(f"{b:,}", *(format_bytes(busiest.peak[(v, b)]) if (v, b) in busiest.peak else "" for v in variants))
        con.print(t)
        if f.failed or f.refused_at:
            con.print(Text("(" + "; ".join(
                ([f"{counted(f.failed, 'compile')} failed: plan.csv's error column says why"] if f.failed else [])
                + ([f"refused by XLA as too large for the device at {_batches(f.refused_at)}: "
                    f"{'it does' if len(f.refused_at) == 1 else 'they do'} not fit"] if f.refused_at else [])) + ")"))
        models = plan.models[plan.models["function_id"] == f.function_id]
        rec = models[(models["variant"] == "recorded") & (models["device"] != "job")]
        for _, m in rec.head(1).iterrows():
            if m["points"] < 2:
                con.print(Text(f"recorded: one batch compiled ({m['batch_min']:,}): no line through one point"))
            elif m["affine"]:
                con.print(Text(f"recorded: {format_bytes(m['intercept_bytes'])} + "
                               f"{format_bytes(m['bytes_per_example'])} per example "
                               f"(its {m['points']} points lie on that line, within 1 %)"))
            else:
                con.print(Text(f"recorded: the {m['points']} points do not lie on one line (within 1 %): only the "
                               f"compiled batches are trusted"))
        if plan.device_bytes is None:
            con.print(Text("report --device-memory SIZE: the largest batch that fits a device of that size"))
        else:
            _render_plan_fit(plan, f, models, busiest, con)
        for note in f.notes:
            con.print(Text(f"not compiled: {safe(note)}"))
    if plan.functions:
        _explained(con, explain, _PLAN_NOTE)


def _batch_text(b, batches=(), searched: bool = False, next_batch=None, refused=()) -> str:
    """A largest batch in words: a compiled batch that fits, and the next
    one, which does not: ``next_batch`` (the model's: compiled, or one of
    ``refused``, those XLA refused as too large) where given, else the next of
    ``batches`` (those compiled for its variant); never a batch read off a line."""
    if b is None or b is pd.NA:
        return "not known (no batch compiled)"
    if next_batch is None or next_batch is pd.NA:
        above = min((x for x in batches if x > b), default=None)
    else:
        above = int(next_batch)
    if b == 0:
        return f"none ({above:,}, the smallest compiled, does not fit)" if above is not None else "none"
    if above is None:
        return f"at least {b:,} (the largest compiled batch, which fits)"
    return (f"{b:,} (compiled, and fits; {above:,}, the next " + ("one, XLA refused as too large" if above in refused
                                                                  else "compiled, does not")
            + ("; found by compiles for this device)" if searched else ")"))


def _render_plan_fit(plan, f, models, busiest, con: Console) -> None:
    rec = models[models["variant"] == "recorded"]
    per_device = rec[rec["device"] != "job"]
    job = rec[rec["device"] == "job"]
    size = format_bytes(plan.device_bytes)
    points = plan.points[(plan.points["function_id"] == f.function_id) & (plan.points["source"] == "search")]
    if plan.searched_bytes == plan.device_bytes and len(points):
        con.print(Text(f"searched at the end of the run for a {size} device: {counted(points['batch'].nunique(), 'more compile')} "
                       f"at batches {', '.join(f'{b:,}' for b in points['batch'].drop_duplicates())}"
                       + (f"; the search was cut short ({safe(plan.cut)})" if plan.cut else "")))
    searched = plan.searched_bytes == plan.device_bytes and len(points) > 0 and not plan.cut
    compiled = busiest.compiled

    for _, m in (job if len(job) else per_device).iterrows():
        on = "every device of the call" if m["device"] == "job" else safe(display(m["device"]))
        batches = compiled("recorded")
        if not backends.get(getattr(plan, "backend", None)).has_pool:  # a TPU: the whole chip (backends/tpu.py)
            whose = " (the chip's own bytes_limit)" if getattr(plan, "device_from", "") == "bytes_limit" else ""
            con.print(Text(f"for a {size} device{whose} ({on}): largest batch "
                           f"{_batch_text(m['largest_batch'], batches, searched, m['next_batch'], f.refused_at)} "
                           f"within the whole chip (a TPU has "
                           f"no pool: XLA:TPU refuses at compile what cannot fit)"))
            continue
        con.print(Text(f"for a {size} device ({on}): largest batch "
                       f"{_batch_text(m['largest_batch'], batches, searched)} in XLA's default pool, less the fit "
                       f"rule's 5 % and 64 MiB; {_batch_text(m['largest_batch_with_settings'], batches)} with "
                       f"{plan.fraction_variable}=.95"))
    lower = [m for _, m in rec.iterrows() if m["largest_batch"] is not pd.NA and m["largest_batch"] == m["batch_max"]]
    if lower and not searched:
        con.print(Text(f"(a bound, not the answer: run the script with --plan-device-memory {size.replace(' ', '')} to "
                       f"find the largest batch by compiles)"))
    if len(job):
        con.print(Text("  by device: " + ", ".join(
            f"{safe(display(m['device']))} {_batch_text(m['largest_batch'], compiled('recorded'))}"
            for _, m in per_device.iterrows())))
    fixes = models[(models["variant"] != "recorded") & (models["device"] == (job["device"].iloc[0] if len(job) else
                                                                             models["device"].iloc[0]))]
    for _, m in fixes.iterrows():
        if m["at_batch"] is pd.NA or not m["at_batch"]:
            continue
        what = {"donated": "donated " + (", ".join(f.donated) or "state"), "bfloat16": "bfloat16 (every float32 "
                "argument)"}.get(m["variant"], m["variant"])
        if m["variant"] == "donated":
            what += (" (as the report advises)" if f.advised is not None and sorted(f.advised) == sorted(f.donated)
                     else f" (the report advises {', '.join(f.advised)})" if f.advised else "")
        own = f"its own largest batch {_batch_text(m['largest_batch'], compiled(m['variant']))}"
        if m["peak_at_batch_bytes"] is pd.NA:
            con.print(Text(f"at batch {m['at_batch']:,}: {safe(what)} was not compiled there (run --plan-device-memory "
                           f"{size.replace(' ', '')} compiles each fix at the answer); {own}"))
            continue
        saving = m["saving_at_batch_bytes"]
        base = m["peak_at_batch_bytes"] + saving
        said = (f"saves {format_bytes(saving)}" if saving >= 0 else f"needs {format_bytes(-saving)} more, by XLA's "
                f"compile")
        con.print(Text(f"at batch {m['at_batch']:,}: {safe(what)} holds {format_bytes(m['peak_at_batch_bytes'])} "
                       f"(recorded: {format_bytes(base)}), {said}; {own}"))


def _render_lifetimes(rep: Report, con: Console, top: int, explain: bool) -> None:
    if rep.has_arrays and not rep.lifetimes.empty:
        _heading(con, "Lifetimes by site (memory x time held, between snapshots)")
        t = _table("arrays", "bytes born", "at peak", "median", "byte·s", "at end", "site")
        for _, r in rep.lifetimes.head(top).iterrows():
            t.add_row(str(r["arrays_born"]), format_bytes(r["bytes_born"]), format_bytes(r["live_bytes_at_peak"]),
                      _seconds(r["median_lifetime_s"]),
                      f"{format_bytes(r['byte_seconds'])}·s", str(r["alive_at_end"]), Text(safe(r["site"])))
        con.print(t)
        if len(rep.lifetimes) > top:
            con.print(Text(f"({counted(len(rep.lifetimes) - top, 'more site')} in lifetimes.csv)"))
        _explained(con, explain, notes.LIFETIMES)
    elif not rep.churn.empty:
        _heading(con, "Births and deaths by site (estimated: no per-array data)")
        con.print(Text(", ".join(safe(c) for c in rep.churn.columns)))
        for _, r in rep.churn.head(top).iterrows():
            con.print(Text("  ".join(safe(v) for v in r.tolist())))


_REUSE_COUNTS = ["buffers_born", "reused_address", "reused_same_size", "donated_in_place"]


def _render_reuse(rep: Report, con: Console, top: int, explain: bool) -> None:
    if not rep.has_arrays or rep.reuse_by_device.empty:
        return
    by_device = rep.reuse_by_device
    unknown = (f"; {rep.reuse_unknown_addresses} without an address" if rep.reuse_unknown_addresses else "")
    if not (by_device["reused_address"].sum() or by_device["donated_in_place"].sum()):
        born = int(by_device["buffers_born"].sum())
        _quiet(con, "Buffer reuse", f"none seen ({born} buffers on {device_ranges(by_device['device'])}{unknown})")
        _explained(con, explain, notes.reuse_note(rep))
        return
    if not explain:  # one line: what the tables under --explain hold
        _quiet(con, "Buffer reuse", (
            f"{int(by_device['reused_address'].sum())} of {int(by_device['buffers_born'].sum())} buffers reused an "
            f"address ({int(by_device['reused_same_size'].sum())} same size), "
            f"{int(by_device['donated_in_place'].sum())} donated in place"
            + unknown))
        return
    _heading(con, "Buffer reuse (seen at snapshots only)")
    t = _table("device", "buffers born", "address reused", "same size", "donated in place")
    for devices, r in collapse_devices(by_device, _REUSE_COUNTS):
        t.add_row(Text(safe(devices)), *(str(r[c]) for c in _REUSE_COUNTS))
    con.print(t)
    by_site = rep.reuse_by_site
    busy = by_site[(by_site["reused_address"] > 0) | (by_site["donated_in_place"] > 0)].head(top) \
        if not by_site.empty else by_site
    if not busy.empty:
        t = _table("address reused", "same size", "donated in place", "site")
        for _, r in busy.iterrows():
            t.add_row(str(r["reused_address"]), str(r["reused_same_size"]), str(r["donated_in_place"]),
                      Text(safe(r["site"])))
        con.print(t)
    if unknown and not explain:
        con.print(Text(f"({unknown[2:]} are not matched: --explain says why)"))
    _explained(con, explain, notes.reuse_note(rep))


def _render_leaks(rep: Report, con: Console, top: int, explain: bool = False) -> None:
    suspects = rep.recompiles[rep.recompiles["suspect"]] if not rep.recompiles.empty else rep.recompiles
    others = len(rep.recompiles) - len(suspects)
    shapes = [f for f in rep.findings if f.rule == "recompile" and f.case == "shapes"]  # for many shapes: a finding
    compiled = "; ".join(f"{safe(f.fact('function'))} was compiled for {f.fact('signatures')} input shapes "
                         f"(finding {rep.findings.index(f) + 1})" for f in shapes) or (
        "no function was compiled again and again" + (
            f" ({others} compiled for a few shapes each: recompiles.csv)" if others else ""))
    if rep.leaks.empty and suspects.empty:
        _quiet(con, "Leaks and recompiles", f"no site grows steadily; {compiled}")
        return
    _heading(con, "Leaks and recompiles")
    if rep.leaks.empty:
        con.print("no site grows steadily across the run")
    elif not explain:  # what grew, in words; the statistics under --explain
        steps = rep.headline.markers or 0
        for _, r in rep.leaks.head(top).iterrows():
            grew = r["live_bytes_last"] - r["live_bytes_first"]
            per_step = r["growth_bytes_per_step"]
            rate = (f"{format_bytes(per_step, signed=True)} a step" if not pd.isna(per_step) and steps >= 2
                    else f"{format_bytes(r['growth_bytes_per_s'], signed=True)}/s")
            over = f" over {steps} steps" if steps >= 2 and not pd.isna(per_step) else ""
            line = Text(safe(r["site"]), style="red")
            said = f" grew {format_bytes(grew)}{over} ({format_pair(r['live_bytes_first'], r['live_bytes_last'])}, {rate})"
            if len(line) + len(said) > con.width:  # the first and last bytes are in leaks.csv
                said = f" grew {format_bytes(grew)}{over} ({rate})"
            line.append(said)
            con.print(line)
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
    if suspects.empty:
        con.print(compiled)
    else:
        t = _table("executables", "first", "last", "name", "site")
        for _, r in suspects.head(top).iterrows():
            t.add_row(str(r["max_count"]), str(r["first_count"]), str(r["last_count"]), Text(safe(r["name"])),
                      Text(safe(r["site"])))
        con.print(t)
        if shapes:
            con.print(Text(compiled))


_COLOURS = {"high": "red", "medium": "yellow", "low": "cyan", "info": ""}


_HINTS = ("low", "info")


def _said(con: Console, text: Text, first: int, hang: int) -> None:
    """``text`` at the console's width, its first line indented by
    ``first``, each line the width wraps by ``hang``: wrapped here, a line
    at a time, never padded (a line padded to the width, or one that is
    one column over it, the terminal wraps again, and a copy carries the
    spaces)."""
    width = con.width
    if len(text) + first <= width:  # the whole line fits (and off a terminal, without $COLUMNS, always)
        con.print(Text(" " * first) + text, soft_wrap=True)
        return
    for i, line in enumerate(text.wrap(con, max(width - max(first, hang), 20))):
        line.rstrip()
        con.print(Text(" " * (first if i == 0 else hang)) + line, soft_wrap=True)


def _print_hanging(con: Console, head: Text, rest: list[str], first: int, hang: int, code: int) -> None:
    """``head`` (wrapped by ``_said``: indented ``first``, its wrapped lines
    ``hang``), then each line of ``rest`` (a fix's statement of several
    lines: code) escaped and indented by ``code``, whole (the terminal wraps
    a line of code longer than it, and a copy is the code)."""
    _said(con, head, first, hang)
    for more in rest:
        con.print(Text(" " * code + safe(more)), soft_wrap=True)


def render_findings(findings, con: Console, *, explain: bool = False, limit: int | None = None,
                    indent: str = "   ", words_of=None, where_of=None) -> None:
    """Each finding in three lines: severity, rule, site and saving; one
    sentence; the fix. A low or info one (a hint) in one line, with its
    fix. With ``explain``, each in full, with its evidence. A line longer
    than the console is wrapped with its indent kept (``_said``)."""
    shown = findings if limit is None else findings[:limit]
    pad = len(indent)
    for i, f in enumerate(shown, start=1):
        w = (words_of or said.words)(f)
        line = Text(f"{i}. ")
        line.append(f"{f.severity} {f.rule}", style=_COLOURS.get(f.severity, ""))
        if f.site:
            line.append(f"  {safe(f.site)}")
        if f.saving_bytes:
            line.append(f"  {said.saves(f, w)}")
        if where_of is not None:  # a job's finding: the processes it applies to
            line.append(f"  ({safe(where_of(f))})")
        if not explain and f.severity in _HINTS:  # one line: what to do (low), or what it says (info)
            words = w.brief if f.severity == "info" else w.brief_fix
            first, *rest = str(words).split("\n") if words else [""]
            if words:
                line.append(f": {safe(first)}")
            _print_hanging(con, line, rest, 0, pad, pad + 5)
            continue
        _said(con, line, 0, pad)
        _said(con, Text(safe(w.message if explain else w.brief)), pad, pad)
        fix = w.fix if explain else w.brief_fix
        if fix:
            first, *rest = str(fix).split("\n")
            _print_hanging(con, Text(f"fix: {safe(first)}"), rest, pad, pad, pad + 5)
        if explain and w.evidence:
            _said(con, Text(f"evidence: {safe(w.evidence)}"), pad, pad)
    if limit is not None and len(findings) > limit:
        con.print(Text(f"{indent}... {len(findings) - limit} more: jaxmemprof report"))


def _render_findings(rep: Report, con: Console, explain: bool) -> None:
    if not rep.findings:
        _quiet(con, "Findings", "nothing to fix found")
        return
    _heading(con, "Findings" + ("" if explain else " (--explain: the evidence and trade-offs)"))
    render_findings(rep.findings, con, explain=explain)


def whatif_note(whatif) -> str:
    """run's summary: what the compiles that verified the advice cost
    (jit_whatif: a row per signature compiled with the change made), for
    the findings' heading; '' where none were made."""
    if whatif is None or whatif.empty:
        return ""
    done = whatif[whatif["error"].isna()]
    seconds = float(pd.to_numeric(done["compile_s"], errors="coerce").fillna(0).sum())
    note = f"; verified by compiling {counted(len(done), 'signature')}, {seconds:.2f} s"
    left = len(whatif) - len(done)
    return note + (f" ({left} not: jit_whatif says why)" if left else "")


def render_plan_closing(plan, events, con: Console, run_dir: str) -> None:
    """run's summary of its --plan: what was compiled, what it cost, and what to ask next (``plan``: None
    when nothing was planned; ``events``: the run's, for why)."""
    said = [] if events is None or events.empty else [str(m) for m in events.loc[events["kind"] == "plan", "message"]]
    if plan is not None and plan.cut:  # its compiles stopped part way: said first (the plan's first event)
        said = plan.events[:1] + said
    for line in said:
        con.print(Text(f"plan: {safe(line)}"))
    if plan is None:
        return
    for f in plan.functions:
        mine = plan.points[(plan.points["function_id"] == f.function_id) & plan.points["peak_bytes"].notna()]
        batches = sorted(set(mine["batch"]))  # those that compiled
        span = (f"batches {batches[0]:,}-{batches[-1]:,}" if len(batches) > 1 else
                f"batch {batches[0]:,} only" if batches else "no batch")
        con.print(Text(f"plan: {safe(f.function)} compiled for {span} ({counted(f.compiles, 'compile')}, "
                       f"{f.compile_s:.2f} s, by XLA on {safe(f.backend or '?')}"
                       + (f"; {f.failed} at other batches failed: plan.csv's error column says why" if f.failed
                          else "")
                       + (f"; refused as too large at {_batches(f.refused_at)}" if f.refused_at else "") + ")"))
    if plan.functions:
        con.print(Text(f"next: jaxmemprof report {safe(run_dir)} --device-memory SIZE (the largest batch that fits)"))


def _batches(batches: list) -> str:
    return ("batch " if len(batches) == 1 else "batches ") + ", ".join(f"{b:,}" for b in batches)
