"""Facts about a whole run: duration, snapshots, the peak and what held it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from jaxmemprof.analysis.groups import Breakdown

if TYPE_CHECKING:
    from jaxmemprof.analysis.attributed import Attributed


@dataclass(frozen=True)
class Overview:
    duration_s: float | None
    snapshots: int
    sampling_s: float  # time spent taking snapshots
    peak_snapshot: int | None
    peak_bytes: int
    peak_t: float | None
    peak_sites: Breakdown | None  # top sites at the peak
    exit_status: object
    ended_by: str | None
    triggers: dict  # trigger -> count
    oom_sites: Breakdown | None  # top sites when the program ran out of memory
    # (--interval, mean seconds between snapshots, --max-overhead) when the
    # overhead budget spaced snapshots well beyond the interval asked for
    stretched: tuple[float, float, float] | None = None
    holder_searches: int = 0  # searches for the Python references holding arrays (analysis/py_holders.py)
    holder_search_s: float = 0.0  # their CPU time
    peak_holders: dict | None = None  # site -> what held it at the peak (py_holders.site_holders)
    peak_holders_at: int | None = None  # the snapshot whose search they come from, where not the peak's own
    holders_unread: str = ""  # the program's frames a holder search could not read, and why (py_holders.unread)
    program_thread: tuple[float, float] | None = None  # (wall, CPU) s of its snapshots in the program's thread
    outside_jit: str = ""  # operations run outside jit between jitted calls, by line (analysis/outside.py)


@dataclass(frozen=True)
class LivePeak:
    """The run's live peak: the first snapshot with the most live bytes (all
    devices); the run's other peaks are analysis/peaks.py's ``Peaks``."""

    snapshot: int
    t: float
    live_bytes: int


def run_peak(snaps: pd.DataFrame) -> LivePeak | None:
    """The one definition of a run's peak (every section reads it from here):
    the first snapshot with the most live bytes; None without snapshots."""
    if snaps.empty:
        return None
    i = int(np.argmax(snaps["live_bytes"].to_numpy(dtype=np.int64)))
    row = snaps.iloc[i]
    return LivePeak(int(row["snapshot"]), float(row["t"]), int(row["live_bytes"]))


def stretched_sampling(snaps: pd.DataFrame, settings: dict) -> tuple[float, float, float] | None:
    """(interval, mean gap, max_overhead) if snapshots came on average more
    than twice the interval apart because of the overhead budget."""
    interval, budget = settings.get("interval"), settings.get("max_overhead")
    if not (isinstance(interval, (int, float)) and interval > 0 and isinstance(budget, (int, float)) and budget > 0) \
            or len(snaps) < 2:
        return None
    gap = float(snaps["t"].max() - snaps["t"].min()) / (len(snaps) - 1)
    return (float(interval), gap, float(budget)) if gap > 2 * interval else None


def overview(ar: Attributed, top_sites: int = 5) -> Overview:
    """What ``run`` prints when the program ends: the peak and the sites
    holding it (and those of an OOM snapshot)."""
    run = ar.run
    snaps: pd.DataFrame = run.snapshots
    m = run.manifest

    def sites_at(snapshot: int) -> Breakdown:
        return ar.sites_holding(snapshot, top_sites)

    from jaxmemprof.analysis.headline import program_thread_cost
    from jaxmemprof.analysis.outside import outside_jit
    from jaxmemprof.analysis.py_holders import holders, holders_searched_at, search_cost, site_holders, unread

    sites = oom = None
    peak = run_peak(snaps)
    searches, search_s = search_cost(run)
    if peak is not None:
        sites = sites_at(peak.snapshot)
        ooms = snaps.loc[snaps["trigger"] == "oom", "snapshot"]
        if not ooms.empty:
            oom = sites_at(int(ooms.iloc[0]))
    return Overview(
        duration_s=m.get("duration_s"),
        snapshots=len(snaps),
        sampling_s=float(snaps["cost_s"].sum()) if not snaps.empty else 0.0,
        peak_snapshot=None if peak is None else peak.snapshot,
        peak_bytes=0 if peak is None else peak.live_bytes,
        peak_t=None if peak is None else peak.t,
        peak_sites=sites,
        exit_status=m.get("exit_status"),
        ended_by=m.get("ended_by"),
        triggers=snaps["trigger"].value_counts().to_dict() if not snaps.empty else {},
        oom_sites=oom,
        stretched=stretched_sampling(snaps, m.get("settings") or {}),
        holder_searches=searches, holder_search_s=search_s,
        peak_holders=site_holders(holders(ar), peak.snapshot, sites.rows if sites is not None else None)
        if peak is not None and searches else {},
        peak_holders_at=holders_searched_at(holders(ar), peak.snapshot) if peak is not None and searches else None,
        holders_unread=unread(run), program_thread=_worth_saying(program_thread_cost(run), m.get("duration_s")),
        outside_jit=outside_jit(ar),
    )


# The closing lines say what the snapshots in the program's thread cost it from this share of the run's wall time
# on (the report and its JSON always give it).
PROGRAM_THREAD_SAID = 0.02


def _worth_saying(cost, duration) -> tuple | None:
    """``cost`` (wall, CPU) where its wall time is PROGRAM_THREAD_SAID of ``duration`` or more, else None."""
    if cost is None or not isinstance(duration, (int, float)) or duration <= 0:
        return cost
    return cost if cost[0] >= PROGRAM_THREAD_SAID * duration else None
