"""A multi-process job's report: terminal, JSON and CSV (analysis/job.py
computes it; this only formats it)."""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd
from rich.console import Console
from rich.table import Table
from rich.text import Text

from jaxmemprof.analysis.job import JobReport
from jaxmemprof.analysis.documents import JobDocument
from jaxmemprof.analysis.page import SITES_PER_PROCESS
from jaxmemprof.render.escape import safe
from jaxmemprof.render.findings import saves, words
from jaxmemprof.render.json import records
from jaxmemprof.render.report import render_findings, sparkline
from jaxmemprof.analysis.rules import Words
from jaxmemprof.store.job import who
from jaxmemprof.store.job import process_list_text
from jaxmemprof.units import counted, format_bytes

JOB_FILES = ("processes.csv", "job_timeline.csv", "job_peak_sites.csv", "job_findings.csv")


def _ended(row) -> str:
    if not row["finished"]:
        return "still running" if row.get("running") else "killed"
    how, status = row["ended_by"], row["exit_status"]
    known = status is not None and status == status  # a column with a missing status holds floats
    return f"{how or 'exit'} {int(status)}" if known else str(how or "exit")


def render_job_report(doc: JobDocument, con: Console) -> None:
    """The job's report (``doc``: analysis/page.py ``job_document``); with
    ``explain``, every finding in full (its message, fix and evidence), as
    ``report --explain`` says a run's."""
    rep, top, explain = doc.report, doc.top, doc.explain
    p = rep.processes
    hosts = sorted(h for h in p["host"].unique() if h)
    con.print(Text(f"job {safe(rep.path)}: {counted(rep.process_count, 'process')}"
                   + (f" on {counted(len(hosts), 'host')}" if hosts else "")
                   + f"; clocks aligned on {safe(rep.alignment)}"))
    for w in rep.warnings[:10]:
        con.print(Text(f"warning: {safe(w)}", style="yellow"))
    if len(rep.warnings) > 10:
        con.print(Text(f"... {counted(len(rep.warnings) - 10, 'more warning')} (--json has them all)", style="yellow"))
    if rep.job_peak_t is None:
        con.print(Text("no process took a snapshot (did the program use JAX?)"))
    else:
        con.print(Text(f"job peak: {format_bytes(rep.job_peak_bytes)} at {rep.job_peak_t:.2f} s "
                       "(the sum over processes at aligned times)"))
        con.print(Text(f"job timeline: {sparkline(rep.timeline['live_bytes'])}"))
    if rep.unfinished:
        con.print(Text(f"did not finish: {who(rep.unfinished)}", style="bold red"))

    con.print()
    con.print(Text("processes, by peak", style="bold underline"))
    t = Table(box=None, pad_edge=False, collapse_padding=True, header_style="bold")
    for c in ("process", "host", "peak", "peak at", "at job peak", "snapshots", "ended"):
        t.add_column(c, justify="left" if c in ("host", "ended") else "right")
    order = doc.by_peak
    shown = order.head(top)
    for _, r in shown.iterrows():
        t.add_row(str(int(r["process"])), safe(r["host"]), format_bytes(int(r["peak_bytes"])),
                  "-" if r["peak_t"] is None or r["peak_t"] != r["peak_t"] else f"{r['peak_t']:.2f} s",
                  format_bytes(int(r["at_job_peak_bytes"])), str(int(r["snapshots"])), safe(_ended(r)))
    con.print(t)
    if len(order) > len(shown):
        rest = order.iloc[len(shown):]
        con.print(Text(f"... {counted(len(rest), 'more process')} (peaks {format_bytes(int(rest['peak_bytes'].min()))} to "
                       f"{format_bytes(int(rest['peak_bytes'].max()))}; median of all "
                       f"{format_bytes(int(p['peak_bytes'].median()))}); --top N shows more"))

    ps = rep.peak_sites
    if not ps.empty:
        con.print()
        con.print(Text(f"what held each process's peak (top {SITES_PER_PROCESS} sites; processes alike are one line)",
                       style="bold underline"))
        ranked = doc.alike_sites
        for key, procs in ranked[:top]:
            label = who(procs)
            held = ", ".join(f"{format_bytes(int(b))} {site}" for site, b in key) or "nothing"
            con.print(Text(f"  {safe(label)}: {safe(held)}"))
        if len(ranked) > top:
            con.print(Text(f"  ... {counted(len(ranked) - top, 'more kind')} of process; --top N shows more"))

    roles = rep.roles
    if not roles.empty:
        con.print()
        con.print(Text("what the memory is in each process (its largest jitted call, busiest device; processes "
                       "alike are one line)", style="bold underline"))
        for key, procs in doc.alike_roles[:top]:
            con.print(Text(f"  {safe(who(procs))}: " + ", ".join(f"{format_bytes(int(b))} {r}" for r, b in key)))

    plan = rep.plan
    if not plan.empty:
        con.print()
        con.print(Text("plan (run --plan): the largest batch that fits every process", style="bold underline"))
        for r in plan.itertuples():
            largest = "none fits" if pd.isna(r.largest_batch) else f"{int(r.largest_batch):,}"
            con.print(Text(f"  {safe(r.function)} {safe(r.variant)}: {largest} (process {r.process} limits it)"
                           + ("" if pd.isna(r.largest_batch_with_settings) else
                              f"; {int(r.largest_batch_with_settings):,} with the fraction set")))

    f = rep.findings
    con.print()
    if not f:
        con.print(Text("findings: none", style="bold underline"))
        return
    con.print(Text(f"findings ({len(f)}), merged over processes", style="bold underline"))
    of = {id(j.finding): j for j in f}
    render_findings([j.finding for j in f], con, explain=explain, words_of=lambda x: _job_words(of[id(x)], explain),
                    where_of=lambda x: who(of[id(x)].processes))


def _job_words(j, explain: bool) -> Words:
    """A job finding's words, with what it saves over all its processes in full."""
    w = words(j.finding)
    if explain and j.saving_bytes_total is not None and len(j.processes) > 1:
        return replace(w, evidence=(w.evidence + "; " if w.evidence else "")
                       + f"over the {len(j.processes)} processes it saves {format_bytes(j.saving_bytes_total)}")
    return w


def findings_table(findings: list) -> pd.DataFrame:
    """The job's findings as rows (job_findings.csv, report --json)."""
    rows = []
    for j in findings:
        w = words(j.finding)
        f = j.finding
        rows.append({"rule": f.rule, "case": getattr(f, "case", ""), "severity": f.severity, "site": f.site,
                     "saving_bytes": f.saving_bytes, "saves": saves(f, w), "saving_bytes_total": j.saving_bytes_total,
                     "processes": process_list_text(j.processes), "process_count": len(j.processes),
                     "message": w.message, "fix": w.fix, "evidence": w.evidence, "brief": w.brief,
                     "brief_fix": w.brief_fix, "facts": json.dumps(getattr(f, "facts", {}), sort_keys=True, default=str),
                     "process_list": list(j.processes)})
    cols = ["rule", "case", "severity", "site", "saving_bytes", "saves", "saving_bytes_total", "processes",
            "process_count",
            "message", "fix", "evidence", "brief", "brief_fix", "facts", "process_list"]
    df = pd.DataFrame(rows, columns=cols)
    for c in ("saving_bytes", "saving_bytes_total"):
        df[c] = df[c].astype("Int64")
    return df


def job_document(rep: JobReport) -> dict:
    """report --json on a job: the job's figures, then every process's row,
    what held each one's peak, the job's timeline and the merged findings."""
    return {
        "command": "report",
        "inputs": [rep.path],
        "job": {"path": rep.path, "processes": rep.process_count, "alignment": rep.alignment,
                "peak_bytes": rep.job_peak_bytes, "peak_t": rep.job_peak_t, "unfinished": rep.unfinished},
        "warnings": list(rep.warnings),
        "processes": records(rep.processes),
        "peak_sites": records(rep.peak_sites),
        "timeline": records(rep.timeline),
        "roles": records(rep.roles),
        "plan": records(rep.plan),
        "findings": [dict(r, facts=json.loads(r["facts"])) for r in records(findings_table(rep.findings))],
    }


def job_tables(rep: JobReport) -> dict[str, pd.DataFrame]:
    """The job's own CSV files (JOB_FILES), besides the processes' tables."""
    f = findings_table(rep.findings).drop(columns=["process_list"])
    return {
        "processes.csv": rep.processes,
        "job_timeline.csv": rep.timeline,
        "job_peak_sites.csv": rep.peak_sites,
        "job_findings.csv": f,
    }


def with_process(tables: dict[str, pd.DataFrame], process: int) -> dict[str, pd.DataFrame]:
    """Each table with a ``process`` column: first, or where the table has
    one already (arrays.csv), set to ``process``."""
    out = {}
    for name, rows in tables.items():
        rows = rows.copy()
        if "process" in rows.columns:
            rows["process"] = process
        else:
            rows.insert(0, "process", process)
        rows["process"] = rows["process"].astype("int64")
        out[name] = rows
    return out
