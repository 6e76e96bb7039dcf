"""Follow a run while it is written (``jaxmemprof top``): the newest snapshot
and a few totals, read from the journal without ever writing to it.

The journal is opened read-only (``mode=ro``: SQLite neither writes the
database nor its WAL) and closed again at every poll, so the recording
process's checkpoints are never held up by a reader left open. Only
committed rows are seen; a snapshot file named by one is complete (it is
renamed into place before its row commits).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from jaxmemprof.errors import InputError, check_not_empty
from jaxmemprof.store import layout
from jaxmemprof.store.journal import connect_read_only, recorder_gone


@dataclass(frozen=True)
class Poll:
    """What one process's run says now. ``latest``: the newest snapshot whose
    file is there, as (snapshot, t_wall, live_bytes, trigger, profile path);
    ``first``: the run's first snapshot (the same tuple); ``previous``: the
    newest before ``latest`` whose file is there; ``peak``:
    (snapshot, live_bytes) so far; ``events``: the newest (kind, message)."""

    path: Path
    manifest: dict
    snapshots: int
    markers: int
    first: tuple | None
    latest: tuple | None
    peak: tuple | None
    events: tuple = ()
    previous: tuple | None = None
    error: str | None = None
    finished: bool = False
    gone: bool = False  # the recording process died without finishing (killed)
    history: tuple = field(default=())  # (snapshot, live_bytes) of the newest snapshots, oldest first


def run_directories(path) -> list[tuple[int | None, Path]]:
    """The run at ``path`` — ``[(None, path)]`` — or the processes of a job
    directory, ``[(N, path/process-N), ...]``."""
    from jaxmemprof.store.job import process_directories

    check_not_empty(path)
    path = Path(path)
    if not path.exists():
        raise InputError(str(path), "no such run directory")
    if not path.is_dir():
        raise InputError(str(path), "is not a directory (a run is a directory)")
    if (path / layout.MANIFEST).is_file() or (path / layout.JOURNAL).is_file():
        return [(None, path)]
    processes = process_directories(path)
    if processes:
        return [(n, p) for n, p in processes]
    raise InputError(str(path), "is not a jaxmemprof run (no manifest.json or journal, no process-N directories)")


def _manifest(path: Path) -> dict:
    try:
        p = path / layout.MANIFEST
        if not p.is_file() or p.stat().st_size > 16 * 1024**2:
            return {}
        doc = json.loads(p.read_text(encoding="utf-8"))
        return doc if isinstance(doc, dict) else {}
    except (OSError, ValueError, RecursionError, UnicodeDecodeError):
        return {}


def _connect(db: Path) -> sqlite3.Connection:
    return connect_read_only(db, tolerant=True, timeout=1.0)


def _profile_path(path: Path, name) -> Path | None:
    """The snapshot's file when it lies inside RUN/snapshots/ and is there
    (a regular file, never reached through a link)."""
    return layout.snapshot_file(path, name)


def _int(v):
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def poll(path: Path, history: int = 30) -> Poll:
    """The run at ``path`` now; never raises for a run not started yet or
    damaged (``error`` says why nothing could be read)."""
    path = Path(path)
    manifest = _manifest(path)
    finished = manifest.get("end_time") is not None
    gone = not finished and recorder_gone(path)
    db = path / layout.JOURNAL
    if not db.is_file():
        return Poll(path, manifest, 0, 0, None, None, None, error="no journal yet", finished=finished, gone=gone)
    try:
        con = _connect(db)
    except sqlite3.Error as exc:
        return Poll(path, manifest, 0, 0, None, None, None, error=f"journal unreadable: {exc}", finished=finished, gone=gone)
    try:
        cols = "snapshot, t_wall, live_bytes, trigger, file"
        rows = con.execute(f"SELECT {cols} FROM snapshots ORDER BY snapshot DESC LIMIT ?", (max(history, 2),)).fetchall()
        first = con.execute(f"SELECT {cols} FROM snapshots ORDER BY snapshot LIMIT 1").fetchone()
        count = con.execute("SELECT count(*) FROM snapshots").fetchone()[0]
        peak = con.execute("SELECT snapshot, live_bytes FROM snapshots ORDER BY live_bytes DESC, snapshot LIMIT 1").fetchone()
        markers = _one(con, "SELECT count(*) FROM markers")
        events = _rows(con, "SELECT kind, message FROM events ORDER BY event DESC LIMIT 3")
    except sqlite3.Error as exc:
        return Poll(path, manifest, 0, 0, None, None, None, error=f"journal unreadable: {exc}", finished=finished, gone=gone)
    finally:
        con.close()

    def snap(r):
        if r is None or _int(r[0]) is None or _int(r[2]) is None:
            return None
        return (int(r[0]), float(r[1]) if isinstance(r[1], (int, float)) else None, int(r[2]), str(r[3]),
                _profile_path(path, r[4]))

    # The newest snapshot whose file is there (a long run thins old files, never the newest).
    usable = [s for s in map(snap, rows) if s is not None and s[4] is not None]
    latest = usable[0] if usable else None
    hist = tuple((s[0], s[2]) for s in reversed([snap(r) for r in rows]) if s is not None)
    return Poll(path, manifest, int(count or 0), int(markers or 0), snap(first), latest,
                None if peak is None or _int(peak[1]) is None else (int(peak[0]), int(peak[1])),
                events=tuple((str(k), str(m)) for k, m in events), finished=finished, gone=gone, history=hist,
                previous=usable[1] if len(usable) > 1 else None)


def _one(con, sql):
    try:
        return con.execute(sql).fetchone()[0]
    except sqlite3.Error:
        return 0


def _rows(con, sql):
    try:
        return con.execute(sql).fetchall()
    except sqlite3.Error:
        return []
