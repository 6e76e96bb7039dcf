"""Every output jaxmemprof writes, where, what one row is, and its columns in
order (from the analyses' own constants, never retyped)."""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Table:
    name: str  # the key of IN_TABLE
    title: str
    where: str  # which command writes it, and under which file or JSON key
    rows: str  # what one row is
    columns: tuple


def _csv(columns) -> tuple:
    """An exported CSV's columns: `process` first, unless the table has its own
    (render/job.py with_process)."""
    return tuple(columns) if "process" in columns else ("process",) + tuple(columns)


def _summary_keys() -> tuple:
    """The keys of the report's summary object: the Headline's fields, in order."""
    from dataclasses import fields

    from jaxmemprof.analysis.headline import Headline

    return tuple(f.name for f in fields(Headline))


# The job's tables have no column constants: tests/test_columns_doc.py checks these against a real job's export.
PROCESSES_COLUMNS = ("process", "host", "devices", "finished", "running", "exit_status", "ended_by", "snapshots", "peak_bytes",
                     "peak_t", "peak_snapshot", "at_job_peak_bytes", "at_job_peak_snapshot", "clock_offset_s", "error")
JOB_PEAK_SITES_COLUMNS = ("process", "site", "bytes", "count")
JOB_TIMELINE_COLUMNS = ("t", "live_bytes")
JOB_KEYS = ("path", "processes", "alignment", "peak_bytes", "peak_t", "unfinished")
# check --json: the document, and the facts some checks add to an Outcome's fields.
CHECK_KEYS = ("command", "run", "baseline", "ok", "checks")
CHECK_FACTS = ("where", "devices", "rules", "what", "bytes", "baseline_bytes", "target", "chip", "hbm_bytes", "error")


def tables() -> list[tuple[str, list[Table]]]:
    """Every output, in sections: (heading, tables)."""
    from jaxmemprof.analysis import inside_jit, leaks, lifetimes, py_holders, reuse, roles, timeline
    from jaxmemprof.analysis.advice import plan, targets
    from jaxmemprof.analysis.advice.capacity import Fit
    from jaxmemprof.analysis.advice.donation import JIT_MEMORY_COLUMNS
    from jaxmemprof.analysis.check import Outcome
    from jaxmemprof.analysis.groups import KEY_COLUMNS
    from jaxmemprof.render import findings, tables as export
    from jaxmemprof.render.job import JOB_FILES, findings_table
    from jaxmemprof.render.results import DIFF_VALUES, SHOW_VALUES

    both = "`export --csv DIR`: {f}; `report --json`: `{j}`"
    per_run = [
        Table("timeline.csv", "timeline.csv", both.format(f="timeline.csv", j="timeline"), "One per snapshot.",
              _csv(timeline.TOTALS_COLUMNS)),
        Table("devices.csv", "devices.csv", both.format(f="devices.csv", j="devices"),
              "One per snapshot x device.", _csv(timeline.DEVICES_COLUMNS)),
        Table("sites.csv", "sites.csv", both.format(f="sites.csv", j="sites"),
              "One per snapshot x top site (`--top`, the rest as `other`).", _csv(timeline.SITES_COLUMNS)),
        Table("arrays.csv", "arrays.csv", both.format(f="arrays.csv", j="arrays"),
              "One per array the run saw (none for a directory of `.prof` files).", _csv(lifetimes.ARRAY_COLUMNS)),
        Table("lifetimes.csv", "lifetimes.csv", both.format(f="lifetimes.csv", j="lifetimes"),
              "One per site, largest `byte_seconds` first.", _csv(lifetimes.SITE_LIFETIME_COLUMNS)),
        Table("lifetimes.csv (estimated)", "lifetimes.csv, for a directory of `.prof` files",
              both.format(f="lifetimes.csv", j="lifetimes") + " with `lifetimes_estimated` true",
              "One per site: births and deaths estimated from count changes between snapshots (lower bounds).",
              _csv(lifetimes.CHURN_COLUMNS)),
        Table("reuse.csv", "reuse.csv", both.format(f="reuse.csv", j="reuse.by_site"),
              "One per site of the new buffers.", _csv(list(reuse.SITE_COLUMNS) + list(reuse.COUNT_COLUMNS))),
        Table("reuse_devices.csv", "reuse_devices.csv", both.format(f="reuse_devices.csv", j="reuse.by_device"),
              "One per device.", _csv(["device"] + list(reuse.COUNT_COLUMNS))),
        Table("leaks.csv", "leaks.csv", both.format(f="leaks.csv", j="leaks"),
              "One per growing site, largest projected growth first.", _csv(leaks.LEAK_COLUMNS)),
        Table("recompiles.csv", "recompiles.csv", both.format(f="recompiles.csv", j="recompiles"),
              "One per site x HLO module whose executables grew in number or code size; suspects first.",
              _csv(leaks.RECOMPILE_COLUMNS)),
        Table("jit.csv", "jit.csv", both.format(f="jit.csv", j="jit_memory"),
              "One per jitted function (the jit probe): its largest compiled signature, largest call peak first.",
              _csv(JIT_MEMORY_COLUMNS)),
        Table("jit_peak.csv", "jit_peak.csv", both.format(f="jit_peak.csv", j="jit_peak"),
              "One per jitted function x user line x kind: XLA's buffers live at the function's own peak.",
              _csv(inside_jit.PEAK_COLUMNS)),
        Table("jit_buffers.csv", "jit_buffers.csv", both.format(f="jit_buffers.csv", j="jit_buffers"),
              "One per buffer of a dumped program: those live at its peak and its largest others.",
              _csv(inside_jit.BUFFER_COLUMNS)),
        Table("jit_curve.csv", "jit_curve.csv", both.format(f="jit_curve.csv", j="jit_curve"),
              "One per jitted function x position x user line: XLA's buffers live at each position of the "
              "function's largest signature, in program order (XProf's memory viewer, in your lines).",
              _csv(inside_jit.CURVE_COLUMNS)),
        Table("roles.csv", "roles.csv", both.format(f="roles.csv", j="roles.by_role"),
              "One per device x role at the sampled jitted call that holds the most: what the memory is "
              "(docs/roles.md).", _csv(roles.ROLE_COLUMNS)),
        Table("owners.csv", "owners.csv", both.format(f="owners.csv", j="roles.owners"),
              "One per device x array of that call, largest first: its role and its path in your tree.",
              _csv(roles.OWNER_COLUMNS)),
        Table("plan.csv", "plan.csv", both.format(f="plan.csv", j="plan.points"),
              "One per planned function x variant x batch x device of the call (`run --plan`; no rows without it): "
              "XLA's figures for the step compiled at that batch, and the device's peak (docs/plan.md).",
              _csv(plan.PLAN_COLUMNS)),
        Table("plan_models.csv", "plan_models.csv", both.format(f="plan_models.csv", j="plan.models"),
              "One per planned function x variant x device (and `job`): the line through its points and, with "
              "`--device-memory`, the largest batch that fits and what each fix saves there.",
              _csv(plan.MODEL_COLUMNS)),
        Table("targets.csv", "targets.csv", both.format(f="targets.csv", j="targets.rows"),
              "One per TPU slice x planned function (`run --target`; no rows without it): XLA:TPU's figures for "
              "the step compiled for the slice at the recorded batch, the run's own beside them, and whether it "
              "fits a chip (docs/targets.md).", _csv(targets.TARGET_COLUMNS)),
        Table("target_points.csv", "target_points.csv", both.format(f="target_points.csv", j="targets.points"),
              "One per TPU slice x compile x device of the call: plan.csv's columns for each compile for the "
              "slice.", _csv(targets.POINT_COLUMNS)),
        Table("target_lines.csv", "target_lines.csv", both.format(f="target_lines.csv", j="targets.lines"),
              "One per TPU slice x function x user line x kind: XLA:TPU's buffers in device memory live at the "
              "peak of the step compiled for the slice at the recorded batch, largest first.",
              _csv(targets.LINE_COLUMNS)),
        Table("holders.csv", "holders.csv", both.format(f="holders.csv", j="holders"),
              "One per search read (`peak`, `end`) x site x chain of Python references holding that site's arrays, "
              "largest first (docs/holders.md).", _csv(py_holders.HOLDER_COLUMNS)),
        Table("findings.csv", "findings.csv", both.format(f="findings.csv", j="findings"),
              "One per finding, ranked by severity, then measured savings before unverified bounds, then saving (in JSON "
              "`facts` is an object).",
              _csv(findings.COLUMNS)),
    ]
    files = {t.title for t in per_run}
    missing = [f for f in export.EXPORT_FILES if f not in files]
    if missing:
        raise RuntimeError(f"render/tables.py exports {missing}, which jaxmemprof/glossary/tables.py does not describe")

    report_only = [
        Table("report --json", "The document", "`report --json`", "One JSON object with these keys.",
              ("schema_version",) + tuple(_report_document_keys())),
        Table("summary", "summary", "`report --json`: `summary`", "The run's headline figures, one object.",
              _summary_keys()),
        Table("peak_sites", "peak_sites", "`report --json`: `peak_sites`",
              "One per site holding bytes at the peak snapshot, largest first.",
              tuple(KEY_COLUMNS["site"]) + tuple(SHOW_VALUES) + ("cum_share",)),
        Table("executables", "executables", "`report --json`: `executables`", "One per snapshot.",
              tuple(timeline.EXECUTABLES_COLUMNS)),
        Table("markers", "markers", "`report --json`: `markers`", "One per marker, in the order recorded.",
              tuple(timeline.MARKERS_COLUMNS)),
        Table("reuse", "reuse", "`report --json`: `reuse`", "One object.",
              ("by_device", "by_site", "buffers", "unknown_addresses", "note")),
        Table("plan", "plan", "`report --json`: `plan`", "One object (null for a run recorded without "
              "`--plan`).", ("device_bytes", "backends", "compiles", "compile_s", "fraction_variable",
                            "searched_bytes", "events", "functions", "points", "models")),
        Table("targets", "targets", "`report --json`: `targets`", "One object (null for a run recorded without "
              "`--target`).", ("asked", "compiles", "compile_s", "events", "rows", "points", "lines")),
        Table("plan functions", "plan.functions", "`report --json`: `plan.functions`", "One per planned function.",
              tuple(f.name for f in fields(plan.Planned))),
        Table("fit", "fit", "`report --json --device-memory SIZE`: `fit`", "One object (null without "
              "`--device-memory`).", tuple(f.name for f in fields(Fit))),
    ]
    job_findings = tuple(c for c in findings_table([]).columns if c != "process_list")
    job_cols = {"processes.csv": PROCESSES_COLUMNS, "job_timeline.csv": JOB_TIMELINE_COLUMNS,
                "job_peak_sites.csv": JOB_PEAK_SITES_COLUMNS, "job_findings.csv": job_findings}
    if set(job_cols) != set(JOB_FILES):
        raise RuntimeError(f"render/job.py writes {JOB_FILES}; jaxmemprof/glossary/tables.py describes {tuple(job_cols)}")
    job_json = "`export --csv DIR` of a job: {f}; `report --json`: `{j}`"
    job = [
        Table("processes.csv", "processes.csv", job_json.format(f="processes.csv", j="processes"),
              "One per process of the job.", PROCESSES_COLUMNS),
        Table("job_timeline.csv", "job_timeline.csv", job_json.format(f="job_timeline.csv", j="timeline"),
              "One per moment a process took a snapshot.", JOB_TIMELINE_COLUMNS),
        Table("job_peak_sites.csv", "job_peak_sites.csv", job_json.format(f="job_peak_sites.csv", j="peak_sites"),
              "One per process x site at that process's own peak.", JOB_PEAK_SITES_COLUMNS),
        Table("job_findings.csv", "job_findings.csv", job_json.format(f="job_findings.csv", j="findings"),
              "One per finding merged over the processes (by rule and site), plus the job's own; in JSON also "
              "`process_list`, and `facts` as an object.", job_findings),
        Table("job report --json", "The job's document", "`report --json` on a job", "One JSON object.",
              ("schema_version", "command", "inputs", "job", "warnings", "processes", "peak_sites", "timeline",
               "roles", "plan", "findings")),
        Table("job", "job", "`report --json` on a job: `job`", "One object.", JOB_KEYS),
    ]
    show = [
        Table("show", "show --by site", "`show --csv` and `show --json` (`rows`)", "One per site, largest first.",
              tuple(KEY_COLUMNS["site"]) + tuple(SHOW_VALUES)),
        Table("diff", "diff --by site", "`diff --csv` and `diff --json` (`rows`)",
              "One per site that changed, largest change first.", tuple(KEY_COLUMNS["site"]) + tuple(DIFF_VALUES)),
        Table("show", "other --by", "`show`/`diff --by function|file|stack|device|kind`",
              "The key columns above are replaced by one.",
              tuple(k for by, keys in KEY_COLUMNS.items() if by != "site" for k in keys)),
        Table("show and diff --json", "The document", "`show --json`, `diff --json`", "One JSON object.",
              ("schema_version", "command", "inputs", "by", "value_type", "totals", "unchanged_rows", "devices",
               "kinds", "omitted", "rows")),
    ]
    check = [
        Table("check --json", "The document", "`check --json`", "One JSON object.", ("schema_version",) + CHECK_KEYS),
        Table("check", "checks", "`check --json`: `checks`",
              "One per check; `where`, `rules`, `what`, `bytes`, `baseline_bytes` only where the check has them.",
              ("process",) + tuple(f.name for f in fields(Outcome) if f.name != "facts") + CHECK_FACTS),
    ]
    python_only = [
        Table("reuse events", "Reuse.events", "`jaxmemprof.analysis.reuse.reuse(attribute(run)).events` (Python only)",
              "One per address reuse.", tuple(reuse.EVENT_COLUMNS)),
        Table("rejits", "rejits", "`jaxmemprof.analysis.leaks.rejits(attribute(run))` (Python only; `recompile` findings "
              "of case `rejit`)", "One per line x function name jitted more than once.", tuple(leaks.REJIT_COLUMNS)),
    ]
    return [("Tables of a run: `export --csv` and `report --json`", per_run),
            ("Only in `report --json`", report_only),
            ("A multi-process job: `export --csv` and `report --json`", job),
            ("`show` and `diff`", show),
            ("`check --json`", check),
            ("Tables in Python only", python_only)]


def _report_document_keys() -> tuple:
    """The keys of render/tables.py report_document's dict, read from its source."""
    from jaxmemprof.render import tables as export

    tree = ast.parse(inspect.getsource(export.report_document))
    for node in ast.walk(tree):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Dict):
            return tuple(k.value for k in node.value.keys if isinstance(k, ast.Constant))
    raise RuntimeError("render/tables.py report_document returns no dict literal: update jaxmemprof/glossary/tables.py")
