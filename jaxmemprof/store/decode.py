"""The journal's cells read as their types, for store/reader.py: each
table's columns (numbers, texts, the ones a row needs), JSON nested too deep
read as damage, and the arrays' JSON lists (shapes, sizes, devices,
addresses) as tuples.

The arrays are read by two paths that must agree on every cell (the tests
check it): the general one, table by table through ``_typed`` and
``_parse_lists``; and the fast one (reader's ``_read_intervals``), which
reads each column of a span of arrays as one text and decodes it here with
numpy (``_numbers``, ``_one_numbers``, ``_address_tuples``). A column
changed in one changes in the other, beside it.
"""

from __future__ import annotations

import json
import re
from warnings import catch_warnings, simplefilter

import numpy as np
import pandas as pd

from jaxmemprof.errors import InputError

# The journal is untrusted (SQLite columns are not typed): every table is read
# against these. table -> (numeric columns, text columns, columns a row cannot
# do without). A row missing a required value is dropped, with a warning; a
# missing optional number becomes 0 (NA for the few that may be absent).
_TABLES = {
    "snapshots": (("snapshot", "t_wall", "t_mono", "live_bytes", "buffers", "arrays", "cost_s", "wall_s"),
                  ("trigger", "label", "file"), ("snapshot", "t_wall", "live_bytes", "file")),
    "arrays": (("array_id", "py_id", "first_snapshot", "kind_id"), ("addresses",),
               ("array_id", "first_snapshot", "kind_id")),
    "array_kinds": (("kind_id", "nbytes", "stack_id"),
                    ("shape", "dtype", "shard_bytes", "devices", "sharding", "memory_kind"), ("kind_id",)),
    "array_ends": (("array_id", "last_snapshot", "end_snapshot"), ("how",),
                   ("array_id", "last_snapshot", "end_snapshot")),
    "stacks": (("stack_id",), ("frames",), ("stack_id",)),
    "executables": (("snapshot", "stack_id", "count", "code_bytes"), ("name",), ("snapshot",)),
    "memory_stats": (("snapshot", "value"), ("device", "key"), ("snapshot", "value")),
    "markers": (("marker", "t_wall", "t_mono", "after_snapshot"), ("label",), ("t_wall", "t_mono")),
    "events": (("event", "t_wall", "snapshot"), ("kind", "message"), ()),
    "jit_functions": (("function_id", "line", "jit_line", "t_wall"),
                      ("name", "qualname", "file", "jit_file", "jit_function", "jit_source", "params", "donate_argnums",
                       "donate_argnames", "static_argnums", "static_argnames", "wrapper", "wrapper_options"),
                      ("function_id",)),
    "jit_compiles": (("function_id", "call_index", "t_wall", "argument_bytes", "output_bytes", "alias_bytes",
                      "temp_bytes", "generated_code_bytes", "host_argument_bytes", "host_output_bytes",
                      "host_alias_bytes", "host_temp_bytes", "host_generated_code_bytes", "peak_bytes"),
                     ("signature",), ("function_id", "t_wall")),
    "jit_calls": (("call_id", "function_id", "call_index", "t_wall", "t_mono", "caller_line"),
                  ("caller_file", "caller_function", "inputs", "outputs", "inputs_alive", "signature", "live_before"),
                  ("call_id", "function_id", "t_wall")),
    "jit_programs": (("function_id", "length", "peak_position", "peak_bytes", "argument_bytes", "output_bytes",
                      "alias_bytes", "temp_bytes", "dump_s"), ("signature", "module"),
                     ("function_id", "peak_bytes")),
    "jit_buffers": (("function_id", "bytes", "live_start", "live_end", "at_peak"),
                    ("name", "shape", "kind", "op", "frames", "signature"), ("function_id", "bytes")),
    "jit_curves": (("function_id",), ("signature", "curve"), ("function_id",)),
    "thinned": (("snapshot",), (), ("snapshot",)),
    "jit_counts": (("function_id", "calls", "compiles", "calls_complete", "traced", "backend_compiles"), (),
                   ("function_id",)),
    "jit_call_live": (("function_id", "call", "t_wall", "counted", "seen"), ("live_before", "signature", "kind"),
                      ("function_id", "call")),
    "source_names": ((), ("file", "label"), ("file", "label")),
    "held_by": (("snapshot", "py_id", "only"), ("frames", "shape", "dtype", "kind", "holder", "names"),
                ("snapshot", "py_id", "holder")),
    "py_chains": (("chain_id", "line"), ("root_kind", "root", "file", "function", "steps", "container"),
                  ("chain_id", "root_kind", "steps")),
    "py_holders": (("snapshot", "array_id", "chain_id"), (), ("snapshot", "array_id", "chain_id")),
    "py_holder_searches": (("snapshot", "cost_s", "arrays", "found", "complete", "visited", "superseded"),
                           ("trigger",),
                           ("snapshot",)),
    "jit_plans": (("function_id", "batch", "recorded_batch", "axis", "argument_bytes", "output_bytes", "alias_bytes",
                   "temp_bytes", "generated_code_bytes", "compile_s"),
                  ("signature", "variant", "devices", "live_outside", "backend", "detail", "error"),
                  ("function_id", "variant", "batch")),
    "jit_targets": (("function_id", "batch", "recorded_batch", "axis", "argument_bytes", "output_bytes",
                     "alias_bytes", "temp_bytes", "generated_code_bytes", "compile_s"),
                    ("target", "signature", "variant", "devices", "live_outside", "backend", "detail", "error"),
                    ("target", "function_id", "variant")),  # batch NULL (not told) reads as 0
    "jit_target_buffers": (("function_id", "bytes", "program_peak_bytes"),
                           ("target", "signature", "name", "shape", "kind", "op", "frames"),
                           ("target", "function_id", "bytes")),
    "snapshot_calls": (("snapshot", "function_id"), (), ("snapshot", "function_id")),
    "jit_whatif": (("function_id", "argument_bytes", "output_bytes", "alias_bytes", "temp_bytes",
                    "generated_code_bytes", "compile_s"), ("signature", "change", "backend", "error"),
                   ("function_id", "signature")),
}
# Schema 1's arrays table (each row its own description), read as it is.
ARRAYS_V1 = (("array_id", "py_id", "first_snapshot", "nbytes", "stack_id"),
              ("shape", "dtype", "shard_bytes", "devices", "addresses", "sharding", "memory_kind"),
              ("array_id", "first_snapshot"))
# Columns whose absence means "not known" rather than 0, and the columns of seconds.
_MAY_BE_MISSING = {"end_snapshot", "after_snapshot", "stack_id", "snapshot", "peak_bytes", "call_index",
                   "calls_complete", "traced", "backend_compiles"}
_FLOAT_COLUMNS = {"t_wall", "t_mono", "cost_s", "wall_s", "dump_s", "compile_s"}
# Tables that runs recorded by earlier versions lack, in the order they were
# added (those added together in one group). The writer makes every table of
# its schema at once, at the start: a journal that has a table lacks none
# added before it, and one it lacks was dropped (dropped_tables). A table
# added later goes at the end.
ADDED_IN_ORDER = (("jit_programs", "jit_buffers"), ("thinned",), ("array_kinds",), ("jit_curves",),
                  ("held_by", "source_names"), ("jit_plans",), ("jit_whatif",), ("snapshot_calls",),
                  ("py_chains", "py_holder_searches", "py_holders"), ("jit_targets",), ("jit_target_buffers",),
                  ("jit_call_live",))
ADDED_TABLES = frozenset(t for group in ADDED_IN_ORDER for t in group)

# Journal cells that hold JSON, which the analyses parse (the jit probe's).
# A cell nested deeper than _MAX_JSON_DEPTH is damage: read as missing.
_JSON_COLUMNS = {
    "jit_functions": ("params", "donate_argnums", "donate_argnames", "static_argnums", "static_argnames",
                      "wrapper_options"),
    "jit_calls": ("inputs", "outputs", "inputs_alive", "live_before"),
    "jit_call_live": ("live_before",),
    "jit_buffers": ("frames",),
    "jit_target_buffers": ("frames",),
    "jit_curves": ("curve",),
    "held_by": ("frames", "shape", "names"),
    "jit_plans": ("devices", "live_outside", "detail"),
    "jit_targets": ("devices", "live_outside", "detail"),
    "py_chains": ("steps",),
    "jit_whatif": ("change",),
}
# The tables added for the end of a run and the holder search (run --plan,
# --target, the verifying compiles, the calls in flight, the references found
# holding arrays) are checked cell by cell against what the writer writes: a
# count of bytes (or a batch, an id) is a whole number from 0 to 2**53, a
# second a finite number from 0, a flag 0 or 1; a column the schema makes NOT
# NULL holds a value, and a compile's five figures are NULL only where its
# error says why. A row with a cell that is not so is damage: left out, and
# the table, its rowid, the column and what is wrong said (``_checked``);
# the gates then do not pass on it (analysis/check.py).
_COUNT, _ID, _SECONDS, _FLAG, _FIGURE = "count", "id", "seconds", "flag", "figure"
_FIGURES = ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "generated_code_bytes")
_COMPILED = {"function_id": _ID, **{f: _FIGURE for f in _FIGURES}, "compile_s": _SECONDS}
CELLS = {
    "jit_plans": {**_COMPILED, "batch": _COUNT, "recorded_batch": _COUNT, "axis": _COUNT},
    "jit_targets": {**_COMPILED, "batch": _COUNT, "recorded_batch": _COUNT, "axis": _COUNT},
    "jit_whatif": dict(_COMPILED),
    "jit_target_buffers": {"function_id": _ID, "bytes": _COUNT, "program_peak_bytes": _COUNT},
    "snapshot_calls": {"snapshot": _ID, "function_id": _ID},
    "jit_call_live": {"function_id": _ID, "call": _COUNT, "t_wall": _SECONDS, "counted": _COUNT, "seen": _COUNT},
    "py_chains": {"chain_id": _ID, "line": _COUNT},
    "py_holders": {"snapshot": _ID, "array_id": _ID, "chain_id": _ID},
    "py_holder_searches": {"snapshot": _ID, "cost_s": _SECONDS, "arrays": _COUNT, "found": _COUNT,
                           "complete": _FLAG, "visited": _COUNT, "superseded": _FLAG},
    # The tables the gates read besides the snapshots and the arrays (analysis/check.py's NEEDS): growth per
    # step from the markers, the true peak from the jit tables.
    "markers": {"marker": _ID, "after_snapshot": _ID, "t_wall": _SECONDS, "t_mono": _SECONDS},
    "jit_compiles": {"function_id": _ID, "call_index": _COUNT, "t_wall": _SECONDS, "peak_bytes": _COUNT,
                     **{f"{host}{f}": _COUNT for host in ("", "host_") for f in _FIGURES}},
    "jit_programs": {"function_id": _ID, "length": _COUNT, "peak_position": _COUNT, "peak_bytes": _COUNT,
                     **{f: _COUNT for f in _FIGURES[:4]}, "dump_s": _SECONDS},
    "jit_counts": {"function_id": _ID, "calls": _COUNT, "compiles": _COUNT, "calls_complete": _COUNT,
                   "traced": _COUNT, "backend_compiles": _COUNT},
    "jit_buffers": {"function_id": _ID, "bytes": _COUNT, "live_start": _COUNT, "live_end": _COUNT,
                    "at_peak": _FLAG},
    "jit_calls": {"call_id": _ID, "function_id": _ID, "call_index": _COUNT, "t_wall": _SECONDS,
                  "t_mono": _SECONDS, "caller_line": _COUNT},
}
# Their JSON cells that figures come from: what each must be (None: NULL, where the schema allows it).
_JSON_CELLS = {
    "jit_plans": {"devices": "texts", "live_outside": "counts", "detail": "object"},
    "jit_targets": {"devices": "texts", "live_outside": "counts", "detail": "object"},
    "jit_whatif": {"change": "object"},
    "jit_call_live": {"live_before": "counts"},
    "py_chains": {"steps": "steps"},
}
# The column whose text, where set, lets a compile's figures be NULL (it failed, and says why).
_ERROR = "error"
# The rowid of each row of a checked table, read beside its columns (store/reader.py).
ROWID = "_jaxmemprof_rowid"


def _schema_not_null() -> dict:
    """table -> the columns layout.SCHEMA declares NOT NULL (or a table's
    INTEGER PRIMARY KEY)."""
    from jaxmemprof.store.layout import SCHEMA

    out: dict = {}
    text = re.sub(r"--[^\n]*", "", SCHEMA)
    for name, body in re.findall(r"CREATE TABLE IF NOT EXISTS (\w+) \((.*?)\);", text, re.S):
        out[name] = tuple(part.split()[0] for part in body.split(",")
                          if part.strip() and ("NOT NULL" in part or "PRIMARY KEY" in part))
    return out


_NOT_NULL_COLUMNS = _schema_not_null()


def _shown(v) -> str:
    """A cell's value as a problem names it: short, on one line."""
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _number_problem(v, rule: str) -> str | None:
    """What is wrong with a present cell ``v`` of a column of ``rule``; None: nothing."""
    if isinstance(v, (bytes, str)):
        return f"is text ({_shown(v)}), not a number"
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        return f"is not a number ({_shown(v)})"
    if isinstance(v, (float, np.floating)) and not np.isfinite(v):
        return f"is not a finite number ({_shown(float(v))})"
    if rule == _SECONDS:
        return f"is negative ({float(v)!r})" if v < 0 else None
    if isinstance(v, (float, np.floating)) and float(v) != int(v):
        return f"is not a whole number ({float(v)!r})"
    if v < 0:
        return f"is negative ({int(v)})"
    if v >= 2**53:
        return f"is past 2**53 ({int(v) if isinstance(v, (int, np.integer)) else float(v)!r})"
    if rule == _FLAG and v not in (0, 1):
        return f"is {int(v)}, not 0 or 1"
    return None


def _json_problem(v, kind: str) -> str | None:
    """What is wrong with a present JSON cell ``v`` that must hold ``kind``."""
    if not isinstance(v, str):
        return f"is not JSON text ({_shown(v)})"
    try:
        parsed = loads(v)
    except ValueError:
        return f"is not JSON ({_shown(v)})"
    if kind == "texts":
        ok = isinstance(parsed, list) and all(isinstance(x, str) for x in parsed)
        return None if ok else f"is not a JSON list of device names ({_shown(v)})"
    if kind == "steps":
        ok = isinstance(parsed, list) and all(
            isinstance(x, list) and len(x) == 2 and isinstance(x[0], str) and not isinstance(x[1], (list, dict))
            for x in parsed)
        return None if ok else f"is not a JSON list of [kind, label] steps ({_shown(v)})"
    if kind == "object":
        return None if isinstance(parsed, dict) else f"is not a JSON object ({_shown(v)})"
    if not isinstance(parsed, dict):
        return f"is not a JSON object of bytes by device ({_shown(v)})"
    for device, n in parsed.items():
        problem = _number_problem(n, _COUNT) if n is not None else "is null"
        if problem is not None:
            return f"holds {_shown(device)}: {n!r}, which {problem.split(' (')[0]}"
    return None


def _column_problems(df: pd.DataFrame, table: str) -> list:
    """(positions of the rows with a bad cell in a column, column, the problem
    of its first) for each column of ``table`` holding one. Columns of
    numbers only (as the writer leaves them) are checked at once; a cell
    is looked at by itself only where the column holds something else, or
    a value out of its range."""
    rules, kinds = CELLS.get(table, {}), _JSON_CELLS.get(table, {})
    not_null = set(_NOT_NULL_COLUMNS.get(table, ()))
    failed = None
    out = []
    for c, col in df.items():
        if not (c in rules or c in not_null or c in kinds):
            continue
        rule, kind = rules.get(c), kinds.get(c)
        n = len(col)
        if col.dtype.kind in "iu":
            missing = np.zeros(n, dtype=bool)
        elif col.dtype.kind == "f":
            missing = np.isnan(col.to_numpy())
        else:
            missing = np.asarray(col.isna().to_numpy(), dtype=bool)
        problems: dict = {}
        if missing.any() and c in not_null:
            lost = missing
        elif missing.any() and rule == _FIGURE:
            if failed is None:  # the rows whose error says why they have no figures
                failed = (df[_ERROR].map(lambda e: isinstance(e, str) and bool(e)).to_numpy(dtype=bool)
                          if _ERROR in df.columns else np.zeros(n, dtype=bool))
            lost = missing & ~failed
        else:
            lost = None
        if lost is not None:
            for i in np.flatnonzero(lost).tolist():
                problems[i] = "is missing (NULL)" + (", and its row has no error saying why" if rule == _FIGURE else "")
        if rule is not None:
            v = col.to_numpy()
            if col.dtype.kind in "iuf":  # numbers only: those out of range looked at
                with np.errstate(invalid="ignore"):
                    bad = ~missing & ~((v >= 0) & (v < 2**53) & ((v <= 1) if rule == _FLAG else True))
                    if col.dtype.kind == "f" and rule != _SECONDS:
                        bad |= ~missing & (np.floor(np.where(missing, 0, v)) != np.where(missing, 0, v))
                look = np.flatnonzero(bad)
            else:
                look = np.flatnonzero(~missing)
            for i in look.tolist():
                problem = _number_problem(v[i], rule)
                if problem is not None:
                    problems[i] = problem
        elif kind is not None:
            present = np.flatnonzero(~missing)
            if len(present):
                values = col.to_numpy(dtype=object)
                codes, uniques = pd.factorize(pd.Series(values[present], dtype=object), use_na_sentinel=False)
                said = [_json_problem(u, kind) for u in uniques]
                for i, code in zip(present.tolist(), codes.tolist()):
                    if said[code] is not None:
                        problems[i] = said[code]
        if problems:
            out.append((np.array(sorted(problems), dtype=np.int64), c, problems[min(problems)]))
    return out


def checked(df: pd.DataFrame, table: str, warnings: list, file: str = "journal.sqlite") -> pd.DataFrame:
    """``df`` (read with each row's rowid, ``ROWID``) less its rows with a
    cell that is not what the writer writes (see CELLS), said in one line
    naming ``file``, the table, the first such row's rowid, the column and
    the problem, and noted as damage of ``table``."""
    if table not in CELLS or df.empty:
        return df  # ROWID, a column no table has, is left to _typed, which reads only the table's own
    found = _column_problems(df, table)
    if not found:
        return df
    bad = np.zeros(len(df.index), dtype=bool)
    for rows, _, _ in found:
        bad[rows] = True
    first = int(np.flatnonzero(bad)[0])
    # the first bad row's first bad column, in the table's order
    rows, column, problem = next(f for f in found if first in f[0])
    if int(rows[0]) != first:
        problem = _problem_at(df, table, column, first)
    rowids = df[ROWID].to_numpy(dtype=object) if ROWID in df.columns else None
    row = (f"rowid {rowids[first]}" if rowids is not None and not pd.isna(rowids[first])
           else f"row {first + 1}")
    count = int(bad.sum())
    note_damage(warnings, table, f"{count} row(s) of the journal's {table} are damaged and left out ({file}, "
                                 f"{table} {row}: {column} {problem})")
    return df[~bad].reset_index(drop=True)


def _problem_at(df: pd.DataFrame, table: str, column: str, i: int) -> str:
    """The problem of the cell at position ``i`` of ``column``."""
    for _rows, c, p in _column_problems(df.iloc[[i]].reset_index(drop=True), table):
        if c == column:
            return p
    return "is damaged"


class Warnings(list):
    """A reader's warnings, and which journal tables lost rows or cells to
    damage (``damaged``: table -> its first such warning). A gate reads
    ``damaged``: a figure computed from a table that is not whole is not
    checked (analysis/check.py)."""

    def __init__(self, *args):
        super().__init__(*args)
        self.damaged: dict[str, str] = {}


def note_damage(warnings: list, table: str, text: str) -> None:
    """Say ``text`` in ``warnings``, and that ``table`` is not whole (when
    ``warnings`` keeps such a record: a plain list only says it)."""
    warnings.append(text)
    damaged = getattr(warnings, "damaged", None)
    if damaged is not None and table:
        damaged.setdefault(table, text)


_MAX_JSON_DEPTH = 64
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def _too_deep(text) -> bool:
    """Whether JSON ``text`` nests lists and objects more than
    _MAX_JSON_DEPTH deep (Python's parser recurses once per level: 100,000
    would raise RecursionError). Cheap for the usual shallow cell."""
    if not isinstance(text, str) or text.count("[") + text.count("{") <= _MAX_JSON_DEPTH:
        return False
    depth = deepest = 0
    for c in _NOT_BRACKET.sub("", _JSON_STRING.sub("", text)):
        depth += 1 if c in "[{" else -1
        deepest = max(deepest, depth)
    return deepest > _MAX_JSON_DEPTH


def loads(text):
    """json.loads for untrusted text: nesting too deep is a ValueError too."""
    if _too_deep(text):
        raise ValueError(f"JSON nested more than {_MAX_JSON_DEPTH} levels deep")
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def shallow_json(df: pd.DataFrame, table: str, warnings: list) -> pd.DataFrame:
    """Cells of ``table``'s JSON columns nested too deep to parse are
    damaged: read as missing, with a warning."""
    damaged = 0
    for c in _JSON_COLUMNS.get(table, ()):
        if c in df.columns:
            deep = df[c].map(_too_deep).astype(bool)
            if deep.any():
                damaged += int(deep.sum())
                df[c] = df[c].where(~deep, None)
    if damaged:
        note_damage(warnings, table, f"{damaged} cell(s) of the journal's {table} hold JSON nested too deeply; "
                                     "read as damaged")
    return df


def typed(df: pd.DataFrame, table: str, warnings: list, spec=None) -> pd.DataFrame:
    """``df`` with the columns of ``table``'s schema (or ``spec``), numbers
    as numbers, texts as text, and the rows that lack a required value
    dropped. Column by column on numpy arrays, the frame built once at the
    end (a run's twenty tables are read on every load: pandas' per-call
    cost, not the rows, was most of it)."""
    numeric, text, required = spec or _TABLES[table]
    missing = [c for c in required if c not in df.columns]
    if missing and table == "snapshots":
        raise InputError(table, f"the journal's snapshots lack {', '.join(missing)}")
    n = len(df.index)
    columns: dict = {}
    torn: list = []  # (column, cells, the first one's problem): cells present that are no such number
    for c in numeric:
        if c not in df.columns:
            columns[c] = np.full(n, np.nan)
            continue
        col = df[c]
        if n == 0 or col.dtype.kind in "iuf":  # numbers already (or none): pd.to_numeric's identity
            values = col.to_numpy(dtype=np.float64)
        else:
            values = pd.to_numeric(col, errors="coerce").astype("float64").to_numpy()
        # Every number the writer writes is one from 0 to 2**53, a whole one but for the seconds: text,
        # infinities, negatives, fractions of a count and numbers past 2**53 (not exact as floats) are damage.
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(values) & (values >= 0) & (values < 2.0**53)
            if c not in _FLOAT_COLUMNS:
                ok &= np.floor(np.where(ok, values, 0.0)) == np.where(ok, values, 0.0)
        if not ok.all():
            bad = ~ok & ~np.asarray(col.isna().to_numpy(), dtype=bool)
            if bad.any() and c not in required:  # a required one's row is left out, and said, below
                first = int(np.flatnonzero(bad)[0])
                torn.append((c, int(bad.sum()), _cell_problem(col.iloc[first])))
            columns[c] = np.where(ok, values, np.nan)
        else:
            columns[c] = values
    for c in text:
        if c not in df.columns:
            columns[c] = np.full(n, None, dtype=object)
            continue
        values = df[c].to_numpy()
        if pd.api.types.infer_dtype(values, skipna=True) in ("string", "empty"):
            values = values.astype(object)  # text already: kept, with None where missing (a copy)
            values[pd.isna(values)] = None
        else:
            texts = [_text(v) for v in values.astype(object)]
            values = np.empty(n, dtype=object)
            values[:] = texts
            # As Series.map(_text) gives them: once one is text, pandas' str dtype, missing as NaN.
            if any(t is not None for t in texts):
                values[pd.isna(values)] = np.nan
        columns[c] = values
    if torn:
        said = "; ".join(f"{c}: {k} cell(s), the first {problem}" for c, k, problem in torn[:3])
        note_damage(warnings, table, f"cells of the journal's {table} are not what its writer writes ({said}); "
                                     "read as missing")
    keep = None
    if required:
        bad = np.zeros(n, dtype=bool)
        for c in required:
            if c in columns:
                bad |= pd.isna(columns[c])
        if bad.any():
            note_damage(warnings, table, f"{int(bad.sum())} row(s) of the journal's {table} are damaged and left out")
            keep = ~bad
    out = {}
    for c in numeric:
        values = columns[c] if keep is None else columns[c][keep]
        if c in _FLOAT_COLUMNS:
            out[c] = np.where(np.isnan(values), 0.0, values)
        elif c in _MAY_BE_MISSING:
            absent = np.isnan(values)
            out[c] = pd.arrays.IntegerArray(np.round(np.where(absent, 0.0, values)).astype(np.int64), absent)
        else:
            out[c] = np.round(np.where(np.isnan(values), 0.0, values)).astype(np.int64)
    index = pd.RangeIndex(n if keep is None else int(keep.sum()))
    for c in text:  # objects: str and None (a frame built from them would infer pandas' str dtype)
        out[c] = pd.Series(columns[c] if keep is None else columns[c][keep], index=index, dtype=object)
    return pd.DataFrame(out, index=index)


def _cell_problem(v) -> str:
    """What is wrong with a present cell of a numeric column."""
    v = v.item() if isinstance(v, np.generic) else v
    if isinstance(v, (str, bytes)):
        return f"is text ({_shown(v)})"
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):
        return f"is not a number ({_shown(v)})"
    if f != f or f in (float("inf"), float("-inf")):
        return f"is not a finite number ({_shown(v)})"
    if f < 0:
        return f"is negative ({_shown(v)})"
    if f >= 2**53:
        return f"is past 2**53 ({_shown(v)})"
    return f"is not a whole number ({_shown(v)})"


def _text(v):
    if v is None or (isinstance(v, float) and v != v):
        return None
    return v if isinstance(v, str) else str(v)


# The arrays' JSON lists, the general path: each distinct text parsed once.
def parse_lists(df: pd.DataFrame, columns, warnings: list | None = None, table: str = "") -> pd.DataFrame:
    """The JSON lists of ``columns`` as tuples (() where damaged: the
    analyses then leave the record out, and ``table``'s damage is noted in
    ``warnings``)."""
    damaged = 0
    for col in columns:
        if col not in df.columns or df.empty:
            continue
        ok = _LIST_CHECKS[col]
        # Many rows share a text (shapes, devices): parse each distinct one once.
        codes, uniques = pd.factorize(df[col], use_na_sentinel=False)
        parsed = np.empty(len(uniques), dtype=object)
        parsed[:] = _parse_uniques(np.asarray(uniques, dtype=object), ok)
        bad = np.array([v is None for v in parsed], dtype=bool)
        if bad.any():
            damaged += int(bad[codes].sum())
            for i in np.flatnonzero(bad).tolist():
                parsed[i] = ()
        df[col] = parsed[codes]
    if damaged and warnings is not None:
        note_damage(warnings, table, f"{damaged} list cell(s) of the journal's {table} are damaged; "
                                     "their records are left out")
    return df


_ONE_COUNT = r"\[(?:0|[1-9]\d{0,17})\]"  # "[140312420899712]": one address or size, below 10**18 < 2**63


def _parse_uniques(texts: np.ndarray, ok) -> list:
    """_json_list of each text; the usual one-number list ("[4096]", an
    address or a size of a single-device array) read without the JSON
    parser, the rest with it."""
    out: list[tuple | None] = [()] * len(texts)
    s = pd.Series(texts, dtype=object)
    is_text = s.map(type).to_numpy() == str  # noqa: E721 (element-wise, over an array of types)
    one = np.zeros(len(texts), dtype=bool)
    if ok in (_is_count, _is_address) and is_text.any():
        digits = s[is_text].astype(str).str.fullmatch(_ONE_COUNT)
        one[np.flatnonzero(is_text)[digits.to_numpy(dtype=bool)]] = True
        if one.any():
            values = s[one].astype(str).str.slice(1, -1).astype(np.int64).tolist()
            for i, v in zip(np.flatnonzero(one).tolist(), values):
                out[i] = (v,)
    for i in np.flatnonzero(~one).tolist():
        out[i] = _json_list(texts[i], ok)
    return out  # None where damaged


def _json_list(text, ok) -> tuple | None:
    """A JSON list whose every element passes ``ok``; None for anything else
    (a damaged record: read as (), which the analyses leave out, and
    counted as damage of its table by _parse_lists)."""
    try:
        v = loads(text)
    except (TypeError, ValueError):
        return None
    return tuple(v) if isinstance(v, list) and all(ok(x) for x in v) else None


def _is_count(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**63


def _is_text(x) -> bool:
    return isinstance(x, str)


def _is_address(x) -> bool:
    return x is None or _is_count(x)


_LIST_CHECKS = {"shape": _is_count, "shard_bytes": _is_count, "devices": _is_text, "addresses": _is_address}


# The fast path: a column of a span of arrays as one text (reader._INTERVALS), its
# addresses' texts joined by a byte that no JSON list holds.
UNIT = "\x1f"


def number_list(text, count: int) -> np.ndarray | None:
    """``count`` integers in a text, separated by spaces; None unless each
    is a whole number from 0 to 2**53 (else typed reads it as damage)."""
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    if not isinstance(text, str):
        return None
    values = _parsed(text)
    return (values if values is not None and len(values) == count and ((values >= 0) & (values < 2**53)).all()
            else None)


def _parsed(text: str) -> np.ndarray | None:
    """The integers of a text separated by spaces (past 2**63: 2**63 - 1);
    None where one is not an integer ("1.5", "abc")."""
    try:
        with catch_warnings():  # numpy warns (or, newer, raises) where the text does not parse to its end
            simplefilter("error")
            return np.fromstring(text, dtype=np.int64, sep=" ")
    except (ValueError, DeprecationWarning):
        return None


def one_numbers(text, count: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Of ``count`` texts joined by _UNIT, those that are a one-number JSON
    list ("[140312420899712]", as _ONE_COUNT matches it) and their numbers;
    None when the texts cannot be told apart."""
    if count == 0:
        return np.zeros(0, dtype=bool), np.zeros(0, dtype=np.int64)
    if not isinstance(text, str):
        return None
    raw = np.frombuffer(text.encode() + bytes([ord(UNIT)]), dtype=np.uint8)  # each text ends at a cut
    cuts = np.flatnonzero(raw == ord(UNIT))
    if len(cuts) != count:
        return None
    starts = np.concatenate([[0], cuts[:-1] + 1])
    length = cuts - starts
    digit = (raw >= ord("0")) & (raw <= ord("9"))
    others = np.add.reduceat((~digit).view(np.uint8), starts, dtype=np.int64)  # its cut too
    second = raw[np.minimum(starts + 1, len(raw) - 1)]
    one = ((length >= 3) & (length <= 20) & (others == 3) & (raw[starts] == ord("[")) & (raw[cuts - 1] == ord("]"))
           & ((second != ord("0")) | (length == 3)))  # "[0]", not "[012]"
    keep = digit & np.repeat(one, length + 1)
    values = _parsed(np.where(keep, raw, ord(" ")).tobytes().decode())
    return (one, values) if values is not None and len(values) == one.sum() else None


def address_tuples(text: str, one: np.ndarray, values: np.ndarray) -> np.ndarray | None:
    """Each array's addresses as a tuple (as _parse_lists gives them):
    ``values`` where ``one``, the rest of the texts parsed; None when one
    is damaged (the general path then says so)."""
    out = np.empty(len(one), dtype=object)
    out[one] = np.fromiter(zip(values.tolist()), dtype=object, count=len(values))  # 1-tuples
    rest = np.flatnonzero(~one)
    if len(rest):
        texts = np.array(text.split(UNIT), dtype=object)[rest]
        quiet: list = []
        out[rest] = parse_lists(pd.DataFrame({"addresses": texts}), ("addresses",), quiet)["addresses"].to_numpy()
        if quiet:
            return None
    return out

