"""The rows and documents that CSV and JSON output of ``show`` and ``diff``
carry: the same columns in both, as documented in the README."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jaxmemprof.analysis.groups import Breakdown, Diff, Table
from jaxmemprof.facts.devices import displayed

if TYPE_CHECKING:
    import pandas as pd

SHOW_VALUES = ("bytes", "count", "share")
DIFF_VALUES = ("base_bytes", "new_bytes", "delta_bytes", "base_count", "new_count", "delta_count")


def _columns(result: Breakdown | Diff) -> list[str]:
    values = SHOW_VALUES if isinstance(result, Breakdown) else DIFF_VALUES
    return list(result.key_columns) + list(values)


def table(result: Breakdown | Diff) -> pd.DataFrame:
    return result.rows[_columns(result)]


def plain_table(result: Breakdown | Diff) -> Table:
    """:func:`table` as a plain :class:`~jaxmemprof.analysis.groups.Table`
    (no pandas), for write_csv."""
    return result.table().select(_columns(result))


def document(command: str, inputs: list[str], result: Breakdown | Diff, value_type: str) -> dict:
    doc = {
        "command": command,
        "inputs": inputs,
        "by": result.by,
        "value_type": value_type,
    }
    show = isinstance(result, Breakdown)
    if show:
        doc["totals"] = {"bytes": result.total_bytes, "count": result.total_count}
    else:
        doc["totals"] = dict(result.totals)
        doc["unchanged_rows"] = result.unchanged_rows
    doc["devices"] = displayed(result.table("devices")).records()
    doc["kinds"] = result.table("kinds").records()
    doc["omitted"] = {
        "rows": result.omitted_rows,
        "bytes" if show else "delta_bytes": result.omitted_bytes,
        "count" if show else "delta_count": result.omitted_count,
    }
    doc["rows"] = displayed(result.table()).records(_columns(result))
    return doc
