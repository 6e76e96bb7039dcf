"""Everything ``report`` and ``export`` say about a run, computed once.

Each section is a table (DataFrame); ``render/`` only formats them, so the
terminal, JSON and CSV carry the same rows and numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pandas as pd

from jaxmemprof.analysis.answer import Answer, answer
from jaxmemprof.analysis.advice.capacity import Fit, will_it_fit
from jaxmemprof.analysis.advice.donation import jit_memory
from jaxmemprof.analysis.advice.plan import Plan, build_plan
from jaxmemprof.analysis.advice.targets import Targets, build_targets
from jaxmemprof.analysis.findings import by_effect, in_proportion, ranked
from jaxmemprof.analysis.groups import Breakdown
from jaxmemprof.analysis.headline import Headline, headline
from jaxmemprof.analysis.inside_jit import largest_buffers, peak_by_line, program_curves
from jaxmemprof.analysis.leaks import leaks, recompiles
from jaxmemprof.analysis.attributed import Attributed
from jaxmemprof.analysis.lifetimes import estimated_site_churn, site_lifetimes
from jaxmemprof.analysis.outside import outside_jit
from jaxmemprof.analysis.py_holders import empty_holders, holders, holders_searched_at, site_holders, unread
from jaxmemprof.analysis.reuse import reuse
from jaxmemprof.analysis.roles import Roles, empty_roles, roles
from jaxmemprof.analysis.rules import ABOUT_A_CALL, DETECTORS, NOT_IN_PROPORTION, Context
from jaxmemprof.analysis.timeline import Timeline, timeline


@dataclass(frozen=True)
class Report:
    """A run, analysed: see each analysis module for the columns."""

    path: str
    manifest: dict
    finished: bool
    has_arrays: bool
    warnings: list
    headline: Headline  # the headline figures (the JSON's summary)
    peak_sites: Breakdown | None  # what held the peak, by site
    timeline: Timeline
    arrays: pd.DataFrame  # one row per array (lifetimes)
    lifetimes: pd.DataFrame  # per site
    churn: pd.DataFrame  # estimated births/deaths per site (runs without array data)
    reuse_by_device: pd.DataFrame
    reuse_by_site: pd.DataFrame
    reuse_buffers: int  # buffers (array shards) the reuse analysis matched by address
    reuse_unknown_addresses: int  # of those, buffers with no recorded address (not matched)
    leaks: pd.DataFrame
    recompiles: pd.DataFrame
    jit_memory: pd.DataFrame  # per jitted function: XLA's memory analysis
    jit_peak: pd.DataFrame  # per jitted function x user line x kind: XLA's buffers at the function's own peak
    jit_buffers: pd.DataFrame  # the largest of those buffers, with their live ranges in program order
    jit_curve: pd.DataFrame  # each function's bytes live at each position of its program, by line
    fit: Fit | None  # for --device-memory, else None
    findings: list  # Finding records, ranked (render/findings.py says them)
    extra_findings: list = field(default_factory=list)
    plan: Plan | None = None  # of a run recorded with run --plan (None without)
    targets: Targets | None = None  # of a run recorded with run --target (None without)
    roles: Roles = field(default_factory=empty_roles)  # what the memory is at the largest sampled jitted call
    peak_devices: pd.DataFrame = field(default_factory=pd.DataFrame)  # live bytes per device at the live peak
    answer: Answer | None = None  # the answer, first in every output (analysis/answer.py)
    holders: pd.DataFrame = field(default_factory=empty_holders)  # what keeps arrays alive (analysis/py_holders.py)
    peak_holders: dict = field(default_factory=dict)  # site -> what holds it at the live peak (site_holders)
    peak_holders_at: int | None = None  # the snapshot whose search they come from, where not the peak's own
    holders_unread: str = ""  # the program's frames a holder search could not read, and why (py_holders.unread)
    outside_jit: str = ""  # operations run outside jit between jitted calls, by line (analysis/outside.py)


def build_report(ar: Attributed, *, extra_rules=()) -> Report:
    """Analyse the attributed run under its options (``top_sites``,
    ``steps``; ``device_memory``: bytes of a device to check the run against,
    "will it fit?"). ``extra_rules``: callables ``(run, report_so_far) ->
    list[Finding]`` added to the findings."""
    run, options = ar.run, ar.options
    ar.prepare()
    tl = timeline(ar)
    peak_sites = None if tl.peak_snapshot is None else ar.sites_holding(tl.peak_snapshot)

    if run.has_arrays:
        arrays = ar.arrays
        per_site = site_lifetimes(ar)
        churn = pd.DataFrame()
        r = reuse(ar)
        reuse_by_device, reuse_by_site = r.by_device, r.by_site
        reuse_buffers, reuse_unknown = r.buffers, r.unknown_addresses
    else:
        arrays = per_site = reuse_by_device = reuse_by_site = pd.DataFrame()
        reuse_buffers = reuse_unknown = 0
        churn = estimated_site_churn(ar)

    leak_rows = leaks(ar)
    recompile_rows = recompiles(ar)
    memory_in_jit = jit_memory(ar)
    # Per device, as XLA's figures are (and as a device's memory is): the
    # busiest device's snapshot peak, or a call's own on the busiest device;
    # and on all devices summed, beside the snapshots' total. Computed once (Attributed.peaks).
    peaks = ar.peaks
    device_peak, total_true_peak, inside = peaks.device_bytes, peaks.total_bytes, peaks.call
    chip = ar.chip  # the chip's own counters beside the model
    what = roles(ar)
    fit = will_it_fit(ar, options.device_memory, device_peak) if options.device_memory is not None else None
    # The rules, each family in turn (analysis/rules/): detection, severity and words in one module each.
    held = holders(ar) if run.has_arrays else empty_holders()
    ctx = Context(ar, tl, leaks=leak_rows, recompiles=recompile_rows, holders=held, device_peak=device_peak, fit=fit)
    for family in DETECTORS:
        ctx.found += family.detect(ctx)
    found = in_proportion(ctx.found, total_true_peak if total_true_peak is not None else int(tl.peak_bytes),
                          NOT_IN_PROPORTION)
    if peaks.in_call:
        found = by_effect(found, inside.function, inside.where, ABOUT_A_CALL)
    plan = build_plan(ar, found, options.device_memory)  # None unless recorded with run --plan

    m = run.manifest
    head = headline(ar, tl, peaks, chip, len(arrays))
    jit_peak = peak_by_line(ar)
    findings = ranked(found)
    report = Report(
        path=str(run.path), manifest=m, finished=run.finished, has_arrays=run.has_arrays,
        warnings=list(run.warnings) + probe_warnings(run), headline=head, peak_sites=peak_sites, timeline=tl,
        arrays=arrays, lifetimes=per_site, churn=churn, reuse_by_device=reuse_by_device,
        reuse_by_site=reuse_by_site, reuse_buffers=reuse_buffers, reuse_unknown_addresses=reuse_unknown,
        leaks=leak_rows,
        recompiles=recompile_rows, jit_memory=memory_in_jit,
        jit_peak=jit_peak, jit_buffers=largest_buffers(ar),
        jit_curve=program_curves(ar),
        fit=fit, findings=findings, plan=plan, targets=build_targets(ar), roles=what, peak_devices=peaks.live_devices,
        answer=answer(head, peaks, memory_in_jit, jit_peak, what, findings), holders=held,
        peak_holders=site_holders(held, tl.peak_snapshot, peak_sites.rows if peak_sites is not None else None),
        peak_holders_at=holders_searched_at(held, tl.peak_snapshot), holders_unread=unread(run),
        outside_jit=outside_jit(ar),
    )
    extra = [f for rule in extra_rules for f in rule(run, report)]
    if extra:
        findings = ranked(found + extra)
        report = replace(report, findings=findings, extra_findings=extra,
                         answer=answer(head, peaks, memory_in_jit, jit_peak, what, findings))
    return report


def probe_warnings(run) -> list[str]:
    """What the jit probe could not do, from the run's events: calls it
    could not read (once per function and error) and functions whose XLA
    dump was left out; and the program's hooks that Python runs in
    jaxmemprof's threads too (capture/threads.py)."""
    ev = run.events
    if ev is None or ev.empty:
        return []
    rows = ev[ev["kind"].isin(["probe-error", "xla-dump", "program-hooks"])]
    prefix = {"probe-error": "jit probe: ", "xla-dump": "memory inside jit: ", "program-hooks": ""}
    return [prefix[kind] + str(msg) for kind, msg in zip(rows["kind"], rows["message"])]

