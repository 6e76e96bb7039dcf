"""A multi-process job's own rules: ``imbalance`` and ``unfinished`` (made by
analysis/job.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jaxmemprof.rules.base import Rule, Words
from jaxmemprof.store.job import process_list_text
from jaxmemprof.units import format_bytes

if TYPE_CHECKING:
    from jaxmemprof.analysis.findings import Finding


def who(processes, most: int = 8) -> str:
    """``processes 0–3, 7``; a long list is cut after ``most`` parts (the
    terminal's; JSON and CSV have them all)."""
    parts = process_list_text(processes).split(", ")
    text = ", ".join(parts) if len(parts) <= most + 2 else ", ".join(parts[:most]) + f", … ({len(processes)} in all)"
    return f"process{'es' if len(processes) > 1 else ''} {text}"


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
    "imbalance", made_by="analysis/job.py",
    summary="A job's process holds much more than the median process at its peak (job only; analysis/job.py).",
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
    "unfinished", made_by="analysis/job.py",
    summary="Processes of a job that did not finish (job only; analysis/job.py).",
    facts={"": ("processes",)},
    meanings={"processes": ("One object per process that did not finish: `process, running` (its recording "
                            "process still holds it), `snapshots, last_t` (its last snapshot, on the job's clock) and `error` (why nothing could be read, if so).")},
    words={"": _unfinished},
)

RULES = (IMBALANCE, UNFINISHED,)
