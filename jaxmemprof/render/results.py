"""The rows and documents that CSV and JSON output of ``show`` and ``diff``
carry: the same columns in both, as documented in the README."""

from __future__ import annotations

import pandas as pd

from jaxmemprof.analysis.groups import Diff, Summary
from jaxmemprof.render.json import records

SHOW_VALUES = ("bytes", "count", "share")
DIFF_VALUES = ("base_bytes", "new_bytes", "delta_bytes", "base_count", "new_count", "delta_count")


def table(result: Summary | Diff) -> pd.DataFrame:
    values = SHOW_VALUES if isinstance(result, Summary) else DIFF_VALUES
    return result.rows[list(result.key_columns) + list(values)]


def document(command: str, inputs: list[str], result: Summary | Diff, value_type: str) -> dict:
    doc = {
        "command": command,
        "inputs": inputs,
        "by": result.by,
        "value_type": value_type,
    }
    show = isinstance(result, Summary)
    if show:
        doc["totals"] = {"bytes": result.total_bytes, "count": result.total_count}
    else:
        doc["totals"] = dict(result.totals)
        doc["unchanged_rows"] = result.unchanged_rows
    doc["devices"] = records(result.devices)
    doc["kinds"] = records(result.kinds)
    doc["omitted"] = {
        "rows": result.omitted_rows,
        "bytes" if show else "delta_bytes": result.omitted_bytes,
        "count" if show else "delta_count": result.omitted_count,
    }
    doc["rows"] = records(table(result))
    return doc
