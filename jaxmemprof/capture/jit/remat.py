"""Rematerialisation as a compiled figure: at the end of the run, the step
compiled with one of the program's own functions wrapped in its library's
spelling of remat (jax.checkpoint, nnx.remat, eqx.filter_checkpoint:
libraries/), under each policy people use, and XLA's figures kept as
jit_whatif rows (change ``{"remat": {...}}``). The remat finding
(analysis/rules/inside_jit.py) reads them: its saving is the fall of the
run's true peak with the best of those compiles in place of the recorded
one, and where none lowers it there is no finding.

Which functions: a step whose forward-pass temporaries (XLA's ``jvp`` ops)
live at its peak hold ``REMAT_SHARE`` of it or more (the rule's own test,
on the journal's jit_buffers) is a candidate; the functions tried are the
program's own functions whose lines made the equations of the step's kept
trace (the run's jaxpr, retrace.Trace), the ones with most equations first,
the jitted function itself left out.

How: the function is swapped where the program finds it, a module global
(``block = jax.checkpoint(block)``) or a class attribute (``Block.__call__
= nnx.remat(Block.__call__)``); the step is re-traced through a new
function object (retrace.fresh), through rerun.py, and the
program is put back exactly as it was in a ``finally``. A lambda, a closure
over a local, or a function no name of its module holds cannot be swapped:
its row says why (not compiled)."""

from __future__ import annotations

import gc
import json
import re
import time
import types

from jaxmemprof.capture.jit.compiles import NOT_SEEN, compile_figures, weak_twins
from jaxmemprof.capture.library_roots import is_library
from jaxmemprof.capture.tracebacks import described

# The rule's own test (analysis/rules/inside_jit.py): forward-pass ops of a gradient live at the peak.
_FORWARD = re.compile(r"(?:^|/)jvp\(")
_BACKWARD = re.compile(r"transpose\(")
REMAT_SHARE = 0.25
# The policies tried, as the fix spells them (None: jax.checkpoint's default, nothing saveable).
POLICIES = ("nothing_saveable", "dots_saveable", "dots_with_no_batch_dims_saveable")
CANDIDATES = 2  # functions tried per step, at most
SIGNATURES = 1  # of a step's kept signatures, the largest ones (the others keep their recorded figures)


def _kept_share(writer, function_id: int, sig: str) -> float:
    """The share of the program's peak that forward-pass temporaries hold (jit_buffers at the peak)."""
    rows = writer._select("SELECT bytes, kind, op FROM jit_buffers WHERE function_id = ? AND signature = ? "
                          "AND at_peak = 1", (function_id, sig))
    peak = writer._select("SELECT peak_bytes FROM jit_programs WHERE function_id = ? AND signature = ? LIMIT 1",
                          (function_id, sig))
    if writer._select("SELECT 1 FROM jit_buffers WHERE function_id = ? AND signature = ? AND (op LIKE '%checkpoint%' "
                      "OR op LIKE '%remat%') LIMIT 1", (function_id, sig)):
        return 0.0  # it rematerialises already (the rule says nothing of it either)
    total = int(peak[0][0]) if peak and peak[0][0] else sum(int(b) for b, _, _ in rows)
    kept = sum(int(b) for b, kind, op in rows
               if kind == "temporary" and _FORWARD.search(str(op)) and not _BACKWARD.search(str(op)))
    return kept / total if total > 0 else 0.0


def _equations(jaxpr):
    """Every equation of a jaxpr and of the jaxprs in its equations' parameters."""
    stack = [jaxpr]
    seen = set()
    while stack:
        j = stack.pop()
        j = getattr(j, "jaxpr", j)  # a ClosedJaxpr's
        if id(j) in seen or not hasattr(j, "eqns"):
            continue
        seen.add(id(j))
        for eqn in j.eqns:
            yield eqn
            for v in eqn.params.values():
                for x in (v if isinstance(v, (tuple, list)) else (v,)):
                    if hasattr(x, "eqns") or hasattr(getattr(x, "jaxpr", None), "eqns"):
                        stack.append(x)


def _user_frames(eqn) -> list:
    tb = getattr(getattr(eqn, "source_info", None), "traceback", None)
    frames = getattr(tb, "frames", None) or ()
    return [(f.file_name, f.function_name, int(f.line_num)) for f in frames if not is_library(f.file_name)]


def candidates(trace, own_name: str) -> list[tuple]:
    """(file, function, line) of the program's functions whose lines made
    the step's equations, the innermost of each equation counted, most
    first; the jitted function (``own_name``) left out."""
    counts: dict = {}
    where: dict = {}
    for eqn in _equations(trace.jaxpr):
        frames = _user_frames(eqn)
        if not frames:
            continue
        file, name, line = frames[0]
        counts[(file, name)] = counts.get((file, name), 0) + 1
        where.setdefault((file, name), line)
    ranked = sorted(counts, key=lambda k: -counts[k])
    return [(f, n, where[(f, n)]) for f, n in ranked if n.split(".")[-1] != own_name]


def _lines(code) -> range:
    lines = [ln for _, _, ln in code.co_lines() if ln is not None] or [code.co_firstlineno]
    return range(min(lines + [code.co_firstlineno]), max(lines) + 1)


def find_function(file: str, name: str, line: int):
    """The function object whose code is at ``file``, named ``name``, holding ``line``; or None."""
    for obj in gc.get_objects():
        if type(obj) is types.FunctionType:
            code = obj.__code__
            if name in (code.co_name, getattr(code, "co_qualname", None)) and code.co_filename == file \
                    and line in _lines(code):
                return obj
    return None


def _holds(value, fn) -> bool:
    """Whether a class's attribute ``value`` is ``fn`` (or a wrapper of it)."""
    for _ in range(8):
        if value is fn:
            return True
        nxt = getattr(value, "__wrapped__", None) or getattr(value, "method", None) or getattr(value, "__func__", None)
        if nxt is None or nxt is value:
            return False
        value = nxt
    return False


class Place:
    """Where the program finds a function, and how to wrap it: ``swap(new)``
    and ``restore()``; ``spelling`` (libraries/), ``what`` (``block`` or
    ``Block.__call__``), ``how`` (module global, class attribute)."""

    def __init__(self, fn, owner, attr: str, spelling: str, wrap, how: str):
        self.fn, self.owner, self.attr, self.spelling, self.wrap, self.how = fn, owner, attr, spelling, wrap, how
        self.what = fn.__qualname__
        self._had = None
        self.made = None

    def swap(self, policy) -> None:
        new = self.wrap(self.fn, policy)
        self.made = new  # its ``static_argnums``, where the wrap made some (flax linen's)
        if self.how == "module global":
            self._had = self.owner[self.attr]
            self.owner[self.attr] = new
        else:
            self._had = self.owner.__dict__[self.attr]
            type.__setattr__(self.owner, self.attr, new)

    def restore(self) -> None:
        if self._had is None:
            return
        if self.how == "module global":
            self.owner[self.attr] = self._had
        else:
            type.__setattr__(self.owner, self.attr, self._had)
        self._had = None


def place_of(fn, libraries) -> Place | str:
    """Where ``fn`` can be swapped for its wrapped self (a Place), or why it cannot (a string)."""
    if fn.__name__ == "<lambda>":
        return "a lambda: no name of the program's holds it (make it a def to wrap it)"
    qual = fn.__qualname__
    if "<locals>" in qual:
        return f"a function defined inside {qual.split('.<locals>')[0]}: a closure over a local, no global holds it"
    parts = qual.split(".")
    if len(parts) == 1:
        if fn.__globals__.get(fn.__name__) is not fn:
            return f"its module's global {fn.__name__!r} no longer holds it"
        lib = _library_of(None, libraries)
        return Place(fn, fn.__globals__, fn.__name__, lib.remat_spelling, lib.remat, "module global")
    owner = fn.__globals__.get(parts[0])
    for p in parts[1:-1]:
        owner = getattr(owner, p, None)
    if not isinstance(owner, type) or not _holds(owner.__dict__.get(parts[-1]), fn):
        return f"no class of its module holds {qual}"
    lib = _library_of(owner, libraries)
    if lib is None:
        return f"{qual} is a method of a class no library's remat wraps"
    if isinstance(lib, str):
        return lib
    spelling, wrap = lib if isinstance(lib, tuple) else (lib.remat_spelling, lib.remat)
    return Place(fn, owner, parts[-1], spelling, wrap, "class attribute")


def _library_of(cls, libraries):
    """The library whose remat wraps a method of ``cls`` (or a plain function: ``cls`` None)."""
    for lib in libraries:
        which = lib.remats(cls)
        if which:  # True, (spelling, wrap) for a kind of its own (flax linen), or why not
            return which if isinstance(which, (str, tuple)) else lib
    return None


def verify_remats(planner, budget_s: float, deadline: float, largest_states, signatures, over_budget: str,
                  original_of) -> list:
    """jit_whatif rows for the steps whose kept activations fill a quarter of their peak."""
    from jaxmemprof.capture.jit.retrace import fresh
    from jaxmemprof.facts.libraries import LIBRARIES

    probe = planner.probe
    jax = probe._jax
    rows = []
    for state in largest_states(probe):
        slot = state.plan
        wrapper = state.row.get("wrapper") or "jax.jit"
        if not slot.abstract or wrapper == "jax.pmap":
            continue
        kept = signatures(slot)
        sigs = kept[:SIGNATURES]
        # and those that may lower to their program (a step's first call with a Python 0): lowered past them,
        # compiled only where they do not (seen)
        twins = [s for s in kept[SIGNATURES:] if any(weak_twins(slot.abstract[s], slot.abstract[t]) for t in sigs)]
        trace = slot.traces.get(sigs[0])
        if trace is None or _kept_share(probe.writer, state.function_id, sigs[0]) < REMAT_SHARE:
            continue
        real = planner.real_of(state)
        real_fun = getattr(real, "__wrapped__", None)
        original = original_of(state)
        own = str(state.row.get("name") or "")

        def row(sig, change, fig=None, seconds=0.0, error=None, state=state, slot=slot):
            rows.append((state.function_id, sig, json.dumps({"remat": change}), *(fig or (None,) * 5),
                         float(seconds), str(slot.abstract[sig].platform or ""), error))

        tried = 0
        seen: dict = {}  # module text -> compile: a policy that lowers as another did is not compiled again
        for file, name, line in candidates(trace, own)[:2 * CANDIDATES]:
            if tried >= CANDIDATES:
                break
            fn = find_function(file, name, line)
            if fn is None:
                continue
            place = place_of(fn, LIBRARIES)
            tried += not isinstance(place, str)
            where = {"function": fn.__qualname__, "file": file, "line": int(fn.__code__.co_firstlineno)}
            if isinstance(place, str):
                row(sigs[0], {**where, "policy": None, "spelling": None}, error=f"not compiled: {place}")
                continue
            where.update(spelling=place.spelling, how=place.how)
            refused = planner.retraces.refusal(state, real) if real is not None else None
            for policy in POLICIES:
                for sig in sigs + twins:
                    change = {**where, "policy": policy}
                    if real_fun is None or original is None:
                        row(sig, change, error="not compiled: the program dropped the jitted function before the end")
                        continue
                    if refused is not None:
                        row(sig, change, error=f"not compiled: {refused.reason}")
                        continue
                    if time.monotonic() > deadline:
                        row(sig, change, error=f"{over_budget} ({budget_s:g} s; run --verify-seconds)")
                        continue
                    pol = None if policy == "nothing_saveable" else getattr(jax.checkpoint_policies, policy)
                    try:
                        place.swap(pol)
                        jitted = original(fresh(real_fun), **slot.options)
                        planner.probe.progress(f"verifying remat in {state.row.get('name', state.function_id)}")
                        fig, seconds, error, _ = compile_figures(jax, jitted, slot.abstract[sig], wrapper=wrapper,
                                                                 retraced=True, seen=seen, lower_only=sig in twins)
                    except Exception as exc:  # the wrap itself refused (a library's check)
                        fig, seconds, error = None, 0.0, described(exc).splitlines()[0][:300]
                    finally:
                        place.restore()
                    static = getattr(place.made, "static_argnums", ())
                    if static:  # the fix as compiled: those arguments static
                        change["static_argnums"] = list(static)
                    planner.retraced.setdefault(state.function_id, set()).add("whatif")
                    reason = getattr(error, "reason", error)
                    if sig in twins and error == NOT_SEEN:  # counted as recorded, as before
                        reason = f"{reason}: not the program of the signature compiled (one a step)"
                    named = getattr(place.made, "by_keyword", ())
                    if error is not None and named:
                        reason = (f"{reason} ({', '.join(named)} passed by keyword, not an array: "
                                  f"{place.spelling}'s static_argnums makes positional arguments static only)")
                    row(sig, change, fig, seconds, None if error is None else f"not compiled: {reason}")
    return rows

