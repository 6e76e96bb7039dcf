"""Read pprof profiles (gzip or raw protobuf) into tidy pandas frames.

The input is untrusted: decompression is bounded, every index is checked, and
any problem becomes an :class:`~jaxmemprof.errors.InputError` naming the file.
Works on any valid pprof (JAX's device-memory profiles, Go heap profiles, ...).
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

import numpy as np
import pandas as pd
from google.protobuf.message import DecodeError

from jaxmemprof.errors import InputError
from jaxmemprof.pprof import profile_pb2

GZIP_MAGIC = b"\x1f\x8b"
# Cap on the decompressed size of a profile (a gzip bomb stops here).
DEFAULT_MAX_DECOMPRESSED = 4 * 1024**3
_CHUNK = 64 * 1024**2

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
    - ``labels``: every label: ``sample_id, key, value, num``.
    - ``sample_types``: ``index, type, unit``; ``value_index`` and
      ``count_index`` say which were used for ``bytes`` and ``count``.
    """

    source: str
    samples: pd.DataFrame
    frames: pd.DataFrame
    stacks: tuple
    labels: pd.DataFrame
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
    if needed, never producing more than ``max_decompressed`` bytes."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        name = name or "<bytes>"
        raw = bytes(source)
    else:
        path = Path(source)
        name = name or str(source)
        try:
            if path.is_dir():
                raise InputError(name, "is a directory, not a profile file")
            size = path.stat().st_size
            if size > max_decompressed:
                raise InputError(
                    name, f"file is {size} bytes, over the {max_decompressed}-byte limit "
                    "(raise it with --max-decompressed)"
                )
            raw = path.read_bytes()
        except FileNotFoundError:
            raise InputError(name, "no such file") from None
        except PermissionError:
            raise InputError(name, "permission denied") from None
        except IsADirectoryError:
            raise InputError(name, "is a directory, not a profile file") from None
        except OSError as exc:
            raise InputError(name, f"cannot read: {exc.strerror or exc}") from None
    if not raw:
        raise InputError(name, "empty file, not a pprof profile")
    if raw[:2] == GZIP_MAGIC:
        raw = _gunzip(raw, name, max_decompressed)
        if not raw:
            raise InputError(name, "gzip data decompresses to nothing, not a pprof profile")
    return name, raw


def _gunzip(data: bytes, name: str, limit: int) -> bytes:
    """Decompress one or more concatenated gzip members, at most ``limit`` bytes."""
    out = bytearray()
    while data:
        d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        pending = data
        try:
            while True:
                chunk = d.decompress(pending, min(_CHUNK, limit - len(out) + 1))
                out += chunk
                if len(out) > limit:
                    raise InputError(
                        name,
                        f"decompresses to more than {limit} bytes (a gzip bomb?); "
                        "raise the limit with --max-decompressed",
                    )
                pending = d.unconsumed_tail
                if d.eof or (not pending and not chunk):
                    break
        except zlib.error as exc:
            raise InputError(name, f"corrupt gzip data ({exc})") from None
        if not d.eof:
            raise InputError(name, "truncated gzip data (the file ends mid-stream)")
        data = d.unused_data
        if data and data[:2] != GZIP_MAGIC:
            if data.strip(b"\0"):
                raise InputError(name, "unexpected data after the end of the gzip stream")
            break
    return bytes(out)


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
    name, raw = read_profile_bytes(source, name=name, max_decompressed=max_decompressed)
    try:
        msg = profile_pb2.Profile.FromString(raw)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise InputError(name, f"not a pprof profile (protobuf decoding failed: {exc})") from None
    return _convert(msg, name, sample_index)


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
    stack_of: dict[tuple, int] = {}
    stacks: list[tuple[int, ...]] = []
    stack_ids = np.empty(n, dtype=np.int64)
    values = np.empty((n, ntypes), dtype=np.int64)
    kinds: list[str] = [""] * n
    devices: list[str] = [""] * n
    label_rows: list[tuple] = []
    get = strings.get
    for i, s in enumerate(msg.sample):
        locs = tuple(s.location_id)
        sid = stack_of.get(locs)
        if sid is None:
            try:
                frames_of = tuple(f for lid in locs for f in loc_frames[lid])
            except KeyError:
                missing = next(lid for lid in locs if lid not in loc_frames)
                raise InputError(
                    name, f"corrupt profile: sample {i} refers to location {missing}, which does not exist"
                ) from None
            sid = stack_of[locs] = len(stacks)
            stacks.append(frames_of)
        stack_ids[i] = sid
        v = s.value
        if len(v) != ntypes:
            raise InputError(
                name, f"corrupt profile: sample {i} has {len(v)} values for {ntypes} sample types"
            )
        values[i] = v
        for lab in s.label:
            key = get(lab.key, f"a label of sample {i}")
            text = get(lab.str, f"a label of sample {i}") if lab.str else ""
            if key == "kind":
                kinds[i] = text
            elif key == "device":
                devices[i] = text
            label_rows.append((i, key, text, int(lab.num)))

    samples = pd.DataFrame(
        {
            "sample_id": np.arange(n, dtype=np.int64),
            "kind": pd.Series(kinds, dtype=object),
            "device": pd.Series(devices, dtype=object),
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
    labels = pd.DataFrame(label_rows, columns=["sample_id", "key", "value", "num"])
    sample_types = pd.DataFrame(
        {"index": range(ntypes), "type": [t for t, _ in types], "unit": [u for _, u in types]}
    )
    return Profile(
        source=name,
        samples=samples,
        frames=frames,
        stacks=tuple(stacks),
        labels=labels,
        sample_types=sample_types,
        value_index=value_index,
        count_index=count_index,
        time_nanos=int(msg.time_nanos),
        duration_nanos=int(msg.duration_nanos),
        comments=tuple(get(c, "a comment") for c in msg.comment),
    )
