"""Read a run directory into tidy frames; also a plain directory of .prof files.

Run directories are untrusted input: a run killed mid-way, a journal edited by
hand, a missing snapshot file. The reader loads what is there, and says in
``Run.warnings`` what is missing; it only raises InputError when nothing
usable is left.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from jaxmemprof.errors import InputError
from jaxmemprof.pprof.reader import Profile, load_profile
from jaxmemprof.store import layout
from jaxmemprof.store.decode import (ADDED_TABLES, ARRAYS_V1, CELLS, UNIT, ROWID, Warnings, address_tuples,
                                     checked, loads, number_list, one_numbers, parse_lists, shallow_json, typed,
                                     note_damage)
from jaxmemprof.store.agree import dropped_tables, markers_agree
from jaxmemprof.store.jit_tables import JOURNAL_TABLES as JIT_TABLES, JitTables
from jaxmemprof.store.journal import connect_read_only, recorder_running, tolerant_text

PROFILE_SUFFIXES = (".prof", ".prof.gz", ".pb.gz", ".pprof")

# The journal's tables are read against store/decode.py's _TABLES (each
# column's type); the description an array names in array_kinds:
_KIND_COLUMNS = ("shape", "dtype", "nbytes", "shard_bytes", "devices", "sharding", "memory_kind", "stack_id")

_HELD_BY_COLUMNS = ("snapshot", "py_id", "frames", "shape", "dtype", "kind", "holder", "names", "only")

# Manifest fields and the types a reader relies on.
_MANIFEST_TYPES: dict[str, type | tuple[type, ...]] = {
    "argv": list, "command": list, "cwd": str, "start_epoch": (int, float), "duration_s": (int, float),
    "process_index": int, "process_count": int, "environment": dict, "devices": list, "backend": str,
    "exit_status": int, "ended_by": str, "end_time": str, "start_time": str, "jax_version": str,
    "jaxlib_version": str, "platform": str, "settings": dict,
}

_CHUNK_ROWS = 100_000
# A manifest is a few KiB; one far larger is not ours.
_MAX_MANIFEST_BYTES = 16 * 1024**2


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _check_manifest(manifest: dict, warnings: list) -> dict:
    for key, kind in _MANIFEST_TYPES.items():
        v = manifest.get(key)
        if v is not None and (not isinstance(v, kind) or isinstance(v, bool) and kind is not bool):
            warnings.append(f"manifest.json: {key} is not a {getattr(kind, '__name__', 'number')}; ignored")
            manifest = {k: w for k, w in manifest.items() if k != key}
    if isinstance(manifest.get("argv"), list):
        manifest["argv"] = [str(a) for a in manifest["argv"]]
    return manifest


@dataclass
class Run:
    """One run directory (one process).

    - ``snapshots``: ``snapshot, t`` (seconds since the run started), ``t_wall,
      trigger, label, file, live_bytes, buffers, arrays, cost_s, wall_s,
      thinned, process`` (``cost_s``: CPU time the snapshot took; ``thinned``:
      its profile file was removed on purpose as a long run went, its row kept).
    - ``arrays``: one row per array identity (interval form): ``array_id,
      first_snapshot, last_snapshot`` (the last snapshot it was seen alive in),
      ``end_snapshot`` (the first it was gone in; NA if alive at the end),
      ``how`` (freed/deleted), ``shape, dtype, nbytes, shard_bytes, devices,
      addresses, sharding, memory_kind, stack_id, py_id, process``.
    - ``stacks``: ``stack_id`` -> frames ``[(file, line, function), ...]``,
      innermost first.
    - ``executables``: per snapshot, loaded executables per creation stack and
      HLO module name: ``snapshot, stack_id, name, count, code_bytes``.
    - ``jit``: what the jit probe saw: ``functions``, ``compiles`` (memory
      analysis per compiled signature), ``calls`` (sampled calls: input and
      output leaves as JSON, and whether each input was still held at the
      next call), ``counts`` (calls and compiles per function), ``plans``
      (run --plan: the step compiled at other batch sizes; empty without it),
      ``whatif`` (recorded signatures compiled with the advised donation made),
      ``snapshot_calls`` (the calls in progress as each snapshot started);
      see store/layout.py for the columns.
    - ``memory_stats`` (``snapshot, device, key, value``), ``markers``,
      ``events``, and the ``manifest``.
    - ``source_names``: file -> label, for code whose file name is no file
      to show (a notebook's cells: ``In [7]``); empty in runs recorded before.
    - ``held_by``: what held live arrays at a snapshot, where the program's
      environment names it (IPython's output history): ``snapshot, py_id,
      frames, shape, dtype, kind, holder, names, only``; empty in runs
      recorded before.
    - ``py_holders``: the Python references found holding live arrays
      (capture/py_holders.py): ``chains``, ``holders`` (snapshot, array_id,
      chain_id) and ``searches`` (their cost), as the journal's py_chains,
      py_holders and py_holder_searches; empty tables in runs recorded before.
    - ``has_arrays``: False for a plain directory of .prof files.
    """

    path: Path
    manifest: dict
    snapshots: pd.DataFrame
    arrays: pd.DataFrame
    stacks: dict
    memory_stats: pd.DataFrame
    executables: pd.DataFrame
    jit: JitTables
    markers: pd.DataFrame
    events: pd.DataFrame
    has_arrays: bool = True
    finished: bool = True
    running: bool = False  # not finished, and its recording process still holds the run
    warnings: list = field(default_factory=list)
    source_names: dict = field(default_factory=dict)
    held_by: pd.DataFrame = field(default_factory=lambda: _empty(_HELD_BY_COLUMNS))
    py_holders: dict = field(default_factory=dict)
    # Why the work of the run's end (the verifying compiles, --plan's and --target's compiles and searches)
    # may not all have been done ('': it ran to its end): see end_cut()
    end_cut: str = ""

    @property
    def damaged(self) -> dict:
        """Journal table -> why it is not whole (rows or cells left out, or
        unreadable): the figures computed from it are partial."""
        return dict(getattr(self.warnings, "damaged", {}))

    def profile_path(self, snapshot: int) -> Path:
        row = self.snapshots.loc[self.snapshots["snapshot"] == snapshot]
        if row.empty:
            raise InputError(str(self.path), f"has no snapshot {snapshot}")
        if "thinned" in row and bool(row["thinned"].iloc[0]):
            raise InputError(f"{self.path}@{snapshot}", "was thinned as the run went (a long run keeps its last "
                                                        "10 minutes whole, one older snapshot per time bucket, and "
                                                        "the peak, labelled and trigger snapshots): pick a kept one")
        p = self.path / row["file"].iloc[0]
        if self.has_arrays and layout.entry_kind(p) == "link":  # put there since the run was read
            raise InputError(str(p), layout.READ_REFUSAL)
        return p

    def profile(self, snapshot: int, **kwargs) -> Profile:
        return load_profile(self.profile_path(snapshot), name=f"{self.path}@{snapshot}", **kwargs)


# The event a run whose end phase was interrupted records (capture/session.py, api.py).
_END_INTERRUPTED = "the end of the run was interrupted"


def end_cut(manifest: dict, finished: bool, running: bool, events: pd.DataFrame | None = None) -> str:
    """Why the work of a run's end, after the script (the verifying
    compiles, run --plan's and --target's compiles and their searches for
    the largest batch), may not all have been done; '' when the run says
    it ran to its end. A finished run says so when a signal skipped the
    rest of that phase (the manifest's ``end_phase.skipped_by``, or its
    event); a run that did not finish may have been stopped in it."""
    phase = manifest.get("end_phase")
    skipped = phase.get("skipped_by") if isinstance(phase, dict) else None
    if isinstance(skipped, str) and skipped:
        return f"{skipped} skipped the rest of the run's end"
    if events is not None and not events.empty and "message" in events.columns:
        said = [str(m) for m in events["message"] if isinstance(m, str) and m.startswith(_END_INTERRUPTED)]
        if said:
            return said[0].split(":")[0]
    if running:
        return "the run is still running"
    if not finished:
        return ("the run was killed after the script ended" if manifest.get("script_end") else
                "the run did not finish (killed)")
    return ""


def is_run_directory(path: Path) -> bool:
    return (path / layout.MANIFEST).is_file() or (path / layout.JOURNAL).is_file()


def _program(manifest: dict) -> tuple | None:
    """What a run ran: its command line, the script resolved against its
    working directory (a rerun of the same command, its code perhaps changed)."""
    argv, cwd = manifest.get("argv"), manifest.get("cwd")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        return None
    first = argv[0]
    if isinstance(cwd, str) and not first.startswith("-"):
        first = os.path.realpath(os.path.join(cwd, first))
    return (first, *argv[1:])


def previous_run(path) -> Path | None:
    """The latest other run directory beside ``path`` (in its parent) of the
    same command that started before it and ended, or None: the run a rerun
    is compared with. Links and unreadable manifests are passed over."""
    path = Path(path)
    try:
        mine = read_manifest(path / layout.MANIFEST)
    except (OSError, ValueError):
        return None
    program, start = _program(mine), mine.get("start_epoch")
    if program is None or not isinstance(start, (int, float)):
        return None
    best = None
    try:
        siblings = list(path.parent.iterdir())
    except OSError:
        return None
    for d in siblings:
        if d == path or layout.entry_kind(d) == "link" or not d.is_dir():
            continue
        try:
            m = read_manifest(d / layout.MANIFEST)
        except (OSError, ValueError):
            continue
        t = m.get("start_epoch")
        if _program(m) != program or not isinstance(t, (int, float)) or t >= start or m.get("ended_by") is None:
            continue
        if best is None or t > best[0]:
            best = (t, d)
    return None if best is None else best[1]


def load_run(path) -> Run:
    """Read a run directory, or a directory of .prof files taken with
    ``jax.profiler.save_device_memory_profile``."""
    path = Path(path)
    if not path.exists():
        raise InputError(str(path), "no such run directory")
    if not path.is_dir():
        raise InputError(str(path), "is not a directory (a run is a directory; a .prof file is read by show)")
    link = layout.linked_entry(path)
    if link is not None:  # never followed out of the run
        raise InputError(str(link), layout.READ_REFUSAL)
    if is_run_directory(path):
        return _load_journal_run(path)
    profiles = [p for p in path.iterdir() if p.is_file() and p.name.endswith(PROFILE_SUFFIXES)]
    if not profiles:
        raise InputError(str(path), "is neither a jaxmemprof run (no manifest.json or journal) nor a directory of .prof files")
    return _load_profile_directory(path, profiles)


def _empty(columns) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})


def _query(con, table: str, warnings: list, spec=None) -> pd.DataFrame:
    """One journal table, typed (see _TABLES; the tables of _CELLS checked
    cell by cell first, each damaged row named by its rowid); empty, with a
    warning, when it cannot be read."""
    raw = _read(con, table, warnings, rowid=table in CELLS)
    return shallow_json(typed(checked(raw, table, warnings), table, warnings, spec), table, warnings)


def _read(con, table: str, warnings: list, rowid: bool = False) -> pd.DataFrame:
    """One journal table as it is (with ``rowid``, each row's rowid too, as
    column ROWID, where the table has one). Read in chunks: a day-long run's
    arrays are millions of rows, and a row's Python objects are many times
    the size of its columns."""
    if rowid:
        try:
            con.execute(f"SELECT rowid FROM {table} LIMIT 0")
        except sqlite3.Error:
            rowid = False  # a table WITHOUT ROWID, or none: its rows are named by their place
    sql = f'SELECT rowid AS "{ROWID}", * FROM {table}' if rowid else f"SELECT * FROM {table}"
    try:
        try:  # sqlite3's own decoding, in C, for the usual table of UTF-8 text
            chunks = list(pd.read_sql_query(sql, con, chunksize=_CHUNK_ROWS))
        except (sqlite3.OperationalError, pd.errors.DatabaseError, UnicodeDecodeError) as exc:
            if "decode" not in str(exc).lower():
                raise
            con.text_factory = tolerant_text  # a damaged cell: read the table again, escaping it
            try:
                chunks = list(pd.read_sql_query(sql, con, chunksize=_CHUNK_ROWS))
            finally:
                con.text_factory = str
        return chunks[0] if len(chunks) == 1 else pd.concat(chunks, ignore_index=True)
    except (sqlite3.Error, pd.errors.DatabaseError, UnicodeDecodeError) as exc:
        if not (table in ADDED_TABLES and "no such table" in str(exc)):  # not in a run recorded before them
            note_damage(warnings, table, f"journal table {table} unreadable ({_one_line(exc)}); left empty")
        return pd.DataFrame()


def _query_arrays_and_ends(con, warnings: list) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The arrays joined with their ends (and None), for the usual journal;
    any other (schema 1, a damaged one): the arrays (as _query_arrays) and
    the array_ends table, read table by table."""
    joined = _read_intervals(con)
    if joined is not None:
        return joined, None
    return _query_arrays(con, warnings), _query(con, "array_ends", warnings)


_HOW = ("freed", "deleted")
# The arrays of a span of ids, joined with their ends: each column as one
# text of numbers (an end's how as 0: none, 1, 2: _HOW, 3: another), and the
# addresses' texts joined by a byte that no JSON list holds (_UNIT); parsed by
# numpy (store/decode.py), with no Python object per cell (a day-long run's
# arrays are millions of rows).
_INTERVALS = (
    "SELECT count(*), group_concat(a.array_id, ' '), group_concat(a.py_id, ' '),"
    " group_concat(a.first_snapshot, ' '), group_concat(a.kind_id, ' '),"
    " group_concat(ifnull(e.last_snapshot, 0), ' '), group_concat(ifnull(e.end_snapshot, 0), ' '),"
    f" group_concat(CASE WHEN e.array_id IS NULL THEN 0 WHEN e.how = '{_HOW[0]}' THEN 1"
    f" WHEN e.how = '{_HOW[1]}' THEN 2 ELSE 3 END, ' '), group_concat(a.addresses, char({ord(UNIT)}))"
    " FROM arrays a LEFT JOIN array_ends e ON e.array_id = a.array_id WHERE a.array_id BETWEEN ? AND ?")
_SPAN_ROWS = 500_000  # arrays a span
_NEXT_SPAN = "SELECT array_id FROM arrays WHERE array_id >= ? ORDER BY array_id LIMIT 1 OFFSET ?"
# Columns no row may lack (NOT NULL): a missing cell would shift the others.
_NOT_NULL = {"arrays": ("array_id", "py_id", "first_snapshot", "kind_id", "addresses"),
             "array_ends": ("array_id", "last_snapshot", "end_snapshot", "how")}


def _read_intervals(con) -> pd.DataFrame | None:
    """The arrays of a schema-2 journal joined with their ends and
    descriptions, as _query_arrays and _array_intervals' join give them
    (``last_snapshot`` NA while alive), read without a Python object per
    cell; None when any row is not as the writer writes it (a schema-1 or
    damaged journal, read by the general path, which says what it left out)."""
    try:
        con.execute("BEGIN")  # its reads see one state of a journal still being written, as one SELECT does
    except sqlite3.Error:
        return None
    try:
        return _intervals_read(con)
    finally:
        if con.in_transaction:
            con.execute("ROLLBACK")


def _intervals_read(con) -> pd.DataFrame | None:
    """_read_intervals, inside its transaction."""
    try:
        for table, needed in _NOT_NULL.items():
            info = {row[1]: row for row in con.execute(f"PRAGMA table_info({table})")}
            if not all(c in info and (info[c][3] or info[c][5]) for c in needed):  # notnull, or the key
                return None
        lo, hi = con.execute("SELECT min(array_id), max(array_id) FROM arrays").fetchone()
        if lo is None:
            return None  # no array: the general path's empty frame
        if not all(isinstance(v, int) and abs(v) < 2**53 for v in (lo, hi)):
            return None
        parts, start = [], lo
        while start is not None:
            following = con.execute(_NEXT_SPAN, (start, _SPAN_ROWS)).fetchone()
            following = following[0] if following else None
            if following is not None and not (isinstance(following, int) and start < following <= hi):
                return None
            count, *numbers, addresses = con.execute(
                _INTERVALS, (start, hi if following is None else following - 1)).fetchone()
            columns = [number_list(t, count) for t in numbers]
            ones = one_numbers(addresses, count)
            if any(c is None for c in columns) or ones is None:
                return None
            tuples = address_tuples(addresses, *ones)
            if tuples is None:
                return None
            parts.append(columns + [tuples])
            start = following
        (ends,) = con.execute("SELECT count(*) FROM array_ends").fetchone()
        quiet: list = []
        kinds = parse_lists(_query(con, "array_kinds", quiet), ("shape", "shard_bytes", "devices"), quiet)
    except (sqlite3.Error, UnicodeError, OverflowError):
        return None
    array_id, py_id, first, kind_id, last, end, how, addresses = (np.concatenate(c) for c in zip(*parts))
    if (how == 3).any() or ends != int((how > 0).sum()):  # an unknown how; an end naming no array
        return None
    if quiet or (len(array_id) > 1 and not (np.diff(array_id) > 0).all()) or kinds["kind_id"].duplicated().any():
        return None
    kinds = kinds.set_index("kind_id")
    if not np.isin(kind_id, kinds.index.to_numpy()).all():
        return None
    alive = how == 0
    out = pd.DataFrame({
        "array_id": array_id, "py_id": py_id, "first_snapshot": first,
        "last_snapshot": pd.arrays.IntegerArray(last, alive), "end_snapshot": pd.arrays.IntegerArray(end, alive),
        "how": pd.Series(np.array((None,) + _HOW, dtype=object)[how], dtype=object),
    })
    described = kinds.reindex(kind_id).reset_index(drop=True)
    for c in _KIND_COLUMNS:
        out[c] = described[c]
    out["addresses"] = pd.Series(addresses, dtype=object)
    return out


def _query_arrays(con, warnings: list) -> pd.DataFrame:
    """The arrays table with each array's description: schema 2 names it
    in array_kinds (each parsed once, shared by its arrays); schema 1
    repeats it in every row. JSON lists parsed (see _parse_lists)."""
    raw = _read(con, "arrays", warnings)
    if "kind_id" not in raw.columns and len(raw.columns):
        return parse_lists(typed(raw, "arrays", warnings, ARRAYS_V1), ("shape", "shard_bytes", "devices",
                                                                           "addresses"), warnings, "arrays")
    arrays = parse_lists(typed(raw, "arrays", warnings), ("addresses",), warnings, "arrays")
    kinds = parse_lists(_query(con, "array_kinds", warnings), ("shape", "shard_bytes", "devices"), warnings,
                         "array_kinds")
    kinds = kinds.drop_duplicates("kind_id").set_index("kind_id")
    known = arrays["kind_id"].isin(kinds.index)
    if not known.all():
        note_damage(warnings, "array_kinds", f"{int((~known).sum())} array(s) name a description (kind_id) the "
                                             "journal's array_kinds lacks; left out")
        arrays = arrays[known]
    described = kinds.reindex(arrays["kind_id"].to_numpy()).reset_index(drop=True)
    out = arrays.drop(columns="kind_id").reset_index(drop=True)
    for c in _KIND_COLUMNS:
        out[c] = described[c]  # the dtypes schema 1 gives: texts and lists as objects, nbytes int64
    return out


def read_manifest(mpath: Path) -> dict:
    """A manifest.json, bounded: ValueError (or OSError) when it is not a
    regular file (a symlink included), too large, nested too deep, or not a
    JSON object."""
    if layout.entry_kind(mpath) == "link":
        raise ValueError("a symlink; not read (a run is read only from its own files)")
    if not mpath.is_file():
        raise ValueError("not a regular file")
    if mpath.stat().st_size > _MAX_MANIFEST_BYTES:
        raise ValueError(f"larger than {_MAX_MANIFEST_BYTES} bytes")
    manifest = loads(mpath.read_text(encoding="utf-8"))
    if not isinstance(manifest, dict):
        raise ValueError("not a JSON object")
    return manifest


def _load_journal_run(path: Path) -> Run:
    warnings = Warnings()
    manifest: dict = {}
    mpath = path / layout.MANIFEST
    if mpath.is_file():
        try:
            manifest = read_manifest(mpath)
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            warnings.append(f"manifest.json unreadable ({_one_line(exc)})")
            manifest = {}
        manifest = _check_manifest(manifest, warnings)
    else:
        warnings.append("manifest.json missing")
    finished = manifest.get("end_time") is not None
    running = not finished and recorder_running(path)
    if manifest and not finished:
        warnings.append("the run is still running: reading what it has committed so far" if running else
                        "the run did not finish (killed): reading what was committed")

    db_path = path / layout.JOURNAL
    if not db_path.is_file():
        raise InputError(str(path), "journal.sqlite missing: no snapshot can be read")
    try:
        con = connect_read_only(db_path)
    except sqlite3.Error as exc:
        raise InputError(str(db_path), f"not a readable journal ({_one_line(exc)})") from None
    try:
        try:
            present = {n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            # schema 1's arrays describe themselves: it has no array_kinds to lose
            v1 = "arrays" in present and "kind_id" not in {c for (_, c, *_) in con.execute("PRAGMA table_info(arrays)")}
            dropped_tables(present, warnings, {"array_kinds"} if v1 else frozenset())
        except sqlite3.Error:
            pass  # each table's own read says what it cannot read
        try:
            snaps = pd.read_sql_query("SELECT * FROM snapshots", con)
        except (sqlite3.Error, pd.errors.DatabaseError, UnicodeDecodeError) as exc:
            raise InputError(str(db_path), f"the journal is damaged: its snapshots are unreadable "
                                           f"({_one_line(exc)})") from None
        try:
            snaps = typed(snaps, "snapshots", warnings)
        except InputError as exc:
            raise InputError(str(db_path), exc.problem) from None
        snaps = _one_row_each(snaps, warnings)
        arrays, ends = _query_arrays_and_ends(con, warnings)
        stack_rows = _query(con, "stacks", warnings)
        memory_stats = _query(con, "memory_stats", warnings)
        executables = _query(con, "executables", warnings)
        jit = JitTables(**{name: _query(con, table, warnings) for name, table in JIT_TABLES.items()})
        markers = markers_agree(_query(con, "markers", warnings), snaps, warnings)
        events = _query(con, "events", warnings)
        thinned = set(_query(con, "thinned", warnings)["snapshot"].dropna().astype(np.int64).tolist())
        names = _query(con, "source_names", warnings)
        held_by = _query(con, "held_by", warnings)
        py_holders = {name: _query(con, table, warnings) for name, table in
                      (("chains", "py_chains"), ("holders", "py_holders"), ("searches", "py_holder_searches"))}
        py_holders["holders"] = _known_chains(py_holders["holders"], py_holders["chains"], warnings)
    finally:
        con.close()

    snaps = _check_snapshot_files(path, snaps, warnings, thinned, running)
    snaps = _whole_peak(path, snaps, warnings)
    start = manifest.get("start_epoch")
    if start is None and not snaps.empty:
        start = float(snaps["t_wall"].min())
    snaps.insert(1, "t", snaps["t_wall"] - (start or 0.0))
    process = int(manifest.get("process_index") or 0)
    snaps["snapshot"] = snaps["snapshot"].astype(np.int64)
    snaps["process"] = process
    if not markers.empty:
        markers["t"] = markers["t_wall"] - (start or 0.0)

    stacks, torn = {}, []
    for sid, frames in zip(stack_rows.get("stack_id", []), stack_rows.get("frames", [])):
        try:
            stacks[int(sid)] = [(str(f), int(ln), str(fn)) for f, ln, fn in loads(frames)]
        except (ValueError, TypeError):
            torn.append(str(sid))
    if torn:
        shown = ", ".join(torn[:10]) + (" ..." if len(torn) > 10 else "")
        note_damage(warnings, "stacks", f"{len(torn)} stack(s) of the journal unreadable (stacks {shown}); "
                                        "their arrays have no site")

    arrays = _array_intervals(arrays, ends, snaps)
    arrays["process"] = process
    return Run(
        path=path, manifest=manifest, snapshots=snaps.reset_index(drop=True), arrays=arrays,
        stacks=stacks, memory_stats=memory_stats, executables=executables, jit=jit, markers=markers, events=events,
        has_arrays=True, finished=finished, running=running, warnings=warnings,
        source_names=dict(zip(names["file"], names["label"])), held_by=held_by[list(_HELD_BY_COLUMNS)],
        py_holders=py_holders, end_cut=end_cut(manifest, finished, running, events),
    )


def _known_chains(holders: pd.DataFrame, chains: pd.DataFrame, warnings: list) -> pd.DataFrame:
    """py_holders' rows whose chain py_chains holds; the others (a chain
    lost, or named wrong) are damage of py_holders, left out and said."""
    if holders.empty or "chain_id" not in holders.columns:
        return holders
    known = chains["chain_id"] if "chain_id" in chains.columns else pd.Series(dtype="int64")
    orphan = ~holders["chain_id"].isin(known)
    if not orphan.any():
        return holders
    first = holders.loc[orphan].iloc[0]
    note_damage(warnings, "py_holders", f"{int(orphan.sum())} row(s) of the journal's py_holders name a chain the "
                                        f"journal's py_chains lacks and are left out ({layout.JOURNAL}, py_holders "
                                        f"snapshot {int(first['snapshot'])}, array_id {int(first['array_id'])}: "
                                        f"chain_id {int(first['chain_id'])} is in no py_chains row)")
    return holders[~orphan].reset_index(drop=True)


def _one_row_each(snaps: pd.DataFrame, warnings: list) -> pd.DataFrame:
    """One row per snapshot: a row repeated whole is read once (said);
    rows of one snapshot that disagree leave it out (its figures cannot be
    told), as damage of the snapshots table."""
    if not snaps["snapshot"].duplicated().any():
        return snaps
    whole = snaps.drop_duplicates()
    if len(whole) < len(snaps):
        warnings.append(f"{len(snaps) - len(whole)} row(s) of the journal's snapshots repeat another whole; "
                        "read once")
    torn = whole["snapshot"].duplicated(keep=False)
    if torn.any():
        ids = sorted(set(whole.loc[torn, "snapshot"].astype(np.int64).tolist()))
        shown = ", ".join(map(str, ids[:10])) + (" ..." if len(ids) > 10 else "")
        note_damage(warnings, "snapshots", f"{int(torn.sum())} row(s) of the journal's snapshots are damaged and "
                                           f"left out (snapshots {shown} have rows that disagree)")
        whole = whole[~torn]
    return whole.reset_index(drop=True)


def _check_snapshot_files(path: Path, snaps: pd.DataFrame, warnings: list, thinned=frozenset(),
                          running: bool = False) -> pd.DataFrame:
    """The snapshots whose profile file is there, and those thinned on
    purpose (a long run keeps their rows, not their files: ``thinned``).
    A file without a journal entry is said, but not of a ``running`` run:
    its row is being committed."""
    # Only regular files directly inside RUN/snapshots/ (load_run refused a
    # symlinked snapshots/): the journal could name any path, a link, or none
    # that the OS accepts (a NUL byte in it).
    dir_ok = layout.entry_kind(path / layout.SNAPSHOT_DIR) == "dir"

    def usable(name) -> bool:
        return dir_ok and layout.snapshot_file(path, name, dir_checked=True) is not None

    missing = [int(s) for s, f in zip(snaps["snapshot"], snaps["file"]) if int(s) not in thinned and not usable(f)]
    if missing:
        shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
        warnings.append(f"{len(missing)} snapshot file(s) missing (snapshots {shown}); those snapshots are skipped")
        snaps = snaps[~snaps["snapshot"].isin(missing)]
    known = set(snaps["file"])
    snap_dir = path / layout.SNAPSHOT_DIR
    if snap_dir.is_dir():
        orphans = [p.name for p in snap_dir.glob("*.prof.gz") if f"{layout.SNAPSHOT_DIR}/{p.name}" not in known]
        if orphans and not running:
            warnings.append(
                f"{len(orphans)} snapshot file(s) without a journal entry (the run was killed while "
                f"writing them?): {', '.join(sorted(orphans)[:5])}"
            )
    snaps = snaps.assign(thinned=snaps["snapshot"].isin(thinned))
    return snaps.sort_values("snapshot").reset_index(drop=True)


def _whole_peak(path: Path, snaps: pd.DataFrame, warnings: list, tries: int = 100) -> pd.DataFrame:
    """The snapshots, less those at the top whose profile is damaged: the
    peak (the first snapshot with the most live bytes, analysis/runs.py) is
    then the highest whole one, and what was left out is said. Only the top
    is read (one profile, for a sound run); a damaged file elsewhere is
    named by what reads it."""
    order = np.argsort(-snaps["live_bytes"].to_numpy(dtype=np.int64), kind="stable")
    bad = []
    for i in order[:tries].tolist():
        row = snaps.iloc[i]
        if "thinned" in snaps.columns and bool(row["thinned"]):
            continue
        try:
            load_profile(path / row["file"], name=f"{path}@{int(row['snapshot'])}")
        except InputError as exc:
            bad.append((int(row["snapshot"]), exc.problem))
            continue
        break
    if not bad:
        return snaps
    shown = ", ".join(str(n) for n, _ in bad[:10]) + (" ..." if len(bad) > 10 else "")
    warnings.append(f"{len(bad)} damaged snapshot file(s) left out (snapshot{'' if len(bad) == 1 else 's'} {shown}: "
                    f"{bad[0][1]}); the peak is the highest whole snapshot")
    return snaps[~snaps["snapshot"].isin([n for n, _ in bad])].reset_index(drop=True)


def _array_intervals(arrays: pd.DataFrame, ends: pd.DataFrame | None, snaps: pd.DataFrame) -> pd.DataFrame:
    """Join births (described, their lists parsed) and ends (None: joined
    already): alive from first_snapshot to last_snapshot."""
    if arrays.empty:
        cols = ["array_id", "py_id", "first_snapshot", "last_snapshot", "end_snapshot", "how", "shape",
                "dtype", "nbytes", "shard_bytes", "devices", "addresses", "sharding", "memory_kind", "stack_id"]
        return _empty(cols)
    out = arrays if ends is None else arrays.merge(ends, on="array_id", how="left")
    last = int(snaps["snapshot"].max()) if not snaps.empty else 0
    alive = out["last_snapshot"].isna()
    out["last_snapshot"] = out["last_snapshot"].fillna(last).astype(np.int64)
    out["end_snapshot"] = out["end_snapshot"].astype("Int64")
    out.loc[alive, "how"] = None
    cols = ["array_id", "py_id", "first_snapshot", "last_snapshot", "end_snapshot", "how", "shape", "dtype",
            "nbytes", "shard_bytes", "devices", "addresses", "sharding", "memory_kind", "stack_id"]
    return out[cols]


def _load_profile_directory(path: Path, profiles: list[Path]) -> Run:
    warnings = ["a plain directory of .prof files: no per-array data (shapes, lifetimes, addresses)"]
    profiles.sort(key=lambda p: (p.stat().st_mtime, p.name))
    rows = []
    for i, p in enumerate(profiles, start=1):
        try:
            prof = load_profile(p)
        except InputError as exc:
            warnings.append(f"skipped {p.name}: {exc.problem}")
            continue
        buffers = prof.samples[prof.samples["kind"] != "executable"]
        rows.append((i, p.stat().st_mtime, "file", p.name, p.name, int(buffers["bytes"].sum()),
                     int(buffers["count"].sum()), 0, 0.0, 0.0))
    if not rows:
        raise InputError(str(path), "none of its .prof files is a readable profile")
    snaps = pd.DataFrame(rows, columns=["snapshot", "t_wall", "trigger", "label", "file", "live_bytes",
                                        "buffers", "arrays", "cost_s", "wall_s"])
    snaps.insert(1, "t", snaps["t_wall"] - snaps["t_wall"].min())
    snaps["process"] = 0
    return Run(
        path=path, manifest={}, snapshots=snaps, arrays=_array_intervals(_empty([]), _empty([]), snaps),
        stacks={}, memory_stats=_empty(["snapshot", "device", "key", "value"]),
        executables=_empty(["snapshot", "stack_id", "name", "count", "code_bytes"]),
        jit=JitTables(),
        markers=_empty(["marker", "t_wall", "t_mono", "label", "after_snapshot", "t"]),
        events=_empty(["event", "t_wall", "kind", "message", "snapshot"]),
        has_arrays=False, finished=True, warnings=warnings,
    )
