"""Two runs compared (analysis/rundiff.py's ``RunDiff``): the terminal's
lines and the document JSON writes. Both print the diff's one table, row
for row: the text groups it by section, the JSON and the CSV carry it as
it is."""

from __future__ import annotations

from jaxmemprof.analysis.rundiff import FINDING, LINE, LIVE_PEAK, NEW, RESOLVED, ROLE, TRUE_PEAK, RunDiff
from jaxmemprof.facts.devices import displayed
from jaxmemprof.render import findings as said
from jaxmemprof.render.escape import safe
from jaxmemprof.render.plain import aligned
from jaxmemprof.units import format_bytes


def _b(v) -> str:
    return "" if v is None else format_bytes(int(v))


def _d(v) -> str:
    return "" if v is None else format_bytes(int(v), signed=True)


def _what(r: dict) -> str:
    """A site as the new run names it (the header names both scripts; JSON and CSV: base_what)."""
    return safe(str(r["what"]))


def _said(f) -> str:
    """What a finding says it saves, in its own words ('saves 4.02 MiB (compiled)', 'saves up to ...')."""
    return said.saves(f, said.words(f)) if f is not None else ""


def _saving(r: dict, pair: tuple) -> str:
    fb, fn = pair
    if r["change"] == RESOLVED:
        return _said(fb).replace("saves", "saved", 1) if fb is not None else f"saved {_b(r['base_bytes'])}"
    if r["change"] == NEW:
        return _said(fn) if fn is not None else f"saves {_b(r['new_bytes'])}"
    before, after = _said(fb), _said(fn)
    return after if before == after else f"{before or 'nothing'} -> {after or 'nothing'}"


def _change(b, n) -> str:
    if b is None or n is None:
        return f"{_b(b) or 'none'} -> {_b(n) or 'none'}"
    return f"{_b(b)} -> {_b(n)} ({_d(n - b)})"


def rundiff_lines(d: RunDiff) -> list[str]:
    """The terminal's lines: the true peak's change first (per device),
    what the memory is by role, XLA's buffers by line inside the call, the
    findings resolved, new and kept, and the live peak last."""
    by = {s: displayed(d.section(s)).records() for s in (TRUE_PEAK, ROLE, LINE, FINDING, LIVE_PEAK)}
    scripts = f" ({safe(d.scripts[0])} -> {safe(d.scripts[1])})" if d.scripts[0] != d.scripts[1] else ""
    out = [f"jaxmemprof diff: {safe(d.base)} -> {safe(d.new)}{scripts}"]
    where = safe(d.new_where) if d.base_where == d.new_where else f"{safe(d.base_where)} -> {safe(d.new_where)}"
    if d.base_true_peak_bytes is None and d.new_true_peak_bytes is None:
        out.append("true peak: not known in either run (no jitted call's figures: recorded with --no-jit-probe?)")
    else:
        out.append(f"true peak {_change(d.base_true_peak_bytes, d.new_true_peak_bytes)}"
                   + (f", {where}" if where else "") + " (on the busiest device)")
    peaks = by[TRUE_PEAK]
    if len(peaks) > 1:
        out += [f"  {safe(str(r['device']))}: {_change(r['base_bytes'], r['new_bytes'])}" for r in peaks]
    out.append("")
    rw = d.roles_where
    out.append("What the memory is, by role" + (f" ({safe(rw[0])} -> {safe(rw[1])})" if rw[0] != rw[1]
                                                else f" ({safe(rw[1])})" if rw[1] else ""))
    if by[ROLE]:
        cells = [(_d(r["delta_bytes"]), _b(r["base_bytes"]), _b(r["new_bytes"]), safe(str(r["device"])),
                  safe(str(r["what"]))) for r in by[ROLE]]
        out += aligned(("delta", "before", "after", "device", "role"), (1, 1, 1, 0, 0), cells)
    else:
        out.append("no change (or no sampled jitted call in either run)")
    if d.omitted.get(ROLE):
        out.append(f"({d.omitted[ROLE]} more roles: --top 0 shows all)")
    out.append("")
    out.append("XLA's buffers live at the call's own peak, by line (per device)")
    if by[LINE]:
        cells = [(_d(r["delta_bytes"]), _b(r["base_bytes"]), _b(r["new_bytes"]), safe(str(r["kind"])), _what(r))
                 for r in by[LINE]]
        out += aligned(("delta", "before", "after", "kind", "site"), (1, 1, 1, 0, 0), cells)
    else:
        out.append("no change (or the true peak is in no jitted call)")
    if d.omitted.get(LINE):
        out.append(f"({d.omitted[LINE]} more lines: --top 0 shows all)")
    out.append("")
    out.append("Findings")
    if by[FINDING]:
        found: list[tuple] = [(str(r["change"]), safe(str(r["kind"])), _what(r), _saving(r, pair))
                              for r, pair in zip(by[FINDING], d.findings or [(None, None)] * len(by[FINDING]))]
        out += aligned(("change", "rule", "site", "saving"), (0, 0, 0, 0), found)
        out.append(f"{d.changes.get(RESOLVED, 0)} resolved, {d.changes.get(NEW, 0)} new")
    else:
        out.append("none in either run")
    for r in by[LIVE_PEAK]:
        out.append("")
        out.append(f"live peak {_change(r['base_bytes'], r['new_bytes'])}: the arrays the snapshots saw "
                   f"(jaxmemprof diff {safe(d.base)}@peak {safe(d.new)}@peak compares them by line)")
    return [line.rstrip() for line in out]


def rundiff_document(d: RunDiff) -> dict:
    """What JSON writes: the inputs, the true peak, and the one table's rows."""
    return {
        "command": "diff",
        "inputs": [d.base, d.new],
        "runs": True,
        "summary": {"base_true_peak_bytes": d.base_true_peak_bytes, "new_true_peak_bytes": d.new_true_peak_bytes,
                    "delta_true_peak_bytes": d.true_peak_delta, "base_where": d.base_where,
                    "new_where": d.new_where, "base_script": d.scripts[0], "new_script": d.scripts[1]},
        "omitted": dict(d.omitted),
        "rows": displayed(d.rows).records(),
    }

