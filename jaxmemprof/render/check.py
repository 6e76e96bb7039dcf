"""``check``'s lines: one per check (``FAIL`` or ``ok``), and its JSON document."""

from __future__ import annotations

from jaxmemprof.render.escape import safe
from jaxmemprof.units import format_bytes


def _limit_text(o) -> str:
    if o.check == "fail-on":
        return f"--fail-on {','.join(o.facts.get('rules', []))}"
    if o.check == "max-increase":
        return f"--max-increase {o.limit:g}%"
    if o.check == "target-fits":
        return f"--target-fits {safe(o.facts.get('target', ''))}"
    if o.check == "out-of-memory":
        return "out-of-memory"
    if o.check == "max-growth":
        return f"--max-growth {format_bytes(o.limit)}/{o.unit.split('/')[-1]}"
    return f"--{o.check} {format_bytes(o.limit)}"


def _held_by(details) -> str:
    if not details:
        return ""
    site, b = details[0]
    return f", held by {safe(site)} {format_bytes(b)}"


def lines(outcomes, process: int | None = None) -> list[str]:
    """Violations first, one line each (one per finding for --fail-on), then
    the checks that held; ``process``: of a multi-process job, named on each line."""
    failed: list = []
    held: list = []
    for o in outcomes:
        out = held if o.held else failed
        tag = "ok  " if o.held else "FAIL"
        limit = _limit_text(o) if process is None else f"process {process}: {_limit_text(o)}"
        if o.check == "max-peak":
            out.append(f"{tag} {limit}: peak {format_bytes(o.value)}{_held_by(o.details)}")
        elif o.check == "max-true-peak":
            where = o.facts.get("where") or ""
            per = " per device" if (o.facts.get("devices") or 1) > 1 else ""
            out.append(f"{tag} {limit}: estimated true peak {format_bytes(o.value)}{per}"
                       f"{' (' + safe(where) + ')' if where else ''}")
        elif o.check == "max-growth":
            per = o.unit.split("/")[-1]
            text = f"{tag} {limit}: grows {format_bytes(o.value)}/{per}"
            if o.details:
                text += ", at " + ", ".join(f"{safe(s)} {format_bytes(g, signed=True)}/{per}" for s, g in o.details)
            out.append(text)
        elif o.check == "fail-on":
            if o.held:
                out.append(f"{tag} {limit}: no such finding")
            for rule, severity, site in o.details:
                out.append(f"{tag} {limit}: [{severity}] {rule}{' at ' + safe(site) if site else ''}")
        elif o.check == "target-fits" and o.value is None:  # XLA:TPU refused it for the device's memory
            out.append(f"{tag} {limit}: {safe(o.site)} does not fit a {safe(o.facts.get('chip', 'chip'))}: "
                       f"{safe(str(o.facts.get('error', '')).splitlines()[0][:300])}")
        elif o.check == "target-fits":
            out.append(f"{tag} {limit}: {safe(o.site)} needs {format_bytes(o.value)} per device, "
                       f"{'within' if o.held else 'more than'} the {format_bytes(o.limit)} XLA may use of a "
                       f"{safe(o.facts.get('chip', 'chip'))} ({format_bytes(o.facts.get('hbm_bytes', 0))} HBM)")
        elif o.check == "out-of-memory":  # the run ran out of memory: XLA's reason, and what fits
            f = o.facts
            needed = (f"needs {format_bytes(f['needed_bytes'])} of {safe(f.get('what') or 'memory')}"
                      if f.get("needed_bytes") else f"could not allocate {format_bytes(f['request_bytes'])}"
                      if f.get("request_bytes") else "ran out of memory")
            has = f", the device has {format_bytes(f['available_bytes'])}" if f.get("available_bytes") else ""
            has += f", {format_bytes(f['free_bytes'])} was free" if f.get("free_bytes") is not None else ""
            has += (f" ({format_bytes(f['largest_free_bytes'])} in one piece)"
                    if f.get("largest_free_bytes") is not None else "")
            has += f"; XLA's message gives figures that are no size: {'; '.join(f['damaged'])}" if f.get("damaged") \
                else ""
            batch = f" at batch {int(f['batch']):,}" if f.get("batch") else ""
            fits = (f"; fits at batch {int(f['fits_at_batch']):,} (compiled)" if f.get("fits_at_batch") else "")
            code = f"XLA {f['code']}" if f.get("code") else "XLA"
            out.append(f"{tag} out-of-memory ({f.get('when')}): {safe(o.site)} {needed}{batch}{has}{fits} "
                       f"({code}: {safe(f.get('reason', ''))[:300]})")
        elif o.check == "max-increase":
            what = o.facts.get("what", "peak")
            pct = "an increase" if o.value == float("inf") else f"{o.value:+.1f}%"
            held_by = _held_by(o.details) if what == "peak" else ""
            out.append(f"{tag} {limit}: {what} {format_bytes(o.facts.get('bytes', 0))} is {pct} on the "
                       f"baseline's {format_bytes(o.facts.get('baseline_bytes', 0))}{held_by}")
    return failed + held


def document(run: str, baseline: str | None, results) -> dict:
    """The JSON document: every check, with its figures; ``results``:
    (process or None, outcomes) pairs (``process`` is null for one run)."""
    return {
        "command": "check",
        "run": run,
        "baseline": baseline,
        "ok": all(o.held for _, outcomes in results for o in outcomes),
        "checks": [
            {"process": n, "check": o.check, "limit": o.limit, "value": o.value, "unit": o.unit, "held": o.held,
             "site": o.site, "details": [list(d) for d in o.details], **o.facts}
            for n, outcomes in results for o in outcomes
        ],
    }


def _first_clause(detail: str) -> str:
    """The reader's warning up to its list of names: ``3 snapshot file(s)
    missing (snapshots 1, 2, 3)``."""
    return detail.split(";")[0].split("):")[0] + (")" if "):" in detail.split(";")[0] else "")


def unchecked_text(u) -> str:
    """Why checks cannot be made (an analysis.check.Unchecked), as the
    problem of a one-line error: what is missing, then which checks."""
    checks = " and ".join(f"--{c}" for c in u.checks)
    verb = "cannot be checked"
    if u.reason == "no-snapshot":
        why = "has no readable snapshot" + (f" ({safe(_first_clause(u.detail))})" if u.detail else "")
    elif u.reason == "no-memory-events":
        why = ("holds no memory events (a profile without them has no snapshot: its live peak and growth are not "
               "in it; --max-true-peak and --fail-on read its programs)")
    elif u.reason == "lost-snapshots":
        why = f"{safe(_first_clause(u.detail))}, so its figures are not all there"
    elif u.reason == "damaged":
        why = f"is damaged ({safe(_first_clause(u.detail))}), so its figures are not all there"
    elif u.reason == "running":
        why = (f"is still running (its last snapshot at {u.detail} s): its figures are not final; give "
               "--allow-unfinished to check what it has so far")
    elif u.reason == "killed":
        why = (f"did not finish (killed after its last snapshot at {u.detail} s): its figures stop there; give "
               "--allow-unfinished to check them")
    elif u.reason == "no-jit":
        why = ("has no figures from inside jitted calls (recorded with --no-jit-probe, or no jitted function "
               "was compiled)")
        verb += "; give --max-peak"
    elif u.reason == "few-snapshots":
        why = (f"has {u.have} snapshot{'' if u.have == 1 else 's'} before its exit, and growth is measured over "
               f"{u.needed} at least")
    elif u.reason == "not-compiled":
        why = f"has no compile for the TPU slice {safe(u.detail)}"
    elif u.reason == "cut":
        name, _, cut = u.detail.partition(": ")
        why = (f"had its end cut short ({safe(cut)}): its compiles for the TPU slice {safe(name)} may not all have "
               "been made")
    elif u.reason == "oom-unread":
        why = f"ran out of memory, and its message is not one jaxmemprof reads ({safe(u.detail)})"
        verb = "cannot be gated on XLA's reason"
    else:  # pragma: no cover - every reason is worded above
        why = f"lacks what the checks need ({u.reason})"
    return f"{why}: {checks} {verb}"
