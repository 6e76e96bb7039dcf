"""XLA's own account of one compiled program's memory, read from its dump.

Compiling a lowering with ``compiler_options={"xla_dump_to": DIR}`` makes XLA
write, per HLO module (``module_NNNN.<name>.<backend>_after_optimizations*``):

- the optimised HLO (``…after_optimizations.txt``), which begins with the
  tables ``FileNames``, ``FunctionNames``, ``FileLocations`` and
  ``StackFrames``; each instruction's ``metadata`` carries an ``op_name`` and a
  ``stack_frame_id`` into them, so every buffer resolves to the Python stack
  of the line that made it;
- the buffer assignment (``…-buffer-assignment.txt``): each allocation's size
  and kind (``parameter N``, ``output``, ``maybe-live-out``, ``constant``,
  ``thread-local``, ``preallocated-temp``), its memory space (``color N``:
  XLA:TPU's on-chip memories; none printed for the device's main memory)
  and the HLO values it holds; its temporaries in the device's memory are
  what a TPU reserves for the program (``device_temporaries``);
- the live ranges (``…-live-range.txt``): the instruction sequence and each
  value's range in it (and a "peak" of XLA's HloLiveRange, not read: it counts
  two values of one buffer where one is written over the other; the peak is
  the sweep's, ``jaxmemprof.xla.curve``).

The text formats are XLA's, the same on every backend (CPU, GPU, TPU); only
the file names' backend part differs. This module parses them, with no JAX
and no pandas (it runs in the profiled process), into a ``ProgramMemory``.
Facts about the formats: docs/jax-facts.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from jaxmemprof.xla.curve import curve, curve_key, sweep

# A value's kind, from its allocation's.
ARGUMENT, OUTPUT, ALIASED, TEMPORARY, CONSTANT = "argument", "output", "aliased", "temporary", "constant"

_TABLE_ROW = re.compile(r"^(\d+) (.*)$")
_FIELDS = re.compile(r"(\w+)=(\d+)")
# An instruction's shape is an array's (f32[8]{0}) or a tuple's, which holds spaces: (s32[], f32[8]{0}).
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = (\((?:[^()]|\([^()]*\))*\)|\S+?)(?:\{[^}]*\})? (\w[\w\-]*)\(")
METADATA = re.compile(r'metadata=\{((?:[^{}"]|"(?:[^"\\]|\\.)*")*)\}')
_OP_NAME = re.compile(r'op_name="((?:[^"\\]|\\.)*)"')
_FRAME_ID = re.compile(r"stack_frame_id=(\d+)")
_ALLOCATION = re.compile(r"^allocation (\d+): size (\d+)(.*):$")
_VALUE = re.compile(r"^ value: <\d+ (\S+)(?: \(\w+\))? @\d+> \(size=(\d+),offset=(\d+)\): (.*)$")
_COLOR = re.compile(r", color (\d+),")  # an allocation in another memory space than the device's main one
_RANGE = re.compile(r"^\s+([^\s:][^:]*\{[^}]*\}):(\d+)-(\d+)$")
_PEAK_AT = re.compile(r"^\s+Live ranges at (\d+) \(peak\):$")
_SEQUENCE_MAX = re.compile(r"^HloLiveRange \(max (\d+)\):")


@dataclass(frozen=True)
class Buffer:
    """One HLO value: a buffer of the program."""

    name: str  # the value, as the live ranges name it: "sort.0{}"
    bytes: int
    shape: str  # "f32[1024,1024]"
    kind: str  # argument, output, aliased, temporary or constant
    op: str  # the op that made it, e.g. "jit(step)/dot_general"
    frames: tuple  # ((file, line, function), ...) of the line that made it, innermost first
    start: int  # its live range in the instruction sequence
    end: int
    at_peak: bool


@dataclass
class ProgramMemory:
    """What one compiled program holds at its own peak, in program order."""

    module: str
    length: int  # instructions in the sequence
    peak_position: int
    peak_bytes: int  # the most bytes at any position (each buffer once): what the buffers at the peak add up to
    buffers: list = field(default_factory=list)  # at the peak, then the largest others
    # allocation sizes by kind in the device's memory (colour 0), as memory_analysis() adds them on
    # XLA:CPU and GPU; temp_bytes is XLA:TPU's reservation (device_temporaries), not its memory_analysis()
    argument_bytes: int = 0
    output_bytes: int = 0
    alias_bytes: int = 0
    temp_bytes: int = 0
    # bytes live at each position of the sequence, in total and by what made
    # them (jaxmemprof.xla.curve.program_curve); None where not read
    curve: dict | None = None


def _table(lines: list[str], title: str) -> dict[int, str]:
    """The rows ``ID TEXT`` under a table's title line, up to a blank line."""
    out: dict[int, str] = {}
    try:
        i = lines.index(title) + 1
    except ValueError:
        return out
    while i < len(lines) and lines[i].strip():
        m = _TABLE_ROW.match(lines[i])
        if m:
            out[int(m.group(1))] = m.group(2)
        i += 1
    return out


_ESCAPE = re.compile(rb"\\(?:([0-7]{1,3})|x([0-9a-fA-F]{2})|(.))", re.S)
_SIMPLE_ESCAPES = {b"n": b"\n", b"t": b"\t", b"r": b"\r"}


def unquote(text: str) -> str:
    """A string as XLA prints it: quoted, with C escapes (a non-ASCII path's
    UTF-8 bytes in octal: ``\\303\\274`` is u-umlaut)."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1]
    raw = text.encode("utf-8", "surrogateescape")

    def one(m):
        if m.group(1):
            return bytes([int(m.group(1), 8) & 0xFF])
        if m.group(2):
            return bytes([int(m.group(2), 16)])
        return _SIMPLE_ESCAPES.get(m.group(3), m.group(3))

    return _ESCAPE.sub(one, raw).decode("utf-8", "replace")


def stack_frames(hlo_text: str) -> dict[int, tuple]:
    """Per stack frame id, its frames ((file, line, function), ...),
    innermost first. A frame's ``parent_frame_id`` is printed one more than
    the parent's id (0 + 1 for none)."""
    lines = hlo_text.splitlines()
    files = {k: unquote(v) for k, v in _table(lines, "FileNames").items()}
    functions = {k: unquote(v) for k, v in _table(lines, "FunctionNames").items()}
    locations = {}
    for k, v in _table(lines, "FileLocations").items():
        f = dict((a, int(b)) for a, b in _FIELDS.findall(v))
        locations[k] = (files.get(f.get("file_name_id", -1), ""), f.get("line", 0),
                        functions.get(f.get("function_name_id", -1), ""))
    raw = {}
    for k, v in _table(lines, "StackFrames").items():
        f = dict((a, int(b)) for a, b in _FIELDS.findall(v))
        raw[k] = (f.get("file_location_id"), f.get("parent_frame_id", 0) - 1)
    out: dict[int, tuple] = {}
    for k in raw:
        chain, seen, frame = [], set(), k
        while frame in raw and frame not in seen:
            seen.add(frame)
            location, parent = raw[frame]
            if location in locations:
                chain.append(locations[location])
            frame = parent
        out[k] = tuple(chain)
    return out


def instructions(hlo_text: str) -> dict[str, tuple]:
    """Per instruction name: (shape, opcode, op_name, stack frame id or 0)."""
    out: dict[str, tuple] = {}
    for line in hlo_text.splitlines():
        m = _INSTRUCTION.match(line)
        if not m:
            continue
        meta = METADATA.search(line)
        op, frame = "", 0
        if meta:
            n = _OP_NAME.search(meta.group(1))
            op = unquote(n.group(1)) if n else ""
            fid = _FRAME_ID.search(meta.group(1))
            frame = int(fid.group(1)) if fid else 0
        out[m.group(1)] = (m.group(2), m.group(3), op, frame)
    return out


def _value_key(name: str) -> str:
    """A value's name as the live ranges write it: with its shape index."""
    return name if name.endswith("}") else name + "{}"


def allocations(text: str) -> tuple[dict[str, str], dict[str, int], dict[str, tuple]]:
    """(kind of each value, bytes per kind over the allocations in the
    device's memory (colour 0: ``device_temporaries``), each value's slot:
    (allocation, offset, size)) from a buffer assignment. Values in one slot
    are one buffer (a loop's carried value and what it was made from)."""
    kinds: dict[str, str] = {}
    slots: dict[str, tuple] = {}
    index = -1
    totals = {ARGUMENT: 0, OUTPUT: 0, ALIASED: 0, TEMPORARY: 0, CONSTANT: 0}
    kind = None
    for line in text.splitlines():
        m = _ALLOCATION.match(line)
        if m:
            index, size, attrs = int(m.group(1)), int(m.group(2)), m.group(3)
            parameter = " parameter " in attrs + " "
            colour = _COLOR.search(attrs + ",")
            device = colour is None or int(colour.group(1)) == 0  # another memory space: not the device's
            output = "output" in attrs or "maybe-live-out" in attrs
            if "thread-local" in attrs:
                kind = None  # a scalar of one thread: not in memory_analysis()
            elif parameter:
                kind = ALIASED if output else ARGUMENT
            elif output:
                kind = OUTPUT
            elif "constant" in attrs:
                kind = CONSTANT
            else:
                kind = TEMPORARY
            if kind is not None and device:
                totals[kind] += size
            continue
        v = _VALUE.match(line)
        if v and kind is not None:
            key = _value_key(v.group(1))
            kinds.setdefault(key, kind)
            slots.setdefault(key, (index, int(v.group(3)), int(v.group(2))))
    return kinds, totals, slots


def device_temporaries(text: str) -> int:
    """The bytes of a buffer assignment's temporary allocations in the
    device's memory: colour 0 (none printed), neither a parameter, an output
    (``output``, ``maybe-live-out``), a constant nor thread-local; on
    XLA:TPU one ``preallocated-temp``. What the chip reserves for the
    program as it runs (``peak_bytes_reserved``, 15,872 B more, measured on
    a v5e: docs/tpu.md), where XLA:TPU's ``memory_analysis().temp_size``
    is not; on XLA:CPU it equals ``temp_size`` (tests/test_tpu_reservation.py)."""
    return allocations(text)[1][TEMPORARY]


def reservation(directory: Path | str) -> int | None:
    """``device_temporaries`` of the program a compile dumped into
    ``directory`` (its buffer assignment, ``*after_optimizations-buffer-
    assignment.txt``; the largest where several modules are there, a jitted
    function's main one); None where there is none."""
    found = [device_temporaries(f.read_text(errors="replace"))
             for f in Path(directory).glob("module_*after_optimizations-buffer-assignment.txt")]
    return max(found) if found else None


def live_ranges(text: str) -> tuple[int, dict[str, tuple]]:
    """(sequence length, value -> (start, end)) from a live-range file (its
    "peak" section is not read: module docstring)."""
    length, ranges = 0, {}
    section = ""
    for line in text.splitlines():
        m = _SEQUENCE_MAX.match(line)
        if m:
            length = int(m.group(1))
            continue
        stripped = line.strip()
        if stripped in ("InstructionSequence:", "BufferLiveRange:"):
            section = stripped
            continue
        if _PEAK_AT.match(line) or stripped.startswith("Stack trace breakdown"):
            section = ""
            continue
        if section == "BufferLiveRange:":
            r = _RANGE.match(line)
            if r:
                ranges[r.group(1).strip()] = (int(r.group(2)), int(r.group(3)))
    return length, ranges


def _dtype_shape(shape: str) -> str:
    """``f32[1024,1024]{1,0}`` -> ``f32[1024,1024]`` (layout dropped)."""
    return re.sub(r"\{[^}]*\}", "", shape)


def read_program(hlo_text: str, assignment_text: str, live_range_text: str, *, module: str = "",
                 largest: int = 20) -> ProgramMemory:
    """The program's peak: every value live there (size, shape, kind, op and
    the Python stack that made it), and the ``largest`` biggest values of the
    whole program with their live ranges."""
    frames = stack_frames(hlo_text)
    instrs = instructions(hlo_text)
    kinds, totals, slots = allocations(assignment_text)
    length, ranges = live_ranges(live_range_text)

    def made_by(name: str) -> tuple:
        """(shape, op, frames) of the instruction that defines a value."""
        base = name.split("{", 1)[0]
        shape, _, op, frame = instrs.get(base, ("", "", "", 0))
        return _dtype_shape(shape), op, frames.get(frame, ())

    # A value with no op of its own (a loop's carried tuple element) takes
    # the op and stack of a value in the same slot that has them.
    by_slot: dict[tuple, tuple] = {}
    for name, slot in slots.items():
        shape, op, fr = made_by(name)
        if fr and slot not in by_slot:
            by_slot[slot] = (shape, op, fr)

    def buffer(name: str, size: int, at_peak: bool) -> Buffer:
        shape, op, fr = made_by(name)
        kind = kinds.get(name, TEMPORARY)
        if not fr and kind not in (ARGUMENT, ALIASED) and slots.get(name) in by_slot:
            shape, op, fr = by_slot[slots[name]]
        start, end = ranges.get(name, (-1, -1))
        return Buffer(name=name, bytes=size, shape=shape, kind=kind, op=op, frames=fr, start=start, end=end,
                      at_peak=at_peak)

    # The bytes at each position and the peak, each buffer once where its
    # values meet (jaxmemprof.xla.curve.sweep). The live ranges' own "peak"
    # is not read: it counts an op's output and the operand it was written
    # over as two buffers (docs/jax-facts.md, "The peak").
    sizes = _value_sizes(assignment_text)
    for name in _other_memory(assignment_text):
        sizes.pop(name, None)
    named = sorted(n for n in ranges if n in sizes)
    swept = sweep([(ranges[n][0], ranges[n][1], sizes[n], slots.get(n)) for n in named], length)
    peak_at = swept.peak_position
    counted = sorted((named[i] for i in swept.at_peak), key=lambda n: (-sizes[n], *_name_and_index(n)))
    at_peak = [buffer(n, sizes[n], True) for n in counted]
    seen = {n for n in named if ranges[n][0] <= peak_at <= ranges[n][1]}
    others = sorted((n for n in ranges if n not in seen and n in sizes), key=lambda n: -sizes[n])[:largest]
    keys = [curve_key(buffer(n, sizes[n], False)) for n in named]
    return ProgramMemory(
        module=module, length=length, peak_position=peak_at, peak_bytes=swept.peak_bytes,
        buffers=at_peak + [buffer(n, sizes[n], False) for n in others],
        argument_bytes=totals[ARGUMENT] + totals[ALIASED], output_bytes=totals[OUTPUT] + totals[ALIASED],
        alias_bytes=totals[ALIASED], temp_bytes=totals[TEMPORARY], curve=curve(swept, keys))


def _name_and_index(name: str) -> tuple:
    """``fusion.2{1,0}`` -> ("fusion.2", (1, 0)): a value's order as the executable's reader sorts it."""
    base, _, index = name.partition("{")
    return base, tuple(int(i) for i in index.rstrip("}").split(",") if i.strip())




def _other_memory(text: str) -> set:
    """The values of allocations in another memory space than the device's
    main one (``color N``, N > 0: XLA:TPU's on-chip memories; XLA:CPU's
    dumps have none): not in the device's memory, nor in memory_analysis()."""
    out, other = set(), False
    for line in text.splitlines():
        m = _ALLOCATION.match(line)
        if m:
            c = _COLOR.search(m.group(3) + ",")
            other = c is not None and int(c.group(1)) > 0
            continue
        if other:
            v = _VALUE.match(line)
            if v:
                out.add(_value_key(v.group(1)))
    return out


def _value_sizes(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        v = _VALUE.match(line)
        if v:
            out.setdefault(_value_key(v.group(1)), int(v.group(2)))
    return out


def read_dump(directory: Path | str, module_name: str | None = None) -> list[ProgramMemory]:
    """Every module of a dump directory that has all three files (the main
    program of a jitted function: ``jit_<name>``), read."""
    directory = Path(directory)
    out = []
    # module_0006.jit_step.cpu_after_optimizations.txt; XLA:TPU's module_0000.jit_step.cl_93374.after_optimizations.txt
    for hlo in sorted([*directory.glob("module_*_after_optimizations.txt"),
                       *directory.glob("module_*.after_optimizations.txt")]):
        stem = hlo.name[: -len(".txt")]
        assignment = hlo.with_name(stem + "-buffer-assignment.txt")
        ranges = hlo.with_name(stem + "-live-range.txt")
        if not (assignment.is_file() and ranges.is_file()):
            continue
        # module_0006.jit_step.cpu_after_optimizations.txt -> jit_step
        parts = hlo.name.split(".")
        module = ".".join(parts[1:-2]) if len(parts) > 3 else hlo.name
        if module_name is not None and module != module_name:
            continue
        out.append(read_program(hlo.read_text(errors="replace"), assignment.read_text(errors="replace"),
                                ranges.read_text(errors="replace"), module=module))
    return out


# Where a figure's temporaries came from (docs/tpu.md, "The program's reservation").
MEMORY_ANALYSIS, BUFFER_ASSIGNMENT = "memory_analysis", "buffer_assignment"
# The run directory a what-if's own dump goes in (scratch.dump_directory), set by the jit probe
# (capture/jit/programs.py) as the program compiles; None: the system's temporary directory.
dumps_under: str | None = None


def platform_of(lowered) -> str:
    """The platform a lowering compiles for (``tpu`` for a deviceless
    ``--target`` slice too), '' where it cannot be told."""
    try:
        lowering = getattr(lowered, "_lowering", None) or lowered.lowered._lowering  # a wrapper of one: .lowered
        return str(lowering.compile_args["backend"].platform)
    except Exception:
        return ""


def reserved_figures(figures: tuple, platform: str, directory) -> tuple[tuple, str]:
    """XLA's five figures (argument, output, alias, temp, code: memory_analysis()'s)
    as jaxmemprof gives them, and where their temporaries came from: on a
    TPU, the temporaries of the program's buffer assignment in the device's
    memory, from its dump in ``directory`` (``reservation``: what the chip
    reserves; XLA:TPU's memory_analysis().temp_size is not it, and its
    executables carry no buffer assignment to read it from instead); on
    every other backend, or with no dump read, memory_analysis()'s as they are."""
    if platform != "tpu" or not directory:
        return tuple(figures), MEMORY_ANALYSIS
    try:
        temp = reservation(directory)
    except OSError:
        temp = None
    if temp is None:
        return tuple(figures), MEMORY_ANALYSIS
    return (*figures[:3], temp, *figures[4:]), BUFFER_ASSIGNMENT


def compile_read(lowered, dump_to: str | None, fields: tuple) -> tuple:
    """``lowered`` compiled as a compile of jaxmemprof's own (scratch.compile_own:
    dumped into ``dump_to`` only) and its figures read, the one place a
    what-if's are: (the executable, the ``fields`` of its memory_analysis()
    as ints with the temporaries ``reserved_figures`` gives, or None where
    XLA gave none, a list of what to say: one line where a TPU's
    temporaries are memory_analysis()'s after all). On a TPU with no
    ``dump_to``, the compile dumps into a directory of its own inside the
    run directory (``dumps_under``), removed once read."""
    from contextlib import nullcontext

    from jaxmemprof.xla import scratch

    platform = platform_of(lowered)
    with (nullcontext(dump_to) if dump_to or platform != "tpu" else scratch.dump_scratch(dumps_under)) as to:
        compiled = scratch.compile_own(lowered, to)
        ma = compiled.memory_analysis()
        if ma is None:
            return compiled, None, []
        figures, source = reserved_figures(tuple(int(getattr(ma, f, 0) or 0) for f in fields), platform, to)
    note = ["XLA:TPU's temporaries from memory_analysis(): its dump held no buffer assignment"
            ] if platform == "tpu" and source != BUFFER_ASSIGNMENT else []
    return compiled, figures, note
