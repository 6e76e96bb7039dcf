"""The answer's lines (analysis/answer.py), as the report's header and
``run``'s closing summary print them: every peak labelled with what it is."""

from __future__ import annotations

from jaxmemprof.facts.devices import display
from jaxmemprof.render.escape import safe
from jaxmemprof.units import format_bytes, format_pair

GLOSSARY = "docs/glossary.md"


def _bytes(values) -> str:
    """``16.00, 4.09, 2.04 MiB``: the unit once where all share it."""
    texts = [format_bytes(v) for v in values]
    units = {t.rpartition(" ")[2] for t in texts}
    if len(units) == 1:
        return ", ".join(t.rpartition(" ")[0] for t in texts) + " " + units.pop()
    return ", ".join(texts)


def true_peak_line(a, width: int = 10_000) -> str | None:
    """``true peak 38.23 MiB during a call of train_step (train.py:72), XLA's
    temporaries included`` (the last words left out where the line would not fit ``width``)."""
    if a.true_peak_bytes is None:
        return None
    size = format_bytes(a.true_peak_bytes)
    where = safe(display(a.true_peak_where))
    total = ""  # on several devices: the sum, at the same moment, or at its own
    if a.devices > 1 and a.true_peak_total_bytes is not None:
        total_where = a.true_peak_total_where or a.true_peak_where
        if total_where == a.true_peak_where:
            size += f" per device ({format_bytes(a.true_peak_total_bytes)} on all {a.devices})"
        else:
            size += " per device"
            total = f"; {format_bytes(a.true_peak_total_bytes)} on all {a.devices} {safe(display(total_where))}"
    if a.inside_call:
        said = [safe(a.true_peak_jitted_at)] if a.true_peak_jitted_at else []
        number, calls, sampled = getattr(a, "true_peak_call", None) or (None, None, True)
        if number is not None and not sampled:  # a counted call no sample saw: which one
            said.append(f"call {number}" + (f" of {calls}" if calls else ""))
        at = f" ({'; '.join(said)})" if said else ""
        line = f"true peak {size} {where}{at}{total}"
        bound = _bound_words(a)
        if bound:
            return line + bound
        more = ", XLA's temporaries included"
        return line + more if a.devices == 1 and len(line + more) <= width else line
    return f"true peak {size} {where} ({_none_needed_more(a)}){total}"


def _counts(a) -> str:
    """``3 of 25 calls not counted``, ``calls of g not seen``: the calls the true peak did not count."""
    counted, seen, unseen = a.calls_counted
    parts = [f"{seen - counted} of {seen} calls not counted"] if seen > counted else []
    if unseen:
        parts.append("calls of " + ", ".join(safe(u) for u in unseen[:3]) + (" and more" if len(unseen) > 3 else "")
                     + " not seen")
    return "; ".join(parts)


def _bound_words(a) -> str:
    """What the true peak's figure is, where not exact: ``, at most (...)`` or ``, at least (...)``."""
    bound = getattr(a, "true_peak_bound", "")
    if bound == "at most":
        return ", at most (the call's signature not known: its function's largest)"
    if bound == "at least":
        counts = _counts(a) if getattr(a, "calls_counted", None) is not None else ""
        return f", at least ({counts})" if counts else ", of the sampled calls"
    return ""


def _none_needed_more(a) -> str:
    """Why the true peak is at a snapshot: every call counted needed less (said as it was counted)."""
    if getattr(a, "true_peak_bound", "") != "at least":
        return "no jitted call needed more"
    if getattr(a, "calls_counted", None) is None:
        return "no sampled call needed more"
    return f"no counted call needed more; {_counts(a)}: at least"


def outside_jit_line(outside: str) -> str | None:
    """The operations run outside jit between jitted calls (analysis/outside.py), in words; None where none."""
    if not outside:
        return None
    return (f"outside jit, between jitted calls: {safe(outside)}; what these operations hold is seen only where a "
            f"snapshot fell, not counted in the true peak")


def live_peak_line(a, *, by_device: str = "") -> str | None:
    """``by_device``: the live peak's bytes per device in words, on several devices."""
    if a.live_peak_bytes is None:
        return None
    on = f" on all {a.devices} devices" if a.devices > 1 else ""
    at = f"snapshot {a.live_peak_snapshot}" + (f"; {by_device}" if by_device else "")
    return (f"live peak {format_bytes(a.live_peak_bytes)}{on} at {a.live_peak_t:.2f} s ({at})"
            + ("" if by_device else ", the arrays a snapshot saw"))


def composition_line(a, width: int = 100) -> str | None:
    """``it is: inside the call 16.00, new state 4.09, ... MiB``: the largest
    roles that fit ``width``."""
    if not a.composition:
        if getattr(a, "composition_unseen", None) is not None:  # what cannot be told, not another call's roles
            return (f"it is: not seen (no sampled call ran its signature; the largest sampled call's roles, "
                    f"{format_bytes(a.composition_unseen)}: roles.csv)")
        return None
    for n in range(len(a.composition), 0, -1):
        shown = a.composition[:n]
        sizes = _bytes([b for _, b in shown]).split(", ")  # the unit on the last where all share it
        line = "it is: " + ", ".join(f"{r} {s}" for (r, _), s in zip(shown, sizes))
        more = len(a.composition) - n + (1 if a.composition_rest else 0)
        line += f" (+{more} more)" if more else ""
        if len(line) <= width or n == 1:
            return line
    return None


def inside_line(a, width: int = 100) -> str | None:
    """The user's lines that hold the call's own peak, as many as fit ``width``."""
    mine = [x for x in a.inside if not x[2].startswith(("<", "("))]  # XLA's buffers with no line of the user's
    if not mine:
        return None
    kinds = {kind for _, kind, _ in mine}
    parts = [f"{safe(site)} {format_bytes(b)}" + ("" if len(kinds) == 1 else f" {kind}") for b, kind, site in mine]
    tail = f" ({kinds.pop()})" if len(kinds) == 1 else ""
    line = "in the call at its peak: " + parts[0]
    for i, p in enumerate(parts[1:], start=1):
        more = f", +{len(parts) - i - 1} more" if i < len(parts) - 1 else ""
        if len(line + ", " + p + more + tail) > width:
            return line + f", +{len(parts) - i} more" + tail
        line += ", " + p
    return line + tail


def fix_line(a, says) -> str | None:
    """``top fix: 2. donate at train.py:27, saves 4.01 MiB (compiled)``; ``says``: the finding's 'saves' words."""
    if a.fix is None:
        return None
    saves = says(a.fix)
    return (f"top fix: {a.fix_number}. {a.fix.rule}" + (f" at {safe(a.fix.site)}" if a.fix.site else "")
            + (f", {saves}" if saves else ""))


def change_lines(new, old: tuple, old_dir: str, new_dir: str) -> list[str]:
    """What changed since the same program's previous run (``old``: its true
    peak and live peak, analysis/peaks.py ``headline_peaks``), and the gate
    that holds it."""
    parts = []
    for name, a, b in (("true peak", old[0], new.true_peak_bytes), ("live peak", old[1], new.live_peak_bytes)):
        if a is not None and b is not None:
            parts.append(f"{name} {format_pair(a, b, exact=False)} ({format_bytes(b - a, signed=True)})")
    return [f"since the previous run ({safe(old_dir)}): " + ("; ".join(parts) or "no peak to compare"),
            f"gate: jaxmemprof check {safe(new_dir)} --baseline {safe(old_dir)} --max-increase 0"]


def counters_lines(a, outside: str = "") -> list[str]:
    """The chip's own counters beside the true peak (``a.counters``:
    analysis/counters.py), and the difference named: ``chip's counters
    15.74 GiB of 15.75 GiB (99.96 %) on tpu:0: arrays 7.35 GiB + the
    program's reservation 8.39 GiB, an upper bound`` then what is beyond
    the step's need (outputs of queued steps, the reservation, padding).
    ``outside``: the operations run outside jit between the jitted calls
    (analysis/outside.py): what they held is in the counters, not in the
    need, and the rest beyond it is said to be theirs first."""
    c = getattr(a, "counters", None) if a is not None else None
    rest_is = ("what operations outside jit held (named below), padding and small buffers" if outside
               else "padding and small buffers")
    if not c or c.get("chip_peak_bytes") is None:
        return []
    chip, limit, reserved = c["chip_peak_bytes"], c.get("bytes_limit"), c.get("peak_reserved_bytes")
    head = f"chip's counters {format_bytes(chip)}"
    if limit:
        head += f" of {format_bytes(limit)} ({100 * chip / limit:.2f} %)"
    head += f" on {safe(str(c.get('device')))}"
    if reserved is not None:
        head += (f": arrays {format_bytes(c['peak_in_use_bytes'])} (peak_bytes_in_use) + the program's reservation "
                 f"{format_bytes(reserved)} (peak_bytes_reserved)" + (", an upper bound" if c.get("upper_bound") else ""))
    else:
        head += " (peak_bytes_in_use)"
    need = c.get("needed_bytes")
    if need is None:
        return [head]
    over = c.get("over_needed_bytes") or 0
    generations = c.get("queued_generations") or 0
    if not generations:
        share = 100 * over / chip if chip else 0.0
        side = "above" if over < 0 else "below"
        rest = "" if over <= 0 or not c.get("other_bytes") else f": {rest_is}"
        return [head, f"the step's need (the true peak {format_bytes(need)}) is {abs(share):.2f} % {side} them "
                      f"({format_bytes(-over, signed=True)}){rest}"]
    parts = [f"{generations} more generation{'s' if generations > 1 else ''} of {safe(str(c.get('queued_function')))}'s "
             f"outputs, {format_bytes(c['queued_bytes'])} ({format_bytes(c['outputs_per_call_bytes'])} each), kept for "
             "steps queued ahead of the chip (async dispatch)"]
    if reserved is not None and c.get("temporaries_bytes") is not None:
        parts.append(f"the program's reservation {format_bytes(reserved - c['temporaries_bytes'], signed=True)} "
                     "from XLA's temporaries and code")
    if c.get("other_bytes"):
        parts.append(f"{format_bytes(c['other_bytes'], signed=True)} {rest_is}")
    return [head, f"beyond the step's need (the true peak {format_bytes(need)}): {format_bytes(over, signed=True)}: "
                  + "; ".join(parts)]
