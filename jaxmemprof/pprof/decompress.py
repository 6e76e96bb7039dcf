"""Reading a profile's bytes from an untrusted file or buffer: only a
regular file, never through a device or a FIFO; gzip or raw; decompression
bounded in size (``DEFAULT_MAX_DECOMPRESSED``) and in ratio
(``DEFAULT_MAX_RATIO``), in bounded memory (a bomb never fills it). Every
problem is an :class:`~jaxmemprof.errors.InputError` naming the file.
"""

from __future__ import annotations

import io
import os
import stat
import zlib
from pathlib import Path
from typing import BinaryIO

from jaxmemprof.errors import InputError

GZIP_MAGIC = b"\x1f\x8b"
# Cap on the decompressed size of a profile (a gzip bomb stops here). A
# 100,000-sample device-memory profile is 3.6 MB decompressed (36 to 70 bytes
# a sample): the cap is some 35 times that, and inflating a bomb up to it
# takes a few tenths of a second (docs/performance.md).
DEFAULT_MAX_DECOMPRESSED = 128 * 1024**2
_CHUNK = 64 * 1024**2  # raw bytes read at a time
_IN_CHUNK = 1024**2  # compressed bytes read at a time
_IN_PIECE = 16 * 1024  # compressed bytes given to zlib at a time: what it copies per call
_OUT_PIECE = 1024**2  # decompressed bytes asked of zlib at a time
# Decompressed bytes held while the total is not known yet: past this, the
# rest is only counted, and a stream that ends under the limit is
# decompressed again, into a buffer of its size (a bomb never fills memory).
HOLD = 32 * 1024**2
# A gzip stream may decompress to at most this many times the bytes read of
# it, past its first _RATIO_FREE bytes: real profiles compress 2 to 15 times
# (JAX and Go aggregate their samples, so no two are alike), a bomb 1,000
# times; one is refused once it has produced a few MiB, not at the bound.
DEFAULT_MAX_RATIO = 100
RATIO_FREE = 4 * 1024**2

Source = str | os.PathLike | bytes


def read_profile_bytes(
    source: Source, *, name: str | None = None, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
    max_ratio: int | None = DEFAULT_MAX_RATIO,
) -> tuple[str, bytes | bytearray]:
    """Return ``(name, serialized protobuf)`` for a path or bytes, gunzipping
    if needed, never producing more than ``max_decompressed`` bytes, nor
    (past its first ``_RATIO_FREE``) more than ``max_ratio`` times the gzip
    bytes read (None: no such limit).

    A path must be a regular file no larger than the limit: that is checked
    with stat() before a byte is read, so a device (/dev/urandom), a FIFO
    (which could block for ever) or a huge sparse file is refused at once.
    The file is then read, and gunzipped, as a stream under the limit (it may
    still be growing)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        name = name or "<bytes>"
        return name, _decode(io.BytesIO(bytes(source)), name, max_decompressed, max_ratio)
    name = name or str(source)
    try:
        with _open_regular(Path(source), name, max_decompressed) as f:
            return name, _decode(f, name, max_decompressed, max_ratio)
    except FileNotFoundError:
        raise InputError(name, "no such file") from None
    except PermissionError:
        raise InputError(name, "permission denied") from None
    except IsADirectoryError:
        raise InputError(name, "is a directory, not a profile file") from None
    except NotADirectoryError:
        raise InputError(name, "no such file (a part of the path is not a directory)") from None
    except OSError as exc:
        raise InputError(name, f"cannot read: {exc.strerror or exc}") from None


_KINDS = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISSOCK, "a socket"))


def _not_regular(mode: int, name: str) -> InputError:
    if stat.S_ISDIR(mode):
        return InputError(name, "is a directory, not a profile file")
    kind = next((k for test, k in _KINDS if test(mode)), "not a regular file")
    return InputError(name, f"is {kind}, not a regular file: save the profile to a file first")


def _open_regular(path: Path, name: str, limit: int):
    """The file open for reading, once stat() says it is a regular file of
    at most ``limit`` bytes; checked again on the open file (the path may
    have been swapped for a FIFO in between: O_NONBLOCK keeps the open from
    waiting on one)."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(st.st_mode, name)
    if st.st_size > limit:
        raise InputError(name, f"is {st.st_size} bytes, larger than the {limit}-byte limit "
                               "(raise it with --max-decompressed)")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(mode, name)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _decode(f: BinaryIO, name: str, limit: int, ratio: int | None = None) -> bytes | bytearray:
    """The serialized protobuf in ``f``: gunzipped if it is gzip (at most
    ``ratio`` times the bytes read, past the first few MiB), at most
    ``limit`` bytes either way."""
    head = f.read(2)
    if not head:
        raise InputError(name, "empty file, not a pprof profile")
    if head == GZIP_MAGIC:
        raw = _gunzip(f, head, name, limit, ratio)
        if not raw:
            raise InputError(name, "gzip data decompresses to nothing, not a pprof profile")
        _check_first_tag(raw[0], name)
        return raw
    _check_first_tag(head[0], name)
    raw = bytearray(head)
    _read_into(raw, f, limit)
    if len(raw) > limit:
        raise InputError(name, f"is larger than the {limit}-byte limit (raise it with --max-decompressed)")
    return raw


def _check_first_tag(byte: int, name: str) -> None:
    """A protobuf message starts with a field tag: field number 1 or more,
    a wire type that can begin a field. Anything else (zeros, most text) is
    refused before the rest of the file is read."""
    if byte >> 3 == 0 or byte & 7 in (4, 6, 7):
        raise InputError(name, f"not a pprof profile (it starts with byte 0x{byte:02x}, "
                               "which begins no protobuf field)")


def _read_into(out: bytearray, f: BinaryIO, limit: int) -> None:
    """Append ``f``'s bytes to ``out`` until it holds ``limit + 1`` (one past
    the limit says "too large"), in chunks: one read of the whole limit would
    reserve all of it up front."""
    while len(out) <= limit:
        chunk = f.read(min(_CHUNK, limit + 1 - len(out)))
        if not chunk:
            break
        out += chunk


def _gunzip(f: BinaryIO, head: bytes, name: str, limit: int, ratio: int | None = None) -> bytearray:
    """Decompress the gzip members in ``f`` (``head``: its first bytes,
    already read), producing at most ``limit`` bytes, and holding at most
    ``HOLD`` of them while the total is not known: a larger stream is
    counted to its end first (refused as soon as it passes the limit), then
    decompressed again, held. NUL padding after the last member is allowed,
    as gzip allows it. ``ratio``: see :func:`_inflate` (the first pass
    only: the second one has its total)."""
    start = f.tell() - len(head)
    total, out = _inflate(f, head, name, limit, min(limit, HOLD), ratio=ratio)
    if out is not None:
        return out
    f.seek(start)
    _, out = _inflate(f, f.read(len(head)), name, total, total, again=True)
    if out is None or len(out) != total:
        raise InputError(name, "changed while it was read (decompressed to a different size)")
    return out


def _inflate(f: BinaryIO, head: bytes, name: str, limit: int, hold: int, again: bool = False,
             ratio: int | None = None):
    """One pass over the gzip members in ``f``: ``(total, bytes)``, or
    ``(total, None)`` when the total passed ``hold`` (those bytes were
    dropped as they came: only the count is kept). Past ``limit``, an
    InputError, before more is decompressed. ``again``: the second pass
    over a stream whose total (``limit``) is known. ``ratio``: past
    ``_RATIO_FREE`` bytes out, an InputError as soon as they are more than
    ``ratio`` times the bytes read from ``f`` (a bomb stops at a few MiB).

    zlib is given the input ``_IN_PIECE`` bytes at a time and asked for at
    most ``_OUT_PIECE`` bytes: what it copies on each call (the input it
    left, the data after a member) stays small, so a file of many tiny
    members costs time in proportion to its size, not to its square."""
    out: bytearray | None = bytearray()
    total = 0
    read_in = len(head)  # bytes read from f
    # Past this many bytes out, the ratio is checked (kept up to date below).
    check_at = max(RATIO_FREE, ratio * read_in) if ratio else limit
    buf = memoryview(head)  # compressed bytes read, not yet given to zlib
    at_end = False
    pending: bytes | memoryview = b""  # given to zlib and not consumed (its output was cut short)
    d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)

    def more() -> bool:
        nonlocal buf, at_end, read_in, check_at
        if not buf and not at_end:
            buf = memoryview(f.read(_IN_CHUNK))
            at_end = not buf
            read_in += len(buf)
            if ratio:
                check_at = max(RATIO_FREE, ratio * read_in)
        return bool(buf)

    while True:
        if not pending and more():
            pending, buf = buf[:_IN_PIECE], buf[_IN_PIECE:]
        try:
            chunk = d.decompress(pending, min(_OUT_PIECE, limit - total + 1))
        except zlib.error as exc:
            raise InputError(name, f"corrupt gzip data ({exc})") from None
        n = len(chunk)
        total += n
        if total > limit:
            if again:
                raise InputError(name, "changed while it was read (it decompresses to more than before)")
            raise InputError(
                name,
                f"decompresses to more than {limit} bytes (a gzip bomb?); raise the limit with --max-decompressed",
            )
        if total > check_at:
            raise InputError(
                name,
                f"decompresses to more than {ratio} times its size ({total} bytes from the first {read_in}; "
                "a gzip bomb?); raise the limit with --max-ratio",
            )
        if out is not None:
            if total > hold:
                out = None  # more than may be held before the total is known: count the rest
            else:
                out += chunk
        del chunk
        pending = d.unconsumed_tail
        if d.eof:
            # What follows a member: another member, NUL padding, or nothing.
            rest = d.unused_data
            while len(rest) < 2 and more():
                k = 2 - len(rest)
                rest += bytes(buf[:k])
                buf = buf[k:]
            if not rest:
                return total, out
            if rest[:2] != GZIP_MAGIC:
                _expect_padding(rest + bytes(buf), f, name)
                return total, out
            d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            pending = rest
        elif not n and not pending and not more():
            raise InputError(name, "truncated gzip data (the file ends mid-stream)")


def _expect_padding(rest: bytes, f: BinaryIO, name: str) -> None:
    """Only NUL bytes may follow the last gzip member."""
    while rest:
        if rest.strip(b"\0"):
            raise InputError(name, "unexpected data after the end of the gzip stream")
        rest = f.read(_IN_CHUNK)
