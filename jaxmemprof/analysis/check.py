"""Gates on memory: ``jaxmemprof check RUN`` and the pytest plugin's limits.

Facts only, from the figures the report already computed (its summary, its
leaks, its findings) or, for one test, from the run recorded around it;
``render/check.py`` and the pytest plugin word them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from typing import TYPE_CHECKING

from jaxmemprof.analysis.sites import Attribution
from jaxmemprof.facts.truepeak import largest, moments

if TYPE_CHECKING:
    from jaxmemprof.analysis.attributed import Attributed


@dataclass(frozen=True)
class Limits:
    """What ``check`` is asked to hold. Bytes; growth per step or per second;
    a percentage over the baseline's peaks."""

    max_peak: int | None = None
    max_true_peak: int | None = None
    max_growth: int | None = None
    growth_per: str = "step"  # "step" (per marker) or "s"
    fail_on: tuple[str, ...] = ()
    max_increase_pct: float | None = None  # with a baseline
    target_fits: tuple[str, ...] = ()  # TPU slices (run --target) the step must fit

    def any(self) -> bool:
        return (self.max_peak is not None or self.max_true_peak is not None or self.max_growth is not None
                or bool(self.fail_on) or self.max_increase_pct is not None or bool(self.target_fits))


def asked(limits: Limits, *, baseline: bool = False) -> tuple[str, ...]:
    """The checks ``limits`` asks for, by name (``baseline``: those that
    read the baseline run: max-increase)."""
    if baseline:
        return ("max-increase",) if limits.max_increase_pct is not None else ()
    names = [("max-peak", limits.max_peak is not None), ("max-true-peak", limits.max_true_peak is not None),
             ("max-growth", limits.max_growth is not None), ("fail-on", bool(limits.fail_on)),
             ("max-increase", limits.max_increase_pct is not None), ("target-fits", bool(limits.target_fits))]
    return tuple(name for name, wanted in names if wanted)


# What a reader says when it left snapshots out (store/reader.py's warnings):
# the figures of the snapshots it skipped cannot be seen, so a gate cannot
# say that a limit held. Snapshot files the journal does not list are such
# snapshots too: a killed run's journal cut short (its WAL) lost their rows.
_LOST = ("snapshot file(s) missing", "row(s) of the journal's snapshots are damaged", "damaged snapshot file(s)",
         "snapshot file(s) without a journal entry")


def lost_snapshots(warnings) -> list[str]:
    """The reader's warnings that say snapshots were left out (of a
    directory of profiles: ``skipped NAME: ...``)."""
    return [str(w) for w in warnings if any(k in str(w) for k in _LOST) or str(w).startswith("skipped ")]


def growth_snapshots() -> int:
    """The snapshots (before the exit) the leak analysis needs to measure growth."""
    from jaxmemprof.analysis.leaks import leaks

    return max(int((leaks.__kwdefaults__ or {}).get("min_snapshots", 2)), 2)


# The journal tables each check's figure is computed from: one that is not
# whole (rows or cells left out, or unreadable: Run.damaged) leaves that
# figure partial, and the check is not made. A finding can come of any table.
_PEAK_TABLES = ("snapshots",)
_JIT_TABLES = ("jit_functions", "jit_compiles", "jit_calls", "jit_counts", "jit_programs", "jit_buffers",
               "executables")
_ARRAY_TABLES = ("arrays", "array_kinds", "array_ends", "stacks")
NEEDS = {
    "max-peak": _PEAK_TABLES,
    "max-true-peak": _PEAK_TABLES + _ARRAY_TABLES + _JIT_TABLES,
    "max-growth": _PEAK_TABLES + _ARRAY_TABLES + ("markers",),
    "fail-on": None,  # every table
    "max-increase": _PEAK_TABLES + _ARRAY_TABLES + _JIT_TABLES,
    "target-fits": ("jit_targets", "jit_functions", "jit_compiles"),
}


def damaged_for(run, checks) -> tuple[tuple[str, ...], str]:
    """Of ``checks``, those whose tables ``run`` does not hold whole, and
    the first reason (the reader's warning)."""
    damaged = getattr(run, "damaged", {}) or {}
    hit, why = [], ""
    for check in checks:
        needs = NEEDS.get(check)
        tables = [t for t in damaged if needs is None or t in needs]
        if tables:
            hit.append(check)
            why = why or damaged[tables[0]]
    return tuple(hit), why


@dataclass(frozen=True)
class Unchecked:
    """Checks asked for whose figure cannot be computed from a run:
    ``reason`` is ``no-snapshot`` (none readable), ``lost-snapshots`` (the
    reader left some out: ``detail`` says which), ``damaged`` (a table a
    figure comes from is not whole: ``detail``), ``running`` or ``killed``
    (the run did not finish: its figures are partial), ``no-jit`` (no figures
    from inside jitted calls, for max-true-peak), ``few-snapshots`` (fewer
    than ``needed`` before the exit, for max-growth: ``have``),
    ``not-compiled`` (no figures for a --target slice: ``detail``) or ``cut``
    (the compiles for a slice cut short at the run's end: ``detail``,
    ``SLICE: why``)."""

    checks: tuple[str, ...]
    reason: str
    detail: str = ""
    have: int = 0
    needed: int = 0


def unchecked_run(run, limits: Limits, *, baseline: bool = False,
                  allow_unfinished: bool = False) -> Unchecked | None:
    """Why ``run`` (the baseline, with ``baseline``) cannot give the figures
    the checks asked for need, before any analysis: None when it can. A run
    that did not finish is checked only with ``allow_unfinished``."""
    checks = asked(limits, baseline=baseline)
    if not checks:
        return None
    snaps = run.snapshots
    readable = snaps if "thinned" not in snaps.columns else snaps[~snaps["thinned"].astype(bool)]
    lost = lost_snapshots(run.warnings)
    if readable.empty and _is_profile(run):
        # A profile without memory events still has its programs: the checks on them are made
        # (check_report); those on the snapshots cannot be.
        needing = tuple(c for c in checks if c in SNAPSHOT_CHECKS)
        if needing:
            return Unchecked(needing, "no-memory-events")
        checks = tuple(c for c in checks if c not in SNAPSHOT_CHECKS)
    elif readable.empty:
        return Unchecked(checks, "no-snapshot", detail=lost[0] if lost else "")
    torn, why = damaged_for(run, checks)
    if torn:
        return Unchecked(torn, "damaged", detail=why)
    if not allow_unfinished and not getattr(run, "finished", True):
        t = float(readable["t"].max()) if "t" in readable.columns else 0.0
        return Unchecked(checks, "running" if getattr(run, "running", False) else "killed", detail=f"{t:.2f}")
    if lost:
        return Unchecked(checks, "lost-snapshots", detail=lost[0])
    if not baseline and limits.max_growth is not None:
        have = int((snaps["trigger"] != "exit").sum())
        needed = growth_snapshots()
        if have < needed:
            return Unchecked(("max-growth",), "few-snapshots", have=have, needed=needed)
    return None


# The checks whose figures are the snapshots' (a profile without memory events has none).
SNAPSHOT_CHECKS = ("max-peak", "max-growth", "max-increase")


def _is_profile(run) -> bool:
    """Whether ``run`` is an XProf profile read as a run (headline.is_profile; not imported: the pytest plugin
    reads this module without pandas)."""
    source = (getattr(run, "manifest", None) or {}).get("source")
    return isinstance(source, dict) and source.get("format") == "xprof"


def profile_true_peak(report) -> tuple[int, str] | None:
    """Of a profile without memory events: (the largest call peak of its
    programs, that program's function), the true peak's figure where nothing
    outside the calls is known (at least this); None otherwise."""
    if getattr(report.headline, "no_snapshot_why", None) != "no-memory-events":
        return None
    jm = report.jit_memory
    if jm is None or jm.empty or "call_peak_bytes" not in jm.columns or jm["call_peak_bytes"].isna().all():
        return None
    row = jm.loc[jm["call_peak_bytes"].astype("float64").idxmax()]
    return int(row["call_peak_bytes"]), str(row["function"])


def unchecked_report(report, limits: Limits) -> Unchecked | None:
    """Why ``report`` cannot give a figure asked for: the estimated true
    peak needs the jit probe's figures (or, of a profile without memory
    events, its programs')."""
    if (limits.max_true_peak is not None and report.headline.true_peak_bytes is None
            and profile_true_peak(report) is None):
        return Unchecked(("max-true-peak",), "no-jit")
    for name in limits.target_fits:
        targets = report.targets
        why = (f"the run was not recorded with --target {name}" if targets is None or name not in targets.asked
               else targets.missing(name))
        if why is None and targets.cut:  # its compiles stopped part way: a function may lack figures
            return Unchecked(("target-fits",), "cut", detail=f"{name}: {targets.cut}")
        if why is not None:
            return Unchecked(("target-fits",), "not-compiled", detail=f"{name}: {why}")
    return None


@dataclass(frozen=True)
class Outcome:
    """One check: ``check`` (max-peak, max-true-peak, max-growth, fail-on,
    max-increase), the ``limit`` and the ``value`` measured (bytes, bytes per
    step or second, a finding count, a percentage), whether it ``held``, the
    ``site`` most to blame where there is one, and the rows behind it
    (``details``: (site, bytes) pairs, or the findings' (rule, severity, site))."""

    check: str
    limit: float | None
    value: float | None
    held: bool
    unit: str = "bytes"
    site: str = ""
    details: tuple = ()
    facts: dict = field(default_factory=dict)


def _findings_rows(findings) -> list[tuple[str, str, str]]:
    """(rule, severity, site) of each finding, from the report's findings
    (a DataFrame with those columns, or a list of Finding records)."""
    if findings is None:
        return []
    if hasattr(findings, "columns"):
        if findings.empty:
            return []
        sites = findings["site"] if "site" in findings.columns else [""] * len(findings)
        return [(str(r), str(s), "" if t is None or t != t else str(t))
                for r, s, t in zip(findings["rule"], findings["severity"], sites)]
    return [(str(f.rule), str(f.severity), str(getattr(f, "site", "") or "")) for f in findings]


def _peak_sites(report, n: int = 3) -> tuple:
    ps = report.peak_sites
    if ps is None or ps.rows.empty:
        return ()
    rows = ps.rows.head(n)
    return tuple((str(s), int(b)) for s, b in zip(rows["site"], rows["bytes"]))


def check_report(report, limits: Limits, baseline=None) -> list[Outcome]:
    """Every check asked for, on ``report`` (and ``baseline``, a report of the
    run to compare with, for ``max_increase_pct``)."""
    s = report.headline
    out: list[Outcome] = []
    sites = _peak_sites(report)
    if limits.max_peak is not None:
        peak = int(s.peak_bytes)
        out.append(Outcome("max-peak", limits.max_peak, peak, peak <= limits.max_peak,
                           site=sites[0][0] if sites else "", details=sites))
    if limits.max_true_peak is not None:
        # Per device (what a device's memory must hold), as XLA's figures are.
        true_peak, where = s.true_peak_bytes, s.true_peak_where or ""
        programs = profile_true_peak(report) if true_peak is None else None
        if programs is not None:  # a profile without memory events: its largest program's call
            true_peak, where = programs[0], (f"at least: the call peak of {programs[1]}, the largest of the "
                                             "profile's programs; nothing outside the calls is in a profile "
                                             "without memory events")
        if true_peak is None:  # no jit probe data: unchecked_report refuses it; never a pass
            raise ValueError("max-true-peak: the report has no estimated true peak")
        true_peak = int(true_peak)
        out.append(Outcome("max-true-peak", limits.max_true_peak, true_peak, true_peak <= limits.max_true_peak,
                           site=sites[0][0] if sites else "", details=sites,
                           facts={"where": where, "devices": int(s.devices or 1)}))
    if limits.max_growth is not None:
        column = "growth_bytes_per_step" if limits.growth_per == "step" else "growth_bytes_per_s"
        growing = []
        lk = report.leaks
        if lk is not None and not lk.empty and column in lk.columns:
            for site, g in zip(lk["site"], lk[column]):
                if g is not None and not (isinstance(g, float) and math.isnan(g)) and g > 0:
                    growing.append((str(site), float(g)))
        growing.sort(key=lambda x: -x[1])
        total = sum(g for _, g in growing)
        out.append(Outcome("max-growth", limits.max_growth, total, total <= limits.max_growth,
                           unit=f"bytes/{limits.growth_per}", site=growing[0][0] if growing else "",
                           details=tuple((site, g) for site, g in growing[:3])))
    if limits.fail_on:
        wanted = set(limits.fail_on)
        hits = [row for row in _findings_rows(report.findings) if row[0] in wanted]
        out.append(Outcome("fail-on", None, len(hits), not hits, unit="findings",
                           site=hits[0][2] if hits else "", details=tuple(hits),
                           facts={"rules": list(limits.fail_on)}))
    for name in limits.target_fits:  # unchecked_report refused a slice without figures: never a pass
        import pandas as pd  # only here: the pytest plugin reads this module without pandas

        rows = report.targets.rows
        rows = rows[(rows["target"] == name) & (rows["peak_bytes"].notna() | rows["fits"].eq(False))]
        # the worst: one XLA:TPU refused as too large for the device (no peak: its error says), else the largest
        refused = rows[rows["peak_bytes"].isna()]
        worst = refused.iloc[0] if len(refused) else rows.loc[rows["peak_bytes"].astype("int64").idxmax()]
        worst_peak = None if pd.isna(worst["peak_bytes"]) else int(worst["peak_bytes"])
        out.append(Outcome("target-fits", int(worst["usable_bytes"]), worst_peak,
                           bool(rows["fits"].astype(bool).all()), site=str(worst["function"]),
                           details=tuple((str(r["function"]), None if pd.isna(r["peak_bytes"]) else int(r["peak_bytes"]))
                                         for _, r in rows.iterrows()),
                           facts={"target": name, "chip": str(worst["chip"]), "hbm_bytes": int(worst["hbm_bytes"]),
                                  **({"error": str(worst["error"])} if worst_peak is None else {})}))
    if limits.max_increase_pct is not None and baseline is not None:
        b = baseline.headline
        pairs = [("peak", int(s.peak_bytes), int(b.peak_bytes))]
        if s.true_peak_total_bytes is not None and b.true_peak_total_bytes is not None:
            pairs.append(("true peak", int(s.true_peak_total_bytes), int(b.true_peak_total_bytes)))
        for what, new, old in pairs:
            pct = (new - old) / old * 100.0 if old > 0 else (0.0 if new == 0 else math.inf)
            out.append(Outcome("max-increase", limits.max_increase_pct, pct, pct <= limits.max_increase_pct,
                               unit="percent", site=sites[0][0] if sites else "", details=sites,
                               facts={"what": what, "bytes": new, "baseline_bytes": old}))
    return out


# -- one test (the pytest plugin) ----------------------------------------------------


@dataclass(frozen=True)
class TestMemory:
    """Device memory of one test, from the run recorded around it.

    Every figure counts the bytes above those alive at the test's start: the
    snapshot labelled ``start``, taken when the test function itself begins
    (after fixtures, ``setUp`` and ``setUpClass``), else the one labelled
    ``call`` (when pytest's call of the test began); snapshots and jitted
    calls before it are not the test's. ``peak_bytes``: the largest of the
    snapshots' live bytes (taken at the test's start, while it ran, when its
    function returned and after it) and the probe's estimate inside its
    jitted calls (``jit_peak_bytes``, ``jit_where``: the live bytes before a
    call, less its arguments, plus XLA's peak for it). ``peak_sites``:
    (site, bytes) grown since the start at the peak snapshot; ``jit_lines``:
    (site, bytes) of XLA's buffers at the call's own peak, by the user's
    line, when a call held the peak and XLA's dump was read.
    ``leak_bytes``: live bytes after the test (after garbage collection)
    less at its start; None when no snapshot was taken after it (the leak
    is then not measured); ``leak_sites``: (site, bytes) that grew."""

    __test__ = False  # not a test class, whatever pytest collects

    peak_bytes: int
    snapshot_peak_bytes: int
    peak_snapshot: int | None
    jit_peak_bytes: int | None
    jit_where: str
    peak_sites: tuple
    jit_lines: tuple
    jit_call_site: str  # where the test called the function whose call held the peak
    leak_bytes: int | None
    leak_sites: tuple
    snapshots: int


# No snapshot: JAX never came up (whether it did is the caller's to know: pytest_plugin checks).
_NOTHING = TestMemory(0, 0, None, None, "", (), (), "", 0, (), 0)


def _snapshot_of(snaps, *, trigger=None, label=None):
    rows = snaps
    if trigger is not None:
        rows = rows[rows["trigger"] == trigger]
    if label is not None:
        rows = rows[rows["label"] == label]
    return None if rows.empty else rows.iloc[-1]


def measure_test(ar: Attributed, *, top: int = 5) -> TestMemory:
    """The figures of one test's run: the snapshot labelled ``start`` (api;
    else ``call``) and the ``exit`` one (``exception`` when the test
    raised); see :class:`TestMemory`. Bytes count above the start: what
    fixtures, set-up and earlier tests left alive is not the test's."""
    from jaxmemprof.analysis.groups import diff, summarize

    run, attribution = ar.run, ar.attribution
    snaps = run.snapshots
    if snaps.empty:
        return _NOTHING
    start = _snapshot_of(snaps, trigger="api", label="start")
    if start is None:
        start = _snapshot_of(snaps, trigger="api", label="call")
    t0 = float(start["t_wall"]) if start is not None else -math.inf
    if start is not None:
        snaps = snaps[snaps["snapshot"] >= int(start["snapshot"])]
    end = _snapshot_of(snaps, trigger="exit")
    if end is None:
        end = _snapshot_of(snaps, trigger="exception")
    base = int(start["live_bytes"]) if start is not None else 0
    base_profile = run.profile(int(start["snapshot"])) if start is not None else None

    def grown(snapshot: int) -> tuple:
        """(site, bytes) that grew since the start, largest first."""
        new = run.profile(snapshot)
        if base_profile is None:
            rows = summarize(new, "site", attribution).rows
            rows = rows[rows["bytes"] > 0].head(top)
            return tuple((str(s), int(b)) for s, b in zip(rows["site"], rows["bytes"]))
        d = diff(base_profile, new, "site", attribution)
        rows = d.rows[d.rows["delta_bytes"] > 0].head(top)
        return tuple((str(s), int(b)) for s, b in zip(rows["site"], rows["delta_bytes"]))

    peak_row = snaps.loc[snaps["live_bytes"].idxmax()]
    snap_peak, peak_snapshot = int(peak_row["live_bytes"]) - base, int(peak_row["snapshot"])
    peak_sites = grown(peak_snapshot) if snap_peak > 0 else ()
    inside, where = _true_peak_since(run, t0)
    if inside is not None:
        inside = max(int(inside) - base, 0)
    jit_lines, call_site = (), ""
    if inside is not None and inside > snap_peak:
        jit_lines = _jit_lines(ar, where, top)
        call_site = _call_site(run, attribution, where, t0)
    peak = max(snap_peak, inside or 0)

    leak, leak_sites = None, ()
    if end is not None:
        leak = int(end["live_bytes"]) - base
        if leak > 0:
            leak_sites = grown(int(end["snapshot"]))
    return TestMemory(peak_bytes=int(peak), snapshot_peak_bytes=snap_peak, peak_snapshot=peak_snapshot,
                      jit_peak_bytes=None if inside is None else int(inside), jit_where=where,
                      peak_sites=peak_sites, jit_lines=jit_lines, jit_call_site=call_site, leak_bytes=leak,
                      leak_sites=leak_sites, snapshots=int(len(snaps)))


def _true_peak_since(run, t0: float) -> tuple[int | None, str]:
    """``report``'s estimated true peak (peaks.call_peaks), of the sampled
    calls made and the signatures compiled at ``t0`` or later: (bytes on
    all the call's devices, where), or (None, "")."""
    from jaxmemprof.analysis.peaks import call_peaks

    best = largest(call_peaks(run, since=t0))
    return (None, "") if best is None else (best.bytes, best.where)


def measure_totals(snapshots: list[dict], compiles: Sequence[dict] = (), calls: Sequence[dict] = (),
                   functions: dict | None = None) -> TestMemory:
    """The figures of :func:`measure_test` without their lines, for a test
    recorded in memory (``capture.totals.TotalsSession``, for the tests
    ``--jaxmemprof`` lists without a limit): ``snapshots`` (``snapshot,
    t_wall, trigger, label, live_bytes``), the probe's ``compiles``
    (``function_id, call_index, t_wall, signature`` and XLA's five figures)
    and sampled ``calls`` (``function_id, call_index, t_wall, signature,
    inputs, outputs, live_before``), ``functions`` (function_id -> name). The jit
    estimate is the report's (truepeak.moments, which peaks.call_peaks reads
    too), here without pandas (tests/test_pytest_plugin.py holds the two equal)."""
    if not snapshots:
        return _NOTHING
    snaps = sorted(snapshots, key=lambda r: r["snapshot"])

    def last(trigger, label=None):
        rows = [r for r in snaps if r["trigger"] == trigger and (label is None or r["label"] == label)]
        return rows[-1] if rows else None

    start = last("api", "start") or last("api", "call")
    base = int(start["live_bytes"]) if start is not None else 0
    t0 = float(start["t_wall"]) if start is not None else -math.inf
    mine = [r for r in snaps if start is None or r["snapshot"] >= start["snapshot"]]
    peak_row = max(mine, key=lambda r: r["live_bytes"])  # the first of equal ones, as idxmax
    snap_peak = int(peak_row["live_bytes"]) - base
    inside, where = _totals_true_peak(snaps, list(compiles), list(calls), functions or {}, t0)
    if inside is not None:
        inside = max(int(inside) - base, 0)
    end = next((r for r in reversed(mine) if r["trigger"] == "exit"), None) or \
        next((r for r in reversed(mine) if r["trigger"] == "exception"), None)
    return TestMemory(peak_bytes=max(snap_peak, inside or 0), snapshot_peak_bytes=snap_peak,
                      peak_snapshot=int(peak_row["snapshot"]), jit_peak_bytes=inside, jit_where=where,
                      peak_sites=(), jit_lines=(), jit_call_site="",
                      leak_bytes=None if end is None else int(end["live_bytes"]) - base, leak_sites=(),
                      snapshots=len(mine))


def _totals_true_peak(snaps, compiles, calls, functions, t0) -> tuple[int | None, str]:
    """The true peak of the calls and compiles from ``t0`` on, on plain rows:
    the same arithmetic as the report's (truepeak.moments), the snapshots'
    totals read as one device where a call has no ``live_before``."""
    snapshots = [(r["t_wall"], int(r["live_bytes"]), int(r["live_bytes"])) for r in snaps]
    best = largest(moments(compiles, calls, snapshots, since=t0))
    if best is None:
        return None, ""
    fid = compiles[best.compile]["function_id"]
    return best.bytes, f"during a call of {functions.get(fid, fid)}"


def _jit_lines(ar: Attributed, where: str, top: int) -> tuple:
    """XLA's buffers at the peak of the function named in ``where`` ('during
    a call of NAME'), by the user's line; () without XLA's dump of it."""
    from jaxmemprof.analysis.inside_jit import largest_signature_only, peak_by_line

    try:
        rows = peak_by_line(ar)
    except Exception:
        return ()
    if rows.empty:
        return ()
    rows = largest_signature_only(rows)
    name = where.rsplit(" ", 1)[-1]
    mine = rows[rows["function"].astype(str) == name] if "function" in rows.columns else rows.iloc[0:0]
    if mine.empty:
        mine = rows[rows["function_id"] == rows["function_id"].iloc[0]]
    g = mine.groupby("site", sort=False)["bytes"].sum().sort_values(ascending=False).head(top)
    return tuple((str(s), int(b)) for s, b in g.items())


def _call_site(run, attribution: Attribution, where: str, t0: float = -math.inf) -> str:
    """The user's line that first called the function named in ``where``
    (at ``t0`` or later)."""
    functions, calls = run.jit.functions, run.jit.calls
    if functions is None or calls is None or functions.empty or calls.empty:
        return ""
    name = where.rsplit(" ", 1)[-1]
    ids = set(functions.loc[functions["name"].astype(str) == name, "function_id"])
    mine = calls[calls["function_id"].isin(ids) & (calls["t_wall"] >= t0)].sort_values("call_index")
    if mine.empty:
        return ""
    r = mine.iloc[0]
    file = r["caller_file"]
    if not isinstance(file, str) or not file:
        return ""
    return f"{attribution.display_path(file)}:{int(r['caller_line'])} ({r['caller_function']})"


def out_of_memory_gate(run):
    """Where ``run`` ran out of memory: a failed ``out-of-memory`` Outcome
    naming XLA's reason (analysis/oom.py), whatever limits were asked; an
    Unchecked (``oom-unread``) where its message is not one xla/oom.py reads;
    None where it did not run out of memory."""
    from jaxmemprof.analysis.oom import out_of_memory

    a = out_of_memory(run)
    if a is None:
        return None
    if a.reason is None:
        first = (a.message or "").strip().splitlines()[0][:300] if (a.message or "").strip() else "no message kept"
        return Unchecked(("out-of-memory",), "oom-unread", detail=first)
    r = a.reason
    place = a.call.get("file") and f"{a.call.get('file')}:{a.call.get('line')}" or (
        a.def_file and f"{a.def_file}:{a.def_line}") or ""
    fit = (a.fit or {}).get("variants", {}).get("recorded", {}) if a.fit else {}
    return Outcome("out-of-memory", r.available_bytes, r.needed_bytes or r.request_bytes, False,
                   site=f"{a.function or 'the program'}" + (f" ({place})" if place else ""),
                   facts={"reason": r.reason, "when": r.when, "what": r.what, "needed_bytes": r.needed_bytes,
                          "available_bytes": r.available_bytes, "request_bytes": r.request_bytes,
                          "free_bytes": r.free_bytes, "largest_free_bytes": r.largest_free_bytes, "code": r.code,
                          "damaged": list(r.damaged), "batch": a.batch,
                          "fits_at_batch": fit.get("largest"), "next_batch": fit.get("next")})
