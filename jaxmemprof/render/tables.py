"""The tables ``report --json`` and ``export --csv`` carry: the same rows the
terminal report shows, every one of them."""

from __future__ import annotations

import pandas as pd

from jaxmemprof.analysis.advice.plan import MODEL_COLUMNS, PLAN_COLUMNS
from jaxmemprof.analysis.advice.targets import LINE_COLUMNS, POINT_COLUMNS, TARGET_COLUMNS
from jaxmemprof.analysis.report import Report
from jaxmemprof.facts.devices import display
from jaxmemprof.render import findings as said
from jaxmemprof.render import notes
from jaxmemprof.render.json import records

EXPORT_FILES = (
    "timeline.csv", "devices.csv", "sites.csv", "arrays.csv", "lifetimes.csv", "reuse.csv",
    "reuse_devices.csv", "leaks.csv", "recompiles.csv", "jit.csv", "jit_peak.csv", "jit_buffers.csv",
    "jit_curve.csv", "roles.csv", "owners.csv", "plan.csv", "plan_models.csv", "targets.csv", "target_points.csv",
    "target_lines.csv", "holders.csv", "findings.csv",
)


def largest_signature(t: pd.DataFrame) -> pd.DataFrame:
    """The rows of each function's largest signature, which the report and
    the page show (jit_peak.csv, jit_buffers.csv and jit_curve.csv hold every
    signature's)."""
    return t[t["largest_signature"].astype(bool)] if "largest_signature" in t.columns and len(t) else t


def export_tables(rep: Report) -> dict[str, pd.DataFrame]:
    """File name -> rows, in EXPORT_FILES order. A run without per-array data
    (a directory of .prof files) has no arrays or reuse; its lifetimes.csv
    holds the estimated births and deaths per site."""
    tl = rep.timeline
    tables = {
        "timeline.csv": tl.totals,
        "devices.csv": tl.devices,
        "sites.csv": tl.sites,
        "arrays.csv": rep.arrays,
        "lifetimes.csv": rep.lifetimes if rep.has_arrays else rep.churn,
        "reuse.csv": rep.reuse_by_site,
        "reuse_devices.csv": rep.reuse_by_device,
        "leaks.csv": rep.leaks,
        "recompiles.csv": rep.recompiles,
        "jit.csv": rep.jit_memory,
        "jit_peak.csv": rep.jit_peak,
        "jit_buffers.csv": rep.jit_buffers,
        "jit_curve.csv": rep.jit_curve,
        "roles.csv": rep.roles.by_role,
        "owners.csv": rep.roles.owners,
        "plan.csv": rep.plan.points if rep.plan is not None else _empty(PLAN_COLUMNS),
        "plan_models.csv": rep.plan.models if rep.plan is not None else _empty(MODEL_COLUMNS),
        "targets.csv": rep.targets.rows if rep.targets is not None else _empty(TARGET_COLUMNS),
        "target_points.csv": rep.targets.points if rep.targets is not None else _empty(POINT_COLUMNS),
        "target_lines.csv": rep.targets.lines if rep.targets is not None else _empty(LINE_COLUMNS),
        "holders.csv": rep.holders,
        "findings.csv": said.table(rep.findings),
    }
    return {name: tables[name] for name in EXPORT_FILES}


def report_document(rep: Report) -> dict:
    tl = rep.timeline
    return {
        "command": "report",
        "inputs": [rep.path],
        "warnings": list(rep.warnings),
        "summary": rep.headline.as_dict(),
        "manifest": _manifest(rep.manifest),
        "peak_sites": records(rep.peak_sites.rows) if rep.peak_sites is not None else [],
        "timeline": records(tl.totals),
        "devices": records(tl.devices),
        "sites": records(tl.sites),
        "executables": records(tl.executables),
        "markers": records(tl.markers),
        "lifetimes": records(rep.lifetimes if rep.has_arrays else rep.churn),
        "lifetimes_estimated": not rep.has_arrays,
        "arrays": records(rep.arrays),
        "reuse": {"by_device": records(rep.reuse_by_device), "by_site": records(rep.reuse_by_site),
                  "buffers": rep.reuse_buffers, "unknown_addresses": rep.reuse_unknown_addresses,
                  "note": notes.reuse_note(rep)},
        "leaks": records(rep.leaks),
        "recompiles": records(rep.recompiles),
        "jit_memory": records(rep.jit_memory),
        "jit_peak": records(rep.jit_peak),
        "jit_buffers": records(rep.jit_buffers),
        "jit_curve": records(rep.jit_curve),
        "roles": {"where": rep.roles.where, "function": rep.roles.function, "peak_bytes": rep.roles.peak_bytes,
                  "by_role": records(rep.roles.by_role), "owners": records(rep.roles.owners)},
        "fit": None if rep.fit is None else {k: v for k, v in vars(rep.fit).items()},
        "plan": plan_document(rep.plan),
        "targets": targets_document(rep.targets),
        "holders": records(rep.holders),
        "outside_jit": rep.outside_jit,  # operations run outside jit between jitted calls, by line ('' where none)
        "findings": said.records(rep.findings),
    }


def _manifest(manifest):
    """The run's manifest, its devices named as every output names them
    (jaxmemprof/facts/devices.py: ``tpu:0``); the rest as recorded."""
    devices = manifest.get("devices") if isinstance(manifest, dict) else None
    if not isinstance(devices, list):
        return manifest
    return {**manifest, "devices": [{**d, "name": display(d["name"])} if isinstance(d, dict) and "name" in d else d
                                    for d in devices]}


def _empty(columns) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})


def targets_document(targets) -> dict | None:
    """run --target's slices in JSON: one row per slice and function
    (targets.csv), every compile (target_points.csv), XLA:TPU's buffers at
    its peak by line (target_lines.csv), what could not be compiled; null
    for a run recorded without --target."""
    if targets is None:
        return None
    return {"asked": list(targets.asked), "compiles": targets.compiles, "compile_s": targets.compile_s,
            "events": list(targets.events), "rows": records(targets.rows), "points": records(targets.points),
            "lines": records(targets.lines)}


def plan_document(plan) -> dict | None:
    """run --plan's plan in JSON: its points (plan.csv), models
    (plan_models.csv), each planned function and what it cost; null
    for a run recorded without --plan."""
    if plan is None:
        return None
    return {
        "device_bytes": plan.device_bytes, "backends": plan.backends, "compiles": plan.compiles,
        "compile_s": plan.compile_s, "fraction_variable": plan.fraction_variable,
        "searched_bytes": plan.searched_bytes, "events": list(plan.events),
        "functions": [vars(f) for f in plan.functions],
        "points": records(plan.points), "models": records(plan.models),
    }
