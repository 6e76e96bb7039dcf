"""What a change does to a recorded call, measured: the user's own jitted
function compiled, at the end of the run, from a recorded call's arguments
as ShapeDtypeStructs (no array allocated), with the change made, and XLA's
``memory_analysis()`` of that compile kept. One place for every "what if":
the plan compiles other batches and bfloat16 through ``compile_figures``;
the donation advice's arguments are compiled donated by
``verify_donations`` (jit_whatif), so that what the report says a donation
saves is the fall of the run's true peak with that compile in place of the
recorded one (analysis/advice/donation.py), not the donated bytes.

Cost: nothing during the run beyond keeping the sampled calls' abstract
arguments (plan.Planner); at the end, one compile per verified signature
(about what the program's own compile of it took), within a budget: a
share of the run's wall time (``VERIFY_SHARE``, at least ``VERIFY_MIN_S``)
or ``run --verify-seconds``. A signature past the budget is written with
the error ``OVER_BUDGET``; the report then says the figure is not verified.
"""

from __future__ import annotations

import contextlib
import json
import time
import warnings

from jaxmemprof.capture.jit.programs import _unseen_compile
from jaxmemprof.donors import Call, donors
from jaxmemprof.libraries import BY_NAME

VERIFY_SHARE = 0.1
VERIFY_MIN_S = 10.0
OVER_BUDGET = "not verified: over the compile budget"
VERIFY_MOST = 64  # functions whose sampled calls the donation rule reads at the end, at most
_FIELDS = ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes",
           "generated_code_size_in_bytes")


def compile_figures(jax, fn, ab, scaled=(), axis: int = 0, batch: int | None = None, narrow: bool = False,
                    wrapper: str = "jax.jit"):
    """XLA's figures for ``fn`` on the abstract arguments ``ab``
    (plan.Abstract), the ``scaled`` inputs' dimension ``axis`` set to
    ``batch``, every float32 argument as bfloat16 if ``narrow``:
    (figures or None, seconds, error or None, warnings)."""
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
    args, kwargs = jax.tree_util.tree_unflatten(ab.treedef, flat)
    args = list(args)
    for i, v in ab.static.items():
        args.insert(i, v)
    kwargs = {**kwargs, **ab.static_kw}
    t0 = time.monotonic()
    said = []
    try:
        with warnings.catch_warnings(record=True) as caught, _unseen_compile(jax), _lowering(fn, wrapper):
            warnings.simplefilter("always")
            ma = fn.lower(*args, **kwargs).compile().memory_analysis()
        said = [f"{w.category.__name__}: {w.message}"[:300] for w in caught][:3]
        if ma is None:
            return None, time.monotonic() - t0, "XLA gave no memory analysis", said
        return tuple(int(getattr(ma, f, 0) or 0) for f in _FIELDS), time.monotonic() - t0, None, said
    except Exception as exc:
        return None, time.monotonic() - t0, f"{type(exc).__name__}: {exc}".splitlines()[0][:500], said


def _lowering(fn, wrapper: str):
    lib = BY_NAME.get(wrapper)
    return lib.lowering(fn) if lib is not None else contextlib.nullcontext()


def rejit(probe, state, real, nums: set, names: set):
    """The function jitted anew as the program jitted it, with the arguments
    at ``nums`` and named ``names`` donated besides those it donates; or why
    that cannot be compiled from outside (a string)."""
    wrapper = state.row.get("wrapper") or "jax.jit"
    jit = BY_NAME[wrapper].rejit if wrapper in BY_NAME else None
    if jit is None:
        return f"{wrapper} decides donation inside its own call (its donate option); not compiled from outside"
    original = next((o for name, o, _ in probe._patched if name == state.plan.jit), None)
    real_fun = getattr(real, "__wrapped__", None)
    if original is None or real_fun is None:
        return "the jitted function's own function is not reachable"
    options = dict(state.plan.options)
    given_nums = options.get("donate_argnums")
    given_nums = [] if given_nums is None else [given_nums] if isinstance(given_nums, int) else list(given_nums)
    given_names = options.get("donate_argnames")
    given_names = [] if given_names is None else [given_names] if isinstance(given_names, str) else list(given_names)
    options["donate_argnums"] = tuple(sorted(set(given_nums) | set(nums)))
    if names or given_names:
        options["donate_argnames"] = tuple(sorted(set(given_names) | set(names)))
    return original(real_fun, **options)


def function_donors(writer, function_id: int) -> list:
    """The donation rule (donors.py) on the function's sampled calls in the journal."""
    calls = []
    for index, inputs, outputs, fates in writer.jit_call_leaves(function_id):
        leaves = [_list(inputs), _list(outputs)]
        fates = _list(fates, None)
        calls.append(Call([d for d in leaves[0] if isinstance(d, dict)],
                          [d for d in leaves[1] if isinstance(d, dict)], fates, index == 1))
    return donors(calls)


def donated_arguments(found) -> tuple[set, set]:
    """(positions, names) to add to the wrapper's donation for the donors ``found``."""
    return ({d.position for d in found if not d.keyword and isinstance(d.position, int)},
            {d.argument for d in found if d.keyword})


def verify_donations(planner, budget_s: float) -> None:
    """For each of the program's functions the donation rule names
    arguments of, while its abstract arguments are kept: each kept
    signature compiled with those arguments donated (jit_whatif rows)."""
    probe = planner.probe
    writer = probe.writer
    t0 = time.monotonic()
    rows = []
    # The functions with the largest call peaks (a program that jits a new function every step has thousands).
    states = sorted((s for s in probe._states if s.plan is not None), key=lambda s: -(s.plan.best or 0))[:VERIFY_MOST]
    for state in states:
        found = function_donors(writer, state.function_id)
        if not found:
            continue
        nums, names = donated_arguments(found)
        change = json.dumps({"donate": [d.argument for d in found], "argnums": sorted(nums),
                             "argnames": sorted(names)})
        slot = state.plan
        if not slot.abstract:  # its arguments' shapes were not kept: a function past the largest few
            rows.append((state.function_id, "", change, *(None,) * 5, 0.0, "",
                         "not verified: its arguments' shapes were not kept (only the functions with the 8 largest "
                         "call peaks keep them)"))
            continue
        real = planner.real_of(state)
        wrapper = state.row.get("wrapper") or "jax.jit"
        fn = rejit(probe, state, real, nums, names) if real is not None else \
            "the program dropped the jitted function before the end of the run"
        for sig in sorted(slot.abstract, key=lambda s: -(slot.peaks.get(s) or 0)):
            ab = slot.abstract[sig]
            if isinstance(fn, str):
                fig, seconds, error = None, 0.0, f"not verified: {fn}"
            elif time.monotonic() - t0 > budget_s:
                fig, seconds, error = None, 0.0, f"{OVER_BUDGET} ({budget_s:g} s; run --verify-seconds)"
            else:
                fig, seconds, error, _ = compile_figures(probe._jax, fn, ab, wrapper=wrapper)
                error = None if error is None else f"not verified: XLA's compile failed: {error}"
            rows.append((state.function_id, sig, change, *(fig or (None,) * 5), float(seconds),
                         str(ab.platform or ""), error))
    if rows:
        writer.add_jit_whatif(rows)


def _list(text, default=()):
    try:
        v = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        v = None
    return v if isinstance(v, list) else (list(default) if default is not None else None)
