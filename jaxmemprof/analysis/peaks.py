"""The run's peak, one model of it: the snapshots' peak, and each sampled
jitted call's own (the bytes live just before it, less its arguments, plus
XLA's call peak for the signature it ran), on the busiest device and on all
devices summed; and what that peak becomes with a change made (XLA's figures
of the changed compile in place of the recorded ones, what the change takes
off the snapshots). The report's header, ``fit``, ``check --max-true-peak``,
roles and the donation advice's measured savings all read it here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from jaxmemprof.truepeak import FIGURES, figures_of, largest, moments

if TYPE_CHECKING:
    from jaxmemprof.analysis.timeline import Timeline


def _functions(run) -> pd.DataFrame:
    f = run.jit.get("functions")
    return f if f is not None else pd.DataFrame()


@dataclass(frozen=True)
class TruePeak:
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


def call_peaks(run, devices: pd.DataFrame | None = None, replace: dict | None = None,
               gone: list | None = None, since: float = float("-inf")) -> list[TruePeak]:
    """For each sampled call (with the signature it ran) and each compiled
    signature no sampled call ran: the bytes at its peak on the busiest
    device and on all its devices (``truepeak.moments``, where the
    arithmetic is). ``devices``: the timeline's live bytes per snapshot and
    device (else the snapshots' totals, as one device), read for calls
    recorded without ``live_before``. ``replace`` and ``gone``: a change
    made; ``since``: the calls and compiles from that time on (``truepeak.moments``)."""
    compiles = run.jit.get("compiles")
    snaps = run.snapshots
    if compiles is None or compiles.empty or snaps.empty:
        return []
    c = compiles.reset_index(drop=True)
    calls = run.jit.get("calls")
    if calls is None:
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
    found = moments(compile_rows, rows, list(zip(snaps["t_wall"].astype(float), busiest, total)),
                    replace=replace, gone=gone, since=since)
    functions = _functions(run)
    names = dict(zip(functions["function_id"], functions["name"])) if not functions.empty else {}
    out = []
    for m in found:
        r = compile_rows[m.compile]
        fid = int(r["function_id"])
        changed = (replace or {}).get((fid, r["signature"]))
        figures = figures_of(changed if changed is not None else r)
        name = str(names.get(fid, fid))
        out.append(TruePeak(m.device_bytes, m.bytes, m.devices, f"during a call of {name}", name, fid,
                            r["signature"], m.call_index, m.live_before, figures))
    return out


def _largest(peaks: list[TruePeak]) -> TruePeak | None:
    return largest(peaks)


def true_peaks(run, tl: Timeline, replace: dict | None = None, less: dict | None = None,
               gone: list | None = None) -> tuple[int | None, int | None, TruePeak | None]:
    """The run's true peak: (on the busiest device, on all devices summed,
    the call that holds it), each the larger of the snapshots' peak and the
    largest call's (``call_peaks``). What the run's peak becomes with a
    change made: ``replace``'s figures in place of the recorded ones, and
    ``less`` ({snapshot: {device: bytes}}) off the snapshots that held
    them, ``gone`` off the calls' (``call_peaks``). (None, None, None)
    without the probe's figures."""
    inside = _largest(call_peaks(run, tl.devices, replace, gone))
    if inside is None:
        return None, None, None
    busiest, total = busiest_snapshot(tl, less), int(tl.peak_bytes)
    if less:
        d = tl.devices
        taken = [less.get(int(s), {}).get(str(dev), 0) for s, dev in zip(d["snapshot"], d["device"])]
        total = int((d["live_bytes"] - pd.Series(taken, index=d.index)).groupby(d["snapshot"]).sum().max()) \
            if not d.empty else total
    return max(busiest, inside.device_bytes), max(total, inside.bytes), inside


def during_calls(run, tl: Timeline, function_id: int) -> dict:
    """{snapshot: {device: live bytes}} of the snapshots taken while a call
    of the function was in progress (snapshot_calls): moments of that call,
    which the call's own peak, compiled with a change, stands for; a change
    takes all of them off (``true_peaks``'s ``less``)."""
    during = run.jit.get("snapshot_calls")
    if during is None or during.empty or tl.devices.empty:
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


def true_peak(run, devices: pd.DataFrame | None = None) -> TruePeak | None:
    """The largest of ``call_peaks``, or None without the probe's figures."""
    return _largest(call_peaks(run, devices))


def largest_sampled_call(run, devices: pd.DataFrame | None = None) -> TruePeak | None:
    """The largest of ``call_peaks`` that a sampled call ran (its inputs
    known), or None."""
    return _largest([p for p in call_peaks(run, devices) if p.call_index is not None])


def estimated_true_peak(run, devices: pd.DataFrame | None = None) -> tuple[int | None, str]:
    """(the true peak's bytes on all devices, where), or (None, "")."""
    tp = true_peak(run, devices)
    return (None, "") if tp is None else (tp.bytes, tp.where)


def headline_peaks(ar) -> tuple[int | None, int | None]:
    """(the true peak on the busiest device, the live peak on all devices) of
    an attributed run, without the rest of its report: what ``run`` compares
    a rerun with. (None, None) without a snapshot."""
    from jaxmemprof.analysis.timeline import timeline

    tl = timeline(ar, top_sites=0)
    if tl.peak_snapshot is None:
        return None, None
    device, _, _ = true_peaks(ar.run, tl)
    return (device if device is not None else busiest_snapshot(tl)), int(tl.peak_bytes)
