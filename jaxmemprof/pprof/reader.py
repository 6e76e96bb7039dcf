"""Read pprof profiles (gzip or raw protobuf) into tidy pandas frames.

The input is untrusted: decompression is bounded, every index is checked, and
any problem becomes an :class:`~jaxmemprof.errors.InputError` naming the file.
Works on any valid pprof (JAX's device-memory profiles, Go heap profiles, ...).
"""

from __future__ import annotations

import io
import os
import stat
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Union

import numpy as np
import pandas as pd
from google.protobuf.message import DecodeError

from jaxmemprof.errors import InputError
from jaxmemprof.pprof import profile_pb2

GZIP_MAGIC = b"\x1f\x8b"
# Cap on the decompressed size of a profile (a gzip bomb stops here).
DEFAULT_MAX_DECOMPRESSED = 4 * 1024**3
_CHUNK = 64 * 1024**2
_IN_CHUNK = 1024**2  # compressed bytes read at a time

Source = Union[str, os.PathLike, bytes]


@dataclass(frozen=True)
class Profile:
    """One pprof profile as tidy frames.

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
    """

    source: str
    samples: pd.DataFrame
    frames: pd.DataFrame
    stacks: tuple
    label_sets: tuple
    label_ids: np.ndarray
    sample_types: pd.DataFrame
    value_index: int
    count_index: int | None
    time_nanos: int = 0
    duration_nanos: int = 0
    comments: tuple = field(default=())

    @property
    def value_type(self) -> str:
        row = self.sample_types.iloc[self.value_index]
        return f"{row['type']}/{row['unit']}"

    @property
    def total_bytes(self) -> int:
        return int(self.samples["bytes"].sum())

    @property
    def labels(self) -> pd.DataFrame:
        rows = [
            (i, key, value, num)
            for i, lid in enumerate(self.label_ids.tolist())
            for key, value, num in self.label_sets[lid]
        ]
        return pd.DataFrame(rows, columns=["sample_id", "key", "value", "num"])

    def stack_frames(self) -> pd.DataFrame:
        """Long form of the stacks: ``stack_id, depth, function, file, line``
        (depth 0 is the innermost frame)."""
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


def read_profile_bytes(
    source: Source, *, name: str | None = None, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED
) -> tuple[str, bytes]:
    """Return ``(name, serialized protobuf)`` for a path or bytes, gunzipping
    if needed, never producing more than ``max_decompressed`` bytes.

    A path must be a regular file no larger than the limit: that is checked
    with stat() before a byte is read, so a device (/dev/urandom), a FIFO
    (which could block for ever) or a huge sparse file is refused at once.
    The file is then read, and gunzipped, as a stream under the limit (it may
    still be growing)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        name = name or "<bytes>"
        return name, _decode(io.BytesIO(bytes(source)), name, max_decompressed)
    name = name or str(source)
    try:
        with _open_regular(Path(source), name, max_decompressed) as f:
            return name, _decode(f, name, max_decompressed)
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


def _decode(f: BinaryIO, name: str, limit: int) -> bytes:
    """The serialized protobuf in ``f``: gunzipped if it is gzip, at most
    ``limit`` bytes either way."""
    head = f.read(2)
    if not head:
        raise InputError(name, "empty file, not a pprof profile")
    if head == GZIP_MAGIC:
        raw = _gunzip(f, head, name, limit)
        if not raw:
            raise InputError(name, "gzip data decompresses to nothing, not a pprof profile")
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


def _gunzip(f: BinaryIO, head: bytes, name: str, limit: int) -> bytearray:
    """Decompress the gzip members in ``f`` (``head``: its first bytes,
    already read), reading it in chunks, and producing at most ``limit``
    bytes. NUL padding after the last member is allowed, as gzip allows it."""
    out = bytearray()
    pending = head
    at_end = False
    d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    while True:
        if not pending and not at_end:
            pending = f.read(_IN_CHUNK)
            at_end = not pending
        try:
            chunk = d.decompress(pending, min(_CHUNK, limit - len(out) + 1))
        except zlib.error as exc:
            raise InputError(name, f"corrupt gzip data ({exc})") from None
        out += chunk
        if len(out) > limit:
            raise InputError(
                name,
                f"decompresses to more than {limit} bytes (a gzip bomb?); raise the limit with --max-decompressed",
            )
        pending = d.unconsumed_tail
        if d.eof:
            rest = d.unused_data
            while len(rest) < 2 and not at_end:
                more = f.read(_IN_CHUNK)
                at_end = not more
                rest += more
            if not rest:
                return out
            if rest[:2] != GZIP_MAGIC:
                _expect_padding(rest, f, name)
                return out
            d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            pending = rest
        elif at_end and not chunk and not pending:
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
) -> Profile:
    """Read a pprof profile from a path or bytes.

    ``sample_index`` picks the value reported as ``bytes`` (a sample type name
    or a position); by default the type named ``space``, else the profile's
    default type when its unit is bytes, else the last type measured in bytes,
    else the last type.
    """
    try:
        name, raw = read_profile_bytes(source, name=name, max_decompressed=max_decompressed)
        try:
            msg = profile_pb2.Profile.FromString(raw)
        except (DecodeError, RuntimeError, ValueError) as exc:
            raise InputError(name, f"not a pprof profile (protobuf decoding failed: {exc})") from None
        del raw
        return _convert(msg, name, sample_index)
    except MemoryError:
        raise InputError(
            name or str(source), "too large to read in the memory available (lower --max-decompressed?)"
        ) from None


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


def _stack_frames(sample, loc_frames: dict, name: str, i: int) -> tuple[int, ...]:
    try:
        return tuple(f for lid in sample.location_id for f in loc_frames[lid])
    except KeyError:
        missing = next(lid for lid in sample.location_id if lid not in loc_frames)
        raise InputError(
            name, f"corrupt profile: sample {i} refers to location {missing}, which does not exist"
        ) from None


def _label_set(sample, strings: "_Strings", i: int) -> tuple:
    what = f"a label of sample {i}"
    return tuple(
        (strings.get(lab.key, what), strings.get(lab.str, what) if lab.str else "", int(lab.num))
        for lab in sample.label
    )


def _convert(msg, name: str, sample_index) -> Profile:
    strings = _Strings(msg.string_table, name)
    if len(strings) == 0 or msg.string_table[0] != b"":
        if not msg.sample and not msg.sample_type and not msg.string_table:
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

    n = len(msg.sample)
    ntypes = len(types)
    sample_msgs = msg.sample
    # Samples repeat the same stacks, values and labels many times over. Each
    # distinct one is decoded once, found through its bytes in the sample's
    # canonical serialisation (location ids, then values, then labels): far
    # cheaper than reading every field of every sample through protobuf.
    stack_of: dict[bytes, int] = {}
    stacks: list[tuple[int, ...]] = []
    value_of: dict[bytes, int] = {}
    value_rows: list[tuple[int, ...]] = []
    labels_of: dict[bytes, int] = {}
    label_sets: list[tuple] = []
    stack_ids = np.empty(n, dtype=np.int64)
    value_ids = np.empty(n, dtype=np.int64)
    label_ids = np.empty(n, dtype=np.int64)
    for i, b in enumerate([smp.SerializeToString() for smp in sample_msgs]):
        end = len(b)
        p = 0
        loc_key = val_key = b""
        if end and b[0] == 0x0A:
            p, q = _length(b, 1)
            loc_key = b[q:p]
        if p < end and b[p] == 0x12:
            p, q = _length(b, p + 1)
            val_key = b[q:p]
        lab_key = b[p:]

        sid = stack_of.get(loc_key)
        if sid is None:
            sid = stack_of[loc_key] = len(stacks)
            stacks.append(_stack_frames(sample_msgs[i], loc_frames, name, i))
        stack_ids[i] = sid

        vid = value_of.get(val_key)
        if vid is None:
            v = tuple(sample_msgs[i].value)
            if len(v) != ntypes:
                raise InputError(
                    name, f"corrupt profile: sample {i} has {len(v)} values for {ntypes} sample types"
                )
            vid = value_of[val_key] = len(value_rows)
            value_rows.append(v)
        value_ids[i] = vid

        lid = labels_of.get(lab_key)
        if lid is None:
            lid = labels_of[lab_key] = len(label_sets)
            label_sets.append(_label_set(sample_msgs[i], strings, i))
        label_ids[i] = lid

    values = np.array(value_rows, dtype=np.int64).reshape(-1, ntypes)[value_ids]
    for col in (value_index, count_index):
        # Sums (and diffs) must stay exact in 64 bits.
        if col is not None and n and np.abs(values[:, col].astype(np.float64)).sum() >= 2**62:
            raise InputError(
                name, f"corrupt profile: the {types[col][0]} values add up past 2**62, too large to total exactly"
            )
    # JAX's two labels become columns.
    label_dicts = [{k: t for k, t, _ in ls} for ls in label_sets]
    kinds = np.array([d.get("kind", "") for d in label_dicts], dtype=object)[label_ids]
    devices = np.array([d.get("device", "") for d in label_dicts], dtype=object)[label_ids]

    samples = pd.DataFrame(
        {
            "sample_id": np.arange(n, dtype=np.int64),
            "kind": kinds,
            "device": devices,
            "count": values[:, count_index] if count_index is not None else np.zeros(n, np.int64),
            "bytes": values[:, value_index],
            "stack_id": stack_ids,
        }
    )
    keys = list(frame_index)
    frames = pd.DataFrame(
        {
            "function": pd.Series([k[0] for k in keys], dtype=object),
            "file": pd.Series([k[1] for k in keys], dtype=object),
            "line": np.fromiter((k[2] for k in keys), dtype=np.int64, count=len(keys)),
        }
    )
    frames.index.name = "frame_id"
    sample_types = pd.DataFrame(
        {"index": range(ntypes), "type": [t for t, _ in types], "unit": [u for _, u in types]}
    )
    return Profile(
        source=name,
        samples=samples,
        frames=frames,
        stacks=tuple(stacks),
        label_sets=tuple(label_sets),
        label_ids=label_ids,
        sample_types=sample_types,
        value_index=value_index,
        count_index=count_index,
        time_nanos=int(msg.time_nanos),
        duration_nanos=int(msg.duration_nanos),
        comments=tuple(strings.get(c, "a comment") for c in msg.comment),
    )
