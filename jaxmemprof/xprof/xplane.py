"""One host's XProf profile (``<host>.xplane.pb``) read into plain Python.

``jax.profiler.trace`` (and XProf's on-demand capture) writes one XSpace per
host: a protobuf of planes, each a set of timelines (lines) of events, the
events' and stats' names kept once per plane in its metadata maps. What
jaxmemprof reads of it (the schema: ``xplane.proto`` beside this module, with
the public field numbers of tsl/profiler/protobuf/xplane.proto):

- the ``/host:metadata`` plane: one event metadata per compiled program,
  named ``<module>(<program id>)``, whose stat ``Hlo Proto`` holds an
  ``xla.HloProto`` (the optimised HLO module, with each op's source metadata,
  and its buffer assignment); its plane stats say the JAX version and the
  process id;
- the executions: events carrying the stats ``program_id`` and ``run_id``
  (on a CPU, on the XLA client's threads; on a TPU or GPU, each device
  plane's ``XLA Modules`` line): how many times each program ran, on which
  device ordinals;
- the memory profile: ``MemoryAllocation`` and ``MemoryDeallocation`` events
  (on the host planes, as XProf's memory profile reads them), with the
  allocator's figures after each (``bytes_allocated``, ``bytes_reserved``,
  ``bytes_available``, ``peak_bytes_in_use``) and the allocation's own
  (``allocation_bytes``, ``requested_bytes``, ``addr``, ``tf_op``,
  ``region_type``, ``data_type``, ``shape``, ``group_id``), per memory
  (``device_ordinal``, ``index_on_host`` or ``allocator_name``). A CPU
  profile has none;
- the device planes (``/device:TPU:N``, ``/device:GPU:N``) and the
  ``Task Environment`` plane's profile start and stop times.

The python tracer's events (most of a CPU profile's bytes) are never looked
at. Nothing here imports jax or pandas: numpy only, for the memory events.
"""

from __future__ import annotations

import os
import re
from array import array
from collections.abc import MutableSequence
from dataclasses import dataclass, field
from pathlib import Path

from jaxmemprof.errors import InputError

SUFFIX = ".xplane.pb"
METADATA_PLANE = "/host:metadata"
TASK_PLANE = "Task Environment"
DEVICE_PLANE = re.compile(r"^/device:(TPU|GPU):(\d+)$")
HLO_PROTO = "Hlo Proto"
XLA_MODULES = "XLA Modules"  # a device plane's line of program executions
ALLOCATION, DEALLOCATION = "MemoryAllocation", "MemoryDeallocation"
# Planes never scanned for events: the python tracer's calls are no memory event.
_SKIPPED_LINES = {"python"}
_SKIPPED_PLANES = {"/host:python-tracer"}
_PROGRAM_NAME = re.compile(r"^(.*)\((\d+)\)$")
_JIT_CALL = re.compile(r"^PjitFunction\((.+)\)$")
# An .xplane.pb larger than this is refused before it is read (a profile of a
# long TPU capture is tens of MiB; protobuf refuses messages of 2 GiB).
MAX_BYTES = 2 * 1024**3 - 1


@dataclass
class Program:
    """One compiled program the profile holds."""

    program_id: int
    module: str  # jit_train_step
    hlo_module: bytes  # serialized HloModuleProto
    buffer_assignment: bytes  # serialized BufferAssignmentProto (b"" where the profile has none)


@dataclass
class MemoryEvents:
    """One memory's allocations and frees over time, in time order (lists of
    equal length)."""

    memory: str  # its id as the profile names it: a device ordinal, or an allocator's name
    t_ps: MutableSequence = field(default_factory=list)  # picoseconds since the profile started
    allocation: MutableSequence = field(default_factory=list)  # True: an allocation; False: a free
    bytes: MutableSequence = field(default_factory=list)  # the allocation's own bytes
    in_use: MutableSequence = field(default_factory=list)  # the allocator's bytes allocated after it
    reserved: MutableSequence = field(default_factory=list)  # its stack reservation
    available: MutableSequence = field(default_factory=list)  # free bytes left (0: not said)
    peak: MutableSequence = field(default_factory=list)  # the allocator's peak bytes in use over its lifetime
    address: MutableSequence = field(default_factory=list)
    op: MutableSequence = field(default_factory=list)  # tf_op: the op (or the JAX program) the allocation is for
    region: MutableSequence = field(default_factory=list)
    dtype: MutableSequence = field(default_factory=list)
    shape: MutableSequence = field(default_factory=list)
    step: MutableSequence = field(default_factory=list)  # group_id: the step it falls in (-1: none)


@dataclass
class Host:
    """What one host's profile says."""

    path: Path
    host: str  # the file's host name (``vm`` of vm.xplane.pb)
    hostnames: list
    start_ns: int  # the profile's start, nanoseconds since the epoch (0: not said)
    stop_ns: int
    versions: dict  # jax_version, jaxlib_version, and the backend's (cpu_version, tpu_version ...)
    pid: int | None
    devices: list  # [(kind, ordinal)] of the device planes: [("TPU", 0), ...]
    programs: list  # [Program]
    runs: dict  # program id -> (executions seen, {device ordinals})
    memory: dict  # memory id -> MemoryEvents
    errors: list  # the profile's own errors and warnings

    @property
    def backend(self) -> str:
        kinds = {k.lower() for k, _ in self.devices}
        if len(kinds) == 1:
            return kinds.pop()
        for key, name in (("tpu_version", "tpu"), ("gpu_version", "gpu"), ("cuda_version", "gpu")):
            if key in self.versions:
                return name
        return "cpu"


def host_name(path: Path) -> str:
    name = path.name
    return name[: -len(SUFFIX)] if name.endswith(SUFFIX) else path.stem


def read_space(path: Path):
    """The XSpace of one file (the generated message, its planes' lines left
    as bytes: ``XSpaceLines``; ``lines`` parses one), or a one-line InputError."""
    from google.protobuf.message import DecodeError

    from jaxmemprof.xprof import xplane_pb2 as pb

    try:
        size = os.stat(path).st_size
    except OSError as exc:
        raise InputError(str(path), f"cannot be read ({exc.strerror or exc})") from None
    if size == 0:
        raise InputError(str(path), "is empty (0 bytes): not an XProf profile")
    if size > MAX_BYTES:
        raise InputError(str(path), f"is {size} bytes: larger than a protobuf message may be (2 GiB)")
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise InputError(str(path), f"cannot be read ({exc.strerror or exc})") from None
    try:
        space = pb.XSpaceLines.FromString(raw)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise InputError(str(path), f"is damaged or truncated: not an XProf profile (protobuf decoding failed: "
                                    f"{' '.join(str(exc).split()) or type(exc).__name__})") from None
    del raw
    if not space.planes or not any(p.name for p in space.planes):
        raise InputError(str(path), "holds no planes: not an XProf profile (damaged or truncated?)")
    return space


def read_host(path) -> Host:
    """One ``.xplane.pb`` read (InputError where it is not one)."""
    path = Path(path)
    space = read_space(path)
    versions: dict = {}
    pid = None
    start_ns = stop_ns = 0
    devices: list = []
    programs: list = []
    runs: dict = {}
    by_op: dict = {}
    memory: dict = {}
    has_devices = any(DEVICE_PLANE.match(p.name) for p in space.planes)
    for plane in space.planes:
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        if plane.name == METADATA_PLANE:
            for st in plane.stats:
                key = names.get(st.metadata_id, "")
                value = _value(st, names)
                if key == "process_id" and isinstance(value, int):
                    pid = value
                elif key.endswith("_version") and isinstance(value, str):
                    versions[key] = value
            programs = _programs(plane, names)
        elif plane.name == TASK_PLANE:
            for st in plane.stats:
                key = names.get(st.metadata_id, "")
                if key == "profile_start_time":
                    start_ns = int(_value(st, names) or 0)
                elif key == "profile_stop_time":
                    stop_ns = int(_value(st, names) or 0)
        m = DEVICE_PLANE.match(plane.name)
        if m:
            devices.append((m.group(1), int(m.group(2))))
        if plane.lines and plane.name not in _SKIPPED_PLANES:
            try:
                # the executions: a device plane's XLA Modules line where there are device planes, else the
                # host's threads (a CPU)
                executions = XLA_MODULES if m else (None if has_devices else "")
                _scan_events(plane, names, runs, memory, int(m.group(2)) if m else None, executions, by_op)
            except _Damaged as exc:
                raise InputError(str(path), f"is damaged: {exc}") from None
    _runs_by_op(by_op, programs, runs)
    for ev in memory.values():
        _in_time_order(ev)
    return Host(path=path, host=host_name(path), hostnames=list(space.hostnames), start_ns=start_ns, stop_ns=stop_ns,
                versions=versions, pid=pid, devices=sorted(devices), programs=programs, runs=runs, memory=memory,
                errors=[*space.errors, *space.warnings])


def _runs_by_op(by_op: dict, programs: list, runs: dict) -> None:
    """Executions counted where the events name no run (a CPU's under JAX
    0.6): from a program's operations' events, on each device the most of
    one operation of its entry computation (each runs once an execution;
    one in a loop's body may run more, and is not counted), the most over
    its devices (each runs it); where none, from the calls of the jitted
    function of its name (``_count_calls``), if one program has that name."""
    if not by_op:
        return
    from jaxmemprof.xprof.programs import entry_operations

    entry = {p.program_id: entry_operations(p.hlo_module) for p in programs}
    best: dict = {}
    for key, n in by_op.items():
        if key[0] == "call":
            continue
        program, op, dev = key
        ops = entry.get(program)
        if ops and op not in ops:
            continue
        count, on = best.get(program, (0, set()))
        best[program] = (max(count, n), on | {dev})
    for program, (count, on) in best.items():
        was, devs = runs.get(program, (0, set()))
        runs[program] = (was + count, devs | on)
    # no operation's event either (a CPU's at host_tracer_level 1): the calls of the one program of that name
    by_module: dict = {}
    for p in programs:
        if p.program_id not in runs:
            by_module.setdefault(p.module, []).append(p.program_id)
    for key, n in by_op.items():
        if key[0] == "call" and len(by_module.get(f"jit_{key[1]}", ())) == 1:
            runs[by_module[f"jit_{key[1]}"][0]] = (n, {0})


def profile_start(path) -> int:
    """The profile's start (ns since the epoch): its ``Task Environment``
    plane's ``profile_start_time``; 0 where it has none (InputError where the
    file is no profile)."""
    for plane in read_space(Path(path)).planes:
        if plane.name == TASK_PLANE:
            names = {k: v.name for k, v in plane.stat_metadata.items()}
            for st in plane.stats:
                if names.get(st.metadata_id) == "profile_start_time":
                    value = _value(st, names)
                    return int(value) if isinstance(value, int) else 0
    return 0


def _value(st, names: dict):
    which = st.WhichOneof("value")
    if which == "ref_value":
        return names.get(st.ref_value, "")
    return None if which is None else getattr(st, which)


def _programs(plane, names: dict) -> list:
    from google.protobuf.message import DecodeError

    from jaxmemprof.xprof import xplane_pb2 as pb

    hlo_ids = {k for k, v in names.items() if v == HLO_PROTO}
    out = []
    for key in sorted(plane.event_metadata):
        em = plane.event_metadata[key]
        for st in em.stats:
            if st.metadata_id not in hlo_ids or st.WhichOneof("value") != "bytes_value":
                continue
            m = _PROGRAM_NAME.match(em.name)
            module, program_id = (m.group(1), int(m.group(2))) if m else (em.name, int(key))
            try:
                h = pb.HloProto.FromString(st.bytes_value)
            except (DecodeError, RuntimeError, ValueError):
                continue  # a damaged program: the others are read (the reader says which were not)
            out.append(Program(program_id, module, bytes(h.hlo_module), bytes(h.buffer_assignment)))
    return out


# A memory event as a row: its time, kind, then the stats read, by the names XProf's schema gives them.
_INT_SLOTS = {"allocation_bytes": 2, "bytes_allocated": 3, "bytes_reserved": 4, "bytes_available": 5,
              "peak_bytes_in_use": 6, "addr": 7, "group_id": 8}
_TEXT_SLOTS = {"tf_op": 9, "region_type": 10, "data_type": 11, "shape": 12,
               "device_ordinal": 13, "index_on_host": 13, "allocator_name": 13}
_ROW = (0, False, 0, 0, 0, 0, 0, 0, -1, "", "", "", "", None)
_COLUMNS = ("t_ps", "allocation", "bytes", "in_use", "reserved", "available", "peak", "address", "step", "op",
            "region", "dtype", "shape")


class _Stats:
    """Each distinct serialized stat decoded once: (metadata id, value).
    Most of a memory event's stats repeat (its device, op, shape, region,
    step); the rest (its address, the allocator's figures) are decoded as
    they come. Bounded: cleared past MAX entries."""

    MAX = 1 << 18

    def __init__(self, names: dict):
        self.names = names
        self.seen: dict = {}

    def __call__(self, raw: bytes) -> tuple:
        got = self.seen.get(raw)
        if got is None:
            from jaxmemprof.xprof import xplane_pb2 as pb

            st = pb.XStat.FromString(raw)
            got = (st.metadata_id, _value(st, self.names))
            if len(self.seen) >= self.MAX:
                self.seen.clear()
            self.seen[raw] = got
        return got


def _scan_events(plane, names: dict, runs: dict, memory: dict, device: int | None, executions: str | None,
                 by_op: dict) -> None:
    """The executions (program_id, run_id) and memory events of one plane;
    ``executions``: the line to read executions from ('': every line; None: none); ``by_op``: the
    events of a program's operations that name no run ((program, op, device) -> events), and the calls of
    each jitted function (("call", name) -> calls: ``_count_calls``), which ``_runs_by_op`` reads."""
    from google.protobuf.message import DecodeError

    try:
        _scan(plane, names, runs, memory, device, executions, by_op)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise _Damaged(f"a stat of plane {plane.name!r} cannot be read ({' '.join(str(exc).split())})") from None


class _Damaged(ValueError):
    pass


def _scan(plane, names: dict, runs: dict, memory: dict, device: int | None, executions: str | None,
          by_op: dict) -> None:
    alloc_ids = {k for k, v in plane.event_metadata.items() if v.name in (ALLOCATION, DEALLOCATION)}
    allocs = {k for k in alloc_ids if plane.event_metadata[k].name == ALLOCATION}
    wanted = {k: v for k, v in names.items() if v in ("program_id", "run_id", "device_ordinal")}
    slots: dict[int, int] = {k: _INT_SLOTS.get(v) or _TEXT_SLOTS[v] for k, v in names.items()
                             if v in _INT_SLOTS or v in _TEXT_SLOTS}
    module_line_programs = _module_line_programs(plane)
    # a CPU host's calls of jitted functions (JAX's PjitFunction(name) events), where its executions name no program
    calls = {k: m.group(1) for k, v in plane.event_metadata.items() if (m := _JIT_CALL.match(v.name))} \
        if executions == "" else {}
    stat = _Stats(names)
    slotted: dict = {}
    placed = slotted.get

    def place(raw: bytes) -> tuple:
        k, v = stat(raw)
        j = slots.get(k, -1)
        hit = (j, v) if j < 0 else (j, (v if isinstance(v, int) else 0) if j < 9 else ("" if v is None else v))
        if len(slotted) >= _Stats.MAX:
            slotted.clear()
        slotted[raw] = hit
        return hit

    seen: dict = {}
    rows: list = []
    if not alloc_ids and executions is None:
        return
    # a plane read for its memory events alone: a line is parsed only where its bytes may hold one
    may_hold = _memory_event_pattern(alloc_ids) if executions is None else None
    for line in lines(plane, may_hold):
        if calls:
            _count_calls(line, calls, by_op)
        if line.name in _SKIPPED_LINES:
            continue
        runs_here = executions == "" or executions == line.name
        if not runs_here and not alloc_ids:
            continue
        base_ps = line.timestamp_ns * 1000
        for e in line.events:
            mid = e.metadata_id
            if mid in alloc_ids:
                row = list(_ROW)
                row[0], row[1] = base_ps + e.offset_ps, mid in allocs
                for raw in e.stats:
                    hit = placed(raw)  # (the row's slot, the value as the row keeps it), -1: not read
                    if hit is None:
                        hit = place(raw)
                    if hit[0] >= 0:
                        row[hit[0]] = hit[1]
                rows.append(row)
                continue
            if not runs_here:
                continue
            found = {}
            for raw in e.stats:
                k, v = stat(raw)
                if k in wanted:
                    found[wanted[k]] = v
            program = found.get("program_id")
            if program is None and line.name == XLA_MODULES:
                program = module_line_programs.get(mid)
            if program is None:
                continue
            run, ordinal = found.get("run_id"), found.get("device_ordinal")
            dev = device if device is not None else (int(ordinal) if isinstance(ordinal, int) else 0)
            if run is None and line.name != XLA_MODULES:
                # an operation's event that names no run (a CPU's, JAX 0.6): counted by operation
                em = plane.event_metadata.get(mid)
                key3 = (int(program), em.name if em is not None else "", dev)
                by_op[key3] = by_op.get(key3, 0) + 1
                continue
            key = (int(program), run if run is not None else (line.timestamp_ns, e.offset_ps))
            seen.setdefault(key, set()).add(dev)
    _memory_rows(rows, memory, device)
    for (program, _), devs in seen.items():
        count, on = runs.get(program, (0, set()))
        runs[program] = (count + 1, on | devs)


def _count_calls(line, calls: dict, by_op: dict) -> None:
    """The calls of each jitted function on one line: its PjitFunction events
    but those inside another of the same function's (JAX writes two for one
    call)."""
    ends: dict = {}
    for e in line.events:
        name = calls.get(e.metadata_id)
        if name is None or e.offset_ps < ends.get(name, -1):
            continue
        ends[name] = e.offset_ps + e.duration_ps
        by_op[("call", name)] = by_op.get(("call", name), 0) + 1


def lines(plane, may_hold=None):
    """The plane's lines, each parsed (``XLineLean``) as it comes; with
    ``may_hold`` (a compiled pattern), only those whose bytes it finds."""
    from jaxmemprof.xprof import xplane_pb2 as pb

    for raw in plane.lines:
        if may_hold is None or may_hold.search(raw) is not None:
            yield pb.XLineLean.FromString(raw)


def _memory_event_pattern(ids: set):
    """What every event of one of ``ids`` has in its line's bytes: the line's
    events field (tag 0x22), the event's length, then its metadata id
    (field 1, tag 0x08; written first, as protobuf writes fields in their
    numbers' order). Other bytes may match too (the line is then parsed,
    and its events looked at as before); an id of 0 is not written at all:
    every line matches then."""
    if 0 in ids:
        return re.compile(b"")
    ids_bytes = b"|".join(re.escape(_varint(i)) for i in sorted(ids))
    return re.compile(b"\x22[\x80-\xff]{0,9}[\x00-\x7f]\x08(?:" + ids_bytes + b")", re.DOTALL)


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # an int64's two's complement, as protobuf writes a negative one
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _module_line_programs(plane) -> dict:
    """event metadata id -> program id, for events named ``module(id)``."""
    out = {}
    for k, em in plane.event_metadata.items():
        m = _PROGRAM_NAME.match(em.name)
        if m:
            out[k] = int(m.group(2))
    return out


def _memory_rows(rows: list, memory: dict, device: int | None) -> None:
    """A plane's memory events (rows) added to each memory's, by its id: the
    plane's device where the plane is one, else the event's own."""
    by: dict = {}
    for row in rows:
        mid = str(device) if device is not None else ("0" if row[13] in (None, "") else str(row[13]))
        by.setdefault(mid, []).append(row)
    for mid, group in by.items():
        ev = memory.get(mid)
        if ev is None:
            ev = memory[mid] = MemoryEvents(mid)
        for name, col in zip(_COLUMNS, zip(*group)):
            getattr(ev, name).extend(col)
        ev.dtype[-len(group):] = [str(v) for v in ev.dtype[-len(group):]]


_NUMBERS = ("t_ps", "bytes", "in_use", "reserved", "available", "peak", "address", "step")
_TEXTS = ("op", "region", "dtype", "shape")


def _in_time_order(ev: MemoryEvents) -> None:
    """The events in time order, kept compact: numbers as 8-byte arrays, each
    distinct text once (a 16-host profile's events are millions)."""
    order = sorted(range(len(ev.t_ps)), key=ev.t_ps.__getitem__)
    same = order == list(range(len(order)))
    for name in _NUMBERS:
        col = getattr(ev, name)
        setattr(ev, name, array("q", col if same else (col[i] for i in order)))
    ev.allocation = array("b", ev.allocation if same else (ev.allocation[i] for i in order))
    for name in _TEXTS:
        col = getattr(ev, name)
        seen: dict = {}
        setattr(ev, name, [seen.setdefault(v, v) for v in (col if same else (col[i] for i in order))])
