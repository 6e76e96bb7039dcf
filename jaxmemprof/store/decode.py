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
    "markers": (("marker", "t_wall", "t_mono", "after_snapshot"), ("label",), ("t_wall",)),
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
_ARRAYS_V1 = (("array_id", "py_id", "first_snapshot", "nbytes", "stack_id"),
              ("shape", "dtype", "shard_bytes", "devices", "addresses", "sharding", "memory_kind"),
              ("array_id", "first_snapshot"))
# Columns whose absence means "not known" rather than 0, and the columns of seconds.
_MAY_BE_MISSING = {"end_snapshot", "after_snapshot", "stack_id", "snapshot", "peak_bytes", "call_index",
                   "calls_complete", "traced", "backend_compiles"}
_FLOAT_COLUMNS = {"t_wall", "t_mono", "cost_s", "wall_s", "dump_s", "compile_s"}
# Tables that runs recorded by earlier versions lack.
_ADDED_TABLES = {"jit_programs", "jit_buffers", "jit_curves", "thinned", "array_kinds", "source_names", "held_by",
                 "jit_plans", "jit_whatif", "snapshot_calls", "py_chains", "py_holders", "py_holder_searches",
                 "jit_targets", "jit_target_buffers"}

# Journal cells that hold JSON, which the analyses parse (the jit probe's).
# A cell nested deeper than _MAX_JSON_DEPTH is damage: read as missing.
_JSON_COLUMNS = {
    "jit_functions": ("params", "donate_argnums", "donate_argnames", "static_argnums", "static_argnames",
                      "wrapper_options"),
    "jit_calls": ("inputs", "outputs", "inputs_alive", "live_before"),
    "jit_buffers": ("frames",),
    "jit_target_buffers": ("frames",),
    "jit_curves": ("curve",),
    "held_by": ("frames", "shape", "names"),
    "jit_plans": ("devices", "live_outside", "detail"),
    "jit_targets": ("devices", "live_outside", "detail"),
    "py_chains": ("steps",),
    "jit_whatif": ("change",),
}
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


def _loads(text):
    """json.loads for untrusted text: nesting too deep is a ValueError too."""
    if _too_deep(text):
        raise ValueError(f"JSON nested more than {_MAX_JSON_DEPTH} levels deep")
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def _shallow_json(df: pd.DataFrame, table: str, warnings: list) -> pd.DataFrame:
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


def _typed(df: pd.DataFrame, table: str, warnings: list, spec=None) -> pd.DataFrame:
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
    for c in numeric:
        if c not in df.columns:
            columns[c] = np.full(n, np.nan)
            continue
        col = df[c]
        if n == 0 or col.dtype.kind in "iuf":  # numbers already (or none): pd.to_numeric's identity
            values = col.to_numpy(dtype=np.float64)
        else:
            values = pd.to_numeric(col, errors="coerce").astype("float64").to_numpy()
        # Infinities and numbers past 2**53 (not exact as floats) are damage too.
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(values) & (np.abs(values) < 2.0**53)
        columns[c] = values if ok.all() else np.where(ok, values, np.nan)
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


def _text(v):
    if v is None or (isinstance(v, float) and v != v):
        return None
    return v if isinstance(v, str) else str(v)


# The arrays' JSON lists, the general path: each distinct text parsed once.
def _parse_lists(df: pd.DataFrame, columns, warnings: list | None = None, table: str = "") -> pd.DataFrame:
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
    out = [()] * len(texts)
    s = pd.Series(texts, dtype=object)
    is_text = s.map(type).to_numpy() == str
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
        v = _loads(text)
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
_UNIT = "\x1f"


def _numbers(text, count: int) -> np.ndarray | None:
    """``count`` integers in a text, separated by spaces; None unless each
    is an integer below 2**53 (beyond, _typed reads it as damage)."""
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    if not isinstance(text, str):
        return None
    values = _parsed(text)
    # Not np.abs: it leaves -2**63 as it is (below 2**53), which the general path reads as damage.
    return (values if values is not None and len(values) == count and ((values > -2**53) & (values < 2**53)).all()
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


def _one_numbers(text, count: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Of ``count`` texts joined by _UNIT, those that are a one-number JSON
    list ("[140312420899712]", as _ONE_COUNT matches it) and their numbers;
    None when the texts cannot be told apart."""
    if count == 0:
        return np.zeros(0, dtype=bool), np.zeros(0, dtype=np.int64)
    if not isinstance(text, str):
        return None
    raw = np.frombuffer(text.encode() + bytes([ord(_UNIT)]), dtype=np.uint8)  # each text ends at a cut
    cuts = np.flatnonzero(raw == ord(_UNIT))
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


def _address_tuples(text: str, one: np.ndarray, values: np.ndarray) -> np.ndarray | None:
    """Each array's addresses as a tuple (as _parse_lists gives them):
    ``values`` where ``one``, the rest of the texts parsed; None when one
    is damaged (the general path then says so)."""
    out = np.empty(len(one), dtype=object)
    out[one] = np.fromiter(zip(values.tolist()), dtype=object, count=len(values))  # 1-tuples
    rest = np.flatnonzero(~one)
    if len(rest):
        texts = np.array(text.split(_UNIT), dtype=object)[rest]
        quiet: list = []
        out[rest] = _parse_lists(pd.DataFrame({"addresses": texts}), ("addresses",), quiet)["addresses"].to_numpy()
        if quiet:
            return None
    return out

