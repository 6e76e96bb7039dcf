"""Out of memory in a jitted call: the failing call kept (``failed``, from
the probe as the call raises), and, at the end of the run, what fits,
compiled (``what_fits``, from Planner.run, within --verify-seconds).

At the failure (the call raised XLA's RESOURCE_EXHAUSTED, or MemoryError):
the function, the user's line that called it, the call's signature and its
arguments as ShapeDtypeStructs (plan.Abstract: shapes, dtypes, shardings),
the bytes live outside the call on its busiest device, and XLA's message,
written as an ``oom-call`` event (JSON) at once: a run killed later still
has them.

At the end: the failing signature compiled again with the plan's machinery
(whatif.compile_figures: a re-trace of the step's Python, shielded, or the
run's own trace where one was kept) at other batches, and the largest batch
whose peak (outside + XLA's call peak) fits the limit found by bisection
(plan.search): the limit is --plan-device-memory's where given, else what
XLA's message says is available (XLA:TPU's "available HBM"). A compile that
XLA itself refuses for memory counts as too large. Then the step with its
state donated and in bfloat16, at the failing batch, and each one's own
largest batch where the budget allows. Written as an ``oom-fit`` event.
"""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any

from jaxmemprof.capture.jit.frames import user_frame
from jaxmemprof.capture.tracebacks import described, is_out_of_memory, message
from jaxmemprof.capture.jit.compiles import compile_figures
from jaxmemprof.capture.jit.whatif import rejit
from jaxmemprof.facts.flow import UNKNOWN, batch_keys, flows
from jaxmemprof.facts.truepeak import peak_of
from jaxmemprof.xla.oom import read

# Names a batch argument goes by, where the calls' flow cannot tell it (the first call failed).
_BATCH_NAMES = ("batch", "x", "y", "inputs", "input", "tokens", "data", "images", "labels", "targets", "xs", "ys",
                "features", "obs", "observations", "ids", "input_ids")
# The compiles' budget at a failure where --verify-seconds is not given (a large step's XLA:TPU compile
# took 13 s on a v5e machine: about 4 searched batches and its fixes; a run's share is often less).
DEFAULT_S = 120.0
MAX_LEAVES_BATCH_ARG = 8  # an argument of more leaves is state (parameters, optimizer), not the batch


class Failure:
    __slots__ = ("state", "real", "abstract", "message", "call", "outside", "signature")

    def __init__(self, state, real, abstract, message, call, outside, signature):
        self.state, self.real, self.abstract = state, real, abstract
        self.message, self.call, self.outside, self.signature = message, call, outside, signature


def is_oom(exc: BaseException) -> bool:
    """XLA's RESOURCE_EXHAUSTED (a JaxRuntimeError; a ValueError where jaxlib's
    fast dispatch path raises it: seen for XLA:CPU's host failures), or
    Python's MemoryError."""
    if isinstance(exc, MemoryError):
        return True
    return is_out_of_memory(exc, ("RuntimeError", "ValueError"))


def failed(probe, state, exc, real, args, kwargs, inputs, abstract) -> None:
    """The probe's call of ``state``'s function raised ``exc``: where it is
    an out-of-memory, keep the call (the first such call of the run)."""
    planner = probe.planner
    if not is_oom(exc) or getattr(planner, "failure", None) is not None:
        return
    frame = user_frame(sys._getframe(2))
    signature = inputs[3] if inputs is not None else probe._signature(state, args, kwargs)
    if abstract is None and state.plan is not None:
        if inputs is None:
            inputs = probe._describe_inputs(state, args, kwargs) + (signature, None)
        abstract = planner.abstract(state, args, kwargs, inputs)
    text = described(exc) if isinstance(exc, MemoryError) else message(exc) or ""  # never the program's __str__
    live = probe.observer.live_bytes_by_device() if probe.observer is not None else None
    outside = None
    if live and abstract is not None:
        own = _argument_bytes(abstract)
        on = [d for d in live if d in abstract.devices] or list(live)
        outside = max(max(int(live[d]) - own, 0) for d in on)
    call = {"file": frame.f_code.co_filename if frame else "", "line": frame.f_lineno if frame else 0,
            "function": frame.f_code.co_name if frame else ""}
    planner.failure = Failure(state, real, abstract, text[:20000], call, outside, signature)
    probe.writer.add_event("oom-call", json.dumps({
        "function_id": state.function_id, "name": state.row.get("name"), "call": call, "signature": signature,
        "call_number": state.calls, "outside_bytes": outside, "devices": abstract.devices if abstract else None,
        "message": text[:20000]}))


def _argument_bytes(ab) -> int:
    """The arguments' bytes on one device (each array's shard)."""
    return sum(_leaf_bytes(x) for x in ab.flat)


def _leaf_bytes(x) -> int:
    shape = getattr(x, "shape", None)
    if shape is None:
        return 0
    try:
        shape = x.sharding.shard_shape(tuple(shape)) if x.sharding is not None else shape
    except Exception:
        pass
    n = 1
    for d in shape:
        n *= int(d)
    return n * int(getattr(x.dtype, "itemsize", 4))


def _batch(probe, failure, axis: int):
    """(batch, scaled flat positions, how): from the calls' flow where two
    calls were sampled, else the arguments of few leaves that share a size
    at ``axis`` (a parameter named like a batch first)."""
    state, ab = failure.state, failure.abstract
    calls = probe.writer.jit_sampled_calls(state.function_id)
    parsed = []
    for _, inputs, _, _, _ in calls:
        try:
            parsed.append(json.loads(inputs))
        except (TypeError, ValueError):
            pass
    flow = flows(parsed)
    shapes = {k: x for k, x in zip(ab.keys, ab.flat) if k is not None and len(getattr(x, "shape", ())) > axis}
    keys, how = batch_keys(flow, usable=lambda k: k in shapes)
    if not keys or all(v == UNKNOWN for v in flow.values()):
        by_arg: dict = {}
        for k in ab.keys:
            if k is not None:
                by_arg.setdefault((k[0], k[1]), []).append(k)
        small = {a: ks for a, ks in by_arg.items() if len(ks) <= MAX_LEAVES_BATCH_ARG and all(k in shapes for k in ks)}
        named = {a: ks for a, ks in small.items() if str(a[1]).lower() in _BATCH_NAMES}
        pick = named or {a: ks for a, ks in small.items() if a != min(by_arg, key=lambda a: str(a[0]))} or small
        keys, how = {k for ks in pick.values() for k in ks}, "guessed"
    if not keys:
        return None
    sizes: dict = {}
    for k in keys:
        x = shapes[k]
        sizes[x.shape[axis]] = sizes.get(x.shape[axis], 0) + _leaf_bytes(x)
    batch = max(sizes, key=lambda b: (sizes[b], b))
    scaled = [j for j, (k, x) in enumerate(zip(ab.keys, ab.flat)) if k in keys and x.shape[axis] == batch]
    return batch, scaled, how


def batch_multiple(ab, scaled, axis: int) -> int:
    """The batches a step is compiled at are multiples of this: a batch
    sharded over n devices splits into n equal shards (the plan's and the
    what-fits searches alike)."""
    multiple = 1
    for j in scaled:
        x = ab.flat[j]
        try:
            multiple = math.lcm(multiple, x.shape[axis] // x.sharding.shard_shape(tuple(x.shape))[axis])
        except Exception:
            pass
    return multiple


def what_fits(planner, budget_s: float, search, given: bool = True) -> None:
    """At the end of the run: the failing call's signature compiled at other
    batches, donated and in bfloat16, within ``budget_s`` seconds (at least
    DEFAULT_S where --verify-seconds was not ``given``; ``search``:
    plan.search, the bisection by compiles)."""
    failure = getattr(planner, "failure", None)
    if failure is None:
        return
    budget_s = budget_s if given else max(budget_s, DEFAULT_S)
    probe = planner.probe
    writer = probe.writer
    state, ab = failure.state, failure.abstract
    out = {"function_id": state.function_id, "name": state.row.get("name")}
    parsed = read(failure.message)
    options = planner.options
    if options is not None and options.fit_peak_bytes:
        limit, source = int(options.fit_peak_bytes), "--plan-device-memory"
    elif parsed is not None and parsed.available_bytes:
        limit, source = int(parsed.available_bytes), "XLA's available memory"
    elif parsed is not None and parsed.free_bytes is not None and ab is not None and failure.outside is not None:
        # At run time: what was live when the call failed (outside it, and its arguments) and what the
        # allocator said was still free. The call's own allocations before the failing one are not in it:
        # the device has at least this much, so a batch that fits under it fits.
        limit = int(failure.outside) + _argument_bytes(ab) + int(parsed.free_bytes)
        source = "the arrays live at the failure and the free memory XLA's message gives"
    else:
        limit, source = None, None
    real = planner.real_of(state) if state.plan is not None else None
    real = real if real is not None else failure.real
    why = ("its arguments were not kept (a function of a library's, or the probe off)" if ab is None else
           ("the message says no limit to fit under (run --plan-device-memory SIZE names one)"
            + (f"; its figures that are no size: {'; '.join(parsed.damaged)}" if parsed is not None and parsed.damaged
               else "")) if limit is None else
           "no time left for compiles (--verify-seconds)" if budget_s <= 0 else None)
    axis = options.axis if options is not None and options.axis is not None else (
        1 if state.row.get("wrapper") == "jax.pmap" else 0)
    told = None if why else _batch(probe, failure, axis)
    if why is None and told is None:
        why = f"no argument with a dimension {axis} could be told to be the batch"
    if why is not None or told is None:  # told None: why says so
        writer.add_event("oom-fit", json.dumps({**out, "error": why}))
        return
    batch, scaled, how = told  # search: plan.search (passed in: plan imports this module)
    outside = failure.outside or 0
    wrapper = state.row.get("wrapper") or "jax.jit"
    deadline = time.monotonic() + budget_s
    t0 = time.monotonic()
    refused = planner.retraces.refusal(state, real) if state.plan is not None and state.plan.abstract else None
    if refused is not None:
        writer.add_event("oom-fit", json.dumps({**out, "error": f"not compiled: {refused.reason}"}))
        return
    multiple = batch_multiple(ab, scaled, axis)
    names = sorted({f"{ab.keys[j][1]}" for j in scaled})
    out.update(batch=int(batch), axis=axis, batch_inputs=names, batch_told=how, limit_bytes=limit,
               limit_from=source, outside_bytes=outside, variants={})
    cut = []

    def variant(name, fn, narrow):
        points = {}

        def at(b):
            if time.monotonic() > deadline:
                cut.append(name)
                return None
            probe.progress(f"what fits: {state.row.get('name', state.function_id)} at batch {b}")
            fig, seconds, error, _ = compile_figures(probe._jax, fn, ab, scaled, axis, b, narrow, wrapper, None, True)
            if fig is None and (error is None or "RESOURCE_EXHAUSTED" not in str(error)):
                points[b] = [int(b), None, str(error)[:300]]
                return None
            fig_peak = peak_of(fig)  # None: no figures
            peak = math.inf if fig_peak is None else outside + fig_peak
            points[b] = [int(b), None if fig is None else int(peak), "refused by XLA for memory" if fig is None
                         else None, None if fig is None else int(fig[3] or 0)]
            return peak

        first = at(batch)
        row: dict[str, Any] = {"points": []}
        if first is not None:
            known = {batch: first}
            largest = batch if first <= limit else search(known, limit, at, multiple=multiple)
            above = [b for b, p in known.items() if p > limit and b > largest]
            row.update(largest=int(largest), next=int(min(above)) if above else None, fits_at_batch=first <= limit)
        row["points"] = [points[b] for b in sorted(points)]
        out["variants"][name] = row

    variant("recorded", real, False)
    donors = _donors(ab, scaled, state)
    if donors:
        fn = rejit(probe, state, real, donors, set())
        if isinstance(fn, str):
            out["variants"]["donated"] = {"error": fn}
        else:
            variant("donated", fn, False)
            out["variants"]["donated"]["argnums"] = sorted(donors)
    if any(hasattr(x, "shape") and str(x.dtype) == "float32" for x in ab.flat):
        variant("bfloat16", real, True)
    out["seconds"] = round(time.monotonic() - t0, 3)
    if cut:
        out["cut_short"] = sorted(set(cut))
    writer.add_event("oom-fit", json.dumps(out))


def _donors(ab, scaled, state) -> set:
    """The positional arguments that hold no batch input and are not
    donated already: the step's state, donated in the what-if."""
    batch_args = {ab.keys[j][0] for j in scaled}
    given = set(state.donate_argnums or [])
    return {k[0] for k in ab.keys if k is not None and isinstance(k[0], int) and k[0] not in batch_args
            and k[0] not in given}
