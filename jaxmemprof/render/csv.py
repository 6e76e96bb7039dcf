"""CSV output: UTF-8, one header row, raw numbers, text cells that a
spreadsheet would run as formulas neutralised with a leading quote."""

from __future__ import annotations

import csv
from typing import TextIO

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def neutralise(value: str) -> str:
    """Prefix ``'`` to text a spreadsheet would treat as a formula."""
    return "'" + value if value.startswith(_FORMULA_START) else value


def write_csv(rows, out: TextIO) -> None:
    """Write ``rows`` (a DataFrame, or a plain Table of show's and diff's
    results: header plus one line per row); object (text) columns are
    neutralised, numeric columns written as they are."""
    # CRLF, the standard CSV line end: with it the writer quotes every cell
    # holding a CR or LF, so no name can start a row of its own.
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(list(rows.columns))
    if not hasattr(rows, "itertuples"):  # a plain Table: text is str, numbers int or float, nothing missing
        for rec in rows.rows:
            writer.writerow([neutralise(v) if isinstance(v, str) else "" if v is None else v for v in rec])
        return
    import pandas as pd

    # Column by column into Python values, then every row written by the csv module's C loop.
    columns = []
    for _, col in rows.items():
        missing = col.isna()
        values = (col.astype(object).where(~missing, "") if missing.any() else col).tolist()  # missing: empty
        if col.dtype == object or pd.api.types.is_string_dtype(col):
            values = [neutralise(v) if isinstance(v, str) else v for v in values]
        columns.append(values)
    writer.writerows(zip(*columns))
