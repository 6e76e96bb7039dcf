"""What the device says of its memory, read in the target process: the
buffers and bytes in a ``device_memory_profile()`` and each local device's
``memory_stats()`` counters (the chip's own: on TPU ``bytes_in_use`` for
arrays, ``bytes_reserved`` for the running program's temporaries)."""

from __future__ import annotations

import gzip


def profile_buffers(data: bytes) -> tuple[int, int]:
    """(bytes, count) of the buffers in a device-memory profile (samples
    labelled kind=buffer), read straight from the protobuf."""
    from jaxmemprof.pprof import profile_pb2  # at the first snapshot: a script without JAX never pays for protobuf

    msg = profile_pb2.Profile.FromString(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
    strings = list(msg.string_table)
    try:
        kind, buffer = strings.index(b"kind"), strings.index(b"buffer")
    except ValueError:
        return 0, 0
    types = [strings[t.type] for t in msg.sample_type]
    space = types.index(b"space") if b"space" in types else len(types) - 1
    count = types.index(b"allocations") if b"allocations" in types else None
    total = n = 0
    for smp in msg.sample:
        for lab in smp.label:
            if lab.key == kind:
                if lab.str == buffer:
                    v = smp.value
                    total += v[space]
                    n += v[count] if count is not None else 1
                break
    return int(total), int(n)


def memory_stats_rows(jax) -> list:
    """(str(device), key, value) of each local device's ``memory_stats()``
    numbers; none where the backend keeps no counters (CPU)."""
    rows: list[tuple] = []
    try:
        devices = jax.local_devices()
    except Exception:
        return rows
    for d in devices:
        try:
            stats = d.memory_stats()
        except Exception:
            stats = None
        if not stats:
            continue
        for k, v in stats.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                rows.append((str(d), k, int(v)))
    return rows
