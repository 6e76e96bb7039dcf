"""Property-based fuzzing of the run-directory reader and the CSV and JSON writers.

- The run-directory reader, on random mutations of a real small run's
  ``journal.sqlite`` bytes, on hand edits of its cells (any value in any
  column: SQLite's columns are not typed), and on random mutations of its
  ``manifest.json`` text and values: ``load_run`` either returns a Run whose
  report ``build_report(attribute(run))`` succeeds, or raises
  InputError; never another exception.
- ``write_csv`` on random frames of text (any unicode, control characters,
  leading ``= + - @``, tab, CR), integers (negative, huge), floats (NaN, inf)
  and missing values: the output parses back to the same rows and columns,
  text escaped as everywhere names are shown (``render/escape.safe``: control
  and bidi characters as Python writes them), text that a spreadsheet would
  run starts with ``'``, numbers stay numbers.
- ``write_json`` on random nested dicts and lists of those values (also
  tuples and numpy scalars, as DataFrame rows hold them): valid JSON, NaN and
  infinities as null, everything else as it was.

The malformed-pprof property lives in test_bad_input.py; hostile names
through show and diff in test_hostile_names.py.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import itertools
import os
import json
import math
import pickle
import random
import re
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import run_cli, write_script

from jaxmemprof import load_run
from jaxmemprof.analysis.report import build_report
from jaxmemprof.errors import InputError
from jaxmemprof.render.csv import write_csv
from jaxmemprof.render.escape import safe
from jaxmemprof.render.json import write_json
from jaxmemprof.analysis.attributed import attribute

FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def reader_examples(searched: int) -> int:
    """How many examples a run-reader property runs. Each loads and reports a
    real run (a few tenths of a second): the README's command, whose profile
    ("ci", tests/conftest.py) runs fixed examples, runs a fixed 25 of each,
    beside the cases the search once found (test_what_the_search_found, and
    the extreme integers below); a random search (--hypothesis-profile=fuzz)
    runs ``searched``."""
    return 25 if settings.default.derandomize else searched


# --------------------------------------------------------------------------
# The run-directory reader


SMALL = """
import jax
import jax.numpy as jnp
import jaxmemprof

keep = []
f = jax.jit(lambda a: a * 2.0)
g = jax.jit(lambda a: a + 1.0, donate_argnums=0)
state = jnp.zeros((64,), jnp.float32)
for i in range(5):
    keep.append(f(jnp.ones((32 * (i + 1),), jnp.float32)))
    state = g(state)
    jaxmemprof.mark(f"step {i}")
    jaxmemprof.snapshot(f"s{i}")
    if i % 2:
        keep.pop(0)
"""


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """A real small finished run (its journal in one file), made once."""
    d = tmp_path_factory.mktemp("real-run")
    script = write_script(d, "small.py", SMALL)
    run_cli("run", "-q", "-o", d / "run", "--interval", "5", script, cwd=d, check=0)
    run = load_run(d / "run")
    assert run.finished and not run.warnings and len(run.snapshots) >= 6
    assert not run.arrays.empty and not run.markers.empty
    build_report(attribute(run))
    assert not (d / "run" / "journal.sqlite-wal").exists()
    return d / "run"


class _Dirs:
    """Fresh run directories for the examples of one test: the manifest and
    journal are written per example; the snapshot files are shared (the
    reader never writes)."""

    def __init__(self, root: Path, source: Path):
        self.root, self.source = root, source
        self.counter = itertools.count()

    def make(self, journal: bytes | None = None, manifest: bytes | None = None) -> Path:
        return self.make_from(self.source, journal, manifest)

    def make_from(self, source: Path, journal: bytes | None = None, manifest: bytes | None = None) -> Path:
        d = self.root / f"ex{next(self.counter):05d}"
        d.mkdir()
        # Hard links share the files (a reader never follows a symlinked snapshots/).
        (d / "snapshots").mkdir()
        for f in (source / "snapshots").iterdir():
            os.link(f, d / "snapshots" / f.name)
        (d / "manifest.json").write_bytes(
            manifest if manifest is not None else (source / "manifest.json").read_bytes())
        (d / "journal.sqlite").write_bytes(
            journal if journal is not None else (source / "journal.sqlite").read_bytes())
        return d


@pytest.fixture(scope="module")
def run_dirs(tmp_path_factory, real_run):
    return _Dirs(tmp_path_factory.mktemp("examples"), real_run)


# The contents of the runs whose report built (every field but the path, as
# pickled): most mutations of a journal's bytes land where SQLite never reads,
# or make the same damage, and a Run read as one already reported is reported
# alike (the report reads the Run and its snapshot files, which every
# example's directory shares), so it is not built again.
_REPORTED: set = set()


def _contents(run) -> str | None:
    try:
        fields = {f.name: getattr(run, f.name) for f in dataclasses.fields(run) if f.name != "path"}
        return hashlib.sha256(pickle.dumps(fields, protocol=5)).hexdigest()
    except (pickle.PicklingError, TypeError, AttributeError):
        return None  # not to be told apart: reported


def _load_and_report(d: Path):
    """The property: load_run raises InputError (one line), or the report of
    what it returns builds."""
    try:
        run = load_run(d)
    except InputError as exc:
        assert "\n" not in str(exc)
        return None
    key = _contents(run)
    if key is None or key not in _REPORTED:
        build_report(attribute(run))
        if key is not None:
            _REPORTED.add(key)
    return run


def _mutate(data: bytes, ops) -> bytes:
    b = bytearray(data)
    for op, pos, value in ops:
        if not b:
            break
        pos %= len(b)
        if op == "flip":
            b[pos] ^= 1 << (value % 8)
        elif op == "set":
            b[pos] = value
        elif op == "zero-run":
            b[pos:pos + 1 + value] = bytes(len(b[pos:pos + 1 + value]))
        elif op == "random-run":
            n = len(b[pos:pos + 1 + value])
            b[pos:pos + n] = bytes((value * 31 + i * 17) % 256 for i in range(n))
        elif op == "truncate":
            del b[pos:]
        elif op == "truncate-page":
            del b[(pos // 4096) * 4096:]
        elif op == "delete":
            del b[pos]
        elif op == "insert":
            b.insert(pos, value)
    return bytes(b)


def _positions(size: int):
    # SQLite's header (first 100 bytes), the page headers (each page's first
    # 12 bytes), and anywhere (uniformly: Hypothesis favours small integers,
    # so the position comes from a drawn seed).
    return st.one_of(
        st.integers(0, 99),
        st.builds(lambda page, off: page * 4096 + off, st.integers(0, max(0, size // 4096 - 1)), st.integers(0, 11)),
        st.integers(0, 2**32).map(lambda seed: random.Random(seed).randrange(max(1, size))),
        st.integers(0, 2**32).map(lambda seed: random.Random(seed).randrange(max(1, size))),
    )


def _ops(size: int, kinds):
    return st.lists(st.tuples(st.sampled_from(kinds), _positions(size), st.integers(0, 255)),
                    min_size=1, max_size=5)


JOURNAL_OPS = ["flip", "flip", "flip", "set", "set", "zero-run", "random-run", "truncate", "truncate-page",
               "delete", "insert"]


@settings(FUZZ, max_examples=100)
@given(data=st.data())
def test_mutated_journal_bytes_load_or_raise_input_error(real_run, run_dirs, data):
    journal = (real_run / "journal.sqlite").read_bytes()
    mutated = _mutate(journal, data.draw(_ops(len(journal), JOURNAL_OPS), label="ops"))
    _load_and_report(run_dirs.make(journal=mutated))


# Values a hand-edited journal can hold in any column.
HOSTILE_CELLS = st.one_of(
    st.none(),
    st.sampled_from(["", "x", "lots", "1e309", "-1", "[", "[[1]]", '[["f", "x", "g"]]', "{}", "null", "NaN",
                     "snapshots/../../manifest.json", "/dev/null", "\x00", "=1+1"]),
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([0, -1, 1, 2**31, 2**53 + 1, 2**63 - 1, -(2**63)]),
    st.floats(allow_nan=False),
    st.binary(max_size=8),
    st.text(max_size=8),
)


def _tables_and_columns(db: Path) -> dict:
    con = sqlite3.connect(db)
    try:
        tables = [t for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: [c[1] for c in con.execute(f"PRAGMA table_info({t})")] for t in tables}
    finally:
        con.close()


@settings(FUZZ, max_examples=reader_examples(100))
@given(data=st.data())
def test_hand_edited_journal_cells_load_or_raise_input_error(real_run, run_dirs, data):
    """Any value in any cell: a journal edited by hand (or by another tool)
    is still read, or refused in one line."""
    d = run_dirs.make()
    db = d / "journal.sqlite"
    schema = _tables_and_columns(db)
    con = sqlite3.connect(db)
    try:
        for _ in range(data.draw(st.integers(1, 3), label="edits")):
            table = data.draw(st.sampled_from(sorted(schema)), label="table")
            column = data.draw(st.sampled_from(schema[table]), label="column")
            value = data.draw(HOSTILE_CELLS, label="value")
            every_row = data.draw(st.booleans(), label="every row")
            where = "" if every_row else f" WHERE rowid = (SELECT min(rowid) FROM {table})"
            try:
                con.execute(f"UPDATE {table} SET {column} = ?{where}", (value,))
            except sqlite3.Error:
                pass  # a constraint refused it (NOT NULL, a duplicate key)
        con.commit()
    finally:
        con.close()
    _load_and_report(d)


# The arrays of a usual journal are read by a fast path (store/reader.py
# _read_intervals: each column parsed in C); any journal it cannot read
# exactly as written goes through the general path. Their results must agree.

SHARDED = """
import jax
jax.config.update("jax_num_cpu_devices", 2)
import jax.numpy as jnp
import numpy as np
import jaxmemprof
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

mesh = Mesh(np.array(jax.devices()), ("x",))
keep = []
for i in range(4):
    keep.append(jax.device_put(jnp.ones((64, 8 * (i + 1)), jnp.float32), NamedSharding(mesh, P("x"))))
    keep.append(jnp.zeros((16 * (i + 1),), jnp.float32) + i)
    jaxmemprof.snapshot(f"s{i}")
    if i % 2:
        keep.pop(0)
"""


@pytest.fixture(scope="module")
def sharded_run(tmp_path_factory):
    """A real run with arrays over two devices (several addresses a row),
    each read (``--addresses all``), some still alive at the end."""
    d = tmp_path_factory.mktemp("sharded-run")
    script = write_script(d, "sharded.py", SHARDED)
    run_cli("run", "-q", "--addresses", "all", "-o", d / "run", "--interval", "5", script, cwd=d, check=0)
    return d / "run"


def _fast_path(d: Path):
    """The fast path's arrays of ``d``, or None where it leaves them to the general path."""
    from jaxmemprof.store import journal, reader

    con = journal.connect_read_only(d / "journal.sqlite")
    try:
        return reader._read_intervals(con)
    finally:
        con.close()


def _general_path(d: Path):
    """What load_run gives by the general path (None: InputError)."""
    from unittest import mock

    from jaxmemprof.store import reader

    with mock.patch.object(reader, "_read_intervals", lambda con: None):
        try:
            return load_run(d)
        except InputError:
            return None


def _same_by_either_path(d: Path) -> None:
    """Where the fast path reads ``d``, it reads what the general path does;
    where it does not, load_run takes the general path: it loads ``d`` or
    raises InputError."""
    if _fast_path(d) is None:
        try:
            load_run(d)
        except InputError:
            pass
        return
    general = _general_path(d)
    assert general is not None
    got = load_run(d)
    pd.testing.assert_frame_equal(got.arrays, general.arrays)
    assert got.warnings == general.warnings


def _agree(d: Path):
    if _fast_path(d) is None:
        return False
    general = _general_path(d)
    assert general is not None
    assert not [w for w in general.warnings if "array" in w], general.warnings  # it read them as written
    got = load_run(d)
    pd.testing.assert_frame_equal(got.arrays, general.arrays)
    assert got.warnings == general.warnings
    return True


def test_the_usual_journal_takes_the_fast_path_and_reads_as_the_general(real_run, sharded_run, run_dirs):
    for run in (real_run, sharded_run):
        assert _agree(run_dirs.make_from(run))
    run = load_run(sharded_run)
    assert (run.arrays["addresses"].map(len) == 2).sum() >= 4  # the sharded ones
    assert run.arrays["addresses"].map(len).eq(1).any() and run.arrays["how"].isna().any()


# Cells that look like what the writer writes, almost.
NEAR_CELLS = st.one_of(
    HOSTILE_CELLS,
    st.sampled_from(["[0]", "[00]", "[0123]", "[]", "[null]", "[1,2]", "[1, 2]", "[ 5]", "[5 ]", "[+5]", "[-5]",
                     "[1e5]", "[5.0]", "5", "[5", "5]", "[9223372036854775807]", "[9223372036854775808]",
                     "[999999999999999999]", "[1\x1f2]", "\x1f", "[\u00e9]", "12", " 12", "1.5", "3.0", "1e3",
                     "freed", "deleted", "gone", "0x10", "inf"]),
    st.integers(0, 2**54),
)


@settings(FUZZ, max_examples=reader_examples(150))
@given(data=st.data())
def test_an_edited_arrays_table_reads_the_same_by_either_path(sharded_run, run_dirs, data):
    d = run_dirs.make_from(sharded_run)
    db = d / "journal.sqlite"
    con = sqlite3.connect(db)
    try:
        for _ in range(data.draw(st.integers(1, 3), label="edits")):
            table = data.draw(st.sampled_from(["arrays", "array_ends"]), label="table")
            column = data.draw(st.sampled_from([c[1] for c in con.execute(f"PRAGMA table_info({table})")]),
                               label="column")
            value = data.draw(NEAR_CELLS, label="value")
            row = data.draw(st.integers(0, 40), label="row")
            try:
                con.execute(f"UPDATE {table} SET {column} = ? WHERE rowid = "
                            f"(SELECT rowid FROM {table} ORDER BY rowid LIMIT 1 OFFSET ?)", (value, row))
            except sqlite3.Error:
                pass  # a constraint refused it (NOT NULL, a duplicate key)
        con.commit()
    finally:
        con.close()
    _same_by_either_path(d)


MANIFEST_FIELDS = ["argv", "command", "cwd", "start_epoch", "start_time", "end_time", "duration_s", "exit_status",
                   "ended_by", "process_index", "process_count", "backend", "devices", "environment",
                   "jaxlib_version", "jax_version", "settings", "schema_version", "hostname"]
JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False),
              st.text(max_size=12)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=6,
)


@settings(FUZZ, max_examples=reader_examples(100))
@given(data=st.data())
def test_mutated_manifest_loads_or_raises_input_error(real_run, run_dirs, data):
    """manifest.json: random byte mutations of its text, or any JSON value in
    any of its fields (or the whole document)."""
    text = (real_run / "manifest.json").read_bytes()
    how = data.draw(st.sampled_from(["bytes", "field", "field", "document"]), label="how")
    if how == "bytes":
        manifest = _mutate(text, data.draw(_ops(len(text), ["flip", "set", "truncate", "delete", "insert"])))
    elif how == "field":
        doc = json.loads(text)
        for _ in range(data.draw(st.integers(1, 3), label="fields")):
            doc[data.draw(st.sampled_from(MANIFEST_FIELDS), label="field")] = data.draw(JSON_VALUES, label="value")
        manifest = json.dumps(doc).encode()
    else:
        manifest = json.dumps(data.draw(JSON_VALUES, label="document")).encode()
    _load_and_report(run_dirs.make(manifest=manifest))


def _sql_edit(*statements):
    def edit(d: Path):
        con = sqlite3.connect(d / "journal.sqlite")
        try:
            for statement in statements:
                con.execute(statement)
            con.commit()
        finally:
            con.close()
    return edit


def _schema_not_utf8(d: Path):
    # A byte of the markers table's schema text that is not UTF-8 (SQLite's
    # error message quotes the damaged schema).
    journal = bytearray((d / "journal.sqlite").read_bytes())
    at = journal.index(b"CREATE TABLE markers (")
    journal[at + len("CREATE TABLE markers ")] = 0xFF
    (d / "journal.sqlite").write_bytes(bytes(journal))


# What the searches found, each fixed since (with the extreme integers of
# test_extreme_integers_read_the_same_by_either_path, and the damaged-run
# cases of test_fault_injection.py): (run, the edit).
FOUND = {
    # An end naming no array (the fast path then read the arrays otherwise than the general path).
    "end-naming-no-array": ("sharded", _sql_edit(
        "UPDATE array_ends SET array_id = 999999 WHERE rowid = (SELECT min(rowid) FROM array_ends)")),
    # A repeated jit_counts row (its key lost to damage: a copy of the table has none) crashed rejits.
    "jit-counts-repeated": ("real", _sql_edit(
        "CREATE TABLE jc AS SELECT * FROM jit_counts", "INSERT INTO jc SELECT * FROM jit_counts",
        "DROP TABLE jit_counts", "ALTER TABLE jc RENAME TO jit_counts")),
    # A schema that is not UTF-8 was a traceback, not a one-line error.
    "schema-not-utf8": ("real", _schema_not_utf8),
}


@pytest.mark.parametrize("case", list(FOUND))
def test_what_the_search_found(real_run, sharded_run, run_dirs, case):
    which, edit = FOUND[case]
    d = run_dirs.make_from(real_run if which == "real" else sharded_run)
    edit(d)
    if _load_and_report(d) is not None:
        _same_by_either_path(d)


def test_unmutated_copy_reports_like_the_original(real_run, run_dirs):
    """The harness itself: an unmutated copy loads with no warning."""
    run = _load_and_report(run_dirs.make())
    assert run is not None and not run.warnings
    assert run.snapshots["live_bytes"].tolist() == load_run(real_run).snapshots["live_bytes"].tolist()


# --------------------------------------------------------------------------
# The CSV writer

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
MISSING = (None, float("nan"), pd.NA)

TEXT = st.one_of(
    st.text(),
    st.builds(lambda p, t: p + t, st.sampled_from(["=", "+", "-", "@", "\t", "\r", "\n", "\r\n", " =", "'", '"', ",",
                                                     "\x00", "=HYPERLINK(", "-1", "+1", "@SUM("]), st.text()),
    st.text(st.characters(max_codepoint=0x1F)),
)
INTS = st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([0, -1, -(2**63), 2**63 - 1]))
BIG_INTS = st.one_of(st.integers(), st.sampled_from([2**64, -(2**64) - 1, 10**30, -(10**30)]))
FLOATS = st.one_of(st.floats(), st.sampled_from([float("nan"), float("inf"), float("-inf"), -0.0, 1e308, -1e-308]))


def _column(kind: str, n: int):
    """(a strategy for the values, the pandas dtype to build with)."""

    def maybe(s):
        return st.one_of(s, st.sampled_from(MISSING))

    return {
        "text": (st.lists(maybe(TEXT), min_size=n, max_size=n), object),
        "string": (st.lists(st.one_of(TEXT, st.just(pd.NA)), min_size=n, max_size=n), "string"),
        "int": (st.lists(INTS, min_size=n, max_size=n), "int64"),
        "nullable-int": (st.lists(st.one_of(INTS, st.just(pd.NA)), min_size=n, max_size=n), "Int64"),
        "big-int": (st.lists(st.one_of(BIG_INTS, st.none()), min_size=n, max_size=n), object),
        "float": (st.lists(FLOATS, min_size=n, max_size=n), "float64"),
        "mixed": (st.lists(maybe(st.one_of(TEXT, INTS, FLOATS)), min_size=n, max_size=n), object),
    }[kind]


@st.composite
def frames(draw):
    n = draw(st.integers(0, 6), label="rows")
    kinds = draw(st.lists(st.sampled_from(["text", "string", "int", "nullable-int", "big-int", "float", "mixed"]),
                          min_size=1, max_size=6), label="columns")
    cols = {}
    for i, kind in enumerate(kinds):
        values_st, dtype = _column(kind, n)
        values = draw(values_st, label=f"c{i} ({kind})")
        cols[f"c{i}_{kind}"] = pd.Series(values, dtype=dtype)
    return pd.DataFrame(cols)


def _is_missing(v) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


def _expected_cell(v) -> str | None:
    """The exact cell text for text and missing values; None for numbers
    (checked by value)."""
    if _is_missing(v):
        return ""
    if isinstance(v, str):
        v = safe(v)
        return "'" + v if v.startswith(FORMULA_START) else v
    return None


@settings(FUZZ, max_examples=200)
@given(frame=frames())
def test_csv_round_trips_and_neutralises_formulas(frame):
    out = io.StringIO(newline="")
    write_csv(frame, out)
    rows = list(csv.reader(io.StringIO(out.getvalue(), newline="")))
    assert rows[0] == list(frame.columns)
    assert len(rows) == 1 + len(frame)
    for r, row in enumerate(rows[1:]):
        assert len(row) == frame.shape[1], row
        for c, cell in enumerate(row):
            v = frame.iat[r, c]
            expected = _expected_cell(v)
            if expected is not None:
                assert cell == expected, (frame.columns[c], v, cell)
            elif isinstance(v, (int, np.integer)) and not isinstance(v, bool):
                # An integer stays a plain integer: no quote, no decimal point.
                assert re.fullmatch(r"-?\d+", cell), (frame.columns[c], v, cell)
                assert int(cell) == int(v)
            else:
                assert isinstance(v, (float, np.floating)), (frame.columns[c], type(v), v)
                # A float stays a number that reads back to itself.
                assert not cell.startswith("'"), (frame.columns[c], v, cell)
                assert float(cell) == float(v), (frame.columns[c], v, cell)
        # Nothing a spreadsheet would evaluate, except numbers.
        for cell in row:
            if cell.startswith(FORMULA_START):
                assert re.fullmatch(r"-\d+(\.\d*)?(e[+-]?\d+)?|-inf|\+?\d+(\.\d*)?(e[+-]?\d+)?", cell), cell


def test_csv_examples():
    frame = pd.DataFrame({
        "site": ["=cmd|' /C calc'!A0", "+1", "-2", "@SUM(A1)", "\tx", "\rx", "plain", None],
        "bytes": pd.Series([-5, 0, 2**62, 1, 2, 3, 4, None], dtype="Int64"),
        "share": [float("nan"), float("inf"), -0.5, 1.0, 0.0, 2.5, -1e-9, 3.0],
    })
    out = io.StringIO(newline="")
    write_csv(frame, out)
    rows = list(csv.reader(io.StringIO(out.getvalue(), newline="")))
    assert [r[0] for r in rows[1:]] == ["'=cmd|' /C calc'!A0", "'+1", "'-2", "'@SUM(A1)", "\\tx", "\\rx", "plain", ""]
    assert [r[1] for r in rows[1:]] == ["-5", "0", str(2**62), "1", "2", "3", "4", ""]
    assert rows[1][2] == "" and float(rows[2][2]) == math.inf and float(rows[3][2]) == -0.5


def test_csv_in_blocks_of_rows_is_one_table(monkeypatch):
    """Rows are written a block at a time: a block boundary changes no byte,
    even where a block has a missing value and the next has none."""
    from jaxmemprof.render import csv as csv_writer

    frame = pd.DataFrame({
        "site": [f"=s{i}" if i % 3 else f"s{i}" for i in range(25)],
        "bytes": pd.Series([None if i == 2 else i for i in range(25)], dtype="Int64"),
        "share": [float("nan") if i == 20 else i / 4 for i in range(25)],
        "alive": [i % 2 == 0 for i in range(25)],
    })
    whole = io.StringIO(newline="")
    write_csv(frame, whole)
    monkeypatch.setattr(csv_writer, "_BLOCK_ROWS", 7)
    blocks = io.StringIO(newline="")
    write_csv(frame, blocks)
    assert blocks.getvalue() == whole.getvalue()
    rows = list(csv.reader(io.StringIO(blocks.getvalue(), newline="")))
    assert len(rows) == 26 and rows[3][1] == "" and rows[8][1] == "7" and rows[21][2] == "" and rows[22][3] == "False"
    assert rows[2][0] == "'=s1" and rows[4][0] == "s3"


# --------------------------------------------------------------------------
# The JSON writer

# Text, integers (huge too), floats (NaN, inf), missing values, and the numpy
# scalars that DataFrame rows hold (float32 and tuples: see the test after).
SCALARS = st.one_of(
    TEXT, st.integers(), FLOATS, st.sampled_from(MISSING + (pd.NaT,)),
    st.builds(np.int64, INTS), st.builds(np.float64, FLOATS),
    st.builds(np.int32, st.integers(-(2**31), 2**31 - 1)), st.booleans(),
)
NESTED = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)),
    max_leaves=20,
)


def _expected_json(v):
    """What ``v`` must read back as."""
    if v is None or v is pd.NA or v is pd.NaT:
        return None
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        return f if math.isfinite(f) else None
    if isinstance(v, str):
        return v
    if isinstance(v, (list, tuple)):
        return [_expected_json(x) for x in v]
    if isinstance(v, dict):
        return {k: _expected_json(x) for k, x in v.items()}
    raise AssertionError(f"unexpected value {v!r}")


def _no_constants(name):
    raise AssertionError(f"{name} in the JSON output")


@settings(FUZZ, max_examples=200)
@given(doc=st.dictionaries(TEXT.filter(lambda k: k != "schema_version"), NESTED, max_size=6))
def test_json_is_valid_and_nan_becomes_null(doc):
    out = io.StringIO()
    write_json(doc, out)
    text = out.getvalue()
    back = json.loads(text, parse_constant=_no_constants)  # NaN, Infinity: not JSON
    assert back.pop("schema_version") == 2
    assert back == _expected_json(doc)


def test_json_examples():
    out = io.StringIO()
    write_json({"rows": [{"a": float("nan"), "b": float("-inf"), "c": np.float64("inf"), "d": pd.NA,
                          "e": 2**70, "f": "=x", "g": np.int64(-3)}]}, out)
    assert json.loads(out.getvalue(), parse_constant=_no_constants)["rows"] == [
        {"a": None, "b": None, "c": None, "d": None, "e": 2**70, "f": "=x", "g": -3}]


def test_json_nan_inside_tuples_and_numpy_float32_becomes_null():
    """DataFrame rows carry tuples (an array's shape, devices) and numpy
    scalars; NaN there is not JSON either."""
    for doc, expected in (
        ({"a": (1.0, float("nan"))}, {"a": [1.0, None]}),
        ({"a": np.float32("nan")}, {"a": None}),
        ({"a": [np.float32("inf")]}, {"a": [None]}),
    ):
        out = io.StringIO()
        write_json(doc, out)
        back = json.loads(out.getvalue(), parse_constant=_no_constants)
        back.pop("schema_version")
        assert back == expected


@pytest.mark.parametrize("value", [-2**63, -2**63 + 1, 2**63 - 1, -1, 2**53 + 1])
@pytest.mark.parametrize("column", ["py_id", "array_id", "first_snapshot", "kind_id"])
def test_extreme_integers_read_the_same_by_either_path(sharded_run, run_dirs, column, value):
    """The cells the property test once found the paths to disagree on
    (py_id = -2**63: -2**63 by the fast path, 0 by the general), fixed here."""
    d = run_dirs.make_from(sharded_run)
    con = sqlite3.connect(d / "journal.sqlite")
    try:
        con.execute(f"UPDATE arrays SET {column} = ? WHERE rowid = (SELECT min(rowid) FROM arrays)", (value,))
        con.commit()
    except sqlite3.Error:
        pytest.skip(f"{column} cannot hold {value}")
    finally:
        con.close()
    _same_by_either_path(d)
