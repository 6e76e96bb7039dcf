"""A trace that ``jax.profiler.trace`` wrote, read for ``export --format
perfetto --with`` to merge into: its events (Chrome trace event JSON,
``<host>.trace.json.gz``) and when it started (the ``.xplane.pb`` beside it).

JAX writes a profile as ``LOG_DIR/plugins/profile/<session>/<host>.xplane.pb``
and ``<host>.trace.json.gz``; the JSON's timestamps are microseconds since the
profile started. That start is in the XPlane, not in the JSON: the plane named
``Task Environment`` holds the stat ``profile_start_time``, nanoseconds since
the epoch on the host's wall clock (the clock of ``time.time()``, which the
run's snapshots and markers record). Only that one stat is read here, by a
walk of the protobuf's wire format that skips every other plane unread (a
TPU's xplane runs to hundreds of MiB); reading the rest of an XPlane is the
profile reader's (docs/xprof.md).

Both files are untrusted: sizes bounded before reading, gzip inflated under a
limit, every length checked; a problem is one InputError naming the file."""

from __future__ import annotations

import json
import os
import stat
import zlib
from dataclasses import dataclass
from pathlib import Path

from jaxmemprof.errors import InputError

MAX_TRACE_BYTES = 1024**3  # the JSON, inflated
MAX_PLANE_BYTES = 1024**2  # the Task Environment plane (a few hundred bytes in practice)
TRACE_SUFFIX = ".trace.json.gz"
XPLANE_SUFFIX = ".xplane.pb"
PROFILE_SUBDIR = ("plugins", "profile")
LOG_DIR = "xprof"  # run --xprof's log directory in the run directory (capture/xprof.py)
START_STAT = "profile_start_time"
ENVIRONMENT_PLANE = "Task Environment"


@dataclass(frozen=True)
class JaxTrace:
    path: Path  # the .trace.json.gz read
    events: list  # its traceEvents, as written (dicts)
    start_ns: int  # the profile's start: ns since the epoch (its XPlane's profile_start_time)
    host: str  # the file's host name (its name less the suffix)
    metadata: dict  # its top-level metadata, as written (JAX's: highres-ticks)


def find_trace(path) -> Path:
    """The ``.trace.json.gz`` that ``path`` names: that file, or the one file
    of a profile's session directory, or of the newest session under a log
    directory (``plugins/profile/<session>/``)."""
    p = Path(path)
    if p.is_file():
        if not p.name.endswith(TRACE_SUFFIX):
            raise InputError(str(p), f"is not a JAX trace (a {TRACE_SUFFIX} file that jax.profiler.trace writes)")
        return p
    if not p.is_dir():
        raise InputError(str(p), "is not a regular file" if p.exists() else "no such file or directory")
    session = p
    base = p.joinpath(*PROFILE_SUBDIR)
    if not _traces(p) and base.is_dir():
        sessions = sorted(d for d in base.iterdir() if d.is_dir() and not d.is_symlink() and _traces(d))
        if not sessions:
            raise InputError(str(p), f"holds no JAX trace (no {TRACE_SUFFIX} under plugins/profile/)")
        session = sessions[-1]  # JAX names sessions by their start time (2026_12_07_06_08_57)
    found = _traces(session)
    if not found:
        raise InputError(str(p), f"holds no JAX trace ({TRACE_SUFFIX})")
    if len(found) > 1:
        raise InputError(str(session), f"holds {len(found)} hosts' traces ({', '.join(f.name for f in found[:4])}"
                                       f"{' ...' if len(found) > 4 else ''}): name one file")
    return found[0]


def _traces(d: Path) -> list[Path]:
    try:
        return sorted(f for f in d.iterdir() if f.name.endswith(TRACE_SUFFIX) and f.is_file())
    except OSError:
        return []


def read_jax_trace(path, max_bytes: int = MAX_TRACE_BYTES) -> JaxTrace:
    """The JAX trace that ``path`` names (see :func:`find_trace`), with its start."""
    trace = find_trace(path)
    host = trace.name[: -len(TRACE_SUFFIX)]
    xplane = trace.with_name(host + XPLANE_SUFFIX)
    start = profile_start_ns(xplane)
    raw = _inflate(trace, max_bytes)
    try:
        doc = json.loads(raw, parse_constant=_no_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(str(trace), f"is not JSON ({str(exc).splitlines()[0][:120]})") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc if isinstance(doc, list) else None
    if not isinstance(events, list):
        raise InputError(str(trace), "is not a trace: no traceEvents list")
    kept = [e for e in events if isinstance(e, dict) and "ph" in e]  # JAX's trace ends with a {}
    for e in kept:
        ts = e.get("ts")
        if ts is not None and (isinstance(ts, bool) or not isinstance(ts, (int, float)) or ts != ts):
            raise InputError(str(trace), f"has an event whose ts is not a number ({str(ts)[:40]!r})")
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    return JaxTrace(path=trace, events=kept, start_ns=start, host=host, metadata=meta if isinstance(meta, dict) else {})


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _open_regular(path: Path, limit: int):
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise InputError(str(path), "no such file") from None
    except OSError as exc:
        raise InputError(str(path), f"cannot read: {exc.strerror or exc}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise InputError(str(path), "is not a regular file")
    if st.st_size > limit:
        os.close(fd)
        raise InputError(str(path), f"is larger than the {limit}-byte limit")
    return os.fdopen(fd, "rb")


def _inflate(path: Path, limit: int) -> bytes:
    """The file's bytes, gunzipped (one or more members), never more than ``limit``."""
    with _open_regular(path, limit) as f:
        data = f.read(limit + 1)
    if data[:2] != b"\x1f\x8b":
        raise InputError(str(path), "is not gzip data")
    out = bytearray()
    rest = data
    try:
        while rest:
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out += d.decompress(rest, limit + 1 - len(out))
            if len(out) > limit:
                raise InputError(str(path), f"inflates past the {limit}-byte limit")
            if not d.eof:
                if d.unconsumed_tail:
                    raise InputError(str(path), f"inflates past the {limit}-byte limit")
                raise InputError(str(path), "is truncated (its gzip data ends early)")
            rest = d.unused_data
    except zlib.error as exc:
        raise InputError(str(path), f"is damaged gzip data ({exc})") from None
    return bytes(out)


# -- the profile's start, from its XPlane ---------------------------------------------------------


def _varint(f, path) -> int | None:
    """A varint read from ``f`` (None at a clean end of the file)."""
    shift = value = 0
    for i in range(10):
        b = f.read(1)
        if not b:
            if i == 0:
                return None
            raise InputError(str(path), "is truncated (it ends inside a field)")
        value |= (b[0] & 0x7F) << shift
        if b[0] < 0x80:
            return value
        shift += 7
    raise InputError(str(path), "is damaged (a varint runs past 10 bytes)")


def _fields(buf: bytes, path):
    """``(field number, wire type, value)`` of one message held whole in ``buf``."""
    p, n = 0, len(buf)

    def varint():
        nonlocal p
        shift = value = 0
        while True:
            if p >= n or shift > 63:
                raise InputError(str(path), "is damaged (a field runs past its message)")
            b = buf[p]
            p += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7

    while p < n:
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            yield field, wire, varint()
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if p + size > n:
                raise InputError(str(path), "is damaged (a field runs past its message)")
            yield field, wire, buf[p:p + size]
            p += size
        elif wire == 2:
            size = varint()
            if p + size > n:
                raise InputError(str(path), "is damaged (a field runs past its message)")
            yield field, wire, buf[p:p + size]
            p += size
        else:
            raise InputError(str(path), f"is damaged (wire type {wire})")


def profile_start_ns(xplane: Path) -> int:
    """The profile's start (ns since the epoch): the ``profile_start_time``
    stat of the XSpace's ``Task Environment`` plane. The planes (XSpace field
    1) are stepped over by their lengths; only their names are read, and the
    one plane's whole message."""
    if not xplane.exists():
        raise InputError(str(xplane), "missing: the JAX trace's start is in it (jax.profiler.trace writes it "
                                      "beside the .trace.json.gz); without it the trace cannot be placed on the "
                                      "run's clock")
    with _open_regular(xplane, 1 << 40) as f:
        size = os.fstat(f.fileno()).st_size
        while True:
            key = _varint(f, xplane)
            if key is None:
                break
            field, wire = key >> 3, key & 7
            if wire != 2:  # XSpace's fields are messages and strings, but for none we need
                if wire == 0:
                    _varint(f, xplane)
                elif wire in (1, 5):
                    f.seek(8 if wire == 1 else 4, os.SEEK_CUR)
                else:
                    raise InputError(str(xplane), f"is not an XPlane profile (wire type {wire})")
                continue
            length = _varint(f, xplane)
            if length is None or f.tell() + length > size:
                raise InputError(str(xplane), "is truncated (a plane runs past the end of the file)")
            if field != 1 or length > MAX_PLANE_BYTES:
                f.seek(length, os.SEEK_CUR)
                continue
            start = _start_in_plane(f.read(length), xplane)
            if start is not None:
                return start
    raise InputError(str(xplane), f"has no {START_STAT} (no '{ENVIRONMENT_PLANE}' plane): the trace cannot be "
                                  "placed on the run's clock")


def _start_in_plane(buf: bytes, path) -> int | None:
    """``profile_start_time`` of an XPlane message, if it is the Task Environment plane."""
    name, stat_names, stats = None, {}, []
    for field, wire, value in _fields(buf, path):
        if field == 2 and wire == 2:  # name
            name = bytes(value).decode("utf-8", "replace")
        elif field == 5 and wire == 2:  # stat_metadata: map<int64, XStatMetadata>
            entry = {f: v for f, w, v in _fields(value, path)}
            meta = {f: v for f, w, v in _fields(entry.get(2, b""), path)}
            if isinstance(meta.get(2), (bytes, bytearray)):
                stat_names[meta.get(1, entry.get(1))] = bytes(meta[2]).decode("utf-8", "replace")
        elif field == 6 and wire == 2:  # stats
            stats.append({f: v for f, w, v in _fields(value, path)})
    if name != ENVIRONMENT_PLANE:
        return None
    for s in stats:
        if stat_names.get(s.get(1)) == START_STAT:
            v = s.get(3, s.get(4))  # uint64_value, or int64_value
            if isinstance(v, int) and v > 0:
                return v
    raise InputError(str(path), f"its '{ENVIRONMENT_PLANE}' plane has no {START_STAT}")
