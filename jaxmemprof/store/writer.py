"""Write a run directory while the target runs (see layout.py for the format
and the crash-safety rules). Thread-safe: the sampler thread and the target's
own thread (markers, on-demand snapshots) both write."""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import math
import os
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from jaxmemprof.errors import InputError
from jaxmemprof.store import layout


@dataclass
class SnapshotRecord:
    """Everything one snapshot adds to the journal."""

    t_wall: float
    t_mono: float
    trigger: str
    label: str | None
    profile: bytes
    live_bytes: int
    buffers: int
    arrays: int
    new_stacks: list = field(default_factory=list)  # (stack_id, frames JSON)
    # (array_id, py_id, shape, dtype, nbytes, shard_bytes, devices, addresses,
    # sharding, memory_kind, stack_id): the writer stores each description once
    new_arrays: list = field(default_factory=list)
    ended_arrays: list = field(default_factory=list)  # (array_id, last_snapshot, how)
    address_updates: list = field(default_factory=list)  # (addresses JSON, array_id): read late
    memory_stats: list = field(default_factory=list)  # (device, key, value)
    executables: list = field(default_factory=list)  # (stack_id, name, count, code_bytes)
    cost_s: float = 0.0
    wall_s: float = 0.0


_KEPT: list = []  # connections a forked child must never close


@dataclass(frozen=True)
class Thinning:
    """How a long run keeps its storage bounded: every snapshot of the last
    ``recent_s`` seconds is kept; older interval snapshots are thinned to
    one per time bucket, the bucket ``base_width_s`` times 2**k wide where
    their age is ``recent_s`` times 2**(k-1) to 2**k (so each doubling of
    age keeps about ``recent_s / (2 * base_width_s)`` of them). Snapshots
    taken for any other reason (first, exit, exception, oom, signal, api),
    labelled ones and the peak so far are always kept. Applied after every
    ``every`` snapshots, with a passive WAL checkpoint."""

    recent_s: float = 600.0
    base_width_s: float = 1.0
    every: int = 100

    def bucket(self, t_rel: float, age: float):
        """(level, index) of a snapshot taken ``t_rel`` seconds into the
        run, ``age`` seconds ago; None while it is recent."""
        if age < self.recent_s:
            return None
        level = int(math.log2(age / self.recent_s)) + 1
        return level, int(t_rel // (self.base_width_s * 2 ** level))


# The WAL is truncated to this after each checkpoint that empties it.
WAL_LIMIT_BYTES = 1 << 20
# Markers wait to be written for at most this long, or until this many wait (Writer._markers).
MARKERS_S = 0.5
MARKERS_AT = 4096
MARKER_SQL = "INSERT INTO markers (t_wall, t_mono, label, after_snapshot) VALUES (?,?,?,?)"
# Descriptions (array_kinds rows) the writer remembers; past this many it
# forgets them all and starts again (a description met again is then stored
# once more, under a new kind_id): memory stays bounded for a program of
# endlessly new shapes.
KINDS_REMEMBERED = 50_000


class RunWriter:
    def __init__(self, directory: Path, manifest: dict, thinning: Thinning | None = Thinning()):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        # Every file of the run is reached through these two descriptors,
        # never by following a link (layout.py): snapshots/ must be a real
        # directory, SQLite's files absent or regular files.
        self._dir_fd: int | None = layout.open_directory(self.directory)  # None once closed
        self._snap_fd: int | None = None
        try:
            for name in layout.JOURNAL_FILES:  # SQLite opens them by name, following links: checked first
                kind = layout.entry_kind(name, self._dir_fd)
                if kind not in ("absent", "file"):
                    raise InputError(str(self.directory / name), layout.refusal(kind))
            self._snap_fd = layout.own_directory(self.directory / layout.SNAPSHOT_DIR, self._dir_fd)
            self.manifest = dict(manifest, schema_version=layout.JOURNAL_SCHEMA_VERSION)
            layout.write_json_atomic(self.directory / layout.MANIFEST, self.manifest, dir_fd=self._dir_fd)
            self._db = sqlite3.connect(
                self.directory / layout.JOURNAL, check_same_thread=False, isolation_level=None
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            # NORMAL: a committed transaction survives the process being killed
            # (not a power cut), without an fsync per snapshot.
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(f"PRAGMA journal_size_limit={WAL_LIMIT_BYTES}")
            # The schema in one transaction: each page goes to the WAL once (a
            # transaction per table wrote 64 frames, 258 KiB, before any snapshot).
            self._db.executescript(f"BEGIN;\n{layout.SCHEMA}COMMIT;\n")
        except BaseException:
            self._undo_start()
            raise
        # Reentrant, so that a signal's last snapshot can tell whether the
        # interrupted thread holds it (RLock._is_owned).
        self._lock = threading.RLock()
        self.thinning = thinning
        self._since_upkeep = 0
        self._peak: tuple[int, int] | None = None  # (live_bytes, snapshot)
        self._t0: float | None = None  # t_mono of the first snapshot
        self.thinned = 0  # snapshots thinned so far
        self._candidates: list = []  # (snapshot, t_mono, file) of interval snapshots not thinned yet
        self._file_refs: dict[str, int] = {}  # profile file -> snapshots not thinned that name it
        self._count = 0
        self._kinds: dict[tuple, int] = {}  # array description -> kind_id (in array_kinds)
        self._next_kind = 1
        self._last_digest: bytes | None = None
        self._last_file: str | None = None
        # Markers of a fast loop (each within MARKERS_S of the last) wait here: a step's marker then
        # costs the program's thread no commit of its own (one was 0.12 ms, most of what a jitted
        # step's call cost under run). They are written with the next snapshot, before it, in its
        # transaction (every snapshot's step exact); else once the oldest is MARKERS_S old or
        # MARKERS_AT wait, as the sampler wakes (a loop's last ones, once it pauses), and at the end.
        # A kill loses at most those. A slower step's marker is written at once.
        self._markers: list = []
        self._last_marker = -MARKERS_S
        self.closed = False
        self.detached = False

    @property
    def snapshots(self) -> int:
        return self._count

    def add_snapshot(self, rec: SnapshotRecord) -> int:
        """Store one snapshot: the profile file first (atomically), then its
        journal rows in one transaction. Returns the snapshot number."""
        if self.closed:
            raise RuntimeError("the run's journal is closed")
        with self._lock:
            index = self._count + 1
            # Profiles often repeat exactly between snapshots (a steady training
            # loop): store such a one once. Bytes 4-8 of gzip are its mtime.
            digest = hashlib.blake2b(rec.profile[:4] + rec.profile[8:], digest_size=16).digest()
            if digest == self._last_digest and self._last_file is not None:
                name = self._last_file
            else:
                name = layout.snapshot_name(index)
                layout.write_atomic(self.directory / name, rec.profile, dir_fd=self._snap_fd)
            births, new_kinds, added = self._births(rec.new_arrays, index)
            db = self._db
            db.execute("BEGIN")
            markers, self._markers = self._markers, []
            try:
                if markers:
                    db.executemany(MARKER_SQL, markers)
                db.execute(
                    "INSERT INTO snapshots VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    (index, rec.t_wall, rec.t_mono, rec.trigger, rec.label, name,
                     rec.live_bytes, rec.buffers, rec.arrays, rec.cost_s, rec.wall_s),
                )
                for sql, rows in (
                    ("INSERT INTO stacks VALUES (?,?)", rec.new_stacks),
                    ("INSERT INTO array_kinds VALUES (?,?,?,?,?,?,?,?,?)", new_kinds),
                    ("INSERT INTO arrays VALUES (?,?,?,?,?)", births),
                    ("UPDATE arrays SET addresses = ? WHERE array_id = ?", rec.address_updates),
                    ("INSERT INTO array_ends VALUES (?,?,?,?)",
                     [(aid, last, index, how) for aid, last, how in rec.ended_arrays]),
                    ("INSERT INTO executables VALUES (?,?,?,?,?)", [(index, *row) for row in rec.executables]),
                    ("INSERT INTO memory_stats VALUES (?,?,?,?)",
                     [(index, d, k, v) for d, k, v in rec.memory_stats]),
                ):
                    if rows:
                        db.executemany(sql, rows)
                db.execute("COMMIT")
            except BaseException:
                _rollback(db)
                self._markers = markers + self._markers
                raise
            self._count = index
            if added:
                if len(self._kinds) + len(added) > KINDS_REMEMBERED:
                    self._kinds.clear()
                self._kinds.update(added)
                self._next_kind += len(added)
            self._last_digest, self._last_file = digest, name
            if self._peak is None or rec.live_bytes > self._peak[0]:
                self._peak = (rec.live_bytes, index)
            if self._t0 is None:
                self._t0 = rec.t_mono
            if self.thinning is not None:
                # Kept snapshots that name each file (a file counts while one does).
                self._file_refs[name] = self._file_refs.get(name, 0) + 1
                if rec.trigger == "interval" and rec.label is None:
                    self._candidates.append((index, rec.t_mono, name))
            self._since_upkeep += 1
            if self.thinning is not None and self._since_upkeep >= self.thinning.every:
                self._since_upkeep = 0
                self._upkeep(rec.t_mono)
            return index

    def _births(self, new_arrays: list, index: int):
        """The arrays rows of one snapshot's new arrays, the array_kinds rows
        of the descriptions not stored yet, and those descriptions with their
        kind_id (remembered once the snapshot is committed)."""
        kinds, births, new_kinds = self._kinds, [], []
        added: dict = {}
        for r in new_arrays:
            # shape, dtype, nbytes, shard_bytes, devices, sharding, memory_kind, stack_id
            desc = (r[2], r[3], r[4], r[5], r[6], r[8], r[9], r[10])
            kind = kinds.get(desc) or added.get(desc)
            if kind is None:
                kind = added[desc] = self._next_kind + len(added)
                new_kinds.append((kind, *desc))
            births.append((r[0], r[1], index, kind, r[7]))
        return births, new_kinds, added

    def _upkeep(self, now: float) -> None:
        """Thin old interval snapshots, then checkpoint the WAL (passive:
        never waits for a reader). A failure here costs only storage."""
        try:
            self._thin(now)
        except (OSError, sqlite3.Error):
            pass
        try:
            self._db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error:
            pass

    def _thin(self, now: float) -> None:
        """Apply the thinning schedule: journal first (one transaction), then
        remove the profile files no kept snapshot names. Killed in between,
        a thinned snapshot's file is merely left behind. Works from what
        the writer remembers of the snapshots it may still thin (not a scan
        of the journal), so each pass costs as much at hour 24 as at hour 1."""
        sched = self.thinning
        if sched is None:  # a writer that keeps every snapshot
            return
        peak = self._peak[1] if self._peak else None
        seen, thin, keep = set(), [], []
        for cand in self._candidates:
            snapshot, t_mono, _ = cand
            key = sched.bucket(t_mono - self._t0, now - t_mono)
            if key is None or snapshot == peak:
                keep.append(cand)
            elif key in seen:
                thin.append(cand)
            else:
                seen.add(key)  # the earliest in its bucket stays
                keep.append(cand)
        if not thin:
            return
        db = self._db
        numbers = [(c[0],) for c in thin]
        db.execute("BEGIN")
        try:
            db.executemany("INSERT INTO thinned VALUES (?)", numbers)
            # One pass over each table (kept small: thinned rows leave it).
            db.execute("CREATE TEMP TABLE IF NOT EXISTS thinning (snapshot INTEGER PRIMARY KEY)")
            db.execute("DELETE FROM temp.thinning")
            db.executemany("INSERT INTO temp.thinning VALUES (?)", numbers)
            db.execute("DELETE FROM executables WHERE snapshot IN (SELECT snapshot FROM temp.thinning)")
            db.execute("DELETE FROM memory_stats WHERE snapshot IN (SELECT snapshot FROM temp.thinning)")
            db.execute("COMMIT")
        except BaseException:
            _rollback(db)
            raise
        self._candidates = keep
        self.thinned += len(thin)
        for _, _, name in thin:
            left = self._file_refs[name] - 1
            if left:
                self._file_refs[name] = left
                continue
            del self._file_refs[name]
            base = Path(name).name
            if name != self._last_file and layout.is_snapshot_file(base):
                # Only our own file: a link put in its place stays as it is.
                if layout.entry_kind(base, self._snap_fd) == "file":
                    try:
                        os.unlink(base, dir_fd=self._snap_fd)
                    except FileNotFoundError:
                        pass

    def _insert(self, sql: str, rows) -> None:
        if self.closed:
            return
        with self._lock:
            if not self.closed:
                self._db.executemany(sql, rows)

    def add_jit_function(self, row: dict) -> None:
        self._insert(f"INSERT INTO jit_functions ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                     [tuple(row.values())])

    def add_jit_compile(self, row: tuple) -> None:
        self._insert("INSERT INTO jit_compiles VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", [row])

    def add_jit_call(self, row: tuple) -> None:
        self._insert("INSERT INTO jit_calls (call_id, function_id, call_index, t_wall, t_mono, caller_file, "
                     "caller_line, caller_function, inputs, outputs, signature, live_before) "
                     "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                     [row])

    def add_jit_program(self, program: tuple, buffers: list, curve: tuple | None = None) -> None:
        """XLA's account of one program: its row, its buffers' rows, and its
        curve's row (function_id, signature, JSON)."""
        self._insert("INSERT INTO jit_programs VALUES (?,?,?,?,?,?,?,?,?,?,?)", [program])
        self._insert("INSERT INTO jit_buffers VALUES (?,?,?,?,?,?,?,?,?,?,?)", buffers)
        if curve is not None:
            self._insert("INSERT INTO jit_curves VALUES (?,?,?)", [curve])

    def set_jit_compile_temp(self, function_id: int, signature: str, temp_bytes: int) -> None:
        """A signature's temporaries (jit_compiles) set anew: on a TPU, its dump's (capture/jit/programs.py)."""
        self._insert("UPDATE jit_compiles SET temp_bytes = ? WHERE function_id = ? AND signature = ?",
                     [(temp_bytes, function_id, signature)])

    def set_jit_liveness(self, call_id: int, alive_json: str) -> None:
        self._insert("UPDATE jit_calls SET inputs_alive = ? WHERE call_id = ?", [(alive_json, call_id)])

    def add_jit_call_live(self, rows: list) -> None:
        """jit_call_live rows: calls whose live bytes before them were counted (capture/jit/calllive.py)."""
        self._insert("INSERT INTO jit_call_live VALUES (?,?,?,?,?,?,?,?)", rows)

    def set_jit_counts(self, rows: list) -> None:
        self._insert("INSERT OR REPLACE INTO jit_counts VALUES (?,?,?,?,?,?)", rows)

    def add_jit_plans(self, rows: list) -> None:
        """jit_plans rows (run --plan): the step compiled at other batch sizes."""
        self._insert("INSERT INTO jit_plans VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)

    def add_jit_targets(self, target: str, rows: list) -> None:
        """jit_targets rows (run --target): jit_plans' rows, compiled for the slice ``target``."""
        self._insert("INSERT INTO jit_targets VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                     [(target, *r) for r in rows])

    def add_jit_target_buffers(self, rows: list) -> None:
        """jit_target_buffers rows (run --target): XLA:TPU's buffers at the program's peak."""
        self._insert("INSERT INTO jit_target_buffers VALUES (?,?,?,?,?,?,?,?,?,?)", rows)

    def add_snapshot_calls(self, snapshot: int, function_ids: list) -> None:
        """snapshot_calls rows: the jitted functions a call of which was in progress as the snapshot started."""
        self._insert("INSERT INTO snapshot_calls VALUES (?,?)", [(snapshot, int(f)) for f in function_ids])

    def add_jit_whatif(self, rows: list) -> None:
        """jit_whatif rows: recorded signatures compiled with a change made."""
        self._insert("INSERT INTO jit_whatif VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)

    def _select(self, sql: str, params: tuple) -> list:
        if self.closed:
            return []
        with self._lock:
            return [] if self.closed else self._db.execute(sql, params).fetchall()

    def jit_compile_figures(self, function_id: int, signature: str) -> tuple | None:
        """XLA's argument, output, alias, temp and code bytes recorded for
        one compiled signature (jit_compiles), or None: what run --plan
        reads back at the end of the run."""
        rows = self._select("SELECT argument_bytes, output_bytes, alias_bytes, temp_bytes, generated_code_bytes "
                            "FROM jit_compiles WHERE function_id = ? AND signature = ? LIMIT 1",
                            (function_id, signature))
        return tuple(rows[0]) if rows else None

    def jit_compiled_signatures(self, function_id: int) -> list:
        """(signature, argument, output, alias, temp and code bytes) of each
        signature the function compiled (jit_compiles), in compile order."""
        rows = self._select("SELECT signature, argument_bytes, output_bytes, alias_bytes, temp_bytes, "
                            "generated_code_bytes FROM jit_compiles WHERE function_id = ? ORDER BY rowid",
                            (function_id,))
        first: dict = {}
        for r in rows:
            if isinstance(r[0], str):
                first.setdefault(r[0], tuple(r))
        return list(first.values())

    def jit_sampled_calls(self, function_id: int) -> list:
        """(call_index, inputs JSON, outputs JSON, signature, live_before
        JSON) of the function's sampled calls recorded so far, in call order."""
        return self._select("SELECT call_index, inputs, outputs, signature, live_before FROM jit_calls "
                            "WHERE function_id = ? ORDER BY call_index", (function_id,))

    def jit_call_leaves(self, function_id: int) -> list:
        """(call_index, inputs JSON, outputs JSON, inputs_alive JSON) of the
        function's sampled calls whose fates are known, in call order: what
        the donation rule (donors.py) reads at the end of the run."""
        return self._select("SELECT call_index, inputs, outputs, inputs_alive FROM jit_calls "
                            "WHERE function_id = ? AND inputs_alive IS NOT NULL ORDER BY call_index", (function_id,))

    def add_source_names(self, rows: list) -> None:
        """(file, label) rows: how sites in code with no file of its own
        are named (a notebook's cells); a file named again takes the new label."""
        self._insert("INSERT OR REPLACE INTO source_names VALUES (?,?)", rows)

    def add_held_by(self, rows: list) -> None:
        """(snapshot, py_id, frames JSON, shape JSON, dtype, kind, holder,
        names JSON, only) rows: what held live arrays at a snapshot
        (IPython's output history)."""
        self._insert("INSERT INTO held_by VALUES (?,?,?,?,?,?,?,?,?)", rows)

    def add_py_holders(self, chains: list, rows: list, search: tuple, replaces: int | None = None) -> None:
        """One search for the Python holders of live arrays: its new chains
        (py_chains rows), its (snapshot, array_id, chain_id) rows, and its
        py_holder_searches row, in one transaction; ``replaces``: the
        snapshot of an earlier search whose rows these replace (marked
        superseded)."""
        if self.closed:
            return
        with self._lock:
            if self.closed:
                return
            db = self._db
            db.execute("BEGIN")
            try:
                db.executemany("INSERT INTO py_chains VALUES (?,?,?,?,?,?,?,?)", chains)
                db.executemany("INSERT INTO py_holders VALUES (?,?,?)", rows)
                db.execute("INSERT OR REPLACE INTO py_holder_searches VALUES (?,?,?,?,?,?,?,0)", search)
                if replaces is not None:
                    db.execute("DELETE FROM py_holders WHERE snapshot = ?", (replaces,))
                    db.execute("UPDATE py_holder_searches SET superseded = 1 WHERE snapshot = ?", (replaces,))
                db.execute("COMMIT")
            except BaseException:
                _rollback(db)
                raise

    def add_marker(self, label: str) -> None:
        if self.closed:
            return
        now = time.monotonic()
        with self._lock:
            fast = now - self._last_marker < MARKERS_S
            self._last_marker = now
            self._markers.append((time.time(), now, label, self._count or None))
            if not fast or len(self._markers) >= MARKERS_AT or now - self._markers[0][1] >= MARKERS_S:
                self._write_markers()

    def flush_markers(self) -> None:
        """Write the markers waiting (the sampler, as it wakes)."""
        if self._markers and not self.closed:
            with self._lock:
                self._write_markers()

    def _write_markers(self) -> None:
        """(Under the lock.) The markers waiting, in one transaction."""
        if self.closed or not self._markers:
            return
        markers, self._markers = self._markers, []
        try:
            self._db.execute("BEGIN")
            self._db.executemany(MARKER_SQL, markers)
            self._db.execute("COMMIT")
        except BaseException:
            _rollback(self._db)
            self._markers = markers + self._markers
            raise

    def add_event(self, kind: str, message: str, snapshot: int | None = None) -> None:
        if self.closed:
            return
        with self._lock:
            self._db.execute(
                "INSERT INTO events (t_wall, kind, message, snapshot) VALUES (?,?,?,?)",
                (time.time(), kind, message, snapshot),
            )

    def owned_by_this_thread(self) -> bool:
        return self._lock._is_owned()  # type: ignore[attr-defined]  # CPython's RLock has it, its stubs do not

    def detach(self) -> None:
        """In a forked child: write nothing more, and never close the
        connection inherited from the parent (closing a WAL database can
        checkpoint and remove the WAL the parent still writes), not even
        when the child's interpreter frees its objects at exit."""
        self.closed = self.detached = True
        try:
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(self._db))
        except Exception:
            _KEPT.append(self._db)

    def finish(self, **fields) -> None:
        """Record how the run ended in the manifest, and close the journal."""
        if self.closed:
            return
        with self._lock:
            if self.closed:
                return
            with contextlib.suppress(Exception):  # a full disk: the manifest is finished all the same
                self._write_markers()
            self.manifest.update(fields)
            layout.write_json_atomic(self.directory / layout.MANIFEST, self.manifest, dir_fd=self._dir_fd)
            # A finished run's journal becomes one self-contained file, readable
            # from read-only places too.
            try:
                self._db.execute("PRAGMA journal_mode=DELETE")
            except Exception:
                pass
            self._db.close()
            self.closed = True
            self._close_directories()

    def move_to(self, directory: Path) -> None:
        """Move the run's files (manifest, journal, snapshots/) into
        ``directory`` (a directory of ours on the same file system, which holds
        none of them) and go on writing there: a process of a job started by
        hand learns its ``process-N`` only once jax.distributed.initialize
        returns. Files are moved by a link made without replacing anything,
        then the old name removed; nothing is ever renamed onto an existing
        name. A failure moves back what had moved, reopens the journal where
        it was and raises OSError or InputError."""
        with self._lock:
            if self.closed:
                raise OSError("the run is closed")
            new_fd = layout.open_directory(directory)
            try:
                for name in (layout.MANIFEST, layout.SNAPSHOT_DIR, *layout.JOURNAL_FILES):
                    kind = layout.entry_kind(name, new_fd)
                    if kind != "absent":
                        raise InputError(str(Path(directory) / name), layout.refusal(kind))
            except BaseException:
                os.close(new_fd)
                raise
            with contextlib.suppress(Exception):  # else they wait, and are written in the new place
                self._write_markers()
            try:
                self._db.execute("PRAGMA journal_mode=DELETE")  # one file to move
            except Exception:
                pass
            self._db.close()
            moved: list[str] = []
            old_fd = self._dir_fd
            assert old_fd is not None  # open while the run is not closed
            try:
                names = [n for n in (layout.SNAPSHOT_DIR, *layout.JOURNAL_FILES, layout.MANIFEST)
                         if layout.entry_kind(n, old_fd) != "absent"]
                for name in names:
                    _move_entry(name, old_fd, new_fd)
                    moved.append(name)
            except BaseException:
                for name in reversed(moved):
                    try:
                        _move_entry(name, new_fd, old_fd)
                    except OSError:
                        pass
                os.close(new_fd)
                self._reopen()
                raise
            self._close_directories()
            self._dir_fd = new_fd
            self.directory = Path(directory)
            self._reopen()

    def _reopen(self) -> None:
        """The journal and snapshots/ opened again in ``self.directory``."""
        dir_fd = self._dir_fd
        assert dir_fd is not None  # reopened only in move_to, the run open
        self._snap_fd = layout.own_directory(self.directory / layout.SNAPSHOT_DIR, dir_fd)
        for name in layout.JOURNAL_FILES:
            kind = layout.entry_kind(name, dir_fd)
            if kind not in ("absent", "file"):
                raise InputError(str(self.directory / name), layout.refusal(kind))
        self._db = sqlite3.connect(self.directory / layout.JOURNAL, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(f"PRAGMA journal_size_limit={WAL_LIMIT_BYTES}")

    def _undo_start(self) -> None:
        """A start that failed (a full disk, say) leaves no run behind: no
        manifest, no journal half made, no empty snapshots/ (the files are
        ours: the directory was claimed and cleared for this run)."""
        db = getattr(self, "_db", None)
        if db is not None:
            try:
                db.close()
            except sqlite3.Error:
                pass
        for name in (layout.MANIFEST, *layout.JOURNAL_FILES):
            try:
                if layout.entry_kind(name, self._dir_fd) == "file":
                    os.unlink(name, dir_fd=self._dir_fd)
            except (OSError, TypeError):
                pass
        if self._snap_fd is not None:
            try:
                os.rmdir(layout.SNAPSHOT_DIR, dir_fd=self._dir_fd)  # empty only; never through a link
            except OSError:
                pass
        self._close_directories()

    def _close_directories(self) -> None:
        for fd in (self._dir_fd, self._snap_fd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._dir_fd = self._snap_fd = None



def _rollback(db) -> None:
    """Undo the transaction that failed, if SQLite has not already (a full
    disk ends it): the failure that ended it is the one to tell, never
    'cannot rollback - no transaction is active'."""
    if db.in_transaction:
        try:
            db.execute("ROLLBACK")
        except sqlite3.Error:
            pass


def write_failure(exc: BaseException) -> str:
    """What a failed write of the run says, in a user's words: the disk
    full, a file too large, a journal SQLite could not write."""
    if isinstance(exc, OSError):
        where = f"{os.path.basename(exc.filename)}: " if getattr(exc, "filename", None) else ""
        return f"cannot write the run ({where}{exc.strerror or exc})"
    if isinstance(exc, sqlite3.Error):
        text = str(exc)
        if "full" in text:
            return "cannot write the run (the disk is full: journal.sqlite)"
        return f"cannot write the run's journal ({text})"
    return f"{type(exc).__name__}: {exc}"


def _move_entry(name: str, src_fd: int, dst_fd: int) -> None:
    """Move ``name`` from one directory to another without replacing
    anything at the destination: a file by a hard link (which fails if the
    name is taken) then the old name removed, snapshots/ by a rename onto
    a name just checked absent. A link is never followed, never moved."""
    kind = layout.entry_kind(name, src_fd)
    if kind == "file":
        try:
            os.link(name, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd, follow_symlinks=False)
        except FileExistsError:
            raise
        except OSError:  # a file system without hard links
            if layout.entry_kind(name, dst_fd) != "absent":
                raise FileExistsError(name) from None
            os.rename(name, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
            return
        os.unlink(name, dir_fd=src_fd)
    elif kind == "dir":
        if layout.entry_kind(name, dst_fd) != "absent":
            raise FileExistsError(name)
        os.rename(name, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
    elif kind != "absent":
        raise InputError(name, layout.refusal(kind))
