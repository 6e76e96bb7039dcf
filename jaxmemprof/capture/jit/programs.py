"""Reading XLA's figures for each compiled signature of a function, and the
signature itself:

- per compiled signature: XLA's ``memory_analysis()`` (arguments, outputs,
  alias, temporaries, generated code), read through the AOT path with the
  same arguments, which hits the compile cache, and the arguments the
  compiled program does not read (pruned: donating them saves nothing);
- per compiled signature of a user's function, when it is compiled, XLA's
  own account of the program read from its executable
  (``jaxmemprof.xla.executable``: no compile of ours): its peak in program
  order (a jit_programs row) and its buffers at that peak, by the line that
  made them (jit_buffers, with the signature), written at once. Where the
  executable lacks XLA's buffer assignment (a backend that leaves it empty),
  a dump of the largest signature at the end stands in (``jaxmemprof.xla.dump``:
  a compile of its own, within a share of the run's time), and a run event
  says so;
- a call's signature as text: what JAX's compile cache tells calls apart by,
  static arguments' values included.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import re
import sys
import threading
import time
from typing import TYPE_CHECKING

from jaxmemprof.capture.arrays import is_deleted as _is_deleted
from jaxmemprof.xla import scratch
from jaxmemprof.xla import dump as _dump
from jaxmemprof.xla.dump import platform_of
from jaxmemprof.facts.truepeak import peak_of
from jaxmemprof.capture.jit.retrace import traced
from jaxmemprof.capture.tracebacks import message

if TYPE_CHECKING:
    from jaxmemprof.capture.jit.state import FunctionState

# Program-order curves written per function, at most (its first signatures').
CURVES = 32
# A signature is stored whole up to this many characters (else its start and a digest).
SIGNATURE_CHARS = 2000


class Programs:
    """The part of JitProbe (a base class of it) that reads XLA's figures
    and writes a signature's text. It uses the probe's ``writer``, ``_jax``,
    ``_states``, ``_is_array``, ``_error`` and ``_guard``, and its dump
    budget (``dump_share``, ``dump_min_s``, ``_t_install``), and its early
    compiles (``early``: early.py)."""

    # The end phase's progress line (Session.end_work): told what is compiled now.
    on_progress = None

    def progress(self, text: str) -> None:
        show = self.on_progress
        if show is not None:
            try:
                show(text)
            except Exception:
                pass

    def _memory_analysis(self, real, state, args, kwargs, after_call: bool = False) -> bool:
        signature = self._signature(state, args, kwargs)  # of the arrays themselves, deleted or not
        if after_call and signature in state.signatures:
            # Analysed before the call ran it (a donating function's first
            # call): its compile is that signature's, already recorded.
            return True
        if after_call and any(_is_deleted(leaf) for leaf in self._array_leaves((args, kwargs))):
            # Donated, the call deleted them; their shapes, dtypes and shardings are still known,
            # and lower() takes those (the leftover last batch of a donated step is analysed so).
            args, kwargs = self._jax.tree_util.tree_map(self._abstract_if_deleted, (args, kwargs))
        try:
            # Traced once (the program's own call takes it from JAX's cache, or took it from), and
            # its jaxpr kept for the compiles at the end of the run (retrace.py: replayed, never re-traced).
            lowered, trace = traced(real, args, kwargs)
        except AttributeError as exc:
            if "'_fun'" not in (message(exc) or ""):
                raise
            # A copy (copy.deepcopy) of a jitted function cannot be lowered,
            # under python too: its calls are still observed, not its memory.
            state.signatures.add(signature)
            return True
        compiled = lowered.compile()
        ma = compiled.memory_analysis()
        _dump.dumps_under = getattr(self.writer, "directory", None)  # a what-if's own dump: inside the run (TPU)
        fields = ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes",
                  "temp_size_in_bytes", "generated_code_size_in_bytes", "host_argument_size_in_bytes",
                  "host_output_size_in_bytes", "host_alias_size_in_bytes", "host_temp_size_in_bytes",
                  "host_generated_code_size_in_bytes", "peak_memory_in_bytes")
        values = [_int_or_none(getattr(ma, f, None)) if ma is not None else None for f in fields]
        state.signatures.add(signature)
        if trace is not None and state.plan is not None and state.user:
            trace.peak = peak_of(values[:5])
            state.plan.traces[signature] = trace
        state.pruned[signature] = self._read_pruned(compiled)
        if state.by_signature:
            state.compiles += 1
        peak = peak_of(values[:5])  # the first five: XLA's device figures, in truepeak.FIGURES order
        self.writer.add_jit_compile((state.function_id, state.calls, time.time(), signature, *values))
        if state.user and platform_of(lowered) == "tpu":
            digest = state.programs[signature] = program_digest(lowered)
            temp = next((t for s, t in list(state.reserved.items()) if digest is not None and state.programs.get(s) == digest),
                        None)
            if temp is not None:  # its program's dump was read (another signature's): the same temporaries
                self._reserved(state, signature, temp)
                return True
        if state.user and not self._read_program(state, signature, compiled, ma):
            # The executable lacks XLA's buffer assignment: the dump at the end, for the largest.
            if state.largest is None or peak > state.largest[0]:
                state.largest = (peak, signature, lowered)
                if not _dumps_of_its_own(self._jax):  # dumped now, beside the program (early.py)
                    self.early.dump(state, signature, lowered)
        return True

    def _abstract_if_deleted(self, x):
        if self._is_array(x) and _is_deleted(x):
            return self._jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding,
                                              weak_type=bool(getattr(x, "weak_type", False)))
        return x

    def _read_program(self, state, signature: str, compiled, ma) -> bool:
        """XLA's figures for this signature, read from the executable the
        program compiled (no compile of ours): its jit_programs row and its
        buffers, now. False
        where the executable lacks the protos (the dump is the fallback)."""
        t0 = time.monotonic()
        # imported at the first compile read: a script that never compiles pays nothing for protobuf
        from jaxmemprof.xla.executable import ExecutableError, read_executable

        try:
            p = read_executable(compiled, memory_analysis=ma)
        except ExecutableError as exc:
            if not self._fallback_said:
                self._fallback_said = True
                self.writer.add_event("xla-dump", f"XLA's buffers by line from a dump at the end of the run instead "
                                                  f"of the executables: {exc}"[:2000])
            return False
        except Exception as exc:  # the reader's own failure: recorded, and the dump stands in
            self._error(state, exc)
            return False
        took = time.monotonic() - t0
        self.read_s += took
        self.programs_read += 1
        self._write_program(state, signature, p, took)
        return True

    def _write_program(self, state, signature: str, p, seconds: float) -> None:
        """One signature's program: its jit_programs row, its buffers, and its
        curve (for a function's first CURVES signatures: one that compiles
        anew every step would write one per step)."""
        curve = None
        if p.curve is not None and state.curves < CURVES:
            state.curves += 1
            curve = (state.function_id, signature, json.dumps(p.curve, separators=(",", ":")))
        self.writer.add_jit_program(
            (state.function_id, signature, p.module, p.length, p.peak_position, p.peak_bytes,
             p.argument_bytes, p.output_bytes, p.alias_bytes, p.temp_bytes, seconds),
            [(state.function_id, b.name, b.bytes, b.shape, b.kind, b.op, json.dumps(b.frames), b.start, b.end,
              int(b.at_peak), signature) for b in p.buffers], curve)

    def _signature(self, state: FunctionState, args, kwargs) -> str:
        """What JAX's compile cache tells calls apart by, as text: each array
        argument's dtype and shape (numpy's too: ``np:float32[8]``), and on
        several devices its shard's shape and their number
        (``float32[8,4]@[2,4]x4``: one executable per sharding), each
        Python scalar's type (traced weakly typed, whatever its value), and
        each static argument's value (``static:3``; with equinox.filter_jit,
        every leaf that is not an array)."""
        # numpy is imported here, not with this module: imported before the
        # program runs, its BLAS threads would take signals the program blocks.
        import numpy as np

        nums = {i % len(args) for i in state.static_argnums if isinstance(i, int) and -len(args) <= i < len(args)}
        nums.update(i for i, name in enumerate(state.param_names[:len(args)]) if name in state.static_argnames)
        parts = []
        for where, value in [*enumerate(args), *sorted(kwargs.items())]:
            if where in nums or where in state.static_argnames:
                parts.append(f"static:{self._static_text(state, value)}")
                continue
            for x in self._jax.tree_util.tree_leaves(value):
                if self._is_array(x):
                    parts.append(f"{x.dtype}[{','.join(map(str, x.shape))}]{_layout(x)}")
                elif isinstance(x, (np.ndarray, np.generic)):
                    parts.append(f"np:{x.dtype}[{','.join(map(str, np.shape(x)))}]")
                elif state.static_leaves:
                    parts.append(f"static:{self._static_text(state, x)}")
                elif type(x) in (bool, int, float, complex):
                    parts.append(type(x).__name__)
        return _bounded(", ".join(parts))

    @staticmethod
    def _static_text(state: FunctionState, value) -> str:
        """A static value as text that is the same on every run of the
        program: its repr for plain values, a function's name, else its type
        and the order in which this function first saw it (a repr may carry
        an address)."""
        plain = (bool, int, float, complex, str, bytes, type(None))
        if type(value) in plain or (type(value) in (tuple, frozenset) and len(value) <= 16
                                    and all(type(v) in plain for v in value)):
            text = repr(value)
            return text if len(text) <= 120 else text[:117] + "..."
        if inspect.isfunction(value) or inspect.isbuiltin(value):
            return f"{getattr(value, '__module__', None) or ''}.{value.__qualname__}"
        seen = state.static_seen
        try:
            number = seen.get(value)
            if number is None and len(seen) < 256:  # kept alive here, as in JAX's own cache: a few
                number = seen[value] = len(seen)
        except TypeError:  # not hashable: JAX refuses it as a static argument too
            number = None
        return f"{type(value).__qualname__}#{'?' if number is None else number}"

    def _mark_pruned(self, state, inputs, args, kwargs) -> None:
        """Mark the call's input leaves that its executable does not read (jit
        prunes an argument its program never uses: donating it saves nothing),
        by the key paths that its compiled signature gave them."""
        leaves, refs, _, signature = inputs[:4]
        paths = state.pruned.get(signature)
        if not paths:
            return
        tu = self._jax.tree_util
        pruned = {id(leaf) for path, leaf in tu.tree_flatten_with_path(self._dynamic(state, args, kwargs))[0]
                  if tu.keystr(path) in paths}
        for d, r in zip(leaves, refs):
            if r is not None and id(r()) in pruned:
                d["pruned"] = True

    @staticmethod
    def _dynamic(state, args, kwargs):
        """The arguments jax.jit traces, (args, kwargs) without the static ones,
        as its compiled function's input_shardings are laid out."""
        nums, names, params = state.jit_static
        static = {i % len(args) for i in nums if isinstance(i, int) and -len(args) <= i < len(args)}
        static.update(i for i, name in enumerate(params[:len(args)]) if name in names)
        return (tuple(a for i, a in enumerate(args) if i not in static),
                {k: v for k, v in kwargs.items() if k not in names})

    def _read_pruned(self, compiled) -> frozenset:
        """The key paths of the arguments XLA's program does not take: None in
        the compiled function's input_shardings."""
        tu = self._jax.tree_util
        try:
            flat = tu.tree_flatten_with_path(compiled.input_shardings, is_leaf=lambda x: x is None)[0]
        except Exception:  # no input_shardings (jax.pmap's): none known pruned
            return frozenset()
        return frozenset(tu.keystr(path) for path, sharding in flat if sharding is None)

    def _array_leaves(self, tree):
        return [x for x in self._jax.tree_util.tree_leaves(tree) if self._is_array(x)]

    def _dump_programs(self) -> None:
        """XLA's own account of each function's largest signature: compile
        its lowering once more with a dump directory (a compile of its own,
        never the program's: the options differ), read the dump, remove it.
        Largest first, each while the budget affords what its compile took
        in the program (the first, whatever the dumps took so far)."""
        jobs = sorted((s for s in self._states if s.largest is not None and s.user), key=lambda s: -s.largest[0])
        if jobs and _dumps_of_its_own(self._jax):
            # The program dumps XLA's or JAX's output itself: a compile of ours
            # would add to its dump directory.
            self.writer.add_event("xla-dump", "left out: the program dumps XLA's or JAX's output itself "
                                              "(XLA_FLAGS --xla_dump_*, jax_dump_ir_to)")
            jobs = []
        budget = max(self.dump_min_s, self.dump_share * (time.monotonic() - self._t_install))
        spent = 0.0
        left = []
        done = 0
        for state in jobs:
            key = ("dump", state.function_id, state.largest[1])
            if self.early.taken(key):
                state.largest = None  # dumped beside the program, or being dumped there now (early.py)
                if getattr(self.planner, "options", None) is not None:
                    self.early.result(key)  # --plan reads the signature's figures: its dump's temporaries (TPU)
                done += 1
                continue
            if done and spent + state.compile_s > budget:  # the largest is dumped whatever it takes
                left.append(state)
                continue
            self.progress(f"XLA's dump of {state.row.get('name', state.function_id)}")
            t0 = time.monotonic()
            self._guard(state, self._dump_one, state)
            spent += time.monotonic() - t0
            done += 1
            state.largest = None  # the lowering is no longer needed
        if left:
            names = ", ".join(str(s.row.get("name", s.function_id)) for s in left[:5])
            self.writer.add_event("xla-dump", f"XLA's buffers by line left out for {names}"
                                              f"{', ...' if len(left) > 5 else ''}: its dump would pass "
                                              f"{budget:.2f} s, the run's share (--max-overhead allows more)")
        for state in left:
            state.largest = None

    def _dump_one(self, state) -> None:
        _, signature, lowered = state.largest
        self._dump_lowered(state, signature, lowered)

    def _dump_lowered(self, state, signature: str, lowered) -> float:
        """Compile ``lowered`` once more with a dump directory, read XLA's
        figures from the dump, write them as the signature's program; the
        seconds it took."""
        t0 = time.monotonic()
        directory = scratch.dump_directory(self.writer)  # inside the run directory
        try:
            with unseen_compile(self._jax):
                scratch.compile_own(lowered, directory)
            from jaxmemprof.xla.dump import read_dump  # imported when a dump is read (protobuf-free, but regex-heavy)

            programs = read_dump(directory)
        finally:
            scratch.remove(directory)
        if not programs:
            raise ValueError("XLA's dump held no program with buffer assignment and live ranges")
        p = max(programs, key=lambda p: p.peak_bytes)
        seconds = time.monotonic() - t0
        self._write_program(state, signature, p, seconds)
        if platform_of(lowered) == "tpu":
            self._reserved(state, signature, p.temp_bytes)
        return seconds

    def _reserved(self, state, signature: str, temp: int) -> None:
        """On a TPU, the signature's temporaries in jit_compiles made its
        dump's (the buffer assignment's in device memory: the chip's
        reservation, xla/dump.reserved_figures), in place of
        memory_analysis()'s, and those of every signature of the function
        that lowered to the same program (``program_digest``: one compile,
        one buffer assignment); a ``reservation`` event says each (the
        journal's record of which figure a signature's temp_bytes is)."""
        writer = self.writer
        setter = getattr(writer, "set_jit_compile_temp", None)
        if setter is None:
            return
        digest = state.programs.get(signature)
        same = [s for s, d in list(state.programs.items()) if digest is not None and d == digest and s != signature
                and s not in state.reserved]
        for sig in [signature, *same]:
            state.reserved[sig] = int(temp)
            before = getattr(writer, "jit_compile_figures", lambda *a: None)(state.function_id, sig)
            setter(state.function_id, sig, int(temp))
            said = "" if before is None or before[3] is None else f", not memory_analysis()'s {int(before[3]):,} B"
            whose = "" if sig == signature else f" (the program of {signature[:100]})"
            writer.add_event("reservation", f"{state.row.get('name', state.function_id)} {sig[:200]}: "
                                            f"temporaries {int(temp):,} B from XLA:TPU's buffer assignment{said}{whose}")


# A sharding over the empty mesh (no axes: the array whole on its one device) written on a parameter,
# as on an array's and not on a Python scalar's: the same program to XLA as none written.
_EMPTY_MESH = re.compile(r"sdy\.sharding = #sdy\.sharding<@empty_mesh, \[(?:\{\}(?:, )?)*\]>(?:, )?")
_EMPTY_DICT = re.compile(r"> \{\}")  # a parameter's attributes, none left
_EMPTY_MESH_DECLARED = re.compile(r"^ *sdy\.mesh @empty_mesh = <\[\]>.*\n", re.M)  # the mesh, declared where used
# Before Shardy (jax 0.6): the same written as a replicated sharding, the same as none in a one-device program.
_REPLICATED = re.compile(r'mhlo\.sharding = "\{replicated\}"(?:, )?')
_ONE_DEVICE = "mhlo.num_partitions = 1 "


def program_text(lowered) -> str | None:
    """The program ``lowered`` holds, as its module's text (shapes,
    shardings, donations, operations) less the one thing that changes
    nothing in it, the empty mesh's shardings and its declaration
    (``_EMPTY_MESH``; before Shardy, a one-device program's replicated
    shardings, ``_REPLICATED``): two lowerings of one text are one program to XLA (the
    same compile, figures and buffer assignment); None where the text cannot
    be had."""
    try:
        text = _EMPTY_MESH.sub("", _EMPTY_MESH_DECLARED.sub("", getattr(lowered, "lowered", lowered).as_text()))
        if _ONE_DEVICE in text:
            text = _REPLICATED.sub("", text)
        return _EMPTY_DICT.sub(">", text)
    except Exception:
        return None


def program_digest(lowered) -> str | None:
    """``program_text``'s digest."""
    text = program_text(lowered)
    return None if text is None else hashlib.sha256(text.encode()).hexdigest()


def _bounded(signature: str, limit: int = SIGNATURE_CHARS) -> str:
    """A signature as stored: whole up to ``limit`` characters, else its
    start and a digest of the whole, so two long signatures that differ
    only at the end (a batch after 500 parameters) stay apart."""
    if len(signature) <= limit:
        return signature
    digest = hashlib.sha256(signature.encode()).hexdigest()[:16]
    tail = f" ... ({len(signature)} characters, sha256 {digest})"
    return signature[:limit - len(tail)] + tail


class unseen_compile:
    """Around a compile of ours: not the program's, so nothing of it is
    shown to the program. No persistent compilation cache (a hit would
    compile nothing, and dump no buffer assignment), no jax_log_compiles
    line, no event for the program's jax.monitoring listeners. Each for the
    compiling thread alone (a compile of ours on a background thread while
    the program runs: early.py): the program's own compiles meanwhile use
    the cache, log and are heard as before. JAX's own internals (private,
    looked up defensively): anything missing is left as it is."""

    def __init__(self, jax):
        self.jax = jax
        self.stack = contextlib.ExitStack()

    def __enter__(self):
        stack = self.stack
        stack.enter_context(scratch._in_this_thread("jax._src.compilation_cache", "is_cache_used",
                                                    lambda original: lambda *a, **k: False))
        state = getattr(sys.modules.get("jax._src.config"), "log_compiles", None)
        try:
            if state is not None:
                stack.enter_context(state(False))  # a thread-local setting
        except Exception:
            pass
        stack.enter_context(_unheard())
        return self

    def __exit__(self, *exc):
        self.stack.close()
        return False


_LISTENERS = ("_event_listeners", "_event_duration_secs_listeners", "_event_time_span_listeners",
              "_scalar_listeners")
_unheard_threads: set = set()  # threads whose jax.monitoring events no listener hears
_unheard_lists: dict = {}  # name -> (the module's own list, ours in its place)
_unheard_lock = threading.Lock()


class _Unheard(list):
    """A listener list of jax.monitoring in place of JAX's own while a
    compile of ours runs: empty to the threads compiling (their events are
    heard by nobody), the same listeners to every other thread; the
    program's register and unregister calls change it as they would JAX's."""

    def __iter__(self):
        return iter(()) if threading.get_ident() in _unheard_threads else list.__iter__(self)


@contextlib.contextmanager
def _unheard():
    monitoring = sys.modules.get("jax._src.monitoring")
    me = threading.get_ident()
    with _unheard_lock:
        if monitoring is not None and not _unheard_threads:
            for name in _LISTENERS:
                own = getattr(monitoring, name, None)
                if isinstance(own, list) and not isinstance(own, _Unheard):
                    ours = _Unheard(own)
                    _unheard_lists[name] = (own, ours)
                    setattr(monitoring, name, ours)
        _unheard_threads.add(me)
    try:
        yield
    finally:
        with _unheard_lock:
            _unheard_threads.discard(me)
            if not _unheard_threads:
                for name, (own, ours) in list(_unheard_lists.items()):
                    if getattr(monitoring, name, None) is ours:  # JAX's own list back, with today's listeners
                        own[:] = list.__iter__(ours)
                        setattr(monitoring, name, own)
                _unheard_lists.clear()


def _dumps_of_its_own(jax) -> bool:
    """Whether the program has XLA or JAX dump their output somewhere."""
    if "--xla_dump" in os.environ.get("XLA_FLAGS", ""):
        return True
    try:
        return bool(jax.config.jax_dump_ir_to)
    except Exception:
        return False


def _int_or_none(v):
    try:
        return None if v is None else int(v)
    except (TypeError, ValueError):
        return None


def _layout(x) -> str:
    """An array on several devices: ``@[shard shape]xN`` (calls alternating
    between shardings of the same shapes run two executables); '' on one."""
    try:
        sharding = x.sharding
        n = len(sharding.device_set)
        return f"@[{','.join(map(str, sharding.shard_shape(tuple(x.shape))))}]x{n}" if n > 1 else ""
    except Exception:
        return ""
