"""XLA's own account of one compiled program's memory, read from the
executable the program already has: no compile of our own.

A compiled executable carries two serialized protos (docs/jax-facts.md,
"XLA's figures from the executable"):

- ``compiled.memory_analysis().serialized_buffer_assignment_proto``: XLA's
  buffer assignment, whose logical buffers are the program's values (an id,
  a size, the instruction and shape index that define it) and whose
  allocations say which values share which slice of which block (parameter,
  output, constant, thread-local or temporary);
- ``compiled.runtime_executable().hlo_modules()[i]
  .as_serialized_hlo_module_proto()``: the optimised module, with every
  computation's instructions (ids, operands, shapes, op names, stack frame
  ids), the schedule, the input/output aliasing, and the stack-frame tables
  that hold the user's files and lines.

From them this module works out each value's live range in the program's
instruction order the way XLA's HloLiveRange does, and the bytes at each
position and the peak as the buffer assignment holds them (each buffer once:
``jaxmemprof.xla.curve.sweep``), into the same ``ProgramMemory`` that
``jaxmemprof.xla.dump`` reads from a dump, so that every analysis reads
either. Nothing here imports jax: ``read_executable``
only calls the methods of the object it is given. The protos are parsed with
``executable_pb2``, generated from ``executable.proto`` (the fields read here,
with XLA's field numbers).
"""

from __future__ import annotations

import gc

from jaxmemprof.xla import executable_pb2 as pb
from jaxmemprof.xla.curve import curve, curve_key, sweep
from jaxmemprof.xla.dump import ALIASED, ARGUMENT, CONSTANT, OUTPUT, TEMPORARY, Buffer, ProgramMemory


class ExecutableError(ValueError):
    """The executable does not carry what is needed (no buffer assignment, no
    HLO module), or what it carries cannot be read."""


# xla.PrimitiveType -> (name as XLA's text writes it, bytes per element)
_TYPES = {
    1: ("pred", 1), 2: ("s8", 1), 3: ("s16", 2), 4: ("s32", 4), 5: ("s64", 8), 6: ("u8", 1), 7: ("u16", 2),
    8: ("u32", 4), 9: ("u64", 8), 10: ("f16", 2), 11: ("f32", 4), 12: ("f64", 8), 15: ("c64", 8), 16: ("bf16", 2),
    18: ("c128", 16), 19: ("f8e5m2", 1), 20: ("f8e4m3fn", 1), 21: ("s4", 1), 22: ("u4", 1), 23: ("f8e4m3b11fnuz", 1),
    24: ("f8e5m2fnuz", 1), 25: ("f8e4m3fnuz", 1), 26: ("s2", 1), 27: ("u2", 1), 28: ("f8e4m3", 1), 29: ("f8e3m4", 1),
    30: ("s1", 1), 31: ("u1", 1), 32: ("f4e2m1fn", 1), 33: ("f8e8m0fnu", 1),
}
_TUPLE, _OPAQUE, _TOKEN = 13, 14, 17
_POINTER = 8  # bytes of a pointer in a tuple's table, as XLA counts it for the live ranges

# Instructions that define no value: theirs come from an operand, a callee or a caller.
_FORWARDS = {"bitcast", "get-tuple-element", "tuple", "copy", "while", "call", "conditional", "domain",
             "add-dependency", "optimization-barrier"}


def _subshape(shape, index: tuple):
    for i in index:
        if i >= len(shape.tuple_shapes):
            return None
        shape = shape.tuple_shapes[i]
    return shape


def _indices(shape, prefix: tuple = ()):
    """Every shape index of ``shape``, its own ({}) first."""
    yield prefix
    if shape.element_type == _TUPLE:
        for i, s in enumerate(shape.tuple_shapes):
            yield from _indices(s, prefix + (i,))


def shape_bytes(shape) -> int:
    """What XLA's ShapeUtil::ByteSizeOf(shape, 8) gives: an array's
    elements (packed when its layout says so), a tuple's table of pointers."""
    if shape is None:
        return 0
    t = shape.element_type
    if t == _TUPLE:
        return _POINTER * len(shape.tuple_shapes)
    if t == _OPAQUE:
        return _POINTER
    if t == _TOKEN or t not in _TYPES:
        return 0
    n = 1
    for d in shape.dimensions:
        n *= int(d)
    bits = shape.layout.element_size_in_bits if shape.HasField("layout") else 0
    if bits:
        return (n * bits + 7) // 8
    return n * _TYPES[t][1]


def shape_text(shape) -> str:
    """A shape as XLA's text writes it, layout left out: ``f32[1024,1024]``,
    ``(f32[8], s32[])``."""
    if shape is None:
        return ""
    t = shape.element_type
    if t == _TUPLE:
        return "(" + ", ".join(shape_text(s) for s in shape.tuple_shapes) + ")"
    if t == _TOKEN:
        return "token[]"
    if t == _OPAQUE:
        return "opaque[]"
    name = _TYPES.get(t, (f"type{t}", 0))[0]
    return f"{name}[{','.join(str(int(d)) for d in shape.dimensions)}]"


def _index_text(index: tuple) -> str:
    return "{" + ",".join(str(i) for i in index) + "}"


def _stack_frames(index) -> dict[int, tuple]:
    """Per stack frame id (1-based), its frames ((file, line, function),
    ...), innermost first."""
    files, functions = list(index.file_names), list(index.function_names)
    locations = []
    for loc in index.file_locations:
        f = files[loc.file_name_id - 1] if 0 < loc.file_name_id <= len(files) else ""
        fn = functions[loc.function_name_id - 1] if 0 < loc.function_name_id <= len(functions) else ""
        locations.append((f, int(loc.line), fn))
    frames = list(index.stack_frames)
    out: dict[int, tuple] = {}
    for k in range(1, len(frames) + 1):
        chain, seen, frame = [], set(), k
        while 0 < frame <= len(frames) and frame not in seen:
            seen.add(frame)
            f = frames[frame - 1]
            if 0 < f.file_location_id <= len(locations):
                chain.append(locations[f.file_location_id - 1])
            frame = f.parent_frame_id
        out[k] = tuple(chain)
    return out


class _Instr:
    """What is read of one instruction, as plain Python values (a proto's
    fields are slow to read again and again)."""

    __slots__ = ("id", "name", "opcode", "shape", "operand_ids", "called_computation_ids", "parameter_number",
                 "tuple_index", "metadata", "indices")

    def __init__(self, i):
        self.id = i.id
        self.name = i.name
        self.opcode = i.opcode
        self.shape = i.shape
        self.operand_ids = tuple(i.operand_ids)
        self.called_computation_ids = tuple(i.called_computation_ids)
        self.parameter_number = i.parameter_number
        self.tuple_index = i.tuple_index
        self.metadata = i.metadata
        self.indices = None  # its shape indices, when needed


class _Module:
    """The module's scheduled computations (not fusions' own, whose values
    are not the program's buffers) and their instructions, indexed."""

    def __init__(self, module):
        self.proto = module
        self.instr: dict[int, _Instr] = {}  # id -> _Instr
        self.parent: dict[int, int] = {}  # instruction id -> computation id
        self.root_of: dict[int, int] = {}  # computation id -> its root's id
        self.users: dict[int, list[int]] = {}  # instruction id -> [user ids], in the computation's order
        self.params: dict[int, dict[int, int]] = {}  # computation id -> {parameter number: instruction id}
        self.sequences = {k: list(v.instruction_ids) for k, v in module.schedule.sequences.items()}
        self.entry = module.entry_computation_id
        for c in module.computations:
            if c.id not in self.sequences:
                continue
            cid = c.id
            self.root_of[cid] = c.root_id
            params = self.params[cid] = {}
            for proto in c.instructions:
                i = _Instr(proto)
                self.instr[i.id] = i
                self.parent[i.id] = cid
                if i.opcode == "parameter":
                    params[i.parameter_number] = i.id
                for o in dict.fromkeys(i.operand_ids):
                    self.users.setdefault(o, []).append(i.id)
        if self.entry not in self.root_of:
            raise ExecutableError("the HLO module names no entry computation, or has no schedule for it")

    def root(self, instruction_id) -> bool:
        return self.root_of[self.parent[instruction_id]] == instruction_id


def _flatten(m: _Module):
    """XLA's HloLiveRange order over the module: each computation's
    schedule, a while's condition then body flattened just before the while
    itself, a call's and a conditional's computations before them. ->
    (instruction id -> time, computation id -> (start, end), callers of each
    flattened computation: (instruction id, kind))."""
    times: dict[int, int] = {}
    spans: dict[int, tuple | None] = {}  # None: being visited
    callers: dict[int, list] = {}
    order: list[int] = []

    def walk(cid):
        if cid in spans or cid not in m.sequences:
            return
        spans[cid] = None  # visiting
        start = len(order)
        for iid in m.sequences[cid]:
            ins = m.instr.get(iid)
            if ins is None:
                continue
            called = list(ins.called_computation_ids)
            if ins.opcode in ("call", "conditional", "async-start"):
                kind = "async" if ins.opcode == "async-start" else ins.opcode
                for k, c in enumerate(called):
                    callers.setdefault(c, []).append((iid, kind, k))
                    walk(c)
            elif ins.opcode == "while" and len(called) >= 2:
                body, cond = called[0], called[1]
                callers.setdefault(cond, []).append((iid, "while", 1))
                callers.setdefault(body, []).append((iid, "while", 0))
                walk(cond)
                walk(body)
            times[iid] = len(order)
            order.append(iid)
        spans[cid] = (start, len(order))

    walk(m.entry)
    return times, spans, callers, order


def _async_ends(m: _Module, times: dict, callers: dict) -> dict:
    """Per computation run in an async context (an async-start's wrapped
    computation, and what it calls), the time of that async-start's
    async-done: XLA's HloLiveRange keeps a value defined there live until
    then (the computation runs while the caller goes on)."""
    ends: dict[int, int] = {}

    def done_of(start):
        iid, seen = start, set()
        while iid not in seen:
            seen.add(iid)
            nxt = [u for u in m.users.get(iid, ()) if m.instr[u].opcode in ("async-update", "async-done")]
            if not nxt:
                return None
            iid = nxt[0]
            if m.instr[iid].opcode == "async-done":
                return times.get(iid)
        return None

    def context(cid, seen=()):
        if cid in ends or cid in seen:
            return ends.get(cid)
        for caller, kind, _ in callers.get(cid, ()):
            t = done_of(caller) if kind == "async" else context(m.parent[caller], (*seen, cid))
            if t is not None:
                ends[cid] = t
                return t
        return None

    for cid in list(callers):
        context(cid)
    return ends


def _value_sets(m: _Module, defined: dict, times: dict, callers: dict) -> dict:
    """For every position (instruction id, shape index) of the flattened
    computations, the ids of the values that may be there: a value is where
    it is defined, and flows through what defines none (tuples, elements of
    tuples, bitcasts, copies' elements, calls, whiles and their bodies'
    parameters, conditionals) until nothing changes."""
    sets: dict[tuple, frozenset] = {}
    instrs = [m.instr[i] for i in times]
    positions = {i.id: list(_indices(i.shape)) for i in instrs}

    def get(iid, index):
        return sets.get((iid, index), frozenset())

    def inputs(ins, index):
        op, ops = ins.opcode, list(ins.operand_ids)
        if op == "parameter":
            out = []
            for caller, kind, k in callers.get(m.parent[ins.id], ()):
                c = m.instr[caller]
                if kind == "while":
                    body = list(c.called_computation_ids)[0]
                    out.append(get(c.operand_ids[0], index) | get(m.root_of.get(body), index))
                elif kind in ("call", "async") and ins.parameter_number < len(c.operand_ids):
                    out.append(get(c.operand_ids[ins.parameter_number], index))
                elif kind == "conditional" and ins.parameter_number == 0 and k + 1 < len(c.operand_ids):
                    out.append(get(c.operand_ids[k + 1], index))
            return frozenset().union(*out) if out else frozenset()
        if op == "tuple":
            return get(ops[index[0]], index[1:]) if index and index[0] < len(ops) else frozenset()
        if op == "get-tuple-element":
            return get(ops[0], (int(ins.tuple_index),) + index) if ops else frozenset()
        if op in ("bitcast", "copy", "domain", "add-dependency", "optimization-barrier"):
            return get(ops[0], index) if ops else frozenset()
        if op == "while":
            called = list(ins.called_computation_ids)
            body_root = m.root_of[called[0]] if called and called[0] in m.root_of else None
            return get(ops[0], index) | (get(body_root, index) if body_root is not None else frozenset())
        if op == "call":
            called = list(ins.called_computation_ids)
            return get(m.root_of[called[0]], index) if called and called[0] in m.root_of else frozenset()
        if op == "conditional":
            out = [get(m.root_of[c], index) for c in ins.called_computation_ids if c in m.root_of]
            return frozenset().union(*out) if out else frozenset()
        # async-start's output is ((its operands), the wrapped computation's result, context): it defines the
        # tuples and the context, forwards its operands at {0, i} and the wrapped root's values at {1};
        # async-update passes them on; async-done's output is what is at {1}. copy-start's is (destination,
        # source, context): the source forwarded at {1}; copy-done's output is the destination at {0}.
        if op == "async-start":
            if len(index) >= 2 and index[0] == 0 and index[1] < len(ops):
                return get(ops[index[1]], index[2:])
            called = list(ins.called_computation_ids)
            if index and index[0] == 1 and called and called[0] in m.root_of:
                return get(m.root_of[called[0]], index[1:])
            return frozenset()
        if op == "async-update":
            return get(ops[0], index) if ops else frozenset()
        if op == "async-done":
            return get(ops[0], (1,) + index) if ops else frozenset()
        if op == "copy-start":
            return get(ops[0], ()) if ops and index == (1,) else frozenset()
        if op == "copy-done":
            return get(ops[0], (0,) + index) if ops else frozenset()
        return frozenset()

    passing = []  # (instruction, index) where no value is defined: what flows there, in program order
    for ins in instrs:
        for index in positions[ins.id]:
            v = defined.get((ins.id, index))
            if v is not None:
                sets[(ins.id, index)] = frozenset((v,))
            else:
                passing.append((ins, index))
    # In program order one pass settles all but what flows back round a loop
    # (a body's root to its parameter): repeat until nothing changes.
    changed = True
    rounds = 0
    while changed and rounds < 1000:
        changed, rounds = False, rounds + 1
        for ins, index in passing:
            new = inputs(ins, index)
            if new != sets.get((ins.id, index), frozenset()):
                sets[(ins.id, index)] = new
                changed = True
    return sets


def _may_use(index: tuple, user) -> bool:
    """Whether ``user`` reads the value at ``index`` of its operand (XLA's
    rule: get-tuple-element and copy read only the top level; tuple and
    domain pass values on unread)."""
    if user.opcode in ("get-tuple-element", "copy"):
        return not index
    return user.opcode not in ("tuple", "domain")


def read_protos(hlo_module: bytes, buffer_assignment: bytes, *, module: str = "", largest: int = 20) -> ProgramMemory:
    """The program's peak and its values, from a serialized HloModuleProto
    and BufferAssignmentProto of one compiled program."""
    # Reading makes many small objects and frees none: the cyclic collector
    # would walk them (and the program's) again and again for nothing.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _read_protos(hlo_module, buffer_assignment, module=module, largest=largest)
    finally:
        if enabled:
            gc.enable()


def _read_protos(hlo_module: bytes, buffer_assignment: bytes, *, module: str, largest: int) -> ProgramMemory:
    if not hlo_module:
        raise ExecutableError("the executable carries no HLO module")
    if not buffer_assignment:
        raise ExecutableError("the executable carries no buffer assignment")
    try:
        hm = pb.HloModule.FromString(hlo_module)
        ba = pb.BufferAssignment.FromString(buffer_assignment)
    except Exception as exc:  # google.protobuf.message.DecodeError, and whatever a damaged blob raises
        raise ExecutableError(f"the executable's protos cannot be read: {exc}") from None
    if not ba.logical_buffers or not ba.buffer_allocations:
        raise ExecutableError("the executable's buffer assignment is empty")
    m = _Module(hm)
    frames = _stack_frames(hm.stack_frame_index)
    times, spans, callers, order = _flatten(m)
    async_end = _async_ends(m, times, callers)
    length = len(order)

    # The values: XLA's logical buffers, each defined at (instruction, shape index).
    value_at: dict[int, tuple] = {}  # value id -> (instruction id, index)
    defined: dict[tuple, int] = {}
    sizes: dict[int, int] = {}
    for lb in ba.logical_buffers:
        where = (int(lb.defined_at.instruction_id), tuple(int(i) for i in lb.defined_at.shape_index))
        value_at[lb.id] = where
        sizes[lb.id] = int(lb.size)
        defined.setdefault(where, lb.id)

    # Allocations: each value's kind and slice (values in one slice that are
    # live together are one buffer), and the totals by kind.
    kinds: dict[int, str] = {}
    slots: dict[int, tuple] = {}
    slot_order: list[int] = []
    elsewhere: set[int] = set()
    totals = {ARGUMENT: 0, OUTPUT: 0, ALIASED: 0, TEMPORARY: 0, CONSTANT: 0}
    for a in ba.buffer_allocations:
        if a.is_thread_local:
            kind = None  # a scalar of one thread: not in memory_analysis()
        elif a.is_entry_computation_parameter:
            kind = ALIASED if a.maybe_live_out else ARGUMENT
        elif a.maybe_live_out:
            kind = OUTPUT
        elif a.is_constant:
            kind = CONSTANT
        else:
            kind = TEMPORARY
        if kind is not None:
            totals[kind] += int(a.size)
        if a.color > 0:
            # another memory space than the device's main one (XLA:TPU's on-chip memories): not in the
            # device's memory, as the dump's reader leaves such allocations out
            elsewhere.update(s.logical_buffer_id for s in a.assigned)
        for s in a.assigned:
            if kind is not None:
                kinds.setdefault(s.logical_buffer_id, kind)
                if s.logical_buffer_id not in slots:
                    slots[s.logical_buffer_id] = (int(a.index), int(s.offset), int(s.size))
                    slot_order.append(s.logical_buffer_id)

    sets = _value_sets(m, defined, times, callers)
    positions: dict[int, list] = {}
    for (iid, index), vs in sets.items():
        for v in vs:
            positions.setdefault(v, []).append((iid, index))

    aliased_params = {(int(e.parameter_number), tuple(int(i) for i in e.parameter_shape_index))
                      for e in hm.input_output_alias.entries}

    # Live ranges, as XLA's HloLiveRange computes them (docs/jax-facts.md).
    ranges: dict[int, list] = {}
    for v, (iid, index) in value_at.items():
        if iid not in times:
            continue  # a value of a computation the schedule does not flatten (a fusion's, a reduction's)
        ins = m.instr[iid]
        comp = m.parent[iid]
        span = spans[comp]
        start = span[0] if ins.opcode == "parameter" else times[iid]
        end = span[1] if m.root(iid) else times[iid]
        if comp in async_end:
            end = max(end, async_end[comp])
        for piid, pindex in positions.get(v, ()):
            if (piid, pindex) == (iid, index):
                continue
            if m.root(piid):
                s = spans.get(m.parent[piid])
                if s is None:
                    continue
                end = max(end, s[1])
            elif piid in times:
                end = max(end, times[piid])
        if ins.opcode == "parameter" and comp == m.entry and (int(ins.parameter_number), index) not in aliased_params:
            end = length
        else:
            last = -1
            roots = {p for p, _ in positions.get(v, ()) if m.root(p)}
            for piid, pindex in positions.get(v, ()):
                for uid in m.users.get(piid, ()):
                    user = m.instr[uid]
                    if not _may_use(pindex, user) and not (m.root(uid) and uid in roots):
                        continue
                    if user.opcode == "call":
                        continue
                    used: int | None = uid
                    if user.opcode == "while":
                        called = list(user.called_computation_ids)
                        used = m.params.get(called[0], {}).get(0) if called else None
                    if used in times:
                        last = max(last, times[used])
            end = max(end, last)
        ranges[v] = [start, end]

    # Values of one buffer: where their ranges overlap, each ends where the
    # next begins (XLA's NormalizeAliasedBuffers). Values of one buffer share
    # one slice; values of different buffers in one slice never overlap, so
    # the slice stands for the buffer.
    by_slot: dict[tuple, list] = {}
    for v in ranges:
        if v in slots:
            by_slot.setdefault(slots[v], []).append(v)
    for vs in by_slot.values():
        if len(vs) < 2:
            continue
        vs.sort(key=lambda v: (ranges[v][0], ranges[v][1], v))
        for a, b in zip(vs, vs[1:]):
            ra, rb = ranges[a], ranges[b]
            rb[1] = max(ra[1], rb[1])
            ra[1] = min(ra[1], rb[0])

    shapes: dict[int, object] = {}

    def value_shape(v):
        shape = shapes.get(v)
        if shape is None:
            iid, index = value_at[v]
            shape = shapes[v] = _subshape(m.instr[iid].shape, index)
        return shape

    own_bytes = {v: (slots[v][2] if v in slots else shape_bytes(value_shape(v))) for v in ranges}

    def name_of(v):
        iid, index = value_at[v]
        return m.instr[iid].name + _index_text(index)

    # The bytes at each position and the peak, each buffer once where its
    # values meet (jaxmemprof.xla.curve.sweep): values in name order, each at
    # its own bytes in its slice.
    named = sorted((v for v in ranges if v not in elsewhere), key=name_of)
    swept = sweep([(ranges[v][0], ranges[v][1], own_bytes[v], slots.get(v)) for v in named], length)
    peak_at = swept.peak_position
    live = [v for v, (s, e) in ranges.items() if s <= peak_at <= e]
    counted = [named[i] for i in swept.at_peak]  # each buffer's value counted at the peak
    counted.sort(key=lambda v: (-own_bytes[v], m.instr[value_at[v][0]].name, value_at[v][1]))

    def made_by(v):
        iid, index = value_at[v]
        ins = m.instr[iid]
        md = ins.metadata
        return shape_text(value_shape(v)), md.op_name, frames.get(int(md.stack_frame_id), ())

    # A value with no stack of its own (a loop's carried tuple element) takes
    # the op and stack of a value in its slot that has them.
    slot_made: dict[tuple, tuple] = {}
    for v in slot_order:
        if v in value_at and value_at[v][0] in m.instr:
            made = made_by(v)
            if made[2] and slots[v] not in slot_made:
                slot_made[slots[v]] = made

    def buffer(v, size, at_peak):
        shape, op, fr = made_by(v)
        kind = kinds.get(v, TEMPORARY)
        if not fr and kind not in (ARGUMENT, ALIASED) and slots.get(v) in slot_made:
            _, op, fr = slot_made[slots[v]]
        s, e = ranges.get(v, (-1, -1))
        return Buffer(name=name_of(v), bytes=int(size), shape=shape, kind=kind, op=op, frames=fr, start=s, end=e,
                      at_peak=at_peak)

    at_peak = [buffer(v, own_bytes[v], True) for v in counted]
    seen = set(live)  # a value live at the peak whose buffer counted another is not among the others
    others = sorted((v for v in sorted(ranges) if v not in seen), key=lambda v: -sizes[v])[:largest]

    def key_of(v):
        """curve_key of buffer(v), without the Buffer: its kind, and its stack or else its op."""
        md = m.instr[value_at[v][0]].metadata
        op, fr = md.op_name, frames.get(int(md.stack_frame_id), ())
        kind = kinds.get(v, TEMPORARY)
        if not fr and kind not in (ARGUMENT, ALIASED) and slots.get(v) in slot_made:
            _, op, fr = slot_made[slots[v]]
        return curve_key(Buffer(name="", bytes=0, shape="", kind=kind, op=op, frames=fr, start=0, end=0,
                                at_peak=False))

    return ProgramMemory(
        module=module or hm.name, length=length, peak_position=int(peak_at), peak_bytes=int(swept.peak_bytes),
        buffers=at_peak + [buffer(v, sizes[v], False) for v in others],
        argument_bytes=totals[ARGUMENT] + totals[ALIASED], output_bytes=totals[OUTPUT] + totals[ALIASED],
        alias_bytes=totals[ALIASED], temp_bytes=totals[TEMPORARY], curve=curve(swept, [key_of(v) for v in named]))


def executable_protos(compiled, module: str | None = None, *, memory_analysis=None) -> tuple[bytes, bytes, str]:
    """(HloModuleProto, BufferAssignmentProto, module name) of a compiled
    executable (``jax.stages.Compiled``, or the runtime's executable):
    ExecutableError where it carries no buffer assignment (a backend that
    does not fill it, an executable loaded from the persistent cache) or no
    HLO module."""
    if not hasattr(compiled, "memory_analysis") and hasattr(compiled, "compiled"):
        compiled = compiled.compiled  # equinox's Compiled holds JAX's
    ma = memory_analysis
    if ma is None:
        try:
            ma = compiled.memory_analysis()
        except Exception as exc:
            raise ExecutableError(f"the executable has no memory analysis: {exc}") from None
    assignment = getattr(ma, "serialized_buffer_assignment_proto", None) if ma is not None else None
    if not assignment:
        raise ExecutableError("the executable carries no buffer assignment (memory_analysis()"
                              ".serialized_buffer_assignment_proto is empty)")
    try:
        runtime = compiled.runtime_executable() if hasattr(compiled, "runtime_executable") else compiled
        modules = runtime.hlo_modules()
    except Exception as exc:
        raise ExecutableError(f"the executable's HLO modules cannot be read: {exc}") from None
    if not modules:
        raise ExecutableError("the executable carries no HLO module")
    chosen = modules[0]
    if module is not None:
        named = [h for h in modules if getattr(h, "name", None) == module]
        if not named:
            raise ExecutableError(f"the executable has no HLO module named {module!r}")
        chosen = named[0]
    try:
        blob = chosen.as_serialized_hlo_module_proto()
    except Exception as exc:
        raise ExecutableError(f"the executable's HLO module cannot be serialized: {exc}") from None
    return bytes(blob), bytes(assignment), str(getattr(chosen, "name", "") or "")


def read_executable(compiled, *, module: str | None = None, largest: int = 20, memory_analysis=None) -> ProgramMemory:
    """XLA's account of a compiled program's memory (its peak, the values
    live there with the op and user line that made each, the largest others,
    its allocations by kind), read from what the executable carries: no
    compile, no dump. ``module``: the HLO module's name, where the executable
    has several (the first otherwise); ``memory_analysis``: what
    ``compiled.memory_analysis()`` gave, where the caller has it already (it
    costs a tenth of a second on a large program). Raises ExecutableError
    where the executable lacks the protos (the caller may fall back to a
    dump)."""
    hlo, assignment, name = executable_protos(compiled, module, memory_analysis=memory_analysis)
    return read_protos(hlo, assignment, module=name, largest=largest)
