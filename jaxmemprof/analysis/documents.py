"""The documents every output format prints (render/formats/): one per kind
of input, built by analysis/page.py with every choice made (which rows,
grouped how, in which order), so that a format only writes them out.

``RunDocument``: ``report`` and ``export --csv`` on one run; ``JobDocument``:
the same on a multi-process job; ``ProfilesDocument``: ``show``, ``diff`` and
``export --format pprof``; ``RunsDocument``: ``diff`` of two runs. Plain dataclasses: importing this module imports
neither pandas nor numpy (``show`` of a profile file needs neither)."""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from numpy import ndarray
    from pandas import DataFrame

    from jaxmemprof.analysis.flame import Cells, RoleCells
    from jaxmemprof.analysis.report import Report


@dataclass(frozen=True)
class PageModel:
    """What an HTML page draws beyond the report: the flame graph's cells, the
    snapshots they cover, the lines held and grown, the roles' cells."""

    cells: Cells
    held: list  # [{site, bytes, share}]: at the selected snapshot (the peak of a run, the one profile of show)
    grew: list  # [{site, base_bytes, new_bytes, delta_bytes}]: from the first to the final
    snapshots: DataFrame | None = None  # the run's snapshots the cells cover
    totals: DataFrame | None = None  # the timeline's totals at those snapshots
    peak_j: int = 0  # the live peak's position among them
    final_j: int = 0  # the last taken while the program ran
    roles: RoleCells | None = None  # what the memory is, as cells (flame.role_cells)
    fit_peak_bytes: int | None = None  # the most a device of the plan's size holds by the fit rule
    process: int = 0  # the run's process index (0 for a run of one process)
    snapshots_total: int = 0  # the run's snapshots, drawn or not
    first_t: float | None = None  # the run's first snapshot's time (a job's page shifts it to the job's clock)
    devices: list = field(default_factory=list)  # [(device, its rows of the timeline at the drawn snapshots)]
    markers: DataFrame | None = None  # the markers drawn (evenly chosen beyond MAX_MARKERS)
    markers_total: int = 0
    lifetimes: DataFrame | None = None  # the arrays drawn as bars: the largest, a few per line
    curves: list = field(default_factory=list)  # [{function, positions, bytes, peak_position, peak_bytes, series}]


@dataclass(frozen=True)
class BatchPeaks:
    """run --plan's peaks of one planned function: per variant and batch, the
    busiest device's (what the report's table and the page's chart show)."""

    variants: list  # in the order the plan has them
    batches: list  # every batch compiled for any variant, smallest first
    peak: dict  # (variant, batch) -> bytes on the busiest device
    devices: list  # the devices of the points, in order

    def points(self, variant) -> list:
        return [(b, self.peak[(variant, b)]) for b in self.batches if (variant, b) in self.peak]

    def compiled(self, variant) -> list:
        """The batches compiled for ``variant``, smallest first."""
        return [b for b, _ in self.points(variant)]


@dataclass(frozen=True)
class RunDocument:
    """A run's report, ready to print in any format."""

    report: Report
    top: int = 5
    explain: bool = False
    timeline_rows: list = field(default_factory=list)  # the timeline's rows the terminal shows (labels)
    role_groups: list = field(default_factory=list)  # [(devices, their role rows, largest first)]: alike devices once
    jit_peak: list = field(default_factory=list)  # [one function's rows at its own peak, largest signature]
    plan_peaks: dict = field(default_factory=dict)  # function_id -> BatchPeaks
    oom: object = None  # analysis/oom.py's answer, where the run ran out of memory
    refusals: list = field(default_factory=list)  # --target slices XLA:TPU refused (analysis/oom.py)
    show: Callable = str  # how a path is shown (the attribution's)
    page: PageModel | None = None  # what the HTML page draws beyond the report (asked for by the format)
    process: int = 0  # the run's process index (export's process column)
    trace: object = None  # analysis/trace.py TraceModel: the run as a timeline (export --format perfetto)


@dataclass(frozen=True)
class ProcessPage:
    """One process of a job drawn in full on the job's page."""

    process: int
    document: RunDocument
    t_shift: float  # seconds from its own clock to the job's
    title: str


@dataclass(frozen=True)
class JobDocument:
    """A multi-process job's report (analysis/job.py), ready to print."""

    report: object  # analysis/job.py JobReport
    top: int = 10
    explain: bool = False
    by_peak: DataFrame | None = None  # the processes, largest peak first
    alike_sites: list = field(default_factory=list)  # [((site, bytes) ..., [processes])]: what held each peak
    alike_roles: list = field(default_factory=list)  # [((role, bytes) ..., [processes])]: the busiest device's
    processes: list = field(default_factory=list)  # ProcessPage of each process drawn (HTML)
    drawn: list = field(default_factory=list)  # their indices, the page opening on the first
    t: ndarray | None = None  # the job's timeline as drawn (each stretch's highest and lowest, and the peak)
    live_bytes: ndarray | None = None
    reports: list = field(default_factory=list)  # [(process, its Report)] (CSV)


@dataclass(frozen=True)
class ProfilesDocument:
    """One profile (show), two (diff), or a snapshot or two for pprof."""

    command: str  # show, diff or export
    names: list
    profiles: list
    value_type: str = "space"
    result: object = None  # analysis/groups.py's Breakdown or Diff (its first rows, as asked)
    title: str = ""
    stacks: list = field(default_factory=list)  # each profile's user stacks (pprof)
    page: PageModel | None = None


@dataclass(frozen=True)
class RunsDocument:
    """Two runs compared (diff BEFORE AFTER of two run directories): analysis/rundiff.py's ``RunDiff``."""

    command: str
    result: object  # analysis/rundiff.py's RunDiff (its first rows, as asked)
