"""What an HTML page draws beyond the report's tables, computed here so that
render/html.py only serialises: the flame graph's cells (of a run's
snapshots, or of one or two profiles), the snapshots they cover, the lines
held at a snapshot and grown between two, the roles' cells, the fit line of
the plan's chart."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from jaxmemprof.analysis.advice.plan import largest_fitting_peak
from jaxmemprof.analysis.attributed import Attributed
from jaxmemprof.analysis.flame import Cells, RoleCells, profile_cells, role_cells, run_cells, site_growth, site_values

HELD = 5  # lines the headline names
GREW = 5


@dataclass(frozen=True)
class PageModel:
    cells: Cells
    held: list  # [{site, bytes, share}]: at the selected snapshot (the peak of a run, the one profile of show)
    grew: list  # [{site, base_bytes, new_bytes, delta_bytes}]: from the first to the final
    run: object = None  # the run (store.reader.Run) of a report page
    snapshots: pd.DataFrame | None = None  # the run's snapshots the cells cover
    totals: pd.DataFrame | None = None  # the timeline's totals at those snapshots
    peak_j: int = 0  # the live peak's position among them
    final_j: int = 0  # the last taken while the program ran
    roles: RoleCells | None = None  # what the memory is, as cells (flame.role_cells)
    fit_peak_bytes: int | None = None  # the most a device of the plan's size holds by the fit rule


def _held(cells: Cells, j: int, n: int = HELD) -> list:
    v = site_values(cells, j)
    v = v[v > 0].sort_values(ascending=False, kind="stable")
    total = int(v.sum())
    return [{"site": s, "bytes": int(b), "share": (b / total if total else 0.0)} for s, b in v.head(n).items()]


def _grew(cells: Cells, base_j: int, new_j: int, n: int = GREW) -> list:
    return [{"site": str(r["site"]), **{k: int(r[k]) for k in ("base_bytes", "new_bytes", "delta_bytes")}}
            for r in site_growth(cells, base_j, new_j).head(n).to_dict("records")]


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
    return PageModel(
        cells=cells, held=_held(cells, peak_j) if len(pos) else [], grew=_grew(cells, 0, final_j) if len(pos) else [],
        run=run, snapshots=snaps, totals=totals, peak_j=peak_j, final_j=final_j,
        roles=role_cells(what) if what is not None and not what.by_role.empty else None,
        fit_peak_bytes=largest_fitting_peak(device, getattr(plan, "backend", None)) if device else None)


def profiles_model(profiles: list, attribution) -> PageModel:
    """The page of ``show --html`` (one profile) or ``diff --html`` (two: what grew from the first to the second)."""
    cells = profile_cells(profiles, attribution)
    return PageModel(cells=cells, held=_held(cells, len(profiles) - 1),
                     grew=_grew(cells, 0, 1, 8) if len(profiles) > 1 else [])
