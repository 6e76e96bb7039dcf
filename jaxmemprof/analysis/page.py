"""Every output's document (analysis/documents.py), shaped here so that
render/ only prints it.

The choices a renderer would otherwise make are made here, once: which rows,
grouped how, in which order (the roles' groups of alike devices, each
function's lines at its own peak, the busiest device's peak per batch of
the plan, the alike processes of a job, which processes a job's page draws,
the arrays drawn as lifetimes), and what an HTML page draws beyond the
report (``PageModel``: the flame graph's cells, the snapshots they cover,
the lines held at a snapshot and grown between two, the roles' cells, the
fit line of the plan's chart)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from jaxmemprof.analysis.advice.plan import largest_fitting_peak
from jaxmemprof.analysis.attributed import Attributed, attribute
from jaxmemprof.analysis.documents import BatchPeaks, JobDocument, PageModel, ProcessPage, RunDocument
from jaxmemprof.analysis.flame import Cells, profile_cells, role_cells, run_cells, site_growth, site_values
from jaxmemprof.analysis.inside_jit import largest_signature_only
from jaxmemprof.analysis.report import Report, build_report

HELD = 5  # lines the headline names
GREW = 5
LIFETIME_ARRAYS = 150  # the largest arrays drawn as bars
LIFETIME_PER_SITE = 40  # at most this many of them made at one line
MAX_MARKERS = 1000  # ticks drawn (evenly chosen beyond)
CURVES = 4  # functions whose program-order curve the page draws
MAX_PROCESSES = 16  # processes of a job drawn in full (the largest at the job's peak, then by own peak)
MAX_JOB_POINTS = 4000
SITES_PER_PROCESS = 3  # a job's report: the sites shown per process for what held its peak
ROLES_PER_PROCESS = 4
TIMELINE_ROWS = 4  # snapshots the terminal's timeline shows


# -- the run --------------------------------------------------------------------------------


def _held(cells: Cells, j: int, n: int = HELD) -> list:
    v = site_values(cells, j)
    v = v[v > 0].sort_values(ascending=False, kind="stable")
    total = int(v.sum())
    return [{"site": s, "bytes": int(b), "share": (b / total if total else 0.0)} for s, b in v.head(n).items()]


def _grew(cells: Cells, base_j: int, new_j: int, n: int = GREW) -> list:
    return [{"site": str(r["site"]), **{k: int(r[k]) for k in ("base_bytes", "new_bytes", "delta_bytes")}}
            for r in site_growth(cells, base_j, new_j).head(n).to_dict("records")]


def _number(v):
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if f == f and abs(f) != float("inf") else None


def process_of(run) -> int:
    """The run's process index: its snapshots', else its manifest's, else 0."""
    snaps = run.snapshots
    if "process" in snaps and len(snaps):
        v = _number(snaps["process"].iloc[0])
        if v is not None:
            return int(v)
    v = _number(run.manifest.get("process_index"))
    return int(v) if v is not None else 0


def lifetime_arrays(arrays: pd.DataFrame | None) -> pd.DataFrame | None:
    """The arrays the page draws as bars: the largest, at most
    LIFETIME_PER_SITE of one line (so that one line's many arrays leave room
    for others)."""
    if arrays is None or arrays.empty:
        return None
    a = arrays.sort_values(["bytes", "lifetime_s", "array_id"], ascending=[False, False, True])
    return a[a.groupby("site", sort=False).cumcount() < LIFETIME_PER_SITE].head(LIFETIME_ARRAYS)


def program_curves(curve: pd.DataFrame | None, functions: int = CURVES) -> list:
    """Each function's program-order curve (the ``functions`` largest), as
    columns: positions, the bytes at each, and each line's series."""
    out: list[dict] = []
    if curve is None or curve.empty:
        return out
    for _, g in curve.groupby("function_id", sort=False):
        positions = sorted(set(int(p) for p in g["position"]))
        at = {p: i for i, p in enumerate(positions)}
        totals = [0] * len(positions)
        series: dict = {}
        for site, position, b, total in zip(g["site"], g["position"], g["bytes"], g["position_bytes"]):
            series.setdefault(str(site), [0] * len(positions))[at[int(position)]] = int(b)
            totals[at[int(position)]] = int(total)
        out.append({"function": str(g["function"].iloc[0]), "positions": positions, "bytes": totals,
                    "peak_position": int(g["program_peak_position"].iloc[0]),
                    "peak_bytes": int(g["program_peak_bytes"].iloc[0]),
                    "series": [{"site": k, "values": v} for k, v in series.items()]})
        if len(out) >= functions:
            break
    return out


def report_model(rep, ar: Attributed) -> PageModel:
    """The page of ``report --html`` (``rep``: the report of ``ar``)."""
    run = ar.run
    cells = run_cells(ar)
    tl = rep.timeline
    pos = cells.positions
    totals = tl.totals.iloc[pos].reset_index(drop=True) if len(tl.totals) else tl.totals
    snaps = run.snapshots.iloc[pos].reset_index(drop=True)
    j_of = {int(s): j for j, s in enumerate(snaps["snapshot"].tolist())}
    peak_j = j_of.get(tl.peak_snapshot, 0) if tl.peak_snapshot is not None else 0
    running = [j for j, trig in enumerate(snaps["trigger"].tolist()) if trig != "exit"]
    final_j = running[-1] if running else max(len(pos) - 1, 0)
    what = getattr(rep, "roles", None)
    plan = getattr(rep, "plan", None)
    device = getattr(plan, "device_bytes", None) if plan is not None else None
    devices = []
    if len(pos) and not tl.devices.empty:
        for name, g in tl.devices.groupby("device", sort=True):
            devices.append((name, g.set_index("snapshot").reindex(snaps["snapshot"].to_numpy())))
    markers = tl.markers
    if len(markers) > MAX_MARKERS:
        markers = markers.iloc[np.linspace(0, len(markers) - 1, MAX_MARKERS).astype(np.int64)]
    return PageModel(
        cells=cells, held=_held(cells, peak_j) if len(pos) else [], grew=_grew(cells, 0, final_j) if len(pos) else [],
        snapshots=snaps, totals=totals, peak_j=peak_j, final_j=final_j,
        roles=role_cells(what) if what is not None and not what.by_role.empty else None,
        fit_peak_bytes=largest_fitting_peak(device, getattr(plan, "backend", None)) if device else None,
        process=process_of(run), snapshots_total=int(len(run.snapshots)),
        first_t=float(run.snapshots["t"].iloc[0]) if not run.snapshots.empty else None,
        devices=devices, markers=markers, markers_total=len(tl.markers),
        lifetimes=lifetime_arrays(rep.arrays), curves=program_curves(largest_signature_only(rep.jit_curve)))


def timeline_rows(totals: pd.DataFrame, peak, n: int = TIMELINE_ROWS) -> list:
    """The timeline's rows the terminal shows: the labels of about ``n``
    snapshots evenly spread, with the first, the peak and the last always in,
    and the first ``n`` the program took itself (``jaxmemprof.snapshot()``:
    it asked for them)."""
    idx = list(totals.index)
    if len(idx) <= n:
        return idx
    chosen = {idx[round(i * (len(idx) - 1) / (n - 2))] for i in range(n - 1)}
    must = {idx[0], idx[-1]}
    if peak is not None:
        must |= set(totals.index[totals["snapshot"] == peak])
        chosen |= must
    asked = [i for i in totals.index[totals["trigger"] == "api"] if i not in must] \
        if "trigger" in totals.columns else []
    if asked:  # in place of evenly spread ones, as many as there is room for
        room = max(0, n - len(must))
        kept = set(asked[:room])
        chosen = must | kept | set(sorted(chosen - must - kept)[:room - len(kept)])
    return sorted(chosen)


def role_groups(what) -> list:
    """What the memory is, per group of devices whose roles are the same:
    ``[(devices, their rows, largest first)]``."""
    if what is None or what.by_role.empty:
        return []
    by_device: dict[tuple, list] = {}
    for device, rows in what.by_role.groupby("device", sort=False):
        key = tuple(zip(rows["role"], rows["bytes"], rows["largest_owner"]))
        by_device.setdefault(key, []).append((device, rows))
    return [([d for d, _ in groups], groups[0][1].sort_values("bytes", ascending=False, kind="stable"))
            for groups in by_device.values()]


def jit_peak_functions(jit_peak: pd.DataFrame) -> list:
    """Each function's rows at its own peak (its largest signature), in the table's order."""
    peak = largest_signature_only(jit_peak)
    return [] if peak.empty else [rows for _, rows in peak.groupby("function_id", sort=False)]


def plan_peaks(plan) -> dict:
    """Per planned function, the busiest device's peak per variant and batch (BatchPeaks)."""
    out: dict = {}
    if plan is None:
        return out
    points = plan.points
    for f in plan.functions:
        mine = points[(points["function_id"] == f.function_id) & points["peak_bytes"].notna()]
        busiest = mine.groupby(["variant", "batch"], sort=False)["peak_bytes"].max()
        out[f.function_id] = BatchPeaks(variants=list(dict.fromkeys(mine["variant"])),
                                        batches=sorted(set(mine["batch"])), peak=dict(busiest.items()),
                                        devices=sorted(set(mine["device"])))
    return out


def run_document(rep: Report, ar: Attributed, *, top: int = 5, explain: bool = False, page: bool = False,
                 oom: bool = True) -> RunDocument:
    """``rep`` (the report of ``ar``) ready to print; ``page``: with what the
    HTML page draws; ``oom``: with the out-of-memory answer that leads the text."""
    from jaxmemprof.analysis.oom import out_of_memory, target_refusals

    return RunDocument(
        report=rep, top=top, explain=explain, role_groups=role_groups(rep.roles),
        timeline_rows=timeline_rows(rep.timeline.totals, rep.timeline.peak_snapshot),
        jit_peak=jit_peak_functions(rep.jit_peak), plan_peaks=plan_peaks(rep.plan),
        oom=out_of_memory(ar.run) if oom else None, refusals=target_refusals(ar.run) if oom else [],
        show=ar.attribution.display_path, page=report_model(rep, ar) if page else None,
        process=ar.run.manifest.get("process_index") if isinstance(ar.run.manifest.get("process_index"), int) else 0)


# -- a job ------------------------------------------------------------------------------------


def page_processes(job_report) -> list[int]:
    """The processes whose full report a job's page shows: the
    ``MAX_PROCESSES`` that held most at the job's peak (then by their own
    peak), largest first (the page opens on the first)."""
    procs = job_report.processes
    order = procs.assign(_a=procs["at_job_peak_bytes"].fillna(0), _p=procs["peak_bytes"].fillna(0))
    order = order[order["error"].isna()] if "error" in order else order
    order = order.sort_values(["_a", "_p", "process"], ascending=[False, False, True])
    return [int(x) for x in order["process"].head(MAX_PROCESSES).tolist()]


def _drawn_timeline(timeline: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The job's timeline as drawn: all of it, or past MAX_JOB_POINTS each
    stretch's highest and lowest, and the peak."""
    t = timeline["t"].to_numpy(dtype=float) if len(timeline) else np.zeros(0)
    v = timeline["live_bytes"].to_numpy(dtype=np.int64) if len(timeline) else np.zeros(0, dtype=np.int64)
    if len(t) > MAX_JOB_POINTS:
        keep = {0, len(t) - 1, int(np.argmax(v))}
        edges = np.linspace(0, len(t), MAX_JOB_POINTS // 2 + 1).astype(np.int64)
        for lo, hi in zip(edges[:-1], edges[1:]):
            if hi > lo:
                keep.update((int(lo + np.argmax(v[lo:hi])), int(lo + np.argmin(v[lo:hi]))))
        idx = np.array(sorted(keep))
        t, v = t[idx], v[idx]
    return t, v


def _alike(rows: pd.DataFrame, columns: tuple, n: int, busiest_device: bool = False) -> list:
    """Processes whose ``n`` largest rows are the same, as one entry
    ``(((name, bytes), ...), [processes])``, those holding most first."""
    groups: dict = {}
    for p, g in rows.groupby("process", sort=True):
        if busiest_device:
            g = g[g["device"] == g.groupby("device", sort=False)["bytes"].sum().idxmax()]
        else:
            g = g[g["bytes"] > 0]
        g = g.sort_values("bytes", ascending=False, kind="stable").head(n)
        groups.setdefault(tuple(zip(*(g[c] for c in columns))), []).append(int(p))
    return sorted(groups.items(), key=lambda kv: (-sum(b for _, b in kv[0]), kv[1][0]))


def _process_page(job, n: int, options, top: int, explain: bool) -> ProcessPage:
    from jaxmemprof.store.reader import load_run

    p = job.process(n)
    ar = attribute(load_run(p.path), options)
    one = build_report(ar)
    doc = run_document(one, ar, top=top, explain=explain, page=True, oom=False)
    shift = 0.0
    if doc.page is not None and doc.page.first_t is not None and not p.snapshots.empty:
        shift = float(p.snapshots["t"].iloc[0]) - doc.page.first_t
    return ProcessPage(n, doc, shift, f"process {n}" + (f" ({p.host})" if p.host else "") + f": {p.path}")


def process_reports(job, options, warn: Callable[[str], None]) -> list:
    """``[(process, its Report)]`` of every readable process with a snapshot (``warn``: told of one that is not)."""
    from jaxmemprof.errors import InputError
    from jaxmemprof.store.reader import load_run

    out = []
    for p in job.processes:
        if p.error is not None or p.snapshots.empty:
            continue
        try:
            run = load_run(p.path)
        except InputError as exc:
            warn(f"jaxmemprof: warning: process {p.process}: {exc}")
            continue
        out.append((p.process, build_report(attribute(run, options))))
    return out


def job_document(job, rep, options, *, top: int = 10, explain: bool = False, page: bool = False,
                 reports: bool = False, warn: Callable[[str], None] = print) -> JobDocument:
    """The job's report ``rep`` ready to print; ``page``: with its largest
    processes' own reports drawn; ``reports``: with every process's report (CSV)."""
    shown = [_process_page(job, n, options, top, explain) for n in page_processes(rep)] if page else []
    t, v = _drawn_timeline(rep.timeline)
    return JobDocument(
        report=rep, top=top, explain=explain,
        by_peak=rep.processes.sort_values(["peak_bytes", "process"], ascending=[False, True], kind="stable"),
        alike_sites=_alike(rep.peak_sites, ("site", "bytes"), SITES_PER_PROCESS) if not rep.peak_sites.empty else [],
        alike_roles=(_alike(rep.roles, ("role", "bytes"), ROLES_PER_PROCESS, busiest_device=True)
                     if not rep.roles.empty else []),
        processes=sorted(shown, key=lambda s: s.process), drawn=[s.process for s in shown], t=t, live_bytes=v,
        reports=process_reports(job, options, warn) if reports else [])


# -- profiles ---------------------------------------------------------------------------------


def profiles_model(profiles: list, attribution) -> PageModel:
    """The page of ``show --html`` (one profile) or ``diff --html`` (two: what grew from the first to the second)."""
    cells = profile_cells(profiles, attribution)
    return PageModel(cells=cells, held=_held(cells, len(profiles) - 1),
                     grew=_grew(cells, 0, 1, 8) if len(profiles) > 1 else [])
