"""A run as a timeline of events, for ``export --format perfetto``
(render/formats/perfetto.py writes it as Chrome trace event JSON): what is
drawn, on which clock, at which moments; the choices made here, once.

Every moment is microseconds from ``origin_epoch_s`` (a wall-clock time,
``time.time()``'s clock: the one the run's snapshots, markers and jitted
calls record). Alone, the origin is the run's start. Merged with a trace
that ``jax.profiler.trace`` wrote (store/jax_trace.py), whose timestamps
are microseconds from the profile's start (its XPlane's
``profile_start_time``, on the same host's wall clock), the origin is the
earlier of the two starts (or of JAX's earliest event) and JAX's events are
shifted by the difference, so that no moment is negative and JAX's ops and
the run's memory share one clock.

What is drawn:
- counters: live bytes per device and on all devices, the sites of the
  report's "what held the live peak" table (the same ``--top``) over every
  snapshot, and the chip's own counters (``memory_stats()``) where recorded;
- the snapshots, as slices as long as each took (their wall time);
- markers and steps, the sampled jitted calls and each compile as instants
  (the run records when a sampled call returned, not when it began: JAX's
  trace, merged, has the calls' slices, its ``PjitFunction(...)`` events,
  each ending just before the call's instant);
- each finding at its moment: the snapshot or the call its facts name, else
  the live peak (what most findings are about)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from jaxmemprof.facts.devices import display

if TYPE_CHECKING:
    from jaxmemprof.analysis.attributed import Attributed
    from jaxmemprof.analysis.report import Report

# The chip's counters drawn, where memory_stats() recorded them (analysis/timeline.py STAT_KEYS).
CHIP_KEYS = ("bytes_in_use", "peak_bytes_in_use", "pool_bytes", "bytes_limit")


@dataclass(frozen=True)
class Counter:
    """One counter track: ``kind`` live (a device, or "all"), site, or chip
    (``key`` on a device); ``points``: ``(ts_us, value)`` in time order."""

    kind: str
    key: str
    device: str = ""
    points: list = field(default_factory=list)


@dataclass(frozen=True)
class TraceModel:
    path: str  # the run's
    process: int
    pid: int  # the trace's process id for the run's tracks (above every pid of JAX's)
    origin_epoch_s: float  # the wall time at ts 0
    run_start_us: float  # the run's start on the trace's clock
    counters: list  # [Counter]
    snapshots: list  # [{snapshot, ts, dur, trigger, label, live_bytes}]
    markers: list  # [{marker, ts, label}]
    findings: list  # [(ts, Finding, at)]: at: what the moment is ("snapshot 12", "call 3 of step", "the live peak")
    calls: list  # [{ts, function, call_index, caller}]: sampled jitted calls, as each returned
    compiles: list  # [{ts, function, signature, peak_bytes}]
    jax_path: str | None = None  # the JAX trace merged
    jax_events: list = field(default_factory=list)  # its events, shifted onto this clock
    jax_shift_us: float = 0.0  # what was added to each of JAX's timestamps
    jax_start_epoch_s: float | None = None
    jax_metadata: dict = field(default_factory=dict)
    display_time_unit: str = "ms"
    jax_overlaps: bool = True  # JAX's events and the run's moments share some time (else: another run's trace?)


def _us(seconds) -> np.ndarray:
    return np.round(np.asarray(seconds, dtype=float) * 1e6, 3)


def _points(ts: np.ndarray, values) -> list:
    v = pd.array(values, dtype="Float64")
    return [(float(t), int(x)) for t, x in zip(ts, v) if x is not pd.NA and x == x]


def run_start_epoch(run) -> float:
    """The wall time of the run's start (its snapshots' ``t`` is from there)."""
    s = run.snapshots
    if len(s) and "t_wall" in s:
        return float(s["t_wall"].iloc[0] - s["t"].iloc[0])
    start = run.manifest.get("start_epoch")
    return float(start) if isinstance(start, (int, float)) else 0.0


def trace_model(rep: Report, ar: Attributed, jax=None) -> TraceModel:
    """The run ``ar`` (``rep``: its report) as a timeline; ``jax``: a
    store/jax_trace.py JaxTrace to merge (its events are shifted in place)."""
    run = ar.run
    tl = rep.timeline
    start = run_start_epoch(run)
    origin = start
    shift = 0.0
    jax_start = None
    if jax is not None:
        jax_start = jax.start_ns / 1e9
        earliest = min([e["ts"] for e in jax.events if isinstance(e.get("ts"), (int, float))] + [0.0])
        origin = min(start, jax_start + earliest / 1e6)  # an event of JAX's before its start is drawn too
        shift = round((jax_start - origin) * 1e6, 3)
    base = start - origin  # seconds from the origin to the run's start

    snaps = run.snapshots
    snap_ts = _us(snaps["t"].to_numpy(dtype=float) + base) if len(snaps) else np.zeros(0)
    ts_of = dict(zip(snaps["snapshot"].astype(np.int64).tolist(), snap_ts.tolist()))

    counters = []
    totals = tl.totals
    if len(totals):
        counters.append(Counter("live", "all", "", _points(_us(totals["t"] + base), totals["live_bytes"])))
    devices = tl.devices
    for device, g in devices.groupby("device", sort=True) if len(devices) else ():
        ts = _us(g["t"].to_numpy(dtype=float) + base)
        counters.append(Counter("live", str(display(device)), str(device), _points(ts, g["live_bytes"])))
    counters += _site_counters(rep, ar, snap_ts)
    for device, g in devices.groupby("device", sort=True) if len(devices) else ():
        ts = _us(g["t"].to_numpy(dtype=float) + base)
        for key in CHIP_KEYS:
            if key in g and g[key].notna().any():
                counters.append(Counter("chip", key, str(display(device)), _points(ts, g[key])))

    snapshots = [{"snapshot": int(s), "ts": float(t), "dur": float(max(w, 0.0) * 1e6) if w == w else 0.0,
                  "trigger": str(trig), "label": None if pd.isna(lab) else str(lab), "live_bytes": int(b)}
                 for s, t, w, trig, lab, b in zip(snaps["snapshot"], snap_ts, _column(snaps, "wall_s", 0.0),
                                                  snaps["trigger"], snaps["label"], snaps["live_bytes"])]
    m = tl.markers
    markers = [{"marker": int(k), "ts": float(t), "label": str(lab)}
               for k, t, lab in zip(m["marker"], _us(m["t"].to_numpy(dtype=float) + base), m["label"])
               if t == t]

    names = _function_names(run)
    calls, compiles = [], []
    c = run.jit.calls
    if c is not None and len(c) and "t_wall" in c:
        for fid, idx, tw, cf, cl, cfn in zip(c["function_id"], c["call_index"], c["t_wall"], c["caller_file"],
                                             c["caller_line"], c["caller_function"]):
            calls.append({"ts": float(_us(tw - origin)), "function": names.get(int(fid), f"function {fid}"),
                          "call_index": int(idx), "caller": f"{ar.attribution.display_path(str(cf))}:{cl} ({cfn})"})
    k = run.jit.compiles
    if k is not None and len(k) and "t_wall" in k:
        for fid, tw, sig, peak in zip(k["function_id"], k["t_wall"], k["signature"], _column(k, "peak_bytes", None)):
            compiles.append({"ts": float(_us(tw - origin)), "function": names.get(int(fid), f"function {fid}"),
                             "signature": str(sig), "peak_bytes": None if peak is None or peak != peak else int(peak)})
    calls.sort(key=lambda r: r["ts"])
    compiles.sort(key=lambda r: r["ts"])

    peak_ts = ts_of.get(tl.peak_snapshot) if tl.peak_snapshot is not None else None
    findings = [moment for f in rep.findings if (moment := _finding_moment(f, ts_of, calls, peak_ts)) is not None]

    jax_events: list = []
    meta: dict = {}
    unit = "ms"
    if jax is not None:
        for e in jax.events:
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] = round(e["ts"] + shift, 3)
        jax_events = jax.events
        meta = dict(jax.metadata)
        unit = "ns"  # JAX's ops are microseconds long
    ours = [t for c in counters for t, _ in c.points] + [k["ts"] for k in markers] + [c["ts"] for c in calls]
    theirs = [e["ts"] for e in jax_events if isinstance(e.get("ts"), (int, float))]
    overlaps = not (ours and theirs) or (min(theirs) <= max(ours) and min(ours) <= max(theirs))
    pids = [e.get("pid") for e in jax_events if isinstance(e.get("pid"), int) and not isinstance(e.get("pid"), bool)]
    process = int(run.manifest.get("process_index") or 0) if isinstance(run.manifest.get("process_index"), int) else 0
    pid = max([*pids, 0]) + 1 + process
    return TraceModel(path=str(run.path), process=process, pid=pid, origin_epoch_s=origin,
                      run_start_us=float(_us(base)), counters=counters, snapshots=snapshots, markers=markers,
                      findings=findings, calls=calls, compiles=compiles,
                      jax_path=None if jax is None else str(jax.path), jax_events=jax_events, jax_shift_us=shift,
                      jax_start_epoch_s=jax_start, jax_metadata=meta, display_time_unit=unit,
                      jax_overlaps=overlaps)


def _column(frame: pd.DataFrame, name: str, default) -> list:
    if name in frame:
        return pd.to_numeric(frame[name], errors="coerce").tolist()
    return [default] * len(frame)


def _function_names(run) -> dict:
    f = run.jit.functions
    if f is None or not len(f) or "function_id" not in f:
        return {}
    return {int(i): str(q or n) for i, n, q in zip(f["function_id"], f["name"], f.get("qualname", f["name"]))}


def _site_counters(rep: Report, ar: Attributed, snap_ts: np.ndarray) -> list:
    """The sites of the report's peak table, each one's live bytes at every snapshot."""
    held = rep.peak_sites
    if held is None or not len(held.rows) or not len(snap_ts):
        return []
    series = ar.series
    table = series.sites
    code_of = {s: i for i, s in zip(table.index.tolist(), table["site"].tolist())}
    wanted = [s for s in held.rows["site"].tolist() if s in code_of]
    if not wanted:
        return []
    matrix, _ = series.matrix([code_of[s] for s in wanted])
    return [Counter("site", str(s), "", [(float(t), int(v)) for t, v in zip(snap_ts, row)])
            for s, row in zip(wanted, matrix)]


def _finding_moment(f, ts_of: dict, calls: list, peak_ts):
    """``(ts, finding, at)``: the snapshot its facts name, the sampled call
    of its function, else the live peak; None when the run has no moment
    at all (no snapshot)."""
    for key in ("snapshot", "first_snapshot"):
        s = f.fact(key)
        if isinstance(s, int) and s in ts_of:
            return ts_of[s], f, f"snapshot {s}"
    fn, idx = f.fact("function"), f.fact("call_index")
    if isinstance(fn, str) and isinstance(idx, int):
        for c in calls:
            if c["call_index"] == idx and (c["function"] == fn or c["function"].rsplit(".", 1)[-1] == fn):
                return c["ts"], f, f"call {idx} of {fn}"
    if peak_ts is not None:
        return peak_ts, f, "the live peak"
    return None
