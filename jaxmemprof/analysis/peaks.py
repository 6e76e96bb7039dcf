"""The run's peak, one model of it: the snapshots' peak, and each sampled
jitted call's own (the bytes live just before it, less its arguments, plus
XLA's call peak for the signature it ran), on the busiest device and on all
devices summed; and what that peak becomes with a change made (XLA's figures
of the changed compile in place of the recorded ones, what the change takes
off the snapshots). Computed once per attributed run (``Attributed.peaks``):
the report's header, ``fit``, roles, the rules and the advice's measured
savings all read that one ``Peaks``; ``check --max-true-peak`` reads
``call_peaks``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from jaxmemprof.analysis.runs import LivePeak
from jaxmemprof.facts.truepeak import FIGURES, figures_of, largest, moments

if TYPE_CHECKING:
    from jaxmemprof.store.reader import Run
    from jaxmemprof.analysis.timeline import Timeline


def _functions(run) -> pd.DataFrame:
    return run.jit.functions


@dataclass(frozen=True)
class CallPeak:
    """What snapshots cannot see inside a jitted call, added back: XLA's
    figures for the signature that call ran (per device, as
    ``memory_analysis()`` gives them) on the bytes live before it."""

    device_bytes: int  # on the busiest device
    bytes: int  # on all the devices of the call, summed
    devices: int  # the devices the call ran on
    where: str  # "during a call of f"
    function: str  # f
    function_id: int = 0
    signature: str | None = None
    call_index: int | None = None  # the sampled call (None: a compile no sampled call ran)
    live_before: dict | None = None  # {device: bytes} just before it, where counted
    figures: dict = field(default_factory=dict)  # XLA's argument, output, alias, temp, code bytes (per device)
    call_number: int | None = None  # a call counted, sampled or not: the function's n-th call (jit_call_live)
    bound: str = ""  # "at most": its signature not known (the largest of its function's)
    calls: int | None = None  # the function's calls seen in the run (jit_call_live), where known


def call_peaks(run, devices: pd.DataFrame | None = None, replace: dict | None = None,
               gone: list | None = None, since: float = float("-inf")) -> list[CallPeak]:
    """For each sampled call (with the signature it ran) and each compiled
    signature no sampled call ran: the bytes at its peak on the busiest
    device and on all its devices (``truepeak.moments``, where the
    arithmetic is). ``devices``: the timeline's live bytes per snapshot and
    device (else the snapshots' totals, as one device), read for calls
    recorded without ``live_before``. ``replace`` and ``gone``: a change
    made; ``since``: the calls and compiles from that time on (``truepeak.moments``)."""
    compiles = run.jit.compiles
    snaps = run.snapshots
    if compiles.empty or snaps.empty:
        return []
    c = compiles.reset_index(drop=True)
    calls = run.jit.calls
    if calls.empty:
        calls = pd.DataFrame(columns=["function_id", "call_index", "t_wall", "signature", "inputs"])
    for col in ("signature", "live_before", "inputs", "outputs"):
        if col not in calls.columns:
            calls = calls.assign(**{col: None})
    total = snaps["live_bytes"].to_numpy(dtype=np.int64)
    busiest = total
    if devices is not None and not devices.empty:
        per = devices.groupby("snapshot")["live_bytes"].max()
        busiest = per.reindex(snaps["snapshot"].to_numpy()).fillna(0).astype(np.int64).to_numpy()
    rows = [{k: (None if k == "signature" and not isinstance(v, str) else v) for k, v in r.items()}
            for r in calls[["function_id", "call_index", "t_wall", "signature", "inputs", "outputs",
                            "live_before"]].to_dict("records")]
    compile_rows = c[["function_id", "signature", "call_index", "t_wall", *FIGURES]].to_dict("records")
    counted, seen = _counted(run)
    found = moments(compile_rows, rows, list(zip(snaps["t_wall"].astype(float), busiest, total)),
                    replace=replace, gone=gone, since=since, counted=counted)
    functions = _functions(run)
    names = dict(zip(functions["function_id"], functions["name"])) if not functions.empty else {}
    out = []
    for m in found:
        r = compile_rows[m.compile]
        fid = int(r["function_id"])
        changed = (replace or {}).get((fid, r["signature"]))
        figures = figures_of(changed if changed is not None else r)
        name = str(names.get(fid, fid))
        out.append(CallPeak(m.device_bytes, m.bytes, m.devices, f"during a call of {name}", name, fid,
                            r["signature"], m.call_index, m.live_before, figures, m.call_number, m.bound,
                            seen.get(fid)))
    return out


def _counted(run) -> tuple[list[dict], dict]:
    """(the jit_call_live rows of calls counted, {function_id: calls seen})."""
    t = getattr(run.jit, "call_live", None)
    if t is None or t.empty or "kind" not in t.columns:
        return [], {}
    rows = t.to_dict("records")
    seen: dict = {}
    for r in rows:
        try:
            seen[int(r["function_id"])] = max(seen.get(int(r["function_id"]), 0), int(r["seen"]))
        except (TypeError, ValueError):
            continue
    return [r for r in rows if r.get("kind") == "max"], seen


@dataclass(frozen=True)
class Coverage:
    """Which of the run's jitted calls the true peak counted: ``recorded``
    (False: a run recorded before every call was counted, its figure from
    the sampled calls only), the calls seen, those counted, and the
    functions whose calls were not all seen (a library's own, once quiet)."""

    recorded: bool
    seen: int = 0
    counted: int = 0
    unseen: tuple = ()  # names of functions with calls not seen

    @property
    def complete(self) -> bool:
        return self.recorded and self.seen == self.counted and not self.unseen

    @property
    def uncounted(self) -> int:
        return self.seen - self.counted


def coverage(run) -> Coverage:
    """The run's ``Coverage``, from jit_call_live's "end" rows and jit_counts."""
    t = getattr(run.jit, "call_live", None)
    if t is None or t.empty or "kind" not in t.columns:
        return Coverage(False)
    ends = t[t["kind"] == "end"]
    seen = int(pd.to_numeric(ends["seen"], errors="coerce").fillna(0).sum())
    counted = int(pd.to_numeric(ends["counted"], errors="coerce").fillna(0).sum())
    ended = set(pd.to_numeric(ends["function_id"], errors="coerce").dropna().astype(int))
    unseen: list = []
    counts, functions = run.jit.counts, _functions(run)
    if not counts.empty and "calls_complete" in counts.columns:
        names = dict(zip(functions["function_id"], functions["name"])) if not functions.empty else {}
        for fid, complete in zip(counts["function_id"], counts["calls_complete"]):
            if complete == 0 and int(fid) not in ended:
                unseen.append(str(names.get(fid, fid)))
    return Coverage(True, seen, counted, tuple(unseen))


def _largest(peaks) -> CallPeak | None:
    return largest(peaks)


@dataclass(frozen=True)
class Changed:
    """The run's true peak with a change made (``Peaks.with_change``)."""

    device_bytes: int | None  # on the busiest device
    total_bytes: int | None  # on all devices summed
    call: CallPeak | None  # the call that holds the largest call peak with the change made


@dataclass(frozen=True, eq=False)
class Peaks:
    """The run's peaks, computed once per attributed run (``Attributed.peaks``):
    the live peak (the snapshots'), the snapshots' peak on the busiest
    device, each call's peak, and the true peak (the larger of the
    snapshots' peak and the largest call's) on the busiest device and on all
    devices summed; where it is and the call that holds it. ``with_change``:
    the same model with a change made (the what-ifs), the unchanged figures
    not computed again."""

    live: LivePeak | None  # the live peak (analysis/runs.py): None without a snapshot
    busiest_live_bytes: int  # the snapshots' peak on the busiest device
    device_bytes: int | None  # the true peak on the busiest device (None without the probe's figures)
    total_bytes: int | None  # the true peak on all devices summed
    call: CallPeak | None  # the largest call's peak (None without the probe's figures)
    calls: tuple = ()  # every call's peak (call_peaks)
    live_devices: pd.DataFrame | None = field(default=None, repr=False)  # the timeline's rows at the live peak
    run: Run | None = field(default=None, repr=False)
    timeline: Timeline | None = field(default=None, repr=False)
    busiest_at: tuple | None = None  # (snapshot, device) of the snapshots' peak on the busiest device
    coverage: Coverage = field(default_factory=lambda: Coverage(False))  # which calls the true peak counted

    @property
    def in_call(self) -> bool:
        """Whether the true peak is a call's (above the snapshots' peak on the busiest device)."""
        return self.call is not None and self.call.device_bytes > self.busiest_live_bytes

    @property
    def where(self) -> str:
        """Where the true peak on the busiest device is: "during a call of f",
        "at the live peak", "at snapshot 3 on cpu:0" (several devices: the
        busiest device's own peak of the snapshots, when it is not at the live
        peak), or "" without the probe's figures."""
        if self.call is None:
            return ""
        return self.call.where if self.in_call else self._snapshots_peak

    @property
    def total_where(self) -> str:
        """Where the true peak on all devices summed is (``total_bytes``: the
        larger of the live peak and that call's bytes): "during a call of f",
        "at the live peak", or "" without the probe's figures."""
        if self.call is None:
            return ""
        return self.call.where if self.live is None or self.call.bytes > self.live.live_bytes else AT_LIVE_PEAK

    @property
    def _snapshots_peak(self) -> str:
        at = self.busiest_at
        if at is None or self.live is None or at[0] == self.live.snapshot:
            return AT_LIVE_PEAK
        return f"at snapshot {at[0]} on {at[1]}"

    @property
    def largest_sampled(self) -> CallPeak | None:
        """The largest call peak of a sampled call (its inputs known), or None."""
        return _largest([p for p in self.calls if p.call_index is not None and p.call_number is None])

    def with_change(self, replace: dict | None = None, less: dict | None = None,
                    gone: list | None = None) -> Changed:
        """The true peak with a change made: ``replace`` ((function_id,
        signature) -> XLA's figures of that signature compiled with it) in
        place of the recorded figures, ``less`` ({snapshot: {device: bytes}})
        off the snapshots that held them, ``gone`` off the calls' bytes live
        before them (``call_peaks``). Without a change, the run's own."""
        if not (replace or less or gone):
            return Changed(self.device_bytes, self.total_bytes, self.call)
        tl = self.timeline
        inside = _largest(call_peaks(self.run, tl.devices, replace, gone) if replace or gone else self.calls)
        if inside is None:
            return Changed(None, None, None)
        busiest, total = busiest_snapshot(tl, less), int(tl.peak_bytes)
        if less:
            d = tl.devices
            taken = [less.get(int(s), {}).get(str(dev), 0) for s, dev in zip(d["snapshot"], d["device"])]
            total = int((d["live_bytes"] - pd.Series(taken, index=d.index)).groupby(d["snapshot"]).sum().max()) \
                if not d.empty else total
        return Changed(max(busiest, inside.device_bytes), max(total, inside.bytes), inside)

    def during(self, function_id: int) -> dict:
        """{snapshot: {device: live bytes}} of the snapshots taken while a
        call of the function was in progress (``during_calls``)."""
        return during_calls(self.run, self.timeline, function_id)


AT_LIVE_PEAK = "at the live peak"


def run_peaks(run, tl: Timeline) -> Peaks:
    """The run's ``Peaks`` from its timeline (``Attributed.peaks`` computes it once)."""
    calls = tuple(call_peaks(run, tl.devices))
    inside = _largest(calls)
    busiest = busiest_snapshot(tl)
    live, d = None, tl.devices
    rows = d.iloc[0:0]
    if tl.peak_snapshot is not None:
        live = LivePeak(int(tl.peak_snapshot), float(tl.peak_t), int(tl.peak_bytes))
        rows = d.loc[d["snapshot"] == tl.peak_snapshot].reset_index(drop=True) if not d.empty else rows
    at = busiest_moment(tl)
    covered = coverage(run)
    if inside is None:
        return Peaks(live, busiest, None, None, None, calls, rows, run, tl, at, covered)
    return Peaks(live, busiest, max(busiest, inside.device_bytes), max(int(tl.peak_bytes), inside.bytes), inside,
                 calls, rows, run, tl, at, covered)


def busiest_moment(tl: Timeline) -> tuple | None:
    """(snapshot, device) where the snapshots' peak on the busiest device is
    (``busiest_snapshot``): the live peak's snapshot where it holds as much
    there, else the first; None without per-device rows."""
    d = tl.devices
    if d.empty:
        return None
    top = d["live_bytes"].max()
    rows = d[d["live_bytes"] == top]
    at_live = rows[rows["snapshot"] == tl.peak_snapshot]
    row = (at_live if not at_live.empty else rows).iloc[0]
    return int(row["snapshot"]), str(row["device"])


def during_calls(run, tl: Timeline, function_id: int) -> dict:
    """{snapshot: {device: live bytes}} of the snapshots taken while a call
    of the function was in progress (snapshot_calls): moments of that call,
    which the call's own peak, compiled with a change, stands for; a change
    takes all of them off (``Peaks.with_change``'s ``less``)."""
    during = run.jit.snapshot_calls
    if during.empty or tl.devices.empty:
        return {}
    snaps = set(pd.to_numeric(during.loc[during["function_id"] == function_id, "snapshot"],
                              errors="coerce").dropna().astype(int))
    d = tl.devices[tl.devices["snapshot"].isin(snaps)]
    out: dict = {}
    for snap, device, live in zip(d["snapshot"], d["device"], d["live_bytes"]):
        out.setdefault(int(snap), {})[str(device)] = int(live)
    return out


def busiest_snapshot(tl: Timeline, less: dict | None = None) -> int:
    """The snapshots' peak on the busiest device (the total, on one device),
    with ``less`` ({snapshot: {device: bytes}}) taken off."""
    d = tl.devices
    if d.empty:
        return int(tl.peak_bytes)
    live = d["live_bytes"]
    if less:
        live = live - pd.Series([less.get(int(s), {}).get(str(dev), 0) for s, dev in zip(d["snapshot"], d["device"])],
                                index=d.index)
    return int(live.groupby(d["device"]).max().max())


def headline_peaks(ar) -> tuple[int | None, int | None]:
    """(the true peak on the busiest device, the live peak on all devices) of
    an attributed run, without the rest of its report: what ``run`` compares
    a rerun with. (None, None) without a snapshot."""
    p = ar.peaks
    if p.live is None:
        return None, None
    return (p.device_bytes if p.device_bytes is not None else p.busiest_live_bytes), p.live.live_bytes
