"""A multi-process job, analysed: each process's own report, then the job's.

Built in two passes, so that a job of many processes costs what its
processes cost, one after the other (linear), and little beyond:

1. store/job.py reads each process's manifest and snapshot totals (no
   profile): each process's peak, the job's peak (the sum over processes at
   aligned times), which processes did not finish.
2. Each process is then analysed as a run of its own (``build_report``:
   what held its peak, its findings), keeping only those small results,
   in worker processes when there are many (``workers``).

Findings of the processes are merged by rule and site: one finding with
the list of processes it applies to. An ``imbalance`` finding names the
process that holds much more than the median process at its peak, and the
sites that make the difference.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from dataclasses import fields as dataclass_fields

import numpy as np
import pandas as pd

from jaxmemprof.analysis.findings import SEVERITIES, Finding, JobFinding
from jaxmemprof.analysis.rules.job import imbalance, unfinished
from jaxmemprof.analysis.options import Options
from jaxmemprof.store.job import Job, JobTimeline, job_timeline
from jaxmemprof.store.layout import PROCESS_RESULT

# Sites kept per process at its peak (to compare processes site by site).
PEAK_SITES_KEPT = 50
# Worker processes are used from this many processes of a job up.
PARALLEL_FROM = 8
# How many worker processes, instead of that choice.
WORKERS_ENV = "JAXMEMPROF_WORKERS"


@dataclass(frozen=True)
class ProcessResult:
    """What the job report keeps of one process's own report."""

    process: int
    peak_sites: pd.DataFrame  # site, bytes, count (its own peak, largest first)
    findings: list  # its Finding records
    headline: dict  # build_report's headline figures (Headline.as_dict)
    warnings: list
    error: str | None = None
    # what the memory is at its largest sampled jitted call: [device, role, bytes, largest owner] rows
    roles: list = field(default_factory=list)
    # run --plan with --device-memory: [function, variant, largest batch, with the settings] on all its devices
    plan: list = field(default_factory=list)


@dataclass(frozen=True)
class JobReport:
    """``processes``: one row per process: ``process, host, devices`` (its
    local devices, as its manifest names them), ``finished,
    exit_status, ended_by, snapshots, peak_bytes, peak_t, peak_snapshot,
    at_job_peak_bytes, at_job_peak_snapshot, clock_offset_s, error``.
    ``peak_sites``: ``process, site, bytes, count`` at each process's own
    peak. ``findings``: JobFinding records, merged over the processes, with
    the job's own (``unfinished``, ``imbalance``). ``timeline``: ``t,
    live_bytes``, the job's."""

    path: str
    alignment: str
    process_count: int
    job_peak_bytes: int
    job_peak_t: float | None
    processes: pd.DataFrame
    peak_sites: pd.DataFrame
    findings: list
    timeline: pd.DataFrame
    unfinished: list
    per_process: dict = field(repr=False, default_factory=dict)  # process -> ProcessResult
    warnings: list = field(default_factory=list)
    plan: pd.DataFrame = field(default_factory=pd.DataFrame)  # job_plan: the largest batch that fits every process
    roles: pd.DataFrame = field(default_factory=pd.DataFrame)  # job_roles: each process's roles


def as_findings(findings) -> list:
    """A report's findings as Finding records (a DataFrame of findings from a
    report of before they were records: its words become the facts)."""
    if isinstance(findings, list):
        return list(findings)
    if findings is None or len(findings) == 0:
        return []
    out = []
    for r in findings.to_dict(orient="records"):
        saving = r.get("saving_bytes")
        saving = None if saving is None or saving != saving or saving is pd.NA else int(saving)
        facts = {k: r[k] for k in ("message", "fix", "evidence") if isinstance(r.get(k), str)}
        out.append(Finding(rule=str(r.get("rule")), severity=str(r.get("severity")), site=str(r.get("site") or ""),
                           saving_bytes=saving, facts=facts))
    return out


def process_result(process: int, report) -> ProcessResult:
    """The small part of a process's Report the job report needs."""
    rows = report.peak_sites.rows if report.peak_sites is not None else pd.DataFrame()
    if rows.empty or "site" not in rows:
        sites = _empty_sites()
    else:
        sites = rows[["site", "bytes", "count"]].reset_index(drop=True)
    what = report.roles.by_role if report.roles is not None else pd.DataFrame()
    roles = [[str(d), str(r), int(b), str(o)] for d, r, b, o in
             zip(what.get("device", ()), what.get("role", ()), what.get("bytes", ()), what.get("largest_owner", ()))]
    return ProcessResult(process, sites, as_findings(report.findings), report.headline.as_dict(), list(report.warnings),
                         roles=roles, plan=_plan_rows(report.plan))


def _plan_rows(plan) -> list:
    """Each planned function and variant's largest batch on all the process's
    devices (the smallest of its devices' answers), where --device-memory asked."""
    if plan is None or plan.device_bytes is None or plan.models.empty:
        return []
    from jaxmemprof.analysis.advice.plan import JOB

    m = plan.models
    rows = []
    for (fn, variant), g in m.groupby(["function", "variant"], sort=False):
        row = g[g["device"] == JOB] if (g["device"] == JOB).any() else g
        largest = [int(v) for v in row["largest_batch"] if pd.notna(v)]
        settings = [int(v) for v in row["largest_batch_with_settings"] if pd.notna(v)]
        rows.append([str(fn), str(variant), min(largest) if largest else None, min(settings) if settings else None])
    return rows


def job_plan(results: dict) -> pd.DataFrame:
    """``function, variant, largest_batch, largest_batch_with_settings,
    process``: for each planned function and variant, the largest batch
    that fits every process's devices (the smallest process's answer; none
    where one process fits none) and the process that limits it; from run
    --plan runs and report --device-memory."""
    by_key: dict = {}
    for n, r in sorted(results.items()):
        for fn, variant, largest, settings in r.plan:
            by_key.setdefault((fn, variant), []).append((largest, settings, n))
    rows = []
    for (fn, variant), vals in by_key.items():
        largest, _, limits = min(vals, key=lambda x: (-1 if x[0] is None else x[0], x[2]))
        settings = [s for _, s, _ in vals]
        rows.append((fn, variant, largest, None if None in settings else min(settings), limits))
    return pd.DataFrame(rows, columns=["function", "variant", "largest_batch", "largest_batch_with_settings",
                                       "process"])


def _empty_sites() -> pd.DataFrame:
    return pd.DataFrame({"site": pd.Series(dtype=object), "bytes": pd.Series(dtype=np.int64),
                         "count": pd.Series(dtype=np.int64)})


def _analyse(args) -> ProcessResult:
    """One process, analysed as a run of its own (runs in a worker)."""
    process, path, options = args
    from jaxmemprof.analysis.attributed import attribute
    from jaxmemprof.analysis.report import build_report
    from jaxmemprof.errors import InputError
    from jaxmemprof.store.reader import load_run

    try:
        run = load_run(path)
        rep = build_report(attribute(run, replace(options, top_sites=max(options.top_sites, PEAK_SITES_KEPT))))
        return process_result(process, rep)
    except InputError as exc:
        return ProcessResult(process, _empty_sites(), [], {}, [], error=exc.problem)
    except Exception as exc:  # one process's damage, or a bug: the other processes are still reported
        return ProcessResult(process, _empty_sites(), [], {}, [],
                             error=f"could not be analysed ({type(exc).__name__}: {' '.join(str(exc).split())[:300]})")


def analyse_processes(job: Job, options: Options, *, workers: int | None = None, progress=None) -> dict:
    """process -> ProcessResult for every readable process of ``job``, each
    attributed under ``options`` as a run of its own (paths relative to the
    directory it was recorded in: see Options). ``workers``: worker
    processes (default: $JAXMEMPROF_WORKERS, else the CPUs, up to 8, when the
    job has PARALLEL_FROM processes or more; 1: in this process)."""
    results = {}
    summary_options = default_options(options)
    todo = []
    for p in job.processes:
        if p.error is not None or p.snapshots.empty:
            continue
        r = read_process_result(p.process, p.path, summary_options) if summary_options is not None and p.finished else None
        if r is not None:
            results[p.process] = r
            if progress is not None:
                progress()
        else:
            todo.append((p.process, str(p.path), options))
    if workers is None:
        env = os.environ.get(WORKERS_ENV, "").strip()
        if env.isdigit() and int(env) > 0:
            workers = int(env)
        else:
            workers = min(os.cpu_count() or 1, 8) if len(todo) >= PARALLEL_FROM else 1
    if workers > 1 and len(todo) > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        method = "fork" if "fork" in mp.get_all_start_methods() else None
        with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context(method)) as pool:
            for r in pool.map(_analyse, todo, chunksize=max(1, len(todo) // (workers * 4))):
                results[r.process] = r
                if progress is not None:
                    progress()
    else:
        for args in todo:
            r = _analyse(args)
            results[r.process] = r
            if progress is not None:
                progress()
    return results


def _rank(f: Finding) -> tuple:
    order = {s: i for i, s in enumerate(SEVERITIES)}
    return (order.get(f.severity, len(SEVERITIES)), -(f.saving_bytes if f.saving_bytes is not None else -1))


def merge_findings(results: dict) -> list:
    """One JobFinding per rule and site over the processes."""
    groups: dict = {}
    for n in sorted(results):
        for f in results[n].findings:
            groups.setdefault((f.rule, f.site or ""), []).append((n, f))
    out = []
    for members in groups.values():
        best = min(members, key=lambda m: (_rank(m[1]), m[0]))[1]
        savings = [f.saving_bytes for _, f in members if f.saving_bytes is not None]
        out.append(JobFinding(best, tuple(sorted({n for n, _ in members})), sum(savings) if savings else None))
    return ranked_job_findings(out)


def ranked_job_findings(findings: list) -> list:
    """Most severe first, then those of more processes, then the largest saving."""
    return sorted(findings, key=lambda j: (_rank(j.finding)[0], -len(j.processes), _rank(j.finding)[1],
                                           j.rule, j.site))


def build_job_report(job: Job, results: dict, timeline: JobTimeline | None = None) -> JobReport:
    """The job's report from its processes' summaries and their own reports."""
    tl = timeline if timeline is not None else job_timeline(job)
    rows = []
    for p in job.processes:
        snap, peak = p.peak
        s = p.snapshots
        at = tl.at_peak.get(p.process)
        at_bytes = int(s.loc[s["snapshot"] == at, "live_bytes"].iloc[0]) if at is not None else 0
        peak_t = float(s.loc[s["snapshot"] == snap, "t"].iloc[0]) if snap is not None else None
        r = results.get(p.process)
        m = p.manifest
        devs = m.get("devices") if isinstance(m.get("devices"), list) else []
        names = [str(d.get("name")) for d in devs if isinstance(d, dict) and d.get("name") is not None]
        rows.append({
            "process": p.process, "host": p.host, "devices": ", ".join(names), "finished": bool(p.finished),
            "running": bool(p.running),
            "exit_status": m.get("exit_status"), "ended_by": m.get("ended_by"), "snapshots": int(len(s)),
            "peak_bytes": int(peak), "peak_t": peak_t, "peak_snapshot": snap, "at_job_peak_bytes": at_bytes,
            "at_job_peak_snapshot": at, "clock_offset_s": float(p.offset_s),
            "last_t": float(s["t"].iloc[-1]) if len(s) else None,
            "error": p.error or (r.error if r is not None else None),
        })
    procs = pd.DataFrame(rows)
    for c in ("peak_snapshot", "at_job_peak_snapshot"):
        procs[c] = procs[c].astype("Int64")
    sites = [r.peak_sites.assign(process=n) for n, r in sorted(results.items()) if not r.peak_sites.empty]
    peak_sites = (pd.concat(sites, ignore_index=True)[["process", "site", "bytes", "count"]] if sites else
                  pd.DataFrame({"process": pd.Series(dtype=np.int64), "site": pd.Series(dtype=object),
                                "bytes": pd.Series(dtype=np.int64), "count": pd.Series(dtype=np.int64)}))
    merged = ranked_job_findings(unfinished(procs) + imbalance(procs, peak_sites) + merge_findings(results))
    warnings = list(job.warnings)
    for n, r in sorted(results.items()):
        if r.error:
            warnings.append(f"process {n}: {r.error}")
        warnings += [f"process {n}: {w}" for w in r.warnings]
    for p in job.processes:
        if p.error:
            warnings.append(f"process {p.process}: {p.error}")
    return JobReport(
        path=str(job.path), alignment=job.alignment, process_count=len(job.processes),
        job_peak_bytes=int(tl.peak_bytes), job_peak_t=tl.peak_t, processes=procs.drop(columns=["last_t"]),
        peak_sites=peak_sites, findings=merged, timeline=tl.totals,
        unfinished=[int(x) for x in procs.loc[~procs["finished"], "process"]],
        per_process=results, warnings=warnings, plan=job_plan(results), roles=job_roles(results),
    )


def job_roles(results: dict) -> pd.DataFrame:
    """``process, device, role, bytes, largest_owner``: each process's roles
    at its largest sampled jitted call (analysis/roles.py)."""
    rows = [(n, *r) for n, result in sorted(results.items()) for r in result.roles]
    return pd.DataFrame(rows, columns=["process", "device", "role", "bytes", "largest_owner"])


# -- each process's summary, written where it ran ----------------------------------------

# A process of a job writes PROCESS_RESULT into its directory as its run ends
# (capture/session.py): what the job report needs of it, analysed with the
# default options, so that a report over thousands of processes reads one
# small file per process instead of analysing each (their hosts did it at
# the end of their runs, side by side). Used only while the journal is the
# one it was made from and the report's options are the defaults.
PROCESS_RESULT_SCHEMA = 3  # 2: with each process's roles; 3: the headline, its true peaks named as in analysis/headline.py
SUMMARY_MAX_ARRAYS = 200_000  # past this, the summary is left to report (as run's closing summary is)


SUMMARY_OPTIONS = Options(top_sites=PEAK_SITES_KEPT)  # what a process's own summary is made with


def default_options(options: Options) -> dict | None:
    """The options a summary is made with, when the report's are those
    (None: they differ, each process is analysed)."""
    if options.top_sites > PEAK_SITES_KEPT or replace(options, top_sites=PEAK_SITES_KEPT) != SUMMARY_OPTIONS:
        return None
    return {"top_sites": SUMMARY_OPTIONS.top_sites, "steps": SUMMARY_OPTIONS.steps}


def _journal_stamp(path) -> dict | None:
    from jaxmemprof.store import layout

    try:
        st = os.stat(os.path.join(path, layout.JOURNAL))
    except OSError:
        return None
    return {"size": int(st.st_size), "mtime_ns": int(st.st_mtime_ns)}


def _plain(o):
    if hasattr(o, "item") and not isinstance(o, (list, dict, tuple, str)):
        try:
            return o.item()
        except (TypeError, ValueError):
            return str(o)
    if isinstance(o, (tuple, set, frozenset)):
        return list(o)
    return str(o)


def write_process_result(path) -> bool:
    """Analyse the finished run in ``path`` and write its PROCESS_RESULT.
    False (and nothing written) when it is too large to analyse now."""
    import json
    from dataclasses import asdict
    from pathlib import Path

    from jaxmemprof._version import __version__
    from jaxmemprof.analysis.attributed import attribute
    from jaxmemprof.analysis.report import build_report
    from jaxmemprof.store import layout
    from jaxmemprof.store.reader import load_run

    run = load_run(path)
    if len(run.arrays) > SUMMARY_MAX_ARRAYS:
        return False
    rep = build_report(attribute(run, SUMMARY_OPTIONS))
    r = process_result(0, rep)
    stamp = _journal_stamp(path)
    if stamp is None:
        return False
    doc = {
        "schema": PROCESS_RESULT_SCHEMA, "jaxmemprof_version": __version__, "journal": stamp,
        "options": {"top_sites": SUMMARY_OPTIONS.top_sites, "steps": SUMMARY_OPTIONS.steps},
        "peak_sites": [[str(s), int(b), int(c)] for s, b, c in zip(r.peak_sites["site"], r.peak_sites["bytes"],
                                                                     r.peak_sites["count"])],
        "findings": [asdict(f) for f in r.findings],
        "headline": r.headline, "warnings": [str(w) for w in r.warnings], "roles": r.roles,
    }
    data = json.dumps(doc, default=_plain, allow_nan=False, sort_keys=True).encode()
    layout.write_atomic(Path(path) / PROCESS_RESULT, data)
    return True


def read_process_result(process: int, path, options: dict) -> ProcessResult | None:
    """The ProcessResult a process's PROCESS_RESULT holds, or None when it is
    missing, damaged, of another version, made with other options, or older
    than the journal (the file is untrusted input: every field is checked)."""
    from pathlib import Path

    from jaxmemprof._version import __version__
    from jaxmemprof.store.reader import read_manifest

    try:
        doc = read_manifest(Path(path) / PROCESS_RESULT)
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if (doc.get("schema") != PROCESS_RESULT_SCHEMA or doc.get("jaxmemprof_version") != __version__
            or doc.get("options") != options or doc.get("journal") != _journal_stamp(path)):
        return None
    try:
        rows = doc["peak_sites"]
        ok = isinstance(rows, list) and all(
            isinstance(r, list) and len(r) == 3 and isinstance(r[0], str)
            and all(isinstance(x, int) and not isinstance(x, bool) for x in r[1:]) for r in rows)
        if not ok:
            return None
        sites = pd.DataFrame(rows, columns=["site", "bytes", "count"]) if rows else _empty_sites()
        sites["bytes"] = sites["bytes"].astype(np.int64)
        sites["count"] = sites["count"].astype(np.int64)
        names = {f.name for f in dataclass_fields(Finding)}
        findings = []
        for f in doc["findings"]:
            if not isinstance(f, dict) or set(f) - names or not isinstance(f.get("rule"), str) \
                    or not isinstance(f.get("severity"), str) or not isinstance(f.get("site", ""), str):
                return None
            s = f.get("saving_bytes")
            if s is not None and (not isinstance(s, int) or isinstance(s, bool)):
                return None
            if "facts" in f and not isinstance(f["facts"], dict):
                return None
            findings.append(Finding(**f))
        head, warnings, roles = doc["headline"], doc["warnings"], doc["roles"]
        if not isinstance(head, dict) or not isinstance(warnings, list):
            return None
        if not isinstance(roles, list) or not all(
                isinstance(r, list) and len(r) == 4 and isinstance(r[0], str) and isinstance(r[1], str)
                and isinstance(r[2], int) and not isinstance(r[2], bool) and isinstance(r[3], str) for r in roles):
            return None
    except (KeyError, TypeError, ValueError):
        return None
    return ProcessResult(process, sites, findings, head, [str(w) for w in warnings], roles=roles)
