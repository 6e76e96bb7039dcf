"""The answer, first in every output: how much memory the run needed at its
worst (the true peak, which call, on which device), what that memory was,
what inside the call held it, and the fix that lowers it most. Computed once
from the report's parts (``build_report``); the report's header, ``run``'s
closing summary, the HTML page and the notebook read it and only format it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

from jaxmemprof.analysis.findings import Finding

if TYPE_CHECKING:
    from jaxmemprof.analysis.headline import Headline
    from jaxmemprof.analysis.peaks import Peaks

INSIDE_LINES = 3  # the user's lines inside the call named at its peak
SMALL = 0.01  # roles under this share of the call are summed as "more"


@dataclass(frozen=True)
class Answer:
    live_peak_bytes: int | None  # the snapshots' peak (all devices), None without a snapshot
    live_peak_t: float | None
    live_peak_snapshot: int | None
    true_peak_bytes: int | None  # on the busiest device: the larger of the live peak there and a call's (Headline's)
    true_peak_total_bytes: int | None  # on all devices summed (Headline's)
    true_peak_where: str  # "during a call of train_step", "at the live peak", or "at snapshot 3 on cpu:0"
    true_peak_jitted_at: str  # "train.py:27": where the function of that call was jitted ("" at the live peak)
    devices: int
    composition: tuple  # ((role, bytes), ...) at the call, largest first, each 1 % or more
    composition_rest: int  # bytes of the smaller roles
    inside: tuple  # ((bytes, kind, site), ...) XLA's buffers at the call's own peak, by the user's line
    fix: Finding | None  # the fix that lowers the peak most (a measured saving first)
    fix_number: int | None  # its number among the report's findings
    counters: dict | None = None  # the chip's own counters beside the true peak (Headline.chip, analysis/counters.py)
    true_peak_total_where: str = ""  # where the total is (Peaks.total_where): another moment than the busiest's
    composition_unseen: int | None = None  # the true peak's call was not sampled: its roles are not known; this is
    # the peak of the largest sampled call, whose roles the report shows
    true_peak_call: tuple | None = None  # (its call number, the function's calls, sampled) where counted
    true_peak_bound: str = ""  # "", "at most" or "at least" (_bound)
    calls_counted: tuple | None = None  # (calls counted, calls seen, functions not seen); None: a run from before

    @property
    def inside_call(self) -> bool:
        return self.true_peak_where.startswith("during a call")


def _jitted_at(jit_memory: pd.DataFrame, function_id) -> str:
    if function_id is None or jit_memory.empty or "function_id" not in jit_memory:
        return ""
    rows = jit_memory[jit_memory["function_id"] == function_id]
    return str(rows["jitted_at"].iloc[0]) if len(rows) and "jitted_at" in rows else ""


def _composition(roles) -> tuple[tuple, int]:
    """The roles on the device that holds most at the call (the first of equal ones)."""
    if roles is None or roles.by_role.empty:
        return (), 0
    by = roles.by_role
    device = by.groupby("device", sort=False)["bytes"].sum().idxmax()
    rows = by[by["device"] == device].sort_values("bytes", ascending=False, kind="stable")
    big = rows[rows["share"] >= SMALL]
    return (tuple((str(r), int(b)) for r, b in zip(big["role"], big["bytes"])),
            int(rows.loc[rows["share"] < SMALL, "bytes"].sum()))


def _inside(jit_peak: pd.DataFrame, function_id, signature) -> tuple:
    """The user's lines that hold the most of XLA's buffers at the call's own
    peak, for the signature the call ran (else the function's largest)."""
    if function_id is None or jit_peak.empty:
        return ()
    rows = jit_peak[jit_peak["function_id"] == function_id]
    if signature is not None and (rows["signature"] == signature).any():
        rows = rows[rows["signature"] == signature]
    elif "largest_signature" in rows:
        rows = rows[rows["largest_signature"].astype(bool)]
    rows = rows[~rows["site"].astype(str).str.startswith("argument ")]
    rows = rows.sort_values("bytes", ascending=False, kind="stable").head(INSIDE_LINES)
    return tuple((int(b), str(k), str(s)) for b, k, s in zip(rows["bytes"], rows["kind"], rows["site"]))


def _fall(f: Finding) -> int:
    """What a measured fix lowers the true peak by on the busiest device (the
    peak the answer leads with): its ``saving_bytes_per_device`` where it has
    one (on several devices its saving is the fall on all of them summed)."""
    return int(f.facts.get("saving_bytes_per_device", f.saving_bytes) or 0)


def top_fix(findings: list[Finding]) -> tuple[Finding | None, int | None]:
    """The finding whose fix lowers the run's peak most: of those whose
    saving XLA's compile measured, the largest fall on the busiest device;
    else the first (ranked) unmeasured one that saves anything."""
    measured = [(i, f) for i, f in enumerate(findings) if f.facts.get("verified") and _fall(f) > 0]
    if measured:
        i, f = max(measured, key=lambda x: (_fall(x[1]), x[1].saving_bytes, -x[0]))
        return f, i + 1
    for i, f in enumerate(findings):
        # a leak's figure is a projection, not a fall of this peak; a measured one that lowers no device's
        # peak but another's (several devices) does not lower the peak the answer leads with
        if (f.saving_bytes or 0) > 0 and f.rule != "leak" and not f.facts.get("verified"):
            return f, i + 1
    return None, None


def answer(head: Headline, peaks: Peaks, jit_memory: pd.DataFrame, jit_peak: pd.DataFrame, roles,
           findings: list[Finding]) -> Answer:
    """The answer from the report's parts: its headline (``Headline``), the
    run's ``Peaks`` (the call that holds the largest call peak, the
    snapshots' peak on the busiest device)."""
    inside = peaks.call
    in_call = peaks.in_call
    fix, number = top_fix(findings)
    # the roles are of the true peak's call itself (never of another call of the same function)
    same_call = in_call and roles is not None and getattr(roles, "call", None) == (
        inside.function_id, inside.signature, inside.call_index, inside.call_number)
    composition, rest = _composition(roles) if same_call else ((), 0)
    unseen = (roles.peak_bytes if in_call and not same_call and inside.call_index is None and roles is not None
              and not roles.by_role.empty else None)
    cov = peaks.coverage
    return Answer(
        live_peak_bytes=head.peak_bytes if head.peak_snapshot is not None else None,
        live_peak_t=head.peak_t, live_peak_snapshot=head.peak_snapshot,
        true_peak_bytes=head.true_peak_bytes,
        true_peak_total_bytes=head.true_peak_total_bytes,
        true_peak_where=head.true_peak_where,
        true_peak_jitted_at=_jitted_at(jit_memory, inside.function_id) if in_call else "",
        devices=int(head.devices or 1), composition=composition, composition_rest=rest,
        inside=_inside(jit_peak, inside.function_id, inside.signature) if in_call else (),
        fix=fix, fix_number=number, counters=head.chip, true_peak_total_where=peaks.total_where,
        composition_unseen=unseen,
        true_peak_call=(inside.call_number, inside.calls, inside.call_index is not None) if in_call else None,
        true_peak_bound=_bound(peaks, in_call),
        calls_counted=None if not cov.recorded else (cov.counted, cov.seen, cov.unseen))


def _bound(peaks: Peaks, in_call: bool) -> str:
    """How the true peak's figure is known: "" (every call counted, its signature known), "at most" (the call's
    signature not known: its function's largest), "at least" (calls not counted, or a run recorded before every
    call was: the figure is of the calls counted)."""
    if in_call and peaks.call is not None and peaks.call.bound:
        return "at most"
    return "" if peaks.coverage.complete else "at least"
