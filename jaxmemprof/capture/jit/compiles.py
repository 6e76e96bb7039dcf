"""How a what-if is compiled (whatif.py decides which): the user's jitted
function lowered on a recorded call's abstract arguments (ShapeDtypeStructs,
nothing allocated), as the program made the call (``placed``), compiled as
a compile of jaxmemprof's own (programs.unseen_compile; on a TPU its
temporaries from the buffer assignment, xla/dump.compile_read), and XLA's
figures read. A lowering whose program was compiled already (``seen``: the
same text, programs.program_text) takes that compile's figures: a remat
policy that lowers as another did, a signature that differs from a compiled
one in weak types alone (``weak_twins``)."""

from __future__ import annotations

import contextlib
import time
import warnings

from jaxmemprof.capture.jit.programs import program_text, unseen_compile
from jaxmemprof.capture.jit.rerun import run_programs_python, unseen
from jaxmemprof.capture.jit.retrace import Refused
from jaxmemprof.capture.tracebacks import described
from jaxmemprof.facts.libraries import BY_NAME
from jaxmemprof.xla.dump import compile_read

_FIELDS = ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes",
           "generated_code_size_in_bytes")


def compile_figures(jax, fn, ab, scaled=(), axis: int = 0, batch: int | None = None, narrow: bool = False,
                    wrapper: str = "jax.jit", dump_to: str | None = None, retraced: bool = True,
                    seen: dict | None = None, lower_only: bool = False):
    """XLA's figures for ``fn`` on the abstract arguments ``ab``
    (plan.Abstract), the ``scaled`` inputs' dimension ``axis`` set to
    ``batch``, every float32 argument as bfloat16 if ``narrow``:
    (figures or None, seconds, error or None, warnings). ``retraced``:
    lowering ``fn`` traces the program's Python (else it replays the run's
    trace, retrace.replay): through rerun.run_programs_python, and a ``Refused``
    error where it raised. ``seen``, ``lower_only``: as ``compile_call``'s."""
    flat = list(ab.flat)
    if wrapper == "jax.pmap":  # pmap places its inputs itself: the arrays' own (pmap) shardings are refused
        flat = [jax.ShapeDtypeStruct(x.shape, x.dtype, weak_type=x.weak_type)
                if isinstance(x, jax.ShapeDtypeStruct) else x for x in flat]
    for j in scaled:
        x = flat[j]
        shape = list(x.shape)
        shape[axis] = batch
        flat[j] = jax.ShapeDtypeStruct(tuple(shape), x.dtype, sharding=x.sharding, weak_type=x.weak_type)
    if narrow:
        for j, x in enumerate(flat):
            if hasattr(x, "shape") and str(x.dtype) == "float32":
                flat[j] = jax.ShapeDtypeStruct(x.shape, jax.numpy.bfloat16, sharding=x.sharding,
                                               weak_type=x.weak_type)
    compiled, seconds, error, said = compile_abstract(jax, fn, ab, flat, wrapper, dump_to, retraced, seen, lower_only)
    return (compiled[0] if compiled else None), seconds, error, said


def arguments(jax, ab, flat: list) -> tuple[list, dict]:
    """The call's (args, kwargs) from the abstract arguments ``ab`` with
    ``flat`` as its dynamic leaves, the static ones put back."""
    args, kwargs = jax.tree_util.tree_unflatten(ab.treedef, flat)
    args = list(args)
    for i, v in ab.static.items():
        args.insert(i, v)
    return args, {**kwargs, **ab.static_kw}


def lower(fn, wrapper: str, args, kwargs):
    with lowering(fn, wrapper):
        return fn.lower(*args, **kwargs)


def compile_abstract(jax, fn, ab, flat: list, wrapper: str, dump_to: str | None = None, retraced: bool = True,
                     seen: dict | None = None, lower_only: bool = False):
    """``fn`` lowered and compiled on the abstract arguments ``ab`` with
    ``flat`` as its dynamic leaves: ((XLA's figures, the compiled
    executable) or None, seconds, error or None, warnings). ``dump_to``: a
    directory XLA dumps the compiled program to (its buffer assignment).
    ``retraced``: the lowering runs the program's Python (rerun.py). ``seen``, ``lower_only``: as
    ``compile_call``'s."""
    args, kwargs = arguments(jax, ab, placed(jax, flat))
    return compile_call(jax, fn, args, kwargs, wrapper, dump_to, retraced, seen, lower_only)


def placed(jax, flat: list) -> list:
    """The leaves ``flat`` with each array on one device made uncommitted
    (no sharding) where another spans several: jit refuses a committed
    array beside arrays on other devices, so the program's own call took it
    uncommitted (flax.nnx's optimizer step, a PRNG key made by default)
    and placed it beside the others, as the compile then does; committed,
    XLA's compile fails ("incompatible devices") where the program's did
    not."""
    def devices(x):
        return len(getattr(getattr(x, "sharding", None), "device_set", ()) or ())

    if not any(isinstance(x, jax.ShapeDtypeStruct) and devices(x) > 1 for x in flat):
        return flat
    return [jax.ShapeDtypeStruct(x.shape, x.dtype, weak_type=x.weak_type)
            if isinstance(x, jax.ShapeDtypeStruct) and devices(x) == 1 else x for x in flat]


def compile_call(jax, fn, args, kwargs, wrapper: str, dump_to: str | None = None, retraced: bool = True,
                 seen: dict | None = None, lower_only: bool = False):
    """``fn`` lowered and compiled on the call ``args``, ``kwargs`` (arrays abstract): as ``compile_abstract``. ``seen``
    (the caller's, kept between calls): a lowering whose module text was compiled before (docs/advice.md: remat's
    policies; a donation's signatures that differ in weak types alone) takes that compile's figures and
    executable; its seconds are the lowering's. ``lower_only``: nothing compiled, the error ``NOT_SEEN``
    where the lowering is not in ``seen``."""
    t0 = time.monotonic()
    said: list = []
    try:
        with warnings.catch_warnings(record=True) as caught, unseen_compile(jax):
            warnings.simplefilter("always")
            if retraced:
                lowered, refused = run_programs_python(unseen(jax, lower), fn, wrapper, args, kwargs)
                if refused is not None:
                    return None, time.monotonic() - t0, Refused(refused), said
            else:
                lowered = lower(fn, wrapper, args, kwargs)
            key = None if seen is None else _module_text(lowered, dump_to)
            if seen is not None and key in seen:
                return seen[key], time.monotonic() - t0, None, said
            if lower_only:
                return None, time.monotonic() - t0, NOT_SEEN, said
            # dumped into dump_to only (never the program's dump); on a TPU, its temporaries from the dump
            compiled, figures, note = compile_read(lowered, dump_to, _FIELDS)
        said = [f"{w.category.__name__}: {w.message}"[:300] for w in caught][:3] + note
        if figures is None:
            return None, time.monotonic() - t0, "XLA gave no memory analysis", said
        done = (figures, compiled)
        if seen is not None and key is not None:
            seen[key] = done
        return done, time.monotonic() - t0, None, said
    except Exception as exc:
        return None, time.monotonic() - t0, described(exc).splitlines()[0][:500], said


def _module_text(lowered, dump_to: str | None):
    """One compile's key: the module's text (programs.program_text) and ``dump_to``; None: no text."""
    text = program_text(lowered)
    return None if text is None else (text, dump_to)


def lowering(fn, wrapper: str):
    lib = BY_NAME.get(wrapper)
    return lib.lowering(fn) if lib is not None else contextlib.nullcontext()


NOT_SEEN = "lowered to a program not compiled yet"


def weak_twins(a, b) -> bool:
    """Whether two signatures' abstract arguments (plan.Abstract) differ in
    weak types alone: the same structure and static values, each array
    leaf of one shape, dtype and sharding, a Python scalar where the other
    has a 0-d array (a step count passed as ``0``, then as the int32 the
    step returned). JAX lowers such signatures to one program as often as
    not; the compile's text decides (``_donated``)."""
    if a.treedef != b.treedef or len(a.flat) != len(b.flat) or a.static.keys() != b.static.keys():
        return False
    try:
        if a.static != b.static or a.static_kw != b.static_kw:
            return False
    except Exception:  # a static value that cannot be compared
        return False
    for x, y in zip(a.flat, b.flat):
        sx, sy = getattr(x, "shape", None), getattr(y, "shape", None)
        if sx is None and sy is None:  # Python scalars, traced by their type (their values are not static)
            if type(x) is not type(y):
                return False
        elif sx is None or sy is None:
            scalar, shape = (x, sy) if sx is None else (y, sx)
            if shape != () or not isinstance(scalar, (bool, int, float, complex)):
                return False
        elif (sx, str(x.dtype), getattr(x, "sharding", None)) != (sy, str(y.dtype), getattr(y, "sharding", None)):
            return False
    return True
