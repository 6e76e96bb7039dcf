"""The run's headline figures, typed: what ran, how it ended, its live peak
and its true peak, the chip's counters beside it, and what the run
recorded. ``Report.headline``; the JSON's ``summary`` object is its fields
in order (``as_dict``), the glossary's summary table names each.

One meaning for each peak, here as in the ``Answer``, the JSON and the
glossary: ``true_peak_bytes`` is the true peak on the busiest device (what a
device must hold: ``fit`` and ``check --max-true-peak`` take it),
``true_peak_total_bytes`` the same moment on all devices summed;
``peak_bytes`` is the live peak (the snapshots' most live bytes, all
devices), at ``peak_snapshot`` and ``peak_t``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from jaxmemprof.analysis.py_holders import search_cost, searches

if TYPE_CHECKING:
    from jaxmemprof.analysis.attributed import Attributed
    from jaxmemprof.analysis.peaks import Peaks
    from jaxmemprof.analysis.timeline import Timeline

@dataclass(frozen=True)
class Headline(Mapping):
    """The headline figures (docs/columns.md, the summary table). Read by
    attribute; it is also a read-only mapping of its fields, for the
    outputs that write it as one object."""

    run: str
    command: str
    finished: bool
    running: bool
    exit_status: int | None
    ended_by: str | None
    cells: str | None  # cells a notebook's magic recorded (In [5], In [7] to In [9])
    raised: str | None  # what one of them raised (notebook/magics.py)
    duration_s: float | None
    backend: str | None
    devices: int
    snapshots: int
    markers: int
    sampling_cpu_s: float
    # the share of the marked steps' time (first marker to last) that the snapshots taken in the program's
    # thread at its steps took (their wall time; None: no snapshot at a step, or under two markers)
    step_snapshots_share: float | None
    # how much longer the steps with a snapshot at them took than the others (the medians of their marker gaps),
    # and whether that is the snapshots' own wall time (the loop was host-bound: each snapshot delayed the next
    # step) or not (a device-bound loop absorbs it: async dispatch); None: not measured (under 2 steps of either)
    step_snapshots_gap_s: float | None
    step_snapshots_host_bound: bool | None
    no_snapshot_why: str | None  # running, killed, no-memory-events (a profile), no-arrays; None: a snapshot
    peak_snapshot: int | None  # the live peak's snapshot (None without a snapshot)
    peak_t: float | None
    peak_bytes: int  # the live peak: the snapshots' most live bytes, all devices
    peak_unattributed_bytes: int | None
    # what the unattributed bytes are: queued (the peak snapshot had a call in flight and the chip's counters saw
    # queued generations of its outputs), runtime (the allocator's own beyond live arrays: compiled programs,
    # constants), profile (a profile's memory events: the allocator's bytes, no arrays in it); None: none
    peak_unattributed_what: str | None
    true_peak_bytes: int | None  # the true peak on the busiest device (None without the probe's figures)
    true_peak_total_bytes: int | None  # the true peak on all devices summed
    true_peak_where: str  # "during a call of train_step", "at the live peak", or ""
    chip: dict | None  # the chip's own counters beside the true peak (analysis/counters.py)
    arrays_seen: int
    per_array_data: bool
    holder_searches: int  # the searches for the Python references holding arrays (capture/py_holders.py)
    holder_search_cpu_s: float  # and their CPU time
    # The snapshots taken in the program's own thread (at its steps, its own), holder searches included:
    # the wall time they took from it, and their CPU time; None without any
    program_thread_wall_s: float | None = None
    program_thread_cpu_s: float | None = None

    @property
    def step_snapshots_slowed(self) -> bool:
        """Whether the snapshots at the program's steps took a share of its loop worth saying
        (``STEP_SNAPSHOTS_SAID`` or more) in a loop they slowed (host-bound, as measured by
        ``step_snapshots_gap``)."""
        return (self.step_snapshots_share is not None and self.step_snapshots_share >= STEP_SNAPSHOTS_SAID
                and self.step_snapshots_host_bound is True)

    def __getitem__(self, key: str):
        if key not in _NAMES:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self):
        return iter(_NAMES)

    def __len__(self) -> int:
        return len(_NAMES)

    def as_dict(self) -> dict:
        """Its fields in order: the JSON's ``summary`` object."""
        return {name: getattr(self, name) for name in _NAMES}


_NAMES = tuple(f.name for f in fields(Headline))
# From this share of the marked steps' time on, the report says that the snapshots at the steps slowed
# the loop (a fast loop runs slower under run, and fewer steps queue ahead of an accelerator: docs/tpu.md).
STEP_SNAPSHOTS_SAID = 0.10


def step_snapshots_share(snaps, markers) -> float | None:
    """The wall time of the snapshots taken at the program's steps (trigger ``step``, in its own thread)
    over the time from its first marker to its last; None without either."""
    if snaps.empty or markers is None or len(markers) < 2 or "wall_s" not in snaps:
        return None
    at_steps = snaps[snaps["trigger"] == "step"]
    span = float(markers["t_mono"].max() - markers["t_mono"].min())
    if at_steps.empty or span <= 0:
        return None
    return round(float(at_steps["wall_s"].sum()) / span, 4)


def program_thread_cost(run) -> tuple[float, float] | None:
    """(wall, CPU) seconds the snapshots taken in the program's own thread took from it (steps', its
    own, their holder searches included): the manifest's ``program_thread`` (capture/steps.py), else
    the snapshots' own figures (trigger ``step`` or ``api``) and their searches' CPU; None without any.
    Rounded to the microsecond here, once, so that every view prints the same figure."""
    own = run.manifest.get("program_thread")
    if isinstance(own, dict) and own.get("snapshots"):
        wall, cpu = own.get("wall_s"), own.get("cpu_s")
        if isinstance(wall, (int, float)) and isinstance(cpu, (int, float)) and math.isfinite(wall + cpu):
            return round(float(wall), 6), round(float(cpu), 6)
    snaps = run.snapshots
    if snaps.empty or "wall_s" not in snaps:
        return None
    mine = snaps[snaps["trigger"].isin(["step", "api"])]
    if mine.empty:
        return None
    searched = searches(run)
    searched = searched[searched["snapshot"].isin(mine["snapshot"])]
    extra = float(np.nansum(searched["cost_s"].astype(float))) if not searched.empty else 0.0
    return round(float(mine["wall_s"].sum()) + extra, 6), round(float(mine["cost_s"].sum()) + extra, 6)


# The steps of each kind (with a snapshot at them, without) needed to compare their gaps.
GAP_STEPS = 2
# A loop is host-bound where the steps with a snapshot took this share of the snapshot's wall time longer.
HOST_BOUND_SHARE = 0.5


def step_snapshots_gap(snaps, markers) -> tuple[float | None, bool | None]:
    """(how much longer the median step with a snapshot at it took than the median step without, whether
    that is the snapshots' wall time: the loop host-bound), from the markers' gaps (a step: one marker to the
    next) and the snapshots taken at the steps; (None, None) where either kind has under GAP_STEPS steps.
    A host-bound loop's step grows by the snapshot's wall time (nothing runs ahead while Python
    snapshots); a device-bound loop absorbs it (async dispatch: the chip still has steps queued)."""
    if snaps.empty or markers is None or len(markers) < 3 or "wall_s" not in snaps:
        return None, None
    t = markers["t_mono"].astype(float).sort_values().to_numpy()
    at_steps = snaps[snaps["trigger"] == "step"]
    if at_steps.empty:
        return None, None
    gaps = t[1:] - t[:-1]
    which = np.searchsorted(t, at_steps["t_mono"].astype(float).to_numpy(), side="right") - 1
    has = np.zeros(len(gaps), dtype=bool)
    has[which[(which >= 0) & (which < len(gaps))]] = True
    if has.sum() < GAP_STEPS or (~has).sum() < GAP_STEPS:
        return None, None
    grown = float(np.median(gaps[has]) - np.median(gaps[~has]))
    wall = float(at_steps["wall_s"].median())
    return round(grown, 6), bool(wall > 0 and grown >= HOST_BOUND_SHARE * wall)


def is_profile(run) -> bool:
    """Whether ``run`` is an XProf profile read as a run (store/xprof.py's manifest says its source)."""
    source = (getattr(run, "manifest", None) or {}).get("source")
    return isinstance(source, dict) and source.get("format") == "xprof"


def unattributed_what(run, peak_snapshot, unattributed, chip) -> str | None:
    """What the unattributed bytes at the live peak are (``Headline.peak_unattributed_what``)."""
    if not unattributed:
        return None
    if is_profile(run):
        return "profile"
    during = getattr(getattr(run, "jit", None), "snapshot_calls", None)
    in_flight = (during is not None and len(during) > 0 and peak_snapshot is not None
                 and bool((during["snapshot"] == peak_snapshot).any()))
    return "queued" if in_flight and (chip or {}).get("queued_generations") else "runtime"


def no_snapshot_why(run, snaps) -> str | None:
    """Why a run has no snapshot (``Headline.no_snapshot_why``); None where it has one."""
    if not snaps.empty:
        return None
    if getattr(run, "running", False):
        return "running"
    if not run.finished:
        return "killed"
    if is_profile(run):
        return "no-memory-events"
    return "no-arrays"


def _text(v) -> str | None:
    return v if isinstance(v, str) and v else None


def headline(ar: Attributed, tl: Timeline, peaks: Peaks, chip: dict | None, arrays_seen: int) -> Headline:
    """The headline of an attributed run: its manifest, its timeline, its
    ``Peaks``, the chip's counters (``counters.chip_counters``) and the
    arrays the report read."""
    run = ar.run
    m = run.manifest
    snaps = run.snapshots
    notebook = m.get("notebook") if isinstance(m.get("notebook"), dict) else {}
    totals = tl.totals
    peak_row = totals.loc[totals["snapshot"] == tl.peak_snapshot] if tl.peak_snapshot is not None else totals.iloc[0:0]
    unattributed = None
    if not peak_row.empty and "unattributed_bytes" in peak_row and pd.notna(peak_row["unattributed_bytes"].iloc[0]):
        unattributed = int(peak_row["unattributed_bytes"].iloc[0])
    searches, search_s = search_cost(run)
    own = program_thread_cost(run)
    gap, host_bound = step_snapshots_gap(snaps, run.markers)
    return Headline(
        run=str(run.path),
        command=" ".join(m.get("argv") or []),
        finished=run.finished,
        running=bool(getattr(run, "running", False)),
        exit_status=m.get("exit_status"),
        ended_by=m.get("ended_by"),
        cells=_text(notebook.get("cells")),
        raised=_text(notebook.get("raised")),
        duration_s=m.get("duration_s"),
        backend=m.get("backend"),
        devices=int(tl.devices["device"].nunique()) if not tl.devices.empty else len(m.get("devices") or []),
        snapshots=int(len(snaps)),
        markers=int(len(run.markers)),
        sampling_cpu_s=float(snaps["cost_s"].sum()) if not snaps.empty else 0.0,
        step_snapshots_share=step_snapshots_share(snaps, run.markers),
        step_snapshots_gap_s=gap,
        step_snapshots_host_bound=host_bound,
        no_snapshot_why=no_snapshot_why(run, snaps),
        peak_snapshot=tl.peak_snapshot,
        peak_t=tl.peak_t,
        peak_bytes=int(tl.peak_bytes),
        peak_unattributed_bytes=unattributed,
        peak_unattributed_what=unattributed_what(run, tl.peak_snapshot, unattributed, chip),
        true_peak_bytes=peaks.device_bytes,
        true_peak_total_bytes=peaks.total_bytes,
        true_peak_where=peaks.where,
        chip=chip,
        arrays_seen=int(arrays_seen),
        per_array_data=bool(run.has_arrays),
        holder_searches=searches,
        holder_search_cpu_s=search_s,
        program_thread_wall_s=None if own is None else own[0],
        program_thread_cpu_s=None if own is None else own[1],
    )
