"""The end-of-run compiles (the donation and sharding what-ifs, run --plan,
run --target) without a second run of the program's Python where that can be
helped, and through rerun.py where it cannot.

- **Replayed, not re-traced.** When the probe analyses a signature during the
  run it traces it through ``jit(...).trace()`` (the trace the program's own
  call then takes from JAX's cache, or took it from), and keeps that trace's
  jaxpr (``Trace``) beside the signature's abstract arguments (plan.Slot).
  A compile at the end at the same shapes and dtypes (a donation, a
  sharding, the step moved onto a TPU slice) jits ``replay``: a function of
  the same arguments that evaluates that jaxpr, under the program's own jit
  options. JAX then traces the jaxpr's equations, not the program's Python,
  and the program as it was during the run is what is compiled.
- **Re-traced, under rerun.py.** Another batch size, bfloat16 arguments,
  or a function whose trace was not kept (jax.pmap has no ``trace()``)
  needs the program's Python traced again. That runs only through
  rerun.run_programs_python: under a deadline, in a thread of ours, its
  output dropped, what it raises contained, its writes, threads and
  processes refused, nothing of it left running (rerun.py says how).
- **Changed programs.** A re-trace reads the program's globals as they are
  at the end (a ``TRAINING`` flag the program cleared): ``Retraces.changed``
  traces the step once more (rerun.py), at the run's own signature, through a
  new function object (so JAX's trace cache does not answer for it) and
  compares the jaxpr's fingerprint with the run's own trace's; where they
  differ, figures that would come from re-traces are not given, and the
  run says why.
"""

from __future__ import annotations

import functools
import hashlib

RETRACED = ("compiled from a re-trace of the program's Python at the end of the run (its output discarded; "
            "docs/plan.md, re-traces)")
CHANGED = ("not given: the program's Python, re-traced at the end of the run at the run's own shapes, traced "
           "a different program than during the run (a global it reads changed: its figures would be of "
           "another program)")


class Refused(str):
    """Why a figure that needs a re-trace is not given: its text ("not
    given: WHY"), and ``reason`` (WHY)."""

    @property
    def reason(self) -> str:
        return self[len("not given: "):] if self.startswith("not given: ") else str(self)


class Trace:
    """The jaxpr JAX traced for one signature during the run, and its
    output tree: what ``replay`` evaluates."""

    __slots__ = ("jaxpr", "out_tree", "const_bytes", "peak", "_fingerprint")

    def __init__(self, jaxpr, out_tree):
        self.jaxpr, self.out_tree = jaxpr, out_tree
        self.peak = None  # XLA's call peak of its signature, once compiled (which traces a function keeps)
        # the bytes of its constants (arrays a closure captured): kept alive with it
        self.const_bytes = sum(int(getattr(c, "nbytes", 0) or 0) for c in getattr(jaxpr, "consts", ()) or ())
        self._fingerprint = None

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = fingerprint(self.jaxpr)
        return self._fingerprint


def traced(real, args, kwargs):
    """``real`` traced on the call's arguments: (its lowering, Trace or None).
    With ``trace()`` (jax.jit's), the lowering of that trace (what
    ``lower()`` does), and the jaxpr kept; otherwise ``lower()`` alone."""
    trace = getattr(real, "trace", None)
    if trace is None:
        return real.lower(*args, **kwargs), None
    t = trace(*args, **kwargs)
    kept = None
    try:
        kept = Trace(t.jaxpr, t.out_tree)
    except Exception:
        kept = None
    return t.lower(), kept


def fingerprint(closed) -> str:
    """A digest of a closed jaxpr: its text (equations, shapes, literals)
    and its constants' shapes and dtypes, with the bytes of those up to
    64 KiB."""
    h = hashlib.sha256(str(closed).encode())
    for c in getattr(closed, "consts", ()) or ():
        shape, dtype = getattr(c, "shape", None), getattr(c, "dtype", None)
        h.update(repr((shape, str(dtype))).encode())
        try:
            nbytes = int(getattr(c, "nbytes", 1 << 30))
            if nbytes <= 65536:
                import numpy as np

                h.update(np.asarray(c).tobytes())
        except Exception:
            pass
    return h.hexdigest()


def _jaxpr_as_fun(jax):
    ext = getattr(getattr(jax, "extend", None), "core", None)
    fun = getattr(ext, "jaxpr_as_fun", None)
    if fun is None:
        from jax._src.core import jaxpr_as_fun  # an older JAX
        fun = jaxpr_as_fun
    return fun


def replay(jax, real_fun, trace: Trace, dynamic):
    """A function with ``real_fun``'s name and parameters that evaluates the
    run's jaxpr on its dynamic arguments (``dynamic(args, kwargs)``: the
    call's arguments without the static ones, as jit traced them)."""
    as_fun = _jaxpr_as_fun(jax)(trace.jaxpr)
    out_tree = trace.out_tree
    tu = jax.tree_util

    def replayed(*args, **kwargs):
        return tu.tree_unflatten(out_tree, as_fun(*tu.tree_leaves(dynamic(args, kwargs))))

    functools.update_wrapper(replayed, real_fun)
    return replayed


def fresh(real_fun):
    """A new function object calling ``real_fun`` (its name and parameters):
    JAX's trace cache, keyed by the function, does not answer for it, so
    tracing it runs the program's Python."""

    def again(*args, **kwargs):
        return real_fun(*args, **kwargs)

    functools.update_wrapper(again, real_fun)
    return again
