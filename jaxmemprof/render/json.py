"""JSON output: one object with ``schema_version``, the inputs and the rows."""

from __future__ import annotations

import json
import sys
from typing import TextIO

from jaxmemprof.facts.devices import displayed
from jaxmemprof.finite import finite

# The JSON documents' schema (2: the summary's true peaks named true_peak_bytes, on the busiest device,
# true_peak_total_bytes and true_peak_where; 1 before). The run directory's is store/layout.py's.
JSON_SCHEMA_VERSION = 2


def records(rows) -> list[dict]:
    """A DataFrame's rows as dicts (a plain Table's too)."""
    rows = displayed(rows)  # devices named as every output names them (jaxmemprof/facts/devices.py)
    if not hasattr(rows, "to_dict"):
        return rows.records()
    return rows.to_dict(orient="records")


def default(o):
    pd = sys.modules.get("pandas")  # none of its values can be here if it was never imported
    if pd is not None and (o is pd.NA or o is pd.NaT):
        return None
    # What this returns is encoded as it is: cleaned here too (allow_nan=False
    # would otherwise fail on a NaN inside it).
    if hasattr(o, "item"):  # numpy scalars
        return finite(o.item())
    if isinstance(o, (tuple, set, frozenset)):
        return finite(list(o))
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def write_json(doc: dict, out: TextIO) -> None:
    body = {"schema_version": JSON_SCHEMA_VERSION, **doc}
    # Compact: indenting would force Python's pure-Python encoder (several
    # times slower on a large run); pipe through `jq .` to read it.
    json.dump(finite(body), out, default=default, allow_nan=False)
    out.write("\n")


def json_text(doc: dict) -> str:
    """The document ``write_json`` writes, as one string (for a command
    that must know it has it all before it writes)."""
    body = {"schema_version": JSON_SCHEMA_VERSION, **doc}
    return json.dumps(finite(body), default=default, allow_nan=False) + "\n"


def strict_dumps(obj, **kwargs) -> str:
    """JSON text for ``obj`` with NaN and infinities as null (never the
    ``NaN`` that Python writes and JSON does not have)."""
    return json.dumps(finite(obj), allow_nan=False, **kwargs)
