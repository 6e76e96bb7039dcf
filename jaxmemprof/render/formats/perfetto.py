"""A run as a trace in the Chrome trace event format (JSON; gzipped when the
file's name ends in .gz), which Perfetto's UI (ui.perfetto.dev), XProf's
trace viewer and chrome://tracing open: ``export --format perfetto``.

It writes what analysis/trace.py's TraceModel holds, on its clock
(microseconds, ``ts``): one process for the run, its counters ("ph": "C")
and its threads of events (snapshots as complete events, "X"; markers,
jitted calls, compiles and findings as instants, "i"), each process and
thread named by metadata events ("M"); then the events of the JAX trace
merged, as JAX wrote them but for their shifted ``ts``. docs/trace-export.md
says how to open it and what each track is."""

from __future__ import annotations

import gzip
import json

from jaxmemprof._version import __version__
from jaxmemprof.render.formats import Format

# The run's threads (tid) and their order in the process.
THREADS = (("snapshots", "snapshots (each as long as it took)"), ("markers", "steps and markers"),
           ("findings", "findings"), ("calls", "jitted calls (sampled; as each returned)"), ("compiles", "compiles"))
TID = {key: i + 1 for i, (key, _) in enumerate(THREADS)}


def _counter_name(c) -> str:
    if c.kind == "live":
        return "live bytes, all devices" if c.key == "all" else f"live bytes {c.key}"
    if c.kind == "site":
        return f"site {c.key}"
    return f"{c.key} {c.device}"  # the chip's own counter (memory_stats)


def events(m) -> list:
    """The trace's events for the model ``m`` (analysis/trace.py TraceModel)."""
    from jaxmemprof.render.findings import saves, words

    pid = m.pid
    out: list = [
        {"ph": "M", "pid": pid, "tid": 0, "name": "process_name",
         "args": {"name": f"jaxmemprof: {m.path}" + (f" (process {m.process})" if m.process else "")}},
        {"ph": "M", "pid": pid, "tid": 0, "name": "process_sort_index", "args": {"sort_index": -1}},
    ]
    for key, label in THREADS:
        out.append({"ph": "M", "pid": pid, "tid": TID[key], "name": "thread_name", "args": {"name": label}})
        out.append({"ph": "M", "pid": pid, "tid": TID[key], "name": "thread_sort_index",
                    "args": {"sort_index": TID[key]}})
    for c in m.counters:
        name = _counter_name(c)
        cat = "memory_stats" if c.kind == "chip" else "memory"
        out.extend({"ph": "C", "pid": pid, "tid": 0, "ts": ts, "name": name, "cat": cat, "args": {"bytes": v}}
                   for ts, v in c.points)
    for s in m.snapshots:
        args = {"snapshot": s["snapshot"], "trigger": s["trigger"], "live_bytes": s["live_bytes"]}
        if s["label"]:
            args["label"] = s["label"]
        out.append({"ph": "X", "pid": pid, "tid": TID["snapshots"], "ts": s["ts"], "dur": s["dur"],
                    "name": f"snapshot {s['snapshot']} ({s['trigger']})", "cat": "snapshot", "args": args})
    for k in m.markers:
        out.append({"ph": "i", "s": "t", "pid": pid, "tid": TID["markers"], "ts": k["ts"], "name": k["label"],
                    "cat": "marker", "args": {"marker": k["marker"]}})
    for ts, f, at in m.findings:
        w = words(f)
        out.append({"ph": "i", "s": "t", "pid": pid, "tid": TID["findings"], "ts": ts,
                    "name": f"{f.severity}: {w.brief}", "cat": "finding",
                    "args": {"rule": f.rule, "severity": f.severity, "site": f.site, "at": at,
                             "saving_bytes": f.saving_bytes, "saves": saves(f, w), "message": w.message,
                             "fix": w.fix}})
    for c in m.calls:
        out.append({"ph": "i", "s": "t", "pid": pid, "tid": TID["calls"], "ts": c["ts"],
                    "name": f"{c['function']} (call {c['call_index']})", "cat": "jit",
                    "args": {"function": c["function"], "call_index": c["call_index"], "caller": c["caller"]}})
    for c in m.compiles:
        out.append({"ph": "i", "s": "t", "pid": pid, "tid": TID["compiles"], "ts": c["ts"],
                    "name": f"compile {c['function']}", "cat": "jit",
                    "args": {"function": c["function"], "signature": c["signature"], "peak_bytes": c["peak_bytes"]}})
    out.extend(m.jax_events)
    return out


def document(m) -> dict:
    """The whole trace: the JSON Object Format (traceEvents, displayTimeUnit, otherData)."""
    doc = {"traceEvents": events(m), "displayTimeUnit": m.display_time_unit,
           "otherData": {"producer": f"jaxmemprof {__version__}", "run": m.path,
                         "origin_epoch_s": m.origin_epoch_s, "run_start_us": m.run_start_us,
                         "jax_trace": m.jax_path, "jax_start_epoch_s": m.jax_start_epoch_s,
                         "jax_shift_us": m.jax_shift_us}}
    if m.jax_metadata:
        doc["metadata"] = m.jax_metadata
    return doc


def run(doc, to) -> None:
    data = json.dumps(document(doc.trace), separators=(",", ":"), allow_nan=False).encode() + b"\n"
    to.binary(gzip.compress(data, mtime=0) if str(getattr(to, "path", "") or "").endswith(".gz") else data)


FORMAT = Format("perfetto", run=run)
