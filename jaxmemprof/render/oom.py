"""The out-of-memory lines that lead run's closing lines, the report and
check: XLA's figures with the failing call, where it failed, XLA's largest
allocations by the user's line, and what fits, compiled (analysis/oom.py's
OomAnswer and TargetRefusal, in words)."""

from __future__ import annotations

import os

from jaxmemprof.units import format_bytes

_LISTED = 5  # XLA's largest allocations shown


def _where(file: str, line: int, show=None) -> str:
    if not file:
        return ""
    return f"{(show or os.path.basename)(file)}:{line}"


def _num(n) -> str:
    return f"{int(n):,}"


def lead(answer, show=None) -> str:
    """``train_step (train.py:78) needs 24.16 GiB of HLO temporaries at batch
    32; the device has 15.75 GiB`` (what XLA's message says, in its terms)."""
    r = answer.reason
    who = answer.function or "the program"
    place = _where(answer.call.get("file", ""), int(answer.call.get("line") or 0), show) or \
        _where(answer.def_file, answer.def_line, show)
    who = f"{who} ({place})" if place else who
    batch = f" at batch {_num(answer.batch)}" if answer.batch else ""
    if r is None:
        first = (answer.message or "").strip().splitlines()[0] if (answer.message or "").strip() else "no message"
        return f"out of memory: {who}{batch}; XLA's message is not one jaxmemprof reads: {first[:300]}"
    damaged = f"; XLA's message gives figures that are no size: {'; '.join(r.damaged)}" if r.damaged else ""
    if r.when == "compile":
        what = r.what or "memory"
        needed = f"needs {format_bytes(r.needed_bytes)} of {what}" if r.needed_bytes else "does not fit"
        has = f"; the device has {format_bytes(r.available_bytes)} ({r.space.upper()})" if r.available_bytes else ""
        return f"out of memory at compile: {who} {needed}{batch}{has}{damaged} (XLA: {r.reason})"
    if r.when == "host":
        asked = f" could not allocate {format_bytes(r.request_bytes)} on the host" if r.request_bytes else \
            " ran out of host memory"
        return f"out of memory: {who}{asked}{batch}{damaged} ({r.reason})"
    what = "load its program" if r.what == "the program" else "allocate"
    asked = f" could not {what} {format_bytes(r.request_bytes)}" if r.request_bytes else " ran out of device memory"
    total = f" (its program's buffers: {format_bytes(r.needed_bytes)})" if r.needed_bytes else ""
    free = "" if r.free_bytes is None else f"; {format_bytes(r.free_bytes)} was free" + (
        f", {format_bytes(r.largest_free_bytes)} of it in one piece" if r.largest_free_bytes is not None else "")
    code = f"XLA {r.code}" if r.code else "XLA"
    return f"out of memory at run time: {who}{asked}{total}{batch}{free}{damaged} ({code}: {r.reason})"


def lines(answer, show=None) -> list:
    """The lead line, XLA's largest allocations by line, and what fits."""
    out = [lead(answer, show)]
    r = answer.reason
    if r is not None and r.allocations:
        out.append(f"XLA's largest allocations ({min(len(r.allocations), _LISTED)} of {len(r.allocations)}):")
        for a in r.allocations[:_LISTED]:
            where = _where(a.file, a.line, show) or "(no source line in XLA's listing)"
            op = f" {a.op}" if a.op else ""
            out.append(f"  {format_bytes(a.bytes):>10}  {where}{op}  {a.shape}".rstrip())
    if answer.signature:
        sig = answer.signature if len(answer.signature) <= 160 else answer.signature[:160] + " ..."
        out.append(f"the failing call's signature: {sig}")
    out.extend(fit_lines(answer.fit))
    return out


def fit_lines(fit) -> list:
    """What fits, as the end of the run compiled it."""
    if not fit:
        return []
    if fit.get("error"):
        return [f"what fits: not compiled: {fit['error']}"]
    limit = fit.get("limit_bytes")
    under = f" under {format_bytes(limit)} ({fit.get('limit_from')})" if limit else ""
    parts = []
    for name, v in (fit.get("variants") or {}).items():
        label = "" if name == "recorded" else (
            f"donated (arguments {', '.join(map(str, v.get('argnums', [])))}): " if name == "donated" else f"{name}: ")
        if v.get("error"):
            parts.append(f"{label}not compiled: {v['error']}")
        elif v.get("largest") is None:
            parts.append(f"{label}not compiled ({_first_error(v)})")
        elif v.get("fits_at_batch"):
            parts.append(f"{label}fits at batch {_num(fit['batch'])} (compiled)")
        elif v["largest"] == 0:
            parts.append(f"{label}not even the smallest batch compiled fits")
        else:
            nxt = f"; {_num(v['next'])} does not" if v.get("next") else ""
            parts.append(f"{label}fits at batch {_num(v['largest'])} (compiled{nxt})")
    head = f"what fits{under}, the failing call compiled at the end ({fit.get('seconds', 0):.1f} s): "
    tail = f"; cut short by --verify-seconds: {', '.join(fit['cut_short'])}" if fit.get("cut_short") else ""
    return [head + "; ".join(parts) + tail]


def _first_error(v) -> str:
    for p in v.get("points") or []:
        if len(p) > 2 and p[2]:
            return str(p[2])[:200]
    return "no compile"


def target_lines(refusals, show=None) -> list:
    """A --target slice that refused the recorded step: XLA:TPU's figures, and the largest batch that fits."""
    out = []
    for t in refusals:
        r = t.reason
        where = _where(t.file, t.line, show)
        who = f"{t.function} ({where})" if where else t.function
        batch = f" at batch {_num(t.batch)}" if t.batch else ""
        if r is not None and r.needed_bytes and r.available_bytes:
            said = (f"needs {format_bytes(r.needed_bytes)} of {r.what}{batch}; the chip has "
                    f"{format_bytes(r.available_bytes)}")
        else:
            said = f"does not fit{batch}: {(r.reason if r else t.message)[:300]}"
        fits = (f"; fits at batch {_num(t.largest)} (compiled" + (f"; {_num(t.next)} does not)" if t.next else ")")
                if t.largest else "")
        out.append(f"{t.target}: {who} {said}{fits}")
    return out
