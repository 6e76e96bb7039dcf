"""Read pprof profiles (gzip or raw protobuf) into a
:class:`~jaxmemprof.pprof.model.Profile`.

The input is untrusted: decompression is bounded (pprof/decompress.py), every
index is checked, and any problem becomes an
:class:`~jaxmemprof.errors.InputError` naming the file. Works on any valid
pprof (JAX's device-memory profiles, Go heap profiles, ...).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from itertools import accumulate
from operator import methodcaller

from jaxmemprof.errors import InputError
from jaxmemprof.pprof.decompress import DEFAULT_MAX_DECOMPRESSED, DEFAULT_MAX_RATIO, Source, read_profile_bytes
from jaxmemprof.pprof.model import Profile, Parts

__all__ = ["DEFAULT_MAX_DECOMPRESSED", "DEFAULT_MAX_RATIO", "Profile", "load_profile", "read_profile_bytes"]

# Top-level fields (samples, strings, locations, functions, ...): past the
# first FIELDS_FREE, at most one per FIELD_BYTES bytes read so far. A real
# profile has one per 19 to 35 bytes (a 100,000-sample JAX profile: 104,000
# in 3.6 MB); 2-byte strings or 5-byte samples would cost protobuf and
# Python far more per byte than any profile does.
FIELDS_FREE = 1 << 17
FIELD_BYTES = 8
_CHECK_BYTES = 64 * 1024  # samples walked between two counts (at most 32,768 of them)


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
    they are decoded (see ``FIELD_BYTES``).
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
        f"one per {FIELD_BYTES} bytes; a decompression bomb?)",
    )


def _count_fields(raw: bytes, p: int, fields: int, name: str) -> int:
    """Walk the top-level fields from ``p`` (``fields`` of them before it),
    refusing the profile (:func:`_too_dense`) once more than
    ``FIELDS_FREE`` have been seen at more than one per ``FIELD_BYTES``
    bytes: before protobuf or Python make an object of each. Bytes that are
    not fields end the walk quietly (protobuf says what is wrong with them).
    Returns the count."""
    size = len(raw)
    free = FIELDS_FREE
    try:
        while p < size:
            p = _skip_field(raw, p)
            fields += 1
            if fields > free and fields * FIELD_BYTES > p:
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
    """Per sample, ``stack << shift | tail``; and each distinct stack key
    (the bytes of its location ids) and tail key (what follows them: values
    and labels), in the order the samples first have them (their ids)."""

    __slots__ = ("codes", "shift", "stacks", "tails", "canonical", "fields")

    def __init__(self, codes, shift, stacks, tails, canonical):
        self.codes = codes
        self.shift = shift
        self.stacks = stacks  # stack key bytes, by stack id
        self.tails = tails  # tail key bytes, by tail id
        self.canonical = canonical  # keys from SerializeToString: a tail never holds locations
        self.fields = 0  # top-level fields up to the end of the samples (_scan_raw's)

    def first_sample(self, key_id: int, stack: bool) -> int:
        """The first sample with this stack (or tail) id: for error messages."""
        mask = (1 << self.shift) - 1
        return next(i for i, c in enumerate(self.codes) if ((c >> self.shift) if stack else (c & mask)) == key_id)


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
    sget, tget, add = stack_of.get, tail_of.get, codes.append
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
            # empty sample) leaves an empty tail key: _decode_tails refuses it.
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
            tid = tget(tk)
            if tid is None:
                tid = tail_of[tk] = len(tail_of)
            add(sid << shift | tid)
            p = e
        if p < stop or p >= size:
            break  # past the samples, or at the end
        fields = skipped + len(codes)
        if fields > FIELDS_FREE and fields * FIELD_BYTES > p:
            raise _too_dense(name, fields, p)
        stop = min(size, p + _CHECK_BYTES)
    if p > size:
        raise _NotPlain()
    keys = _Keys(codes, shift, list(stack_of), list(tail_of), False)
    keys.fields = fields = skipped + len(codes)
    if fields > FIELDS_FREE and fields * FIELD_BYTES > p:  # the last stretch
        raise _too_dense(name, fields, p)
    return first, p, keys


def _scan_messages(msg) -> _Keys:
    """The same keys from each sample's canonical serialisation (location
    ids, then values, then labels)."""
    stack_of: dict = {}
    tail_of: dict = {}
    codes: list = []
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
        tid = tail_of.get(tk)
        if tid is None:
            tid = tail_of[tk] = len(tail_of)
        codes.append(sid << shift | tid)
    return _Keys(codes, shift, list(stack_of), list(tail_of), True)


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
    for i, (t, _) in enumerate(types):
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


def _label_set(sample, strings: _Strings, keys: _Keys, tail: int) -> tuple:
    n = len(strings)
    if any(not 0 <= lab.key < n or not 0 <= lab.str < n for lab in sample.label):
        what = f"a label of sample {keys.first_sample(tail, False)}"  # for the error below
    else:
        what = ""
    return tuple(
        (strings.get(lab.key, what), strings.get(lab.str, what) if lab.str else "", int(lab.num))
        for lab in sample.label
    )


# A varint protobuf would not write (a padded one, or one of 10 bytes or more).
_ODD_VARINT = re.compile(rb"[\x80-\xff](?:\x00|[\x80-\xff]{8})")


def _decode_tails(keys: _Keys) -> list:
    """Each tail key's Sample message, by tail id, once each stack key is
    checked to be a run of varints as protobuf writes them (so that the key
    is one list of location ids, and the only encoding of it). On the fast
    path all are checked before any is used, so that bytes protobuf would
    refuse give its error (through the whole-message path), not a later
    check's."""
    from google.protobuf.message import DecodeError

    from jaxmemprof.pprof.profile_pb2 import Sample

    if keys.canonical:
        return [Sample.FromString(key) for key in keys.tails]
    # Keys joined by a zero byte: a key whose last byte continues a varint
    # then shows as a varint padded with a zero, as an odd one inside a key
    # does; no odd varint can span two keys (a key ends with a varint's last byte).
    if _ODD_VARINT.search(b"\0".join(keys.stacks) + b"\0"):
        raise _NotPlain()
    try:
        out = [Sample.FromString(key) for key in keys.tails]
    except (DecodeError, RuntimeError, ValueError):
        raise _NotPlain() from None
    # An empty tail: no values (an error, or a sample misread: see _scan_raw).
    if not all(keys.tails) or any(smp.location_id for smp in out):
        raise _NotPlain()
    return out


_HIGH_BYTES = bytes(range(0x80, 0x100))


def _packed_ids(varints: bytes):
    """The ids of a run of varints, read by protobuf as one packed field."""
    from jaxmemprof.pprof.profile_pb2 import Sample

    n, length = len(varints), bytearray()
    while n >= 0x80:
        length.append(n & 0x7F | 0x80)
        n >>= 7
    length.append(n)
    return Sample.FromString(b"\x0a" + bytes(length) + varints).location_id


def _convert(msg, name: str, sample_index, keys: _Keys) -> Profile:
    # First: bytes protobuf would refuse must give its error before any check does.
    decoded = _decode_tails(keys)
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
    value_of: dict[bytes, int] = {}
    value_rows: list[tuple[int, ...]] = []
    labels_of: dict[bytes, int] = {}
    label_sets: list[tuple] = []
    tails: list[tuple[int, int]] = []
    # The stacks' location ids, all at once: their keys joined (each a run of
    # canonical varints: _decode_tails checked it) are one packed field for
    # protobuf to read, in C; a key's ids are as many as its bytes below 0x80.
    ids = _packed_ids(b"".join(keys.stacks))
    ends = list(accumulate(map(len, map(methodcaller("translate", None, _HIGH_BYTES), keys.stacks))))
    flat = stacks = None
    try:
        if all(len(v) == 1 for v in loc_frames.values()):
            flat = list(map({k: v[0] for k, v in loc_frames.items()}.__getitem__, ids))
        else:
            stacks = [tuple(f for v in ids[s:e] for f in loc_frames[v]) for s, e in zip([0, *ends], ends)]
    except KeyError:
        at, missing = next((i, v) for i, v in enumerate(ids) if v not in loc_frames)
        raise InputError(
            name, f"corrupt profile: sample {keys.first_sample(bisect_right(ends, at), True)} refers to location "
            f"{missing}, which does not exist"
        ) from None
    for tid, (key, smp) in enumerate(zip(keys.tails, decoded)):
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
                    name, f"corrupt profile: sample {keys.first_sample(tid, False)} has {len(v)} values "
                    f"for {ntypes} sample types"
                )
            vid = value_of[val_key] = len(value_rows)
            value_rows.append(v)
        lid = labels_of.get(lab_key)
        if lid is None:
            lid = labels_of[lab_key] = len(label_sets)
            label_sets.append(_label_set(smp, strings, keys, tid))
        tails.append((vid, lid))

    codes = keys.codes
    shift = keys.shift
    parts = Parts(types, list(frame_index), value_rows, None, tails, codes, shift)
    if flat is not None:
        parts.flat, parts.ends = flat, ends
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
        stacks=stacks,
        label_sets=tuple(label_sets),
        value_index=value_index,
        count_index=count_index,
        time_nanos=int(msg.time_nanos),
        duration_nanos=int(msg.duration_nanos),
        comments=tuple(strings.get(c, "a comment") for c in msg.comment),
        _parts=parts,
    )
