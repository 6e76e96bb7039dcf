"""A program of a profile as XLA compiled it: its memory (XLA's buffers at
its peak by the op and line that made each: jaxmemprof/xla/executable.py's
reader, the one the jit probe uses on a live executable), its arguments by
the names JAX gives them, its outputs, and which arguments XLA aliased with
an output (the donated ones).

The names: JAX writes each parameter's pytree path into the parameter's
``op_name`` metadata (``params[0][0]``, ``opt_state[0].mu['w']``, ``x``);
the argument is the name before the first ``[`` or ``.``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from jaxmemprof.xla import executable_pb2 as pb
from jaxmemprof.xla.dump import ProgramMemory
from jaxmemprof.xla.executable import ExecutableError, read_protos, shape_bytes, shape_text

# XLA's element type names -> numpy's, as JAX names dtypes.
_DTYPES = {"pred": "bool", "s8": "int8", "s16": "int16", "s32": "int32", "s64": "int64", "u8": "uint8",
           "u16": "uint16", "u32": "uint32", "u64": "uint64", "f16": "float16", "bf16": "bfloat16",
           "f32": "float32", "f64": "float64", "c64": "complex64", "c128": "complex128", "s4": "int4", "u4": "uint4",
           "f8e5m2": "float8_e5m2", "f8e4m3fn": "float8_e4m3fn"}
_ARGUMENT = re.compile(r"^([^\[.]+)")
_TUPLE = 13


@dataclass(frozen=True)
class Leaf:
    """One array of an argument or of the result."""

    path: str  # params[0][0] for an argument (its op_name); [2] for an output
    argument: str  # params ('' for an output)
    position: int  # the parameter's number; the output's index
    shape: tuple
    dtype: str  # float32
    bytes: int
    aliased: bool = False  # an argument whose buffer XLA writes an output into (donated)


@dataclass
class ProgramFacts:
    """One program: its memory, arguments and outputs."""

    module: str
    memory: ProgramMemory | None
    arguments: list = field(default_factory=list)  # [Leaf], in parameter order
    outputs: list = field(default_factory=list)  # [Leaf]
    error: str = ""  # why its memory was not read ('' where it was)

    @property
    def signature(self) -> str:
        """As the jit probe writes a signature: each array argument's dtype and shape."""
        return ", ".join(f"{a.dtype}[{','.join(map(str, a.shape))}]" for a in self.arguments)

    @property
    def argument_names(self) -> list:
        seen: list = []
        for a in self.arguments:
            if a.argument not in seen:
                seen.append(a.argument)
        return seen


def dtype_name(xla_type: str) -> str:
    return _DTYPES.get(xla_type, xla_type)


def _leaves(shape, index=()):
    if shape.element_type == _TUPLE:
        for i, s in enumerate(shape.tuple_shapes):
            yield from _leaves(s, (*index, i))
    else:
        yield index, shape


def entry_operations(hlo_module: bytes) -> set:
    """The names of the operations of the module's entry computation (empty
    where it cannot be read)."""
    try:
        hm = pb.HloModule.FromString(hlo_module)
    except Exception:  # DecodeError, and whatever a damaged blob raises
        return set()
    entry = next((c for c in hm.computations if c.id == hm.entry_computation_id), None)
    return {i.name for i in entry.instructions} if entry is not None else set()


def read_program(module_name: str, hlo_module: bytes, buffer_assignment: bytes, *, largest: int = 20) -> ProgramFacts:
    """The facts of one program (its memory where the profile has its buffer
    assignment; ``error`` says why not)."""
    memory, error = None, ""
    if not buffer_assignment:
        error = "the profile holds no buffer assignment for it"
    else:
        try:
            memory = read_protos(hlo_module, buffer_assignment, module=module_name, largest=largest)
        except ExecutableError as exc:
            error = str(exc).replace("the executable", "the program")
    try:
        hm = pb.HloModule.FromString(hlo_module)
    except Exception:  # DecodeError, and whatever a damaged blob raises
        return ProgramFacts(module_name, memory, error=error or "its HLO module cannot be read")
    entry = next((c for c in hm.computations if c.id == hm.entry_computation_id), None)
    if entry is None:
        return ProgramFacts(module_name, memory, error=error or "its HLO module has no entry computation")
    aliased = {(int(e.parameter_number), tuple(int(i) for i in e.parameter_shape_index))
               for e in hm.input_output_alias.entries}
    params = sorted((i for i in entry.instructions if i.opcode == "parameter"), key=lambda i: i.parameter_number)
    arguments = []
    for ins in params:
        name = ins.metadata.op_name or ins.name
        for index, shape in _leaves(ins.shape):
            path = name + "".join(f"[{i}]" for i in index)
            m = _ARGUMENT.match(name)
            text = shape_text(shape)
            arguments.append(Leaf(path=path, argument=m.group(1) if m else name, position=int(ins.parameter_number),
                                  shape=tuple(int(d) for d in shape.dimensions), dtype=dtype_name(text.split("[")[0]),
                                  bytes=shape_bytes(shape), aliased=(int(ins.parameter_number), index) in aliased))
    root = next((i for i in entry.instructions if i.id == entry.root_id), None)
    outputs = []
    if root is not None:
        for n, (index, shape) in enumerate(_leaves(root.shape)):
            text = shape_text(shape)
            outputs.append(Leaf(path="".join(f"[{i}]" for i in index), argument="", position=n,
                                shape=tuple(int(d) for d in shape.dimensions), dtype=dtype_name(text.split("[")[0]),
                                bytes=shape_bytes(shape)))
    return ProgramFacts(module_name, memory, arguments, outputs, error)
