"""Which operations ran outside jit between the program's jitted calls,
and where (capture/jit/outside.py records JAX's compiles of them): what
they held between snapshots is not in the true peak, and the report says
so (docs/advice.md, "What the true peak does not count"). Those before the
first call (a model's initialisation) or after the last (the final loss)
are not said: they run beside no state of the loop's."""

from __future__ import annotations

import json

from jaxmemprof.capture.jit.outside import EVENT

_SITES = 3  # sites named; the rest counted


def outside_jit(ar) -> str:
    """``dot, add +2 more at mnist.py:20 (accuracy)``: the operations JAX
    compiled outside jit between the run's jitted calls (one before, one
    after), by the user's line that ran them; '' where none (or the run did
    not record them)."""
    ev = getattr(ar.run, "events", None)
    if ev is None or ev.empty or not {"kind", "message"} <= set(ev.columns):
        return ""
    said = [m for m in ev.loc[ev["kind"] == EVENT, "message"] if isinstance(m, str)]
    try:
        doc = json.loads(said[-1]) if said else {}
        total, compiles = int(doc.get("calls") or 0), list(doc.get("compiles") or [])
    except (ValueError, AttributeError, TypeError):
        return ""
    by_site: dict = {}
    for c in compiles:
        before = c.get("calls_before") if isinstance(c, dict) else None
        if not isinstance(before, int) or not 0 < before < total:
            continue
        file, line, function = c.get("file"), c.get("line"), c.get("function")
        site = f"{ar.files.display_path(file)}:{line} ({function})" if isinstance(file, str) else "a line not found"
        ops = by_site.setdefault(site, [])
        if c.get("op") not in ops:
            ops.append(str(c.get("op")))
    parts = []
    for site, ops in list(by_site.items())[:_SITES]:
        more = f" +{len(ops) - 3} more" if len(ops) > 3 else ""
        parts.append(f"{', '.join(ops[:3])}{more} at {site}")
    if len(by_site) > _SITES:
        parts.append(f"+{len(by_site) - _SITES} more lines")
    return "; ".join(parts)
