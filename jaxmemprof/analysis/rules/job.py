"""A multi-process job's own rules: ``imbalance`` and ``unfinished``, found
here from the job's processes (analysis/job.py ``build_job_report`` runs
them)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from jaxmemprof.analysis.findings import Finding, JobFinding
from jaxmemprof.analysis.rules.base import Rule, Words
from jaxmemprof.store.job import who
from jaxmemprof.units import format_bytes

# A process is imbalanced when its peak exceeds the median process's by this
# fraction of the median, and by at least IMBALANCE_MIN_BYTES.
IMBALANCE_FRACTION = 0.25
IMBALANCE_MIN_BYTES = 1 << 20


def _imbalance(f: Finding, x: dict) -> Words:
    n, m = x["process"], x["median_process"]
    sites = x.get("sites") or []
    at = ", ".join(f"{s['site']} ({format_bytes(s['delta_bytes'], signed=True)})" for s in sites)
    heavy = x.get("processes") or [n]
    many = (f"{len(heavy)} of {x.get('process_count')} processes hold up to " if len(heavy) > 1 else
            f"Process {n} holds ")
    brief = (f"{many}{format_bytes(x['peak_bytes'])} at their peak{'s' if len(heavy) > 1 else ''}, "
             f"{format_bytes(x['excess_bytes'])} more than the median process ({format_bytes(x['median_bytes'])})"
             + (f": the difference is at {at}" if at else "") + ".") if len(heavy) > 1 else (
             f"Process {n} holds {format_bytes(x['peak_bytes'])} at its peak, {format_bytes(x['excess_bytes'])} "
             f"more than the median process ({format_bytes(x['median_bytes'])})"
             + (f": the difference is at {at}" if at else "") + ".")
    where = ", ".join(s["site"] for s in sites) or "the sites that differ"
    brief_fix = (f"Make what {'those processes keep' if len(heavy) > 1 else f'process {n} keeps'} at {where} match "
                 "the other processes, or shard it across them.")
    fix = (f"Every process of an SPMD job needs the device memory of the largest one. Find why process {n} keeps "
           f"more at {where} (an array made only on one process, e.g. for logging or evaluation, or an uneven "
           "shard of the data) and make it match the others, or shard it across the processes.")
    evidence = (f"peaks per process: median {format_bytes(x['median_bytes'])}, min {format_bytes(x['min_bytes'])}, "
                f"max {format_bytes(x['peak_bytes'])} (process {n}); at the peaks of process {n} and process {m} "
                f"({format_bytes(x['median_process_bytes'])}, the nearest the median): "
                + ("; ".join(f"{s['site']}: {format_bytes(s['bytes'])} vs {format_bytes(s['median_process_bytes'])}"
                             for s in sites) or "no site differs"))
    return Words(brief, brief_fix, brief, fix, evidence)


def _unfinished(f: Finding, x: dict) -> Words:
    ps = x.get("processes") or []
    many = len(ps) > 1
    live = {bool(p.get("running")) for p in ps}
    state = "still running" if live == {True} else "killed" if live == {False} else "killed, or still running"
    brief = (f"{who([p['process'] for p in ps]).capitalize()} did not finish ({state}): "
             f"{'their' if many else 'its'} data ends at the last snapshot committed; the others' are complete.")
    brief_fix = "See why it ended: its log, the launcher's exit codes, the kernel's OOM killer."
    evidence = "; ".join(
        f"process {p['process']}{' (still running)' if p.get('running') else ''}: " + (p["error"] if p.get("error") else
                                       f"{p['snapshots']} snapshot(s)" + (f", the last at {p['last_t']:.2f} s"
                                                                          if p.get("last_t") is not None else ""))
        for p in ps)
    return Words(brief, brief_fix, brief, brief_fix, evidence)


IMBALANCE = Rule(
    "imbalance", made_by="analysis/rules/job.py",
    finds="A job's process holds much more than the median process at its peak (job only; analysis/rules/job.py).",
    facts={"": ("process", "peak_bytes", "median_bytes", "min_bytes", "median_process", "median_process_bytes",
                "excess_bytes", "sites", "processes", "process_count")},
    meanings={"process": "The process with the highest peak.",
              "peak_bytes": "Its peak.",
              "median_bytes": "The median process's peak (the lower median: a peak some process has).",
              "min_bytes": "The lowest peak of any process.",
              "median_process": "The process whose peak is nearest the median.",
              "median_process_bytes": "Its peak.",
              "excess_bytes": "`peak_bytes - median_bytes`.",
              "sites": ("The (up to 3) sites whose bytes at the two peaks differ most: objects of `site, bytes, "
                        "median_process_bytes, delta_bytes`."),
              "processes": ("Every process whose peak exceeds the median by the threshold (the finding applies to "
                            "them all)."),
              "process_count": "The processes of the job with snapshots."},
    words={"": _imbalance},
)


UNFINISHED = Rule(
    "unfinished", made_by="analysis/rules/job.py",
    finds="Processes of a job that did not finish (job only; analysis/rules/job.py).",
    facts={"": ("processes",)},
    meanings={"processes": ("One object per process that did not finish: `process, running` (its recording "
                            "process still holds it), `snapshots, last_t` (its last snapshot, on the job's clock) and `error` (why nothing could be read, if so).")},
    words={"": _unfinished},
)

def imbalance(processes: pd.DataFrame, peak_sites: pd.DataFrame) -> list:
    """The ``imbalance`` finding, when the process with the highest peak
    holds more than the median process (the lower median) by IMBALANCE_FRACTION of it
    (and IMBALANCE_MIN_BYTES). Facts: ``process`` (the highest),
    ``peak_bytes``, ``median_bytes``, ``min_bytes``, ``median_process`` (the
    process nearest the median) and its ``median_process_bytes``, ``excess_bytes``,
    ``sites``: the sites whose bytes at the two peaks differ most (``site,
    bytes, median_process_bytes, delta_bytes``, largest first, those of at
    least 1 % of the excess), ``processes``: every process past the
    threshold (the finding applies to them all), ``process_count``."""
    p = processes[processes["snapshots"] > 0]
    if len(p) < 2:
        return []
    peaks = p["peak_bytes"].to_numpy(np.int64)
    # The lower median: a peak some process really has (of two processes, the smaller).
    median = float(np.sort(peaks)[(len(peaks) - 1) // 2])
    hi = p.iloc[int(peaks.argmax())]
    excess = int(hi["peak_bytes"]) - int(median)
    threshold = max(IMBALANCE_FRACTION * median, IMBALANCE_MIN_BYTES)
    if excess < threshold:
        return []
    # Every process past the threshold; the figures are the highest one's.
    heavy = sorted(int(x) for x in p.loc[p["peak_bytes"] - median >= threshold, "process"])
    others = p[~p["process"].isin(heavy)]
    mid = others.iloc[int(np.abs(others["peak_bytes"].to_numpy(float) - median).argmin())]
    a = peak_sites[peak_sites["process"] == hi["process"]].groupby("site")["bytes"].sum()
    b = peak_sites[peak_sites["process"] == mid["process"]].groupby("site")["bytes"].sum()
    d = a.sub(b, fill_value=0).sort_values(ascending=False, kind="stable")
    d = d[d >= max(1, 0.01 * excess)].head(3)  # the sites that make the difference, not every byte
    sites: list[dict[str, Any]] = [
        {"site": str(site), "bytes": int(a.get(site, 0)), "median_process_bytes": int(b.get(site, 0)),
         "delta_bytes": int(v)} for site, v in d.items()]
    n_hi = int(hi["process"])
    facts = {"process": n_hi, "peak_bytes": int(hi["peak_bytes"]), "median_bytes": int(median),
             "min_bytes": int(peaks.min()), "median_process": int(mid["process"]),
             "median_process_bytes": int(mid["peak_bytes"]), "excess_bytes": excess, "sites": sites,
             "processes": heavy, "process_count": int(len(p))}
    severity = "high" if hi["peak_bytes"] >= 2 * median else "medium"
    f = Finding(rule="imbalance", severity=severity, site=sites[0]["site"] if sites else "", saving_bytes=excess,
                facts=facts)
    return [JobFinding(f, tuple(heavy), excess)]


def unfinished(processes: pd.DataFrame) -> list:
    """The ``unfinished`` finding: the processes that did not finish (killed,
    or still running). Facts: ``processes``, a list of ``process, running,
    snapshots, last_t`` (the last snapshot committed, on the job's clock)
    and ``error`` (why nothing could be read, if so)."""
    rows = processes[~processes["finished"].astype(bool)]
    if rows.empty:
        return []
    facts = {"processes": [{"process": int(r.process), "running": bool(r.running), "snapshots": int(r.snapshots),
                            "last_t": None if r.last_t is None or r.last_t != r.last_t else float(r.last_t),
                            "error": r.error if isinstance(r.error, str) else None}
                           for r in rows.itertuples()]}
    f = Finding(rule="unfinished", severity="high", site="", saving_bytes=None, facts=facts)
    return [JobFinding(f, tuple(int(x) for x in rows["process"]), None)]


RULES = (IMBALANCE, UNFINISHED,)
