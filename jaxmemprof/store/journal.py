"""Opening a run's journal (SQLite) to read it, never writing to it: the
run reader, the job reader and `top` (which reads a run while it is written)."""

from __future__ import annotations

import errno
import os
import stat
import sqlite3
from pathlib import Path

from jaxmemprof.store import layout


def connect_read_only(db_path: Path, *, tolerant: bool = False, timeout: float = 5.0) -> sqlite3.Connection:
    """A journal opened without ever writing to it; one whose WAL index
    cannot be opened read-only (a read-only directory, a run killed with its
    -shm file gone) is read as it is on disk (``immutable``). ``tolerant``:
    text that is not UTF-8 is shown escaped (for small reads; the run reader
    decodes in C and escapes only a table that needs it). A journal, WAL or
    WAL index that is a symlink is refused (sqlite3.DatabaseError): SQLite
    would follow it, and may write the WAL index even when reading."""
    db_path = Path(db_path)
    for name in layout.JOURNAL_FILES:
        f = db_path.with_name(db_path.name + name[len(layout.JOURNAL):])
        if layout.entry_kind(f) == "link":
            raise sqlite3.DatabaseError(f"{f.name} is a symlink; a run's journal is never read through a link")
    # The directory's links resolved (the user's path), the file's own name kept.
    uri = (Path(os.path.realpath(db_path.parent)) / db_path.name).as_uri()
    try:
        con = _opened(f"{uri}?mode=ro", timeout)
    except sqlite3.Error:
        con = _opened(f"{uri}?immutable=1", timeout)
    if tolerant:
        con.text_factory = tolerant_text
    return con


def _opened(uri: str, timeout: float) -> sqlite3.Connection:
    con = sqlite3.connect(uri, uri=True, timeout=timeout)
    try:
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except UnicodeDecodeError as exc:  # SQLite's message quotes the damaged schema, which is not UTF-8
        con.close()
        raise sqlite3.DatabaseError(f"malformed database schema (text that is not UTF-8: {exc.reason})") from None
    except sqlite3.Error:
        con.close()
        raise
    return con


def tolerant_text(b: bytes) -> str:
    """Text that is not UTF-8, shown escaped rather than failing the run."""
    return b.decode("utf-8", "backslashreplace")


def recorder_running(run_dir: Path) -> bool:
    """Whether a live process holds ``run_dir``'s lock: it is still being
    recorded (False: finished, killed, or never locked)."""
    import fcntl

    try:
        fd = os.open(Path(run_dir) / layout.LOCK, os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or device put there: no lock of ours
            return False
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        return exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK)
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def recorder_gone(run_dir: Path) -> bool:
    """Whether the process that recorded into ``run_dir`` died without
    finishing: its lock file is still there, and nothing holds it (the
    kernel releases a dead process's lock). False while it records, and for
    a run that finished (its lock file is removed) or was never locked."""
    import fcntl

    try:
        fd = os.open(Path(run_dir) / layout.LOCK, os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:  # held: it records (or a file system without locks: cannot tell)
        return False
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    finally:
        os.close(fd)
