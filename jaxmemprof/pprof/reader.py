"""Read pprof profiles (gzip or raw protobuf): plain Python data, and tidy
pandas frames built from it on first use.

The input is untrusted: decompression is bounded, every index is checked, and
any problem becomes an :class:`~jaxmemprof.errors.InputError` naming the file.
Works on any valid pprof (JAX's device-memory profiles, Go heap profiles, ...).
"""

from __future__ import annotations

import io
import os
import re
import stat
import zlib
from itertools import compress
from pathlib import Path
from typing import BinaryIO, Union

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
_HOLD = 32 * 1024**2
# A gzip stream may decompress to at most this many times the bytes read of
# it, past its first _RATIO_FREE bytes: real profiles compress 2 to 15 times
# (JAX and Go aggregate their samples, so no two are alike), a bomb 1,000
# times; one is refused once it has produced a few MiB, not at the bound.
DEFAULT_MAX_RATIO = 100
_RATIO_FREE = 4 * 1024**2
# Top-level fields (samples, strings, locations, functions, ...): past the
# first _FIELDS_FREE, at most one per _FIELD_BYTES bytes read so far. A real
# profile has one per 19 to 35 bytes (a 100,000-sample JAX profile: 104,000
# in 3.6 MB); 2-byte strings or 5-byte samples would cost protobuf and
# Python far more per byte than any profile does.
_FIELDS_FREE = 1 << 17
_FIELD_BYTES = 8
_CHECK_BYTES = 64 * 1024  # samples walked between two counts (at most 32,768 of them)

Source = Union[str, os.PathLike, bytes]


class Profile:
    """One pprof profile.

    The reader keeps it in plain Python form (no pandas or numpy: ``show``
    and ``diff`` group it without them); the tidy frames below are built on
    first access and kept:

    - ``samples``: one row per sample: ``sample_id, kind, device, count, bytes,
      stack_id`` (``kind``/``device`` come from JAX's labels, "" when absent;
      ``bytes`` is the chosen value, ``count`` its companion count, 0 if none).
    - ``frames``: one row per distinct frame, indexed by ``frame_id``:
      ``function, file, line``.
    - ``stacks``: for each ``stack_id``, the tuple of its frame ids, innermost
      first (inlined frames expanded, as pprof does).
    - ``labels`` (built on demand): every label: ``sample_id, key, value, num``.
    - ``sample_types``: ``index, type, unit``; ``value_index`` and
      ``count_index`` say which were used for ``bytes`` and ``count``.

    It can also be made from frames directly (a job's merged profile), with
    the same arguments, in the same order, as before.
    """

    def __init__(self, source, samples=None, frames=None, stacks=(), label_sets=(), label_ids=None,
                 sample_types=None, value_index=0, count_index=None, time_nanos=0, duration_nanos=0,
                 comments=(), *, _parts=None):
        self.source = source
        self.stacks = tuple(stacks)
        self.label_sets = tuple(label_sets)
        self.value_index = value_index
        self.count_index = count_index
        self.time_nanos = time_nanos
        self.duration_nanos = duration_nanos
        self.comments = tuple(comments)
        self._parts = _parts
        self._cache: dict = {}
        if _parts is None:
            self._cache.update(samples=samples, frames=frames, sample_types=sample_types, label_ids=label_ids)

    def __repr__(self) -> str:
        return (f"Profile(source={self.source!r}, {self.sample_count} samples, {len(self.stacks)} stacks, "
                f"value_type={self.value_type!r})")

    def _cached(self, key, make):
        v = self._cache.get(key)
        if v is None:
            v = self._cache[key] = make()
        return v

    # The frames, built on first access (pandas and numpy are imported then).

    @property
    def samples(self):
        return self._cached("samples", self._make_samples)

    @property
    def frames(self):
        return self._cached("frames", self._make_frames)

    @property
    def sample_types(self):
        return self._cached("sample_types", self._make_sample_types)

    @property
    def label_ids(self):
        return self._cached("label_ids", lambda: self._per_sample()[2])

    def _per_sample(self):
        """(stack ids, value ids, label ids) per sample, as int64 arrays."""
        def make():
            import numpy as np

            parts = self._parts
            codes = np.array(parts.codes, dtype=np.int64)
            tails = np.array(parts.tails, dtype=np.int64).reshape(-1, 2)[codes & ((1 << parts.shift) - 1)]
            return codes >> parts.shift, tails[:, 0], tails[:, 1]
        return self._cached("_per_sample", make)

    def _make_samples(self):
        import numpy as np
        import pandas as pd

        parts = self._parts
        stack_ids, value_ids, label_ids = self._per_sample()
        n = len(stack_ids)
        ntypes = len(parts.types)
        values = np.array(parts.value_rows, dtype=np.int64).reshape(-1, ntypes)[value_ids]
        kinds = np.array([k for k, _ in parts.label_kd], dtype=object)[label_ids]
        devices = np.array([d for _, d in parts.label_kd], dtype=object)[label_ids]
        ci = self.count_index
        return pd.DataFrame(
            {
                "sample_id": np.arange(n, dtype=np.int64),
                "kind": kinds,
                "device": devices,
                "count": values[:, ci] if ci is not None else np.zeros(n, np.int64),
                "bytes": values[:, self.value_index],
                "stack_id": stack_ids,
            }
        )

    def _make_frames(self):
        import numpy as np
        import pandas as pd

        keys = self._parts.frame_keys
        frames = pd.DataFrame(
            {
                "function": pd.Series([k[0] for k in keys], dtype=object),
                "file": pd.Series([k[1] for k in keys], dtype=object),
                "line": np.fromiter((k[2] for k in keys), dtype=np.int64, count=len(keys)),
            }
        )
        frames.index.name = "frame_id"
        return frames

    def _make_sample_types(self):
        import pandas as pd

        types = self._parts.types
        return pd.DataFrame(
            {"index": range(len(types)), "type": [t for t, _ in types], "unit": [u for _, u in types]}
        )

    # Plain views, for the code that needs no frames (show, diff).

    @property
    def types(self) -> list[tuple[str, str]]:
        """``(type, unit)`` of each sample type."""
        if self._parts is not None:
            return self._parts.types
        st = self.sample_types
        return list(zip(st["type"].tolist(), st["unit"].tolist()))

    @property
    def frame_keys(self) -> list[tuple[str, str, int]]:
        """``(function, file, line)`` per frame id."""
        if self._parts is not None:
            return self._parts.frame_keys
        fr = self.frames
        return list(zip(fr["function"].tolist(), fr["file"].tolist(), fr["line"].tolist()))

    @property
    def sample_count(self) -> int:
        return len(self._parts.codes) if self._parts is not None else len(self.samples)

    def stack_groups(self) -> list[tuple[str, str, int, int, int]]:
        """The samples summed per ``(kind, device, stack_id)``: rows
        ``(kind, device, stack_id, bytes, count)``, in no particular order."""
        return self._cached("_stack_groups", self._make_stack_groups)

    def _make_stack_groups(self):
        parts = self._parts
        if parts is None:
            s = self.samples
            if s.empty:
                return []
            g = s.groupby(["kind", "device", "stack_id"], sort=False, dropna=False)[["bytes", "count"]].sum()
            return [(k, d, int(sid), int(b), int(c)) for (k, d, sid), b, c
                    in zip(g.index, g["bytes"].tolist(), g["count"].tolist())]
        return parts.stack_groups(self.value_index, self.count_index)

    @property
    def value_type(self) -> str:
        t, u = self.types[self.value_index]
        return f"{t}/{u}"

    @property
    def total_bytes(self) -> int:
        if self._parts is None:
            return int(self.samples["bytes"].sum())
        return sum(g[3] for g in self.stack_groups())

    @property
    def labels(self):
        import pandas as pd

        rows = [
            (i, key, value, num)
            for i, lid in enumerate(self.label_ids.tolist())
            for key, value, num in self.label_sets[lid]
        ]
        return pd.DataFrame(rows, columns=["sample_id", "key", "value", "num"])

    def stack_frames(self):
        """Long form of the stacks: ``stack_id, depth, function, file, line``
        (depth 0 is the innermost frame)."""
        import numpy as np

        lengths = np.fromiter((len(s) for s in self.stacks), dtype=np.int64, count=len(self.stacks))
        frame_ids = np.fromiter(
            (f for s in self.stacks for f in s), dtype=np.int64, count=int(lengths.sum())
        )
        stack_id = np.repeat(np.arange(len(self.stacks), dtype=np.int64), lengths)
        starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
        depth = np.arange(len(frame_ids), dtype=np.int64) - starts
        out = self.frames.loc[frame_ids].reset_index(drop=True)
        out.insert(0, "depth", depth)
        out.insert(0, "stack_id", stack_id)
        return out


class _Parts:
    """What the reader found, in plain form. Per sample only one int:
    ``stack_id << shift | tail`` (a tail is a distinct (values, labels)
    pair: ``tails[tail] = (value_id, label_id)``)."""

    __slots__ = ("types", "frame_keys", "value_rows", "label_kd", "tails", "codes", "shift")

    def __init__(self, types, frame_keys, value_rows, label_kd, tails, codes, shift):
        self.types = types
        self.frame_keys = frame_keys
        self.value_rows = value_rows
        self.label_kd = label_kd  # (kind, device) per label set
        self.tails = tails
        self.codes = codes
        self.shift = shift

    def stack_groups(self, value_index, count_index):
        shift = self.shift
        mask = (1 << shift) - 1
        rows = self.value_rows
        # Label sets with the same (kind, device) are one group.
        group_of: dict = {}
        kd_index = [group_of.setdefault(kd, len(group_of)) for kd in self.label_kd]
        ngroups = max(len(group_of), 1)
        tbytes = [rows[v][value_index] for v, _ in self.tails]
        tcount = [rows[v][count_index] for v, _ in self.tails] if count_index is not None else None
        tgroup = [kd_index[lab] for _, lab in self.tails]
        nstacks = (max(self.codes) >> shift) + 1 if self.codes else 0
        size = nstacks * ngroups
        if size > 4 * len(self.codes) + 4096:
            return self._stack_groups_sparse(tbytes, tcount, tgroup, ngroups)
        nb = [0] * size
        nc = [0] * size
        seen = [False] * size
        # The one loop over every sample: kept to list indexing.
        if tcount is None:
            for code in self.codes:
                t = code & mask
                g = (code >> shift) * ngroups + tgroup[t]
                nb[g] += tbytes[t]
                seen[g] = True
        else:
            for code in self.codes:
                t = code & mask
                g = (code >> shift) * ngroups + tgroup[t]
                nb[g] += tbytes[t]
                nc[g] += tcount[t]
                seen[g] = True
        kds = list(group_of)
        return [(*kds[g % ngroups], g // ngroups, nb[g], nc[g]) for g in compress(range(size), seen)]

    def _stack_groups_sparse(self, tbytes, tcount, tgroup, ngroups):
        """:meth:`stack_groups` with a dict, when a list per (stack, group)
        would be far larger than the samples (many label sets)."""
        shift = self.shift
        mask = (1 << shift) - 1
        acc: dict = {}
        get = acc.get
        for code in self.codes:
            t = code & mask
            g = (code >> shift) * ngroups + tgroup[t]
            a = get(g)
            if a is None:
                acc[g] = [tbytes[t], tcount[t] if tcount is not None else 0]
            else:
                a[0] += tbytes[t]
                if tcount is not None:
                    a[1] += tcount[t]
        kds = list(dict.fromkeys(self.label_kd))
        return [(*kds[g % ngroups], g // ngroups, b, c) for g, (b, c) in acc.items()]

    def abs_total(self, col: int) -> int:
        """The sum of ``|value[col]|`` over every sample."""
        from collections import Counter

        mask = (1 << self.shift) - 1
        tails, rows = self.tails, self.value_rows
        return sum(abs(rows[tails[t][0]][col]) * m for t, m in Counter(c & mask for c in self.codes).items())


def read_profile_bytes(
    source: Source, *, name: str | None = None, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
    max_ratio: int | None = DEFAULT_MAX_RATIO,
) -> tuple[str, bytes]:
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


def _decode(f: BinaryIO, name: str, limit: int, ratio: int | None = None) -> bytes:
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
    ``_HOLD`` of them while the total is not known: a larger stream is
    counted to its end first (refused as soon as it passes the limit), then
    decompressed again, held. NUL padding after the last member is allowed,
    as gzip allows it. ``ratio``: see :func:`_inflate` (the first pass
    only: the second one has its total)."""
    start = f.tell() - len(head)
    total, out = _inflate(f, head, name, limit, min(limit, _HOLD), ratio=ratio)
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
    check_at = max(_RATIO_FREE, ratio * read_in) if ratio else limit
    buf = memoryview(head)  # compressed bytes read, not yet given to zlib
    at_end = False
    pending = b""  # given to zlib and not consumed (its output was cut short)
    d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)

    def more() -> bool:
        nonlocal buf, at_end, read_in, check_at
        if not buf and not at_end:
            buf = memoryview(f.read(_IN_CHUNK))
            at_end = not buf
            read_in += len(buf)
            if ratio:
                check_at = max(_RATIO_FREE, ratio * read_in)
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


def load_profile(
    source: Source,
    *,
    name: str | None = None,
    sample_index: str | int | None = None,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
    max_ratio: int | None = DEFAULT_MAX_RATIO,
) -> Profile:
    """Read a pprof profile from a path or bytes.

    ``sample_index`` picks the value reported as ``bytes`` (a sample type name
    or a position); by default the type named ``space``, else the profile's
    default type when its unit is bytes, else the last type measured in bytes,
    else the last type. ``max_decompressed`` and ``max_ratio``: see
    :func:`read_profile_bytes`. Whatever its size, a profile with far more
    top-level fields per byte than any profiler writes is refused before
    they are decoded (see ``_FIELD_BYTES``).
    """
    try:
        name, raw = read_profile_bytes(source, name=name, max_decompressed=max_decompressed,
                                       max_ratio=max_ratio)
        raw = bytes(raw)
        return _convert_raw(raw, name, sample_index)
    except MemoryError:
        raise InputError(
            name or str(source), "too large to read in the memory available (lower --max-decompressed?)"
        ) from None


def _parse(raw: bytes, name: str):
    from google.protobuf.message import DecodeError

    from jaxmemprof.pprof import profile_pb2

    try:
        return profile_pb2.Profile.FromString(raw)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise InputError(name, f"not a pprof profile (protobuf decoding failed: {exc})") from None


class _NotPlain(Exception):
    """The samples are not laid out as the fast path expects: read them
    through protobuf instead."""


def _convert_raw(raw: bytes, name: str, sample_index) -> Profile:
    """The fast path: the samples' bytes are read straight from ``raw``
    (each distinct stack and (values, labels) part decoded once, through
    protobuf); the rest of the message through protobuf. Anything unusual
    (samples not in one run, fields out of the usual order, a decoding
    error) goes through the whole-message path, which gives the same result
    or the same error."""
    try:
        scan = _scan_raw(raw, name)
    except (IndexError, _NotPlain):
        scan = None
    counted = False
    if scan is not None:
        first, end, keys = scan
        _count_fields(raw, end, keys.fields, name)  # the fields after the samples
        counted = True
        try:
            from google.protobuf.message import DecodeError

            from jaxmemprof.pprof import profile_pb2

            msg = profile_pb2.Profile.FromString(raw[:first] + raw[end:])
            if not msg.sample:
                return _convert(msg, name, sample_index, keys)
        except (DecodeError, RuntimeError, ValueError, _NotPlain):
            pass
    if not counted:
        _count_fields(raw, 0, 0, name)
    msg = _parse(raw, name)
    del raw
    return _convert(msg, name, sample_index, _scan_messages(msg))


def _varint(b: bytes, p: int) -> tuple[int, int]:
    """The varint at ``p``: (value, position after it)."""
    n, shift = 0, 0
    while True:
        byte = b[p]
        n |= (byte & 0x7F) << shift
        p += 1
        if byte < 0x80:
            return n, p
        shift += 7
        if shift > 63:
            raise _NotPlain()


def _too_dense(name: str, fields: int, p: int) -> InputError:
    return InputError(
        name,
        f"not a pprof profile as profilers write one ({fields} fields in its first {p} bytes: more than "
        f"one per {_FIELD_BYTES} bytes; a decompression bomb?)",
    )


def _count_fields(raw: bytes, p: int, fields: int, name: str) -> int:
    """Walk the top-level fields from ``p`` (``fields`` of them before it),
    refusing the profile (:func:`_too_dense`) once more than
    ``_FIELDS_FREE`` have been seen at more than one per ``_FIELD_BYTES``
    bytes: before protobuf or Python make an object of each. Bytes that are
    not fields end the walk quietly (protobuf says what is wrong with them).
    Returns the count."""
    size = len(raw)
    free = _FIELDS_FREE
    try:
        while p < size:
            p = _skip_field(raw, p)
            fields += 1
            if fields > free and fields * _FIELD_BYTES > p:
                raise _too_dense(name, fields, min(p, size))
    except (IndexError, _NotPlain):
        pass
    return fields


def _skip_field(raw: bytes, p: int) -> int:
    tag, p = _varint(raw, p)
    wt = tag & 7
    if wt == 0:
        return _varint(raw, p)[1]
    if wt == 2:
        n, p = _varint(raw, p)
        return p + n
    if wt == 1:
        return p + 8
    if wt == 5:
        return p + 4
    raise _NotPlain()


class _Keys:
    """Per sample, ``stack << shift | tail``; and, in sample order, the
    first sample of each new stack key and each new tail key (what follows
    its locations: values and labels)."""

    __slots__ = ("codes", "shift", "events", "n_stacks", "n_tails", "canonical", "fields")

    def __init__(self, codes, shift, events, n_stacks, n_tails, canonical):
        self.codes = codes
        self.shift = shift
        self.events = events  # (sample index, True for a stack | False for a tail, key bytes)
        self.n_stacks = n_stacks
        self.n_tails = n_tails
        self.canonical = canonical  # keys from SerializeToString: a tail never holds locations
        self.fields = 0  # top-level fields up to the end of the samples (_scan_raw's)


# Fields read one at a time before the samples (a profile has its few sample
# types there); a stream with more is read by protobuf, not field by field
# in Python (128 MiB of zeros would be 64 M of them).
_FIELDS_BEFORE_SAMPLES = 4096


def _scan_raw(raw: bytes, name: str = "<bytes>"):
    """Find the run of samples (field 2) in the serialized Profile and key
    each one by the bytes of its location ids and of the rest; None when
    there are no samples where expected. Too many samples for their bytes
    (see :func:`_count_fields`) are refused as the run is walked."""
    size = len(raw)
    p = 0
    skipped = 0
    while p < size and raw[p] != 0x12:
        p = _skip_field(raw, p)
        skipped += 1
        if skipped > _FIELDS_BEFORE_SAMPLES:
            raise _NotPlain()  # not as a profiler writes it: protobuf reads it, in C
    if p >= size:
        return None
    first = p
    shift = size.bit_length()
    stack_of: dict = {}
    tail_of: dict = {}
    codes: list = []
    events: list = []
    sget, tget, add, event = stack_of.get, tail_of.get, codes.append, events.append
    # The run is walked _CHECK_BYTES at a time; between two stretches, the
    # fields so far are counted (the loop itself has no test to spare).
    stop = min(size, p + _CHECK_BYTES)
    while True:
        while p < stop and raw[p] == 0x12:
            ln = raw[p + 1]
            if ln < 0x80:
                s = p + 2
            elif raw[p + 2] < 0x80:
                ln = ln & 0x7F | raw[p + 2] << 7
                s = p + 3
            else:
                ln, s = _varint(raw, p + 1)
            e = s + ln  # past the end only for the last one read: checked below
            # A location field that overruns the sample (or one read past an
            # empty sample) leaves an empty tail key: _decode_events refuses it.
            if raw[s] == 0x0A:
                k = raw[s + 1]
                if k < 0x80:
                    q0 = s + 2
                elif raw[s + 2] < 0x80:
                    k = k & 0x7F | raw[s + 2] << 7
                    q0 = s + 3
                else:
                    k, q0 = _varint(raw, s + 1)
                q = q0 + k
                lk = raw[q0:q]
            else:
                q = s
                lk = b""
            tk = raw[q:e]
            sid = sget(lk)
            if sid is None:
                sid = stack_of[lk] = len(stack_of)
                event((len(codes), True, lk))
            tid = tget(tk)
            if tid is None:
                tid = tail_of[tk] = len(tail_of)
                event((len(codes), False, tk))
            add(sid << shift | tid)
            p = e
        if p < stop or p >= size:
            break  # past the samples, or at the end
        fields = skipped + len(codes)
        if fields > _FIELDS_FREE and fields * _FIELD_BYTES > p:
            raise _too_dense(name, fields, p)
        stop = min(size, p + _CHECK_BYTES)
    if p > size:
        raise _NotPlain()
    keys = _Keys(codes, shift, events, len(stack_of), len(tail_of), False)
    keys.fields = fields = skipped + len(codes)
    if fields > _FIELDS_FREE and fields * _FIELD_BYTES > p:  # the last stretch
        raise _too_dense(name, fields, p)
    return first, p, keys


def _scan_messages(msg) -> _Keys:
    """The same keys from each sample's canonical serialisation (location
    ids, then values, then labels)."""
    stack_of: dict = {}
    tail_of: dict = {}
    codes: list = []
    events: list = []
    shift = max(len(msg.sample), 1).bit_length()
    for b in [smp.SerializeToString() for smp in msg.sample]:
        p = 0
        lk = b""
        if b and b[0] == 0x0A:
            p, q = _length(b, 1)
            lk = b[q:p]
        tk = b[p:]
        sid = stack_of.get(lk)
        if sid is None:
            sid = stack_of[lk] = len(stack_of)
            events.append((len(codes), True, lk))
        tid = tail_of.get(tk)
        if tid is None:
            tid = tail_of[tk] = len(tail_of)
            events.append((len(codes), False, tk))
        codes.append(sid << shift | tid)
    return _Keys(codes, shift, events, len(stack_of), len(tail_of), True)


class _Strings:
    """The string table, decoded lazily, with checked indices."""

    def __init__(self, table, name: str):
        self._raw = table
        self._n = len(table)
        self._cache: dict[int, str] = {}
        self._name = name

    def __len__(self) -> int:
        return self._n

    def get(self, index: int, what: str) -> str:
        s = self._cache.get(index)
        if s is None:
            if not 0 <= index < self._n:
                raise InputError(
                    self._name,
                    f"corrupt profile: {what} refers to string {index}, "
                    f"but the string table has {self._n} entries",
                )
            s = self._raw[index].decode("utf-8", errors="backslashreplace")
            self._cache[index] = s
        return s


def _choose_value_index(types: list[tuple[str, str]], default_type: str, wanted, name: str) -> int:
    if wanted is not None:
        if isinstance(wanted, int) or (isinstance(wanted, str) and wanted.lstrip("-").isdigit()):
            i = int(wanted)
            if not -len(types) <= i < len(types):
                raise InputError(name, f"sample index {i} out of range: the profile has {len(types)} sample types")
            return i % len(types)
        for i, (t, _) in enumerate(types):
            if t == wanted:
                return i
        raise InputError(
            name, f"no sample type {wanted!r}; it has: {', '.join(t for t, _ in types)}"
        )
    for i, (t, u) in enumerate(types):
        if t == "space":
            return i
    if default_type:
        for i, (t, u) in enumerate(types):
            if t == default_type and u == "bytes":
                return i
    byte_types = [i for i, (_, u) in enumerate(types) if u == "bytes"]
    return byte_types[-1] if byte_types else len(types) - 1


def _choose_count_index(types: list[tuple[str, str]], value_index: int) -> int | None:
    vtype = types[value_index][0]
    counts = [i for i, (_, u) in enumerate(types) if u == "count"]
    if not counts:
        return None
    # Go heap profiles pair inuse_space with inuse_objects, alloc_space with alloc_objects.
    prefix = vtype.rsplit("_", 1)[0] + "_" if "_" in vtype else None
    if prefix:
        for i in counts:
            if types[i][0].startswith(prefix):
                return i
    return counts[0]


def _length(b: bytes, p: int) -> tuple[int, int]:
    """Read a length varint at ``p``: (end of the field's data, its start)."""
    n = b[p]
    if n < 0x80:
        return p + 1 + n, p + 1
    n, shift = 0, 0
    while True:
        byte = b[p]
        n |= (byte & 0x7F) << shift
        p += 1
        if byte < 0x80:
            return p + n, p
        shift += 7


def _label_set(sample, strings: "_Strings", i: int) -> tuple:
    what = f"a label of sample {i}"
    return tuple(
        (strings.get(lab.key, what), strings.get(lab.str, what) if lab.str else "", int(lab.num))
        for lab in sample.label
    )


def _varint_bytes(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# One varint's bytes; a stack key (packed location ids) is a run of them.
_VARINT = re.compile(rb"[\x80-\xff]*[\x00-\x7f]")
# A varint protobuf would not write (a padded one, or one of 10 bytes or more).
_ODD_VARINT = re.compile(rb"[\x80-\xff](?:\x00|[\x80-\xff]{8})")


def _decode_events(keys: _Keys) -> list:
    """Each new tail key's Sample message (None for a stack key), in sample
    order, once each stack key is checked to be a run of varints as
    protobuf writes them (so that the key is one list of location ids, and
    the only encoding of it). On the fast path all are checked before any
    is used, so that bytes protobuf would refuse give its error (through
    the whole-message path), not a later check's."""
    from google.protobuf.message import DecodeError

    from jaxmemprof.pprof.profile_pb2 import Sample

    out = []
    odd = _ODD_VARINT.search
    try:
        for i, is_stack, key in keys.events:
            if is_stack:
                if key and (key[-1] >= 0x80 or odd(key)) and not keys.canonical:
                    raise _NotPlain()
                out.append(None)
                continue
            if not key and not keys.canonical:
                raise _NotPlain()  # no values: an error, or a sample misread (see _scan_raw)
            smp = Sample.FromString(key)
            if smp.location_id and not keys.canonical:
                raise _NotPlain()
            out.append(smp)
    except (DecodeError, RuntimeError, ValueError):
        if keys.canonical:
            raise
        raise _NotPlain() from None
    return out


def _convert(msg, name: str, sample_index, keys: _Keys) -> Profile:
    # First: bytes protobuf would refuse must give its error before any check does.
    decoded = _decode_events(keys)
    strings = _Strings(msg.string_table, name)
    if len(strings) == 0 or msg.string_table[0] != b"":
        if not keys.codes and not msg.sample_type and not msg.string_table:
            raise InputError(name, "not a pprof profile (no sample types, samples or strings)")
        raise InputError(name, "not a pprof profile (its string table must start with an empty string)")
    types = [
        (strings.get(t.type, "a sample type"), strings.get(t.unit, "a sample unit"))
        for t in msg.sample_type
    ]
    if not types:
        raise InputError(name, "not a pprof profile (it declares no sample types)")
    default_type = strings.get(msg.default_sample_type, "the default sample type")
    value_index = _choose_value_index(types, default_type, sample_index, name)
    count_index = _choose_count_index(types, value_index)

    functions: dict[int, tuple[str, str]] = {}
    for fn in msg.function:
        functions[fn.id] = (
            strings.get(fn.name, f"function {fn.id}'s name"),
            strings.get(fn.filename, f"function {fn.id}'s file name"),
        )

    mappings = {m.id: strings.get(m.filename, f"mapping {m.id}'s file name") for m in msg.mapping}

    frame_index: dict[tuple[str, str, int], int] = {}
    loc_frames: dict[int, tuple[int, ...]] = {}
    for loc in msg.location:
        ids = []
        if loc.line:
            for ln in loc.line:
                fn = functions.get(ln.function_id)
                if fn is None:
                    raise InputError(
                        name,
                        f"corrupt profile: location {loc.id} refers to function "
                        f"{ln.function_id}, which does not exist",
                    )
                key = (fn[0], fn[1], int(ln.line))
                fid = frame_index.setdefault(key, len(frame_index))
                ids.append(fid)
        else:
            # No symbols: show the address, as pprof does.
            if loc.mapping_id and loc.mapping_id not in mappings:
                raise InputError(
                    name,
                    f"corrupt profile: location {loc.id} refers to mapping "
                    f"{loc.mapping_id}, which does not exist",
                )
            key = (f"0x{loc.address:x}", mappings.get(loc.mapping_id, ""), 0)
            ids.append(frame_index.setdefault(key, len(frame_index)))
        loc_frames[loc.id] = tuple(ids)

    ntypes = len(types)
    # Samples repeat the same stacks, values and labels many times over: each
    # distinct one was keyed by its bytes (_Keys) and is decoded once here.
    stacks: list[tuple[int, ...]] = []
    value_of: dict[bytes, int] = {}
    value_rows: list[tuple[int, ...]] = []
    labels_of: dict[bytes, int] = {}
    label_sets: list[tuple] = []
    tails: list[tuple[int, int]] = []
    # Location ids are read from a stack key's bytes: one varint each, found
    # by its encoding (a key is canonical: _decode_events checked it).
    by_bytes = {_varint_bytes(k): v for k, v in loc_frames.items()}
    one_frame = {k: v[0] for k, v in by_bytes.items()} if all(len(v) == 1 for v in by_bytes.values()) else None
    pieces = _VARINT.findall
    for (i, is_stack, key), smp in zip(keys.events, decoded):
        if is_stack:
            try:
                if one_frame is not None:
                    frames = tuple(map(one_frame.__getitem__, pieces(key)))
                else:
                    frames = tuple(f for v in pieces(key) for f in by_bytes[v])
            except KeyError:
                missing = next(_varint(v, 0)[0] for v in pieces(key) if v not in by_bytes)
                raise InputError(
                    name, f"corrupt profile: sample {i} refers to location {missing}, which does not exist"
                ) from None
            stacks.append(frames)
            continue
        c = key if keys.canonical else smp.SerializeToString()
        p, end = 0, len(c)
        val_key = b""
        if end and c[0] == 0x12:
            p, q = _length(c, 1)
            val_key = c[q:p]
        lab_key = c[p:]
        vid = value_of.get(val_key)
        if vid is None:
            v = tuple(smp.value)
            if len(v) != ntypes:
                raise InputError(
                    name, f"corrupt profile: sample {i} has {len(v)} values for {ntypes} sample types"
                )
            vid = value_of[val_key] = len(value_rows)
            value_rows.append(v)
        lid = labels_of.get(lab_key)
        if lid is None:
            lid = labels_of[lab_key] = len(label_sets)
            label_sets.append(_label_set(smp, strings, i))
        tails.append((vid, lid))

    codes = keys.codes
    shift = keys.shift
    parts = _Parts(types, list(frame_index), value_rows, None, tails, codes, shift)
    n = len(codes)
    for col in (value_index, count_index):
        # Sums (and diffs) must stay exact in 64 bits.
        if col is None or not n:
            continue
        if max(abs(v[col]) for v in value_rows) * n >= 2**62 and parts.abs_total(col) >= 2**62:
            raise InputError(
                name, f"corrupt profile: the {types[col][0]} values add up past 2**62, too large to total exactly"
            )
    # JAX's two labels become columns.
    label_dicts = [{k: t for k, t, _ in ls} for ls in label_sets]
    parts.label_kd = [(d.get("kind", ""), d.get("device", "")) for d in label_dicts]
    return Profile(
        source=name,
        stacks=tuple(stacks),
        label_sets=tuple(label_sets),
        value_index=value_index,
        count_index=count_index,
        time_nanos=int(msg.time_nanos),
        duration_nanos=int(msg.duration_nanos),
        comments=tuple(strings.get(c, "a comment") for c in msg.comment),
        _parts=parts,
    )
