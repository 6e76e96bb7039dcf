"""JSON has no NaN or infinity: ``finite(o)`` is ``o`` with each one as None.

A leaf (imports nothing of the package), so that the run directory's
manifest (store/) and every JSON output (render/) clean their documents the
same way."""

from __future__ import annotations

import math


def finite(o):
    """``o`` with every float that is not finite replaced by None, through
    dicts, lists and tuples; numpy scalars (float32 included) as Python's."""
    if hasattr(o, "item") and not isinstance(o, (list, dict, tuple)):
        try:
            o = o.item()
        except (TypeError, ValueError):
            pass
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, dict):
        return {k: finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [finite(v) for v in o]
    return o
