"""When the program ran out of memory: XLA's reason read (xla/oom.py), the
failing call (the function, the user's line that called it, its signature),
where it failed outside a jitted call, and what fits, as the end of the run
compiled it (capture/jit/oom.py, the ``oom-fit`` event). Data only; the
words are render/oom.py's. A run whose target ran out of memory under
``run --target`` (XLA:TPU refused the recorded batch for a slice) is read
here too (``targets``), from its ``jit_targets`` rows."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from jaxmemprof.store.jit_tables import JitTables
from jaxmemprof.xla.oom import OutOfMemory, read


@dataclass
class TargetRefusal:
    """A --target slice that refused the recorded step for its memory."""

    target: str
    function: str
    file: str
    line: int
    batch: int | None
    reason: OutOfMemory | None
    message: str
    largest: int | None = None  # the largest batch compiled that fits (None: not searched)
    next: int | None = None  # the smallest compiled above it that does not


@dataclass
class OomAnswer:
    """The run ran out of memory (``message``: XLA's or Python's text;
    ``reason``: read, None where it is not a form xla/oom.py knows)."""

    message: str
    reason: OutOfMemory | None
    function: str | None = None  # the jitted function whose call failed
    def_file: str = ""
    def_line: int = 0
    call: dict = field(default_factory=dict)  # the user's line that called it (or the failing line: oom-at)
    signature: str | None = None
    batch: int | None = None
    fit: dict | None = None  # the oom-fit event: what fits, compiled at the end

    @property
    def readable(self) -> bool:
        return self.reason is not None


def _events(run, kind: str) -> list:
    ev = getattr(run, "events", None)
    if ev is None or not len(ev) or "kind" not in ev:
        return []
    return [str(m) for m in ev.loc[ev["kind"] == kind, "message"].tolist()]


def _json(text):
    try:
        v = json.loads(text)
    except (TypeError, ValueError):
        return None
    return v if isinstance(v, dict) else None


def out_of_memory(run) -> OomAnswer | None:
    """The run's out-of-memory answer; None where the run did not run out of memory."""
    messages = _events(run, "oom")
    m = getattr(run, "manifest", None) or {}
    if not messages and m.get("ended_by") != "oom":
        return None
    message = messages[0] if messages else ""
    out = OomAnswer(message, read(message) if message else None)
    call = next((c for c in map(_json, _events(run, "oom-call")) if c), None)
    at = next((c for c in map(_json, _events(run, "oom-at")) if c), None)
    if call is not None:
        out.function = call.get("name")
        out.call = call.get("call") or {}
        out.signature = call.get("signature")
        fid = call.get("function_id")
        fns = (getattr(run, "jit", None) or JitTables()).functions
        if len(fns) and fid is not None:
            row = fns.loc[fns["function_id"] == fid]
            if len(row):
                out.def_file, out.def_line = str(row.iloc[0]["file"]), int(row.iloc[0]["line"])
    elif at:
        out.call = at
    if not out.function and at:  # a call the probe no longer watched: the jitted function called at that line
        out.function, out.def_file, out.def_line, out.signature = _called_at(run, at)
    if not out.function:
        out.function, out.def_file, out.def_line = _failed_function(run, out.call)
    fit = next((c for c in map(_json, _events(run, "oom-fit")) if c), None)
    if fit is not None:
        out.fit = fit
        out.batch = fit.get("batch")
    return out


def _called_at(run, at: dict):
    """The jitted function whose sampled calls were made at the failing line
    (``oom-at``), and its last sampled signature there: a step that ran out of
    memory after its samples were taken (its calls then go straight to XLA)."""
    try:
        calls, fns = run.jit.calls, run.jit.functions
        here = calls[(calls["caller_file"] == at.get("file")) & (calls["caller_line"] == int(at.get("line") or 0))]
        if len(here) and here["function_id"].nunique() == 1:
            last = here.iloc[-1]
            f = fns.loc[fns["function_id"] == last["function_id"]].iloc[0]
            sig = last["signature"] if isinstance(last["signature"], str) else None
            return str(f["name"]), str(f["file"]), int(f["line"]), sig
    except Exception:
        pass
    return None, "", 0, None


def _failed_function(run, call: dict):
    """A run recorded before ``oom-call`` events: the one jitted function the
    program called that has no sampled call recorded (its call raised before
    it could be), where there is exactly one."""
    try:
        fns, counts, calls = run.jit.functions, run.jit.counts, run.jit.calls
        if not len(fns) or counts.empty:
            return None, "", 0
        done = set(calls["function_id"].tolist()) if len(calls) else set()
        user = fns.merge(counts, on="function_id")
        failing = user[(user["calls"] > 0) & ~user["function_id"].isin(done)]
        if len(failing) == 1:
            r = failing.iloc[0]
            return str(r["name"]), str(r["file"]), int(r["line"])
    except Exception:
        pass
    return None, "", 0


def target_refusals(run) -> list:
    """The --target slices whose compile of the recorded batch XLA:TPU
    refused for memory, with the largest batch that fits where searched."""
    jit = getattr(run, "jit", None) or JitTables()
    t, fns = jit.targets, jit.functions
    if not len(t):
        return []
    out = []
    for (target, fid), rows in t.groupby(["target", "function_id"], sort=True):
        rec = rows[rows["variant"] == "recorded"]
        at = rec[rec["batch"] == rec["recorded_batch"]]
        if not len(at) or not isinstance(at.iloc[0]["error"], str) or "RESOURCE_EXHAUSTED" not in at.iloc[0]["error"]:
            continue
        name, file, line = str(fid), "", 0
        if fns is not None and len(fns):
            f = fns.loc[fns["function_id"] == fid]
            if len(f):
                name, file, line = str(f.iloc[0]["name"]), str(f.iloc[0]["file"]), int(f.iloc[0]["line"])
        batch = at.iloc[0]["batch"]
        ok = rec[rec["error"].isna() & rec["temp_bytes"].notna()]
        bad = rec[rec["error"].astype(str).str.contains("RESOURCE_EXHAUSTED", na=False)]
        largest = int(ok["batch"].max()) if len(ok) else None
        above = bad[bad["batch"] > (largest or 0)]["batch"]
        message = str(at.iloc[0]["error"])
        out.append(TargetRefusal(str(target), name, file, line, None if batch != batch else int(batch),
                                 read(message), message, largest, int(above.min()) if len(above) else None))
    return out
