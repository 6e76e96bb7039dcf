"""Write a run directory while the target runs (see layout.py for the format
and the crash-safety rules). Thread-safe: the sampler thread and the target's
own thread (markers, on-demand snapshots) both write."""

from __future__ import annotations

import ctypes
import hashlib
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

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
    new_arrays: list = field(default_factory=list)  # rows of the arrays table, without first_snapshot
    ended_arrays: list = field(default_factory=list)  # (array_id, last_snapshot, how)
    address_updates: list = field(default_factory=list)  # (addresses JSON, array_id): read late
    memory_stats: list = field(default_factory=list)  # (device, key, value)
    executables: list = field(default_factory=list)  # (stack_id, name, count, code_bytes)
    cost_s: float = 0.0
    wall_s: float = 0.0


_KEPT: list = []  # connections a forked child must never close


class RunWriter:
    def __init__(self, directory: Path, manifest: dict):
        self.directory = Path(directory)
        (self.directory / layout.SNAPSHOT_DIR).mkdir(parents=True, exist_ok=True)
        self.manifest = dict(manifest, schema_version=layout.SCHEMA_VERSION)
        layout.write_json_atomic(self.directory / layout.MANIFEST, self.manifest)
        # Reentrant, so that a signal's last snapshot can tell whether the
        # interrupted thread holds it (RLock._is_owned).
        self._lock = threading.RLock()
        self._db = sqlite3.connect(
            self.directory / layout.JOURNAL, check_same_thread=False, isolation_level=None
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        # NORMAL: a committed transaction survives the process being killed
        # (not a power cut), without an fsync per snapshot.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(layout.SCHEMA)
        self._count = 0
        self._last_digest: bytes | None = None
        self._last_file: str | None = None
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
                layout.write_atomic(self.directory / name, rec.profile)
            db = self._db
            db.execute("BEGIN")
            try:
                db.execute(
                    "INSERT INTO snapshots VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    (index, rec.t_wall, rec.t_mono, rec.trigger, rec.label, name,
                     rec.live_bytes, rec.buffers, rec.arrays, rec.cost_s, rec.wall_s),
                )
                for sql, rows in (
                    ("INSERT INTO stacks VALUES (?,?)", rec.new_stacks),
                    ("INSERT INTO arrays VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                     [(r[0], r[1], index, *r[2:]) for r in rec.new_arrays]),
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
                db.execute("ROLLBACK")
                raise
            self._count = index
            self._last_digest, self._last_file = digest, name
            return index

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
                     "caller_line, caller_function, inputs, outputs) VALUES (?,?,?,?,?,?,?,?,?,?)", [row])

    def add_jit_program(self, program: tuple, buffers: list) -> None:
        """XLA's dump of one program: its row, and its buffers' rows."""
        self._insert("INSERT INTO jit_programs VALUES (?,?,?,?,?,?,?,?,?,?,?)", [program])
        self._insert("INSERT INTO jit_buffers VALUES (?,?,?,?,?,?,?,?,?,?)", buffers)

    def set_jit_liveness(self, call_id: int, alive_json: str) -> None:
        self._insert("UPDATE jit_calls SET inputs_alive = ? WHERE call_id = ?", [(alive_json, call_id)])

    def set_jit_counts(self, rows: list) -> None:
        self._insert("INSERT OR REPLACE INTO jit_counts VALUES (?,?,?,?,?)", rows)

    def add_marker(self, label: str) -> None:
        if self.closed:
            return
        with self._lock:
            self._db.execute(
                "INSERT INTO markers (t_wall, t_mono, label, after_snapshot) VALUES (?,?,?,?)",
                (time.time(), time.monotonic(), label, self._count or None),
            )

    def add_event(self, kind: str, message: str, snapshot: int | None = None) -> None:
        if self.closed:
            return
        with self._lock:
            self._db.execute(
                "INSERT INTO events (t_wall, kind, message, snapshot) VALUES (?,?,?,?)",
                (time.time(), kind, message, snapshot),
            )

    def owned_by_this_thread(self) -> bool:
        return self._lock._is_owned()

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
            self.manifest.update(fields)
            layout.write_json_atomic(self.directory / layout.MANIFEST, self.manifest)
            # A finished run's journal becomes one self-contained file, readable
            # from read-only places too.
            try:
                self._db.execute("PRAGMA journal_mode=DELETE")
            except Exception:
                pass
            self._db.close()
            self.closed = True

