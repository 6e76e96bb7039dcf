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


def profile_start_ns(xplane: Path) -> int:
    """The profile's start (ns since the epoch): the ``profile_start_time``
    stat of the XSpace's ``Task Environment`` plane, read by the XPlane
    reader (jaxmemprof/xprof/xplane.py)."""
    from jaxmemprof.xprof.xplane import profile_start

    if not xplane.exists():
        raise InputError(str(xplane), "missing: the JAX trace's start is in it (jax.profiler.trace writes it "
                                      "beside the .trace.json.gz); without it the trace cannot be placed on the "
                                      "run's clock")
    start = profile_start(xplane)
    if start <= 0:
        raise InputError(str(xplane), f"has no {START_STAT} (no '{ENVIRONMENT_PLANE}' plane): the trace cannot be "
                                      "placed on the run's clock")
    return start
