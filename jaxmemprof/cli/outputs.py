"""Output files of show, diff and export: what may be written, and what replaced.

- A path that does not exist is created.
- A regular file that exists is replaced only with ``--force``. A symlink is
  followed: the file it points to is replaced and the link stays a link.
- A FIFO or a character device (``/dev/stdout``, ``/dev/null``, a ``>(...)``
  pipe) is written into, as a shell redirection would: nothing is replaced,
  so no ``--force`` is needed; ``/dev/full`` then fails as a full disk does.
- Anything else (a directory, a socket, a block device, a dangling symlink)
  is refused. Inside a directory that ``export --csv`` fills, only regular
  files are ever replaced: a link or a FIFO there is refused.

A file is written under a temporary name beside it and renamed into place,
never renamed over anything but a regular file, so a failed write (a full
disk, a read-only file system) leaves what was there as it was. Every failure
is an InputError naming the path: one line, exit status 2.
"""

from __future__ import annotations

import io
import os
import stat
import tempfile
from contextlib import contextmanager

from jaxmemprof.errors import InputError, check_not_empty

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISSOCK, "a socket"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _problem(exc: OSError) -> str:
    return f"cannot write: {exc.strerror or exc}"


def _target(path: str, force: bool, streams: bool) -> tuple[str, str]:
    """How ``path`` is written: ("new" | "replace" | "stream", the path to
    write). Raises InputError for what must not be touched."""
    check_not_empty(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise InputError(path, "is a symlink to a file that does not exist; remove it or name another path") from None
        return "new", path
    except OSError as exc:
        raise InputError(path, _problem(exc)) from None
    link = os.path.islink(path)
    if stat.S_ISREG(st.st_mode):
        if link and not streams:
            raise InputError(path, "is a symlink; refused (only regular files are replaced here)")
        if not force:
            raise InputError(path, "already exists; pass --force to overwrite it")
        return "replace", os.path.realpath(path)
    if streams and (stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode)):
        return "stream", path
    if stat.S_ISDIR(st.st_mode):
        raise InputError(path, "cannot write: it is a directory (name a file)")
    what = _kind(st.st_mode) + (" (through a symlink)" if link else "")
    raise InputError(path, f"is {what}, not a regular file; refused")


def _open_stream(path: str):
    """Open a FIFO or device for writing without creating or truncating
    anything; checked again once open (the path may have changed since)."""
    fd = os.open(path, os.O_WRONLY | getattr(os, "O_NOCTTY", 0))
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)):
        os.close(fd)
        raise InputError(path, "changed while being opened; refused")
    return os.fdopen(fd, "wb")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _commit(tmp: str, real: str, how: str, path: str) -> None:
    """Rename the finished temporary file into place, re-checking first that
    nothing but a regular file (or nothing) is there."""
    try:
        st = os.lstat(real)
    except FileNotFoundError:
        st = None
    if how == "new" and st is not None:
        raise InputError(path, "appeared while being written; pass --force to overwrite it")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise InputError(path, f"became {_kind(st.st_mode)} while being written; refused")
    os.chmod(tmp, stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask())
    os.replace(tmp, real)


def _discard(tmp: str | None) -> None:
    if tmp is not None:
        try:
            os.unlink(tmp)
        except OSError:
            pass


@contextmanager
def open_output(path: str, force: bool, *, binary: bool = False, strict: bool = False):
    """A file object to write ``path`` (see the module's rules). ``strict``:
    only a new or a regular file (the files inside an export directory)."""
    path = str(path)
    how, real = _target(path, force, streams=not strict)
    tmp = None
    try:
        if how == "stream":
            raw = _open_stream(path)
        else:
            # The temporary name is kept short: a legitimate 255-byte name plus a
            # prefix and suffix would be too long for the file system.
            fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(real)[:64]}.", suffix=".tmp",
                                       dir=os.path.dirname(real) or ".")
            raw = os.fdopen(fd, "wb")
    except OSError as exc:
        raise InputError(path, _problem(exc)) from None
    out = raw if binary else io.TextIOWrapper(raw, encoding="utf-8", newline="")
    try:
        try:
            yield out
            out.close()  # flushes: a full disk shows here
        finally:
            if not out.closed:
                try:
                    out.close()
                except OSError:
                    pass
        if tmp is not None:
            _commit(tmp, real, how, path)
            tmp = None
    except BrokenPipeError:
        raise  # the reader of a FIFO went away: as for stdout, not an error
    except OSError as exc:
        raise InputError(path, _problem(exc)) from None
    finally:
        _discard(tmp)


def check_output(path: str, force: bool) -> None:
    """Refuse ``path`` now if open_output would refuse it (before the work)."""
    _target(str(path), force, streams=True)


def write_output(path: str, data: bytes, force: bool) -> None:
    """Write ``data`` to ``path`` under the module's rules."""
    with open_output(path, force, binary=True) as f:
        f.write(data)


def prepare_directory(directory: str, names, force: bool) -> str:
    """Make sure ``directory`` can take the files ``names``: created if
    missing, refused when it is not a directory or when one of the files
    exists (without --force, or when it is not a regular file)."""
    directory = str(directory)
    check_not_empty(directory)
    if os.path.lexists(directory) and not os.path.isdir(directory):
        raise InputError(directory, "exists and is not a directory")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise InputError(directory, f"cannot create the directory: {exc.strerror or exc}") from None
    clash = []
    for name in names:
        p = os.path.join(directory, name)
        if os.path.lexists(p):
            st = os.lstat(p)
            if not stat.S_ISREG(st.st_mode):
                raise InputError(p, "is not a regular file (a link, a directory, a FIFO ...); refused")
            clash.append(name)
    if clash and not force:
        raise InputError(directory, f"already holds {', '.join(clash)}; pass --force to overwrite")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise InputError(directory, "cannot write: permission denied")
    return directory
