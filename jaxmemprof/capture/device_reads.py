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


class LoadedExecutables:
    """The backend's loaded executables at each snapshot, counted per
    (creation stack, HLO module name): their code, which a device holds
    beside the arrays. An executable's module name and code size are read
    once, when it first appears: on a TPU ``hlo_modules()`` of a large
    step's executable costs 0.2-0.3 s a call (the chip's runs: a snapshot
    went from 0.035 to 0.35 s once the step was compiled), and a snapshot
    taken at a step's marker runs in the program's thread."""

    def __init__(self):
        # (executable's address, its traceback's id) -> (module name, code bytes); both are the
        # executable's own for its life, so a pair seen again is the same executable.
        self._known: dict[tuple, tuple[str, int]] = {}

    def rows(self, jax, stack_id) -> list:
        """[(stack id, module name, executables, code bytes)], each
        executable's stack through ``stack_id(traceback)``; empty where the
        backend's client cannot list them."""
        counts: dict[tuple, list] = {}
        seen: dict[tuple, tuple[str, int]] = {}
        try:
            clients = {id(d.client): d.client for d in jax.local_devices()}
            for client in clients.values():
                for e in client.live_executables():
                    tb = getattr(e, "traceback", None)
                    key = _identity(e, tb)
                    known = self._known.get(key) if key is not None else None
                    if known is None:
                        known = _name_and_code(e)
                    if key is not None:
                        seen[key] = known
                    entry = counts.setdefault((stack_id(tb), known[0]), [0, 0])
                    entry[0] += 1
                    entry[1] += known[1]
        except Exception:
            return []
        self._known = seen  # the executables freed since are forgotten
        return [(sid, name, c, b) for (sid, name), (c, b) in counts.items()]


def _identity(e, tb) -> tuple | None:
    """An executable's own for its life: its address and its traceback's id."""
    try:
        pointer = e.unsafe_executable_pointer  # a property in jaxlib 0.10
        return (int(pointer() if callable(pointer) else pointer), id(tb))
    except Exception:
        return None


def _name_and_code(e) -> tuple[str, int]:
    try:
        modules = e.hlo_modules()
        name = modules[0].name if modules else "?"
    except Exception:
        name = "?"
    try:
        code = int(e.size_of_generated_code_in_bytes())
    except Exception:
        code = 0
    return name, code
