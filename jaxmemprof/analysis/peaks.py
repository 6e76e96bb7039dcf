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

from jaxmemprof.analysis.cells import json_cell as _json
from jaxmemprof.analysis.cells import leaves as _leaves

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


def _call_devices(calls: pd.DataFrame) -> dict:
    """(function_id, signature) -> the devices its sampled calls' inputs span."""
    out: dict = {}
    for fid, sig, inputs in zip(calls["function_id"], calls["signature"], calls["inputs"]):
        n = max((int(leaf.get("devices") or 1) for leaf in _leaves(inputs) if isinstance(leaf, dict)), default=1)
        key = (int(fid), sig)
        out[key] = max(out.get(key, 1), n)
        out[(int(fid), None)] = max(out.get((int(fid), None), 1), n)
    return out


def _device_bytes(text) -> dict | None:
    """A ``live_before`` cell: {device: bytes}, or None where it is missing or damaged."""
    v = _json(text, {}) if isinstance(text, str) else None
    if not v and text != "{}":
        return None
    ok = all(isinstance(b, int) and not isinstance(b, bool) and 0 <= b < 2**63 for b in v.values())
    return v if ok else None


FIGURES = ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "generated_code_bytes")


def call_peak(fig: dict):
    """XLA's call peak from its figures (``FIGURES``; numbers, or arrays of
    them): ``argument + output - alias + temp + code``."""
    return (fig["argument_bytes"] + fig["output_bytes"] - fig["alias_bytes"] + fig["temp_bytes"]
            + fig["generated_code_bytes"])


def call_peaks(run, devices: pd.DataFrame | None = None, replace: dict | None = None,
               gone: list | None = None) -> list[TruePeak]:
    """For each sampled call (with the signature it ran) and each compiled
    signature no sampled call ran: on the busiest device, the bytes live
    just before the call (counted by the recorder then: ``live_before``;
    else, as in runs recorded before it, those at the last snapshot before
    the call), minus the call's arguments there (XLA counts them), plus
    XLA's peak for that signature; on all devices, the same summed over the
    devices the call ran on. ``devices``: the timeline's live bytes per
    snapshot and device (else the snapshots' totals, as one device).
    ``replace``: (function_id, signature) -> XLA's figures (``FIGURES``) of
    that signature compiled with a change made (a "what if", jit_whatif),
    whose peak stands in place of the recorded one (the arguments live
    before the call are the recorded ones: a change to them is in the new
    peak); ``gone``: (from, until, {device: bytes}[, function ids]) of
    arrays a change deletes or shrinks, taken off ``live_before`` of the
    calls between those times (epoch seconds) but those of the functions
    named (which take them as arguments: counted by their peak)."""
    compiles = run.jit.get("compiles")
    snaps = run.snapshots
    if compiles is None or compiles.empty or snaps.empty:
        return []
    c = compiles.reset_index(drop=True)
    figures = {col: pd.to_numeric(c[col], errors="coerce").fillna(0).astype(np.int64).to_numpy(copy=True)
               for col in FIGURES}
    args = figures["argument_bytes"].copy()  # the recorded arguments: those live before the call
    for (fid, sig), changed in (replace or {}).items():
        for i in np.flatnonzero((c["function_id"].astype(np.int64).to_numpy() == fid) & (c["signature"] == sig)):
            for col in FIGURES:
                figures[col][i] = int(changed[col])
    peak = call_peak(figures)
    fids = c["function_id"].astype(np.int64).to_numpy()
    sigs = c["signature"].tolist()
    call_index = pd.to_numeric(c["call_index"], errors="coerce").fillna(0).astype(np.int64).to_numpy()
    by_signature = {(int(f), sg): i for i, (f, sg) in enumerate(zip(fids, sigs))}
    calls = run.jit.get("calls")
    if calls is None:
        calls = pd.DataFrame(columns=["function_id", "call_index", "t_wall", "signature", "inputs"])
    for col in ("signature", "live_before"):
        if col not in calls.columns:
            calls = calls.assign(**{col: None})
    n_of = _call_devices(calls) if not calls.empty else {}
    # (live bytes before it per device, or None: the snapshot before it; its
    # time; its row of compiles; the sampled call's index or None) per event.
    events, ran = [], set()
    for fid, idx, t, sig, before in zip(calls["function_id"], calls["call_index"], calls["t_wall"],
                                        calls["signature"], calls["live_before"]):
        i = by_signature.get((int(fid), sig)) if isinstance(sig, str) else None
        if i is None:  # recorded before calls named their signature: the last compiled at or before it
            earlier = np.flatnonzero((fids == int(fid)) & (call_index <= int(idx)))
            if not len(earlier):
                continue
            i = int(earlier[-1])
        ran.add(i)
        # the sampled call's index, where the journal's cell is one (roles read its inputs)
        events.append((_device_bytes(before), float(t), i, int(idx) if pd.notna(idx) else None))
    events += [(None, float(t), i, None) for i, t in enumerate(c["t_wall"]) if i not in ran]
    order = np.argsort(snaps["t_wall"].to_numpy(dtype=float), kind="stable")
    snap_t = snaps["t_wall"].to_numpy(dtype=float)[order]
    numbers = snaps["snapshot"].to_numpy(dtype=np.int64)[order]
    total = snaps["live_bytes"].to_numpy(dtype=np.int64)[order]
    busiest = total
    if devices is not None and not devices.empty:
        per = devices.groupby("snapshot")["live_bytes"].max()
        busiest = per.reindex(numbers).fillna(0).astype(np.int64).to_numpy()
    functions = _functions(run)
    names = dict(zip(functions["function_id"], functions["name"])) if not functions.empty else {}
    out = []
    for before, t, i, idx in events:
        if before is not None:
            for t_from, t_to, off, *exempt in gone or ():
                if t_from < t < t_to and not (exempt and int(fids[i]) in exempt[0]):
                    before = {d: max(b - off.get(d, 0), 0) for d, b in before.items()}
            live_busiest, live_total = max(before.values(), default=0), sum(before.values())
        else:
            j = int(np.searchsorted(snap_t, t, side="right")) - 1
            live_busiest, live_total = (int(busiest[j]), int(total[j])) if j >= 0 else (0, 0)
        n = n_of.get((int(fids[i]), sigs[i]), n_of.get((int(fids[i]), None), 1))
        on_device = max(live_busiest - int(args[i]), 0) + int(peak[i])
        summed = max(live_total - n * int(args[i]), 0) + n * int(peak[i])
        name = str(names.get(fids[i], fids[i]))
        out.append(TruePeak(on_device, summed, n, f"during a call of {name}", name, int(fids[i]), sigs[i], idx,
                            before, {col: int(figures[col][i]) for col in FIGURES}))
    return out


def _largest(peaks: list[TruePeak]) -> TruePeak | None:
    best = None
    for p in peaks:
        if best is None or (p.device_bytes, p.bytes) > (best.device_bytes, best.bytes):
            best = p
    return best


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
