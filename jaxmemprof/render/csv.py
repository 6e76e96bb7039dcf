"""CSV output: UTF-8, one header row, raw numbers, text cells escaped as
the terminal and the HTML page show them (render/escape.py: control and
bidirectional characters as ``\\x1b``, ``\\n``, ``\\u202e``), and those a
spreadsheet would run as formulas neutralised with a leading quote."""

from __future__ import annotations

import csv
from typing import TextIO

from jaxmemprof.facts.devices import displayed
from jaxmemprof.render.escape import safe_column

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_BLOCK_ROWS = 100_000


def neutralise(value: str) -> str:
    """Prefix ``'`` to text a spreadsheet would treat as a formula."""
    return "'" + value if value.startswith(_FORMULA_START) else value


def write_csv(rows, out: TextIO) -> None:
    """Write ``rows`` (a DataFrame, or a plain Table of show's and diff's
    results: header plus one line per row); object (text) columns are
    escaped and neutralised, numeric columns written as they are."""
    # CRLF, the standard CSV line end: with it the writer quotes every cell
    # holding a CR or LF, so no name can start a row of its own.
    writer = csv.writer(out, lineterminator="\r\n")
    rows = displayed(rows)  # devices named as every output names them (jaxmemprof/facts/devices.py)
    names = [str(c) for c in rows.columns]
    writer.writerow(names)
    if not hasattr(rows, "itertuples"):  # a plain Table: text is str, numbers int or float, nothing missing
        columns = [safe_column(name, list(col)) for name, col in zip(names, zip(*rows.rows))]
        for rec in zip(*columns):
            writer.writerow([neutralise(v) if isinstance(v, str) else "" if v is None else v for v in rec])
        return
    import pandas as pd

    text = [rows[c].dtype == object or pd.api.types.is_string_dtype(rows[c]) for c in rows.columns]
    # Column by column into Python values, then the rows written by the csv module's C loop; a block of
    # rows at a time (the values of a million rows would take more memory than their frame).
    for start in range(0, len(rows), _BLOCK_ROWS):
        block = rows.iloc[start:start + _BLOCK_ROWS]
        columns = []
        for name, is_text, (_, col) in zip(names, text, block.items()):
            missing = col.isna()
            values = (col.astype(object).where(~missing, "") if missing.any() else col).tolist()  # missing: empty
            if is_text:
                values = [neutralise(v) if isinstance(v, str) else v for v in safe_column(name, values)]
            columns.append(values)
        writer.writerows(zip(*columns))
