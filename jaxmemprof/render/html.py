"""One self-contained HTML page for ``report --html``, ``show --html`` and
``diff --html``.

The page is its data (JSON in a ``<script type="application/json">``, with
frames, stacks and texts stored once) plus the script and style sheet of
``html_assets/``, all inline: it opens offline, from a file, in any browser.
A Content-Security-Policy lets only that one script run and the page fetch
nothing. Names are data: every text of the data is escaped as the terminal
and CSV show it (render/escape.py: control and bidirectional characters as
``\\x1b``, ``\\n``, ``\\u202e``), the JSON is escaped so that no text can
close the element (``<``, ``>``, ``&`` and U+2028/9 as ``\\uXXXX``), and the
script builds the page with ``textContent``, never ``innerHTML``.

See docs/html.md for what the page shows.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from importlib import resources

import numpy as np
import pandas as pd

from jaxmemprof._version import __version__
from jaxmemprof.analysis.flame import Cells
from jaxmemprof.analysis.documents import JobDocument, ProfilesDocument, RunDocument
from jaxmemprof.analysis.roles import ROLES
from jaxmemprof.facts.devices import display, display_all, displayed
from jaxmemprof.finite import finite
from jaxmemprof.render.escape import safe, safe_column, safe_field
from jaxmemprof.render.json import default
from jaxmemprof.render.tables import largest_signature

FORMAT_VERSION = 1
_SCRIPT_ESCAPES = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026",
                   0x2028: "\\u2028", 0x2029: "\\u2029"}


class _Strings:
    """The page's string table: each text stored once, referred to by index."""

    def __init__(self):
        self.items: list = []
        self.ids: dict = {}

    def __call__(self, text) -> int:
        text = "" if text is None or (isinstance(text, float) and math.isnan(text)) else str(text)
        i = self.ids.get(text)
        if i is None:
            i = self.ids[text] = len(self.items)
            self.items.append(text)
        return i


def _asset(name: str) -> str:
    return resources.files("jaxmemprof.render").joinpath("html_assets", name).read_text(encoding="utf-8")


def _rows(df: pd.DataFrame | None, columns=None) -> list:
    if df is None or df.empty:
        return []
    if columns is not None:
        df = df[[c for c in columns if c in df.columns]]
    return finite(displayed(df).to_dict(orient="records"))


def _num(v):
    if v is None or v is pd.NA:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(f):
        return None
    return int(f) if f == int(f) and abs(f) < 2**53 else f


def _gaps(changes: list) -> list:
    """Each key's changes as one flat list, positions as the gap from the
    key's previous change (smaller numbers in the file)."""
    if not changes:
        return []
    lens = np.fromiter((len(ch) for ch in changes), dtype=np.int64, count=len(changes))
    allc = np.concatenate(changes).astype(np.int64)
    gap = np.diff(allc[:, 0], prepend=0)
    starts = np.r_[0, np.cumsum(lens)[:-1]]
    gap[starts] = allc[starts, 0]
    flat = np.column_stack([gap, allc[:, 1:]]).ravel().tolist()
    ends = np.cumsum(lens * 3).tolist()
    return [flat[a:b] for a, b in zip([0] + ends[:-1], ends)]


def _cells_data(cells: Cells, S: _Strings) -> dict:
    """Frames, stacks, keys and changes: numbers and string indices only."""
    return {
        "frames": [[S(fn), S(file), int(line), 1 if user else 0] for fn, file, line, user in cells.frames],
        "stacks": [[int(f) for f in s] for s in cells.stacks],
        "keys": [[int(st), S(ty), S(display(dev)), int(pr)] for st, ty, dev, pr in
                 zip(cells.keys["stack"].tolist(), cells.keys["type"], cells.keys["device"],
                     cells.keys["process"].tolist())],
        "changes": _gaps(cells.changes),
    }


# -- the three pages ------------------------------------------------------------------


def report_page(doc: RunDocument) -> str:
    """The page of ``report --html``: a run's timeline, flame graphs of any
    snapshot and of the change between two, lifetimes, memory inside jit and
    the findings (``doc``: the run's report, with what the page draws beyond
    it, analysis/page.py ``run_document(..., page=True)``)."""
    S = _Strings()
    data = _report_data(doc, S)
    data["strings"] = S.items
    return page(data)


def _report_data(doc: RunDocument, S: _Strings, t_shift: float = 0.0) -> dict:
    """A run's data for the page (texts go to the string table ``S``);
    ``t_shift``: seconds added to its times (a process of a job, on the
    job's clock)."""
    rep, model = doc.report, doc.page
    cells = model.cells
    proc = model.process
    tl = rep.timeline
    totals, snaps = model.totals, model.snapshots
    P = len(cells.positions)
    peak_j, final_j = model.peak_j, model.final_j
    trig = snaps["trigger"].astype(object).tolist()

    def col(df, name):
        if name not in df:
            return None
        vals = [_num(v) for v in df[name].tolist()]
        return vals if any(v is not None for v in vals) else None

    stats = []
    if P:
        stats.append({"process": proc, "device": S(""), "bytes_in_use": col(totals, "bytes_in_use"),
                      "bytes_limit": col(totals, "bytes_limit")})
        for name, g in model.devices:
            stats.append({"process": proc, "device": S(display(name)), "bytes_in_use": col(g, "bytes_in_use"),
                          "bytes_limit": col(g, "bytes_limit")})
    markers = model.markers
    s = rep.headline
    data = {
        "page": "report",
        "title": f"jaxmemprof report: {rep.path}",
        "run": rep.path,
        "command": s.get("command") or "",
        "facts": finite({k: s.get(k) for k in ("backend", "devices", "duration_s", "snapshots", "markers",
                                                "exit_status", "ended_by", "finished", "per_array_data")}),
        **_cells_data(cells, S),
        "snapshots": {
            "snapshot": [int(x) for x in snaps["snapshot"].tolist()],
            "t": [round(float(x) + t_shift, 6) for x in snaps["t"].tolist()],
            "label": [S(x) for x in snaps["label"].tolist()],
            "trigger": [S(x) for x in trig],
            "live_bytes": [int(x) for x in totals["live_bytes"].tolist()] if P else [],
        },
        "snapshots_total": model.snapshots_total,
        "stats": stats,
        "markers": {"t": [round(float(x) + t_shift, 6) for x in markers["t"].tolist()],
                    "label": [S(x) for x in markers["label"].tolist()]},
        "markers_total": model.markers_total,
        "top_sites": [x for x in tl.site_order if x != "other"],
        "peak": {"snapshot": tl.peak_snapshot, "t": _shifted(tl.peak_t, t_shift), "bytes": int(tl.peak_bytes),
                 "j": peak_j},
        # the line of all devices summed, labelled with its own moment (the busiest device's may be another)
        "true_peak": {"bytes": _num(s.true_peak_total_bytes),
                      "where": display(getattr(getattr(rep, "answer", None), "true_peak_total_where", "")
                                       or s.true_peak_where or "")},
        "answer": _answer(rep),
        "defaults": {"selected": peak_j, "base": 0, "new": final_j},
        "headline": {
            "peak_bytes": int(tl.peak_bytes), "peak_t": _shifted(tl.peak_t, t_shift), "peak_snapshot": tl.peak_snapshot,
            "held_by": ([dict(r, holder=rep.peak_holders.get(r["site"], ""))
                         for r in _rows(rep.peak_sites.rows.head(5), ["site", "bytes", "share"])]
                        if rep.peak_sites is not None else model.held),
            "grew": model.grew,
            "grew_between": [int(snaps["snapshot"].iloc[0]), int(snaps["snapshot"].iloc[final_j])] if P else [],
        },
        "lifetimes": _lifetimes(model.lifetimes, t_shift),
        "jit": {
            "memory": _rows(rep.jit_memory, ["function", "wrapper", "defined_at", "jitted_at", "calls", "compiles",
                                             "signatures",
                                             "argument_bytes", "output_bytes", "alias_bytes", "temp_bytes",
                                             "generated_code_bytes", "call_peak_bytes"]),
            # each function's largest signature, as the report shows (the exports hold every one's)
            "peak": _rows(largest_signature(rep.jit_peak), ["function", "site", "kind", "bytes", "buffers",
                                                             "share_of_peak", "program_peak_bytes"]),
            "buffers": _rows(largest_signature(rep.jit_buffers), ["function", "name", "site", "kind", "shape",
                                                                   "bytes", "op", "live_start", "live_end",
                                                                   "program_length", "at_peak"]),
            "curves": model.curves,
        },
        "findings": _findings(rep.findings),
        "warnings": [str(w) for w in rep.warnings],
        "process": proc,
    }
    if getattr(rep, "plan", None) is not None:
        data["plan"] = _plan(rep.plan, doc.plan_peaks, model.fit_peak_bytes)
    if model.roles is not None:
        data["roles"] = _roles(rep.roles, model.roles, S)
    return data


def _roles(what, rc, S: _Strings) -> dict:
    """What the memory is, for the page's icicle: role -> owner path cells
    (``rc``: analysis/flame.py ``role_cells``), one group per set of devices
    whose cells are the same."""
    from jaxmemprof.render.report import device_ranges

    return {"where": display(what.where), "order": list(ROLES), **_cells_data(rc.cells, S),
            "groups": [{"device": display(devices[0]), "devices": display_all(devices), "bytes": int(total),
                        "label": "" if devices == ["all"] else device_ranges(devices)} for devices, total in rc.groups]}


def _plan(plan, peaks: dict, fit_peak_bytes: int | None) -> dict:
    """run --plan's points for the page's chart: per planned function and
    variant, the busiest device's peak at each compiled batch (``peaks``:
    analysis/page.py ``plan_peaks``); the most a device of ``device_bytes``
    holds by the fit rule; the largest batch."""
    out = {"device_bytes": plan.device_bytes, "fit_peak_bytes": fit_peak_bytes, "functions": []}
    for f in plan.functions:
        busiest = peaks[f.function_id]
        variants = [{"variant": str(v), "points": [[int(b), int(p)] for b, p in busiest.points(v)]}
                    for v in busiest.variants]
        models = plan.models[(plan.models["function_id"] == f.function_id) & (plan.models["variant"] == "recorded")]
        job = models[models["device"] == "job"]
        row = (job if len(job) else models).head(1)
        largest = _num(row["largest_batch"].iloc[0]) if len(row) else None
        out["functions"].append({"function": f.function, "backend": f.backend, "compiles": f.compiles,
                                 "compile_s": round(f.compile_s, 3), "recorded_batch": f.recorded_batch,
                                 "variants": variants, "largest_batch": largest})
    return out


_FINDING_FIELDS = ("rule", "severity", "site", "message", "saving_bytes", "saves", "fix", "evidence", "brief",
                   "brief_fix")


def _answer(rep) -> dict | None:
    """The answer's figures and their labels, as the terminal says them (render/answer.py)."""
    from jaxmemprof.render import answer
    from jaxmemprof.render.findings import saves, words

    a = getattr(rep, "answer", None)
    if a is None or a.live_peak_bytes is None:
        return None
    return finite({
        "true_peak_bytes": a.true_peak_bytes, "true_peak_total_bytes": a.true_peak_total_bytes,
        "devices": a.devices, "true_peak": answer.true_peak_line(a) or "",
        "live_peak": answer.live_peak_line(a) or "",
        "composition": [[r, b] for r, b in a.composition], "composition_rest": a.composition_rest,
        "inside": answer.inside_line(a, 10_000) or "",
        "fix_number": a.fix_number, "fix": "" if a.fix is None else answer.fix_line(a, lambda f: saves(f, words(f))),
        # the chip's own counters beside the true peak, and the difference named (analysis/counters.py)
        "chip": answer.counters_lines(a, rep.outside_jit), "chip_peak_bytes": (a.counters or {}).get("chip_peak_bytes"),
    })


def _findings(found) -> list:
    """The findings in words, ranked (a table of them, or Finding records)."""
    if isinstance(found, pd.DataFrame):
        return _rows(found, _FINDING_FIELDS)
    from jaxmemprof.render.findings import records

    return finite([{k: r.get(k) for k in _FINDING_FIELDS} for r in records(found)])


def _shifted(t, shift: float):
    t = _num(t)
    return None if t is None else t + shift


def _lifetimes(a: pd.DataFrame | None, t_shift: float = 0.0) -> list:
    """The arrays drawn as bars (analysis/page.py ``lifetime_arrays``)."""
    if a is None or a.empty:
        return []
    out = []
    for r in a.itertuples(index=False):
        shape = r.shape if isinstance(r.shape, tuple) else ()
        out.append({
            "id": int(r.array_id), "site": str(r.site), "type": f"{r.dtype}[{','.join(map(str, shape))}]",
            "bytes": int(r.bytes), "start": _num(r.first_t), "last": _num(r.last_t),
            "end": _num(r.ended_t), "how": None if r.how is None or r.how is pd.NA else str(r.how),
            "alive_at_end": bool(r.alive_at_end),
        })
    return out


def job_page(doc: JobDocument) -> str:
    """The page of ``report JOB --html`` for a multi-process job: the job's
    memory over time (the sum over processes, on the aligned clock), every
    process's peak, and the full report page of each process the document
    draws (analysis/page.py ``job_document(..., page=True)``), one at a time
    behind a selector."""
    S = _Strings()
    job_report = doc.report
    blocks = []
    for shown in doc.processes:
        block = _report_data(shown.document, S, t_shift=shown.t_shift)
        block["process"] = shown.process  # the job's index (the directory's), whatever the manifest says
        block["title"] = shown.title
        blocks.append(block)
    data = {
        "page": "job", "title": f"jaxmemprof report: {job_report.path} ({job_report.process_count} processes)",
        "job": {
            "alignment": job_report.alignment, "process_count": int(job_report.process_count),
            "peak_bytes": int(job_report.job_peak_bytes), "peak_t": _num(job_report.job_peak_t),
            "t": [round(float(x), 6) for x in doc.t.tolist()], "live_bytes": [int(x) for x in doc.live_bytes.tolist()],
            "processes": _rows(job_report.processes, ["process", "host", "finished", "exit_status", "snapshots",
                                                      "peak_bytes", "peak_t", "at_job_peak_bytes", "error"]),
            "drawn": [s.process for s in doc.processes], "default": doc.drawn[0] if doc.drawn else None,
            "unfinished": [int(x) for x in job_report.unfinished],
        },
        "processes": blocks,
    }
    data["strings"] = S.items
    return page(data)


def show_page(doc: ProfilesDocument) -> str:
    """The page of ``show --html``: one profile's flame graph (``doc.page``:
    analysis/page.py ``profiles_model``)."""
    S = _Strings()
    (name,), (prof,), model = doc.names, doc.profiles, doc.page
    data = {"page": "show", "title": f"jaxmemprof show: {name}", "names": [name], "value_type": prof.value_type,
            **_cells_data(model.cells, S), "defaults": {"selected": 0},
            "headline": {"total_bytes": prof.total_bytes, "held_by": model.held}}
    data["strings"] = S.items
    return page(data)


def diff_page(doc: ProfilesDocument) -> str:
    """The page of ``diff --html``: the differential flame graph of two
    profiles, and each one's own (``doc.page``: analysis/page.py ``profiles_model``)."""
    S = _Strings()
    (base_name, new_name), (base, new), model = doc.names, doc.profiles, doc.page
    data = {"page": "diff", "title": f"jaxmemprof diff: {base_name} -> {new_name}", "names": [base_name, new_name],
            "value_type": new.value_type, **_cells_data(model.cells, S), "defaults": {"selected": 1, "base": 0, "new": 1},
            "headline": {"base_bytes": base.total_bytes, "new_bytes": new.total_bytes,
                         "grew": model.grew}}
    data["strings"] = S.items
    return page(data)


# -- the document ----------------------------------------------------------------------


_PLAIN = ("frames", "stacks", "keys", "changes")  # built of Python ints and str indices already


def _cleaned(data: dict) -> dict:
    """``data`` with NaN as null, numpy scalars as numbers and every text
    escaped (``_escaped``), skipping the cells (numbers only, and the bulk of
    a long run); a job's processes each as a page of its own."""
    blocks = data.get("processes")
    blocks = blocks if isinstance(blocks, list) else None
    out = {k: (v if k in _PLAIN or (k == "processes" and blocks is not None) else _escaped(finite(v), k))
           for k, v in data.items()}
    if blocks is not None:
        out["processes"] = [_cleaned(b) for b in blocks]
    return out


def _escaped(value, name: str = ""):
    """``value`` with each string escaped as the terminal and CSV show it
    (``safe``; a fix line by line, as ``safe_field``), dict keys too: the
    page shows names as the other outputs do, never a control or
    bidirectional character of the program's."""
    if isinstance(value, str):
        return safe_field(name, value)
    if isinstance(value, dict):
        return {safe(k) if isinstance(k, str) else k: _escaped(v, k if isinstance(k, str) else name)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(v, str) for v in value):  # a column of texts (the string table): one search
            return safe_column(name, list(value))
        return [_escaped(v, name) for v in value]
    return value


def embed_json(data: dict) -> str:
    """``data`` as JSON that is safe inside a ``<script>`` element."""
    text = json.dumps(_cleaned({"format": FORMAT_VERSION, "generator": f"jaxmemprof {__version__}", **data}),
                      default=default, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    return text.translate(_SCRIPT_ESCAPES)


def _hash(code: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(code.encode("utf-8")).digest()).decode("ascii")


def page(data: dict) -> str:
    """The whole HTML document for ``data``."""
    from html import escape

    guard, script, style = _asset("guard.js"), _asset("report.js"), _asset("report.css")
    csp = (f"default-src 'none'; script-src '{_hash(guard)}' '{_hash(script)}'; style-src 'unsafe-inline'; "
           "base-uri 'none'; form-action 'none'")
    return "".join([
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n",
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{escape(csp)}\">\n",
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n",
        f"<title>{escape(safe(data.get('title', 'jaxmemprof')))}</title>\n",
        f"<style>{style}</style>\n",
        f"<script>{guard}</script>\n",
        "</head><body>\n<noscript>This page draws its charts with JavaScript; the data is in the "
        "jmp-data element of its source.</noscript>\n",
        "<pre id=\"jmp-errors\" hidden></pre>\n<main id=\"jmp\"></main>\n",
        f"<script type=\"application/json\" id=\"jmp-data\">{embed_json(data)}</script>\n",
        f"<script>{script}</script>\n</body></html>\n",
    ])
