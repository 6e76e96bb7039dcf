"""What a change does to a recorded call, measured: the user's own jitted
function compiled, at the end of the run, from a recorded call's arguments
as ShapeDtypeStructs (no array allocated), with the change made, and XLA's
``memory_analysis()`` of that compile kept. One place for every "what if":
the plan compiles other batches and bfloat16 through ``compile_figures``;
the donation advice's arguments are compiled donated by
``verify_donations`` (at each kept signature, and at each signature compiled
that no sampled call ran, from a kept one's arguments with its shapes:
unsampled.py), and the replicated inputs the sharding advice names
are compiled sharded by ``verify_shardings``, with the jitted functions that
made them whole compiled returning them sharded (``_makers``: the fix makes
them sharded where they are created), and the step with a function of the
program wrapped in remat by remat.py (all jit_whatif rows), so that
what the report says a fix saves is the fall of the run's true peak with
that compile in place of the recorded one (analysis/advice/donation.py and
sharding.py), not the bytes a rule expects.

Cost: nothing during the run beyond keeping the sampled calls' abstract
arguments (plan.Planner); at the end, one compile per verified signature
(about what the program's own compile of it took), within a budget: a
share of the run's wall time (``VERIFY_SHARE``, at least ``VERIFY_MIN_S``)
or ``run --verify-seconds``, spent on the donations and shardings in order
of what each could take off the run's true peak, largest first (budget.py).
A signature past the budget is written with the error ``OVER_BUDGET``; the
report then says the figure is not verified.

How each is compiled (as the program made the call, and once per program:
a signature that lowers to a program compiled already takes its figures)
is compiles.py's.
"""

from __future__ import annotations

import functools
import json
import time

from jaxmemprof.capture.jit.budget import DONATE, SHARD, Job, donation_bound, in_order, rooms
from jaxmemprof.capture.jit.compiles import (NOT_SEEN, arguments, compile_abstract, compile_call, compile_figures,
                                             lowering, placed, weak_twins)
from jaxmemprof.capture.jit.programs import unseen_compile
from jaxmemprof.capture.jit.remat import verify_remats
from jaxmemprof.capture.jit.rerun import run_programs_python
from jaxmemprof.capture.jit.retrace import CHANGED, RETRACED, Refused, fingerprint, fresh, replay
from jaxmemprof.capture.jit.unsampled import SIZES_DIFFER, template_for
from jaxmemprof.facts.donors import Call, donors
from jaxmemprof.facts.donors import arguments as array_arguments
from jaxmemprof.facts.replicas import candidate, meshes_of, saving, shard_options, spec
from jaxmemprof.facts.libraries import BY_NAME
from jaxmemprof.facts.truepeak import peak_of
from jaxmemprof.units import array_bytes
from jaxmemprof.capture.tracebacks import described

VERIFY_SHARE = 0.1
VERIFY_MIN_S = 10.0
OVER_BUDGET = "not verified: over the compile budget"
VERIFY_MOST = 64  # functions whose sampled calls the donation rule reads at the end, at most
def rejit(probe, state, real, nums: set, names: set, trace=None):
    """The function jitted anew as the program jitted it, with the arguments
    at ``nums`` and named ``names`` donated besides those it donates; or why
    that cannot be compiled from outside (a string). With ``trace`` (the
    run's, retrace.Trace), the function jitted is its replay: lowering it
    runs none of the program's Python."""
    wrapper = state.row.get("wrapper") or "jax.jit"
    jit = BY_NAME[wrapper].rejit if wrapper in BY_NAME else None
    if jit is None and (nums or names):
        return f"{wrapper} decides donation inside its own call (its donate option); not compiled from outside"
    own = _own_function(probe, state, real, trace)
    if isinstance(own, str):
        return own
    original, real_fun = own
    options = dict(state.plan.options)
    if not nums and not names:
        return original(real_fun, **options)
    given_nums = options.get("donate_argnums")
    given_nums = [] if given_nums is None else [given_nums] if isinstance(given_nums, int) else list(given_nums)
    given_names = options.get("donate_argnames")
    given_names = [] if given_names is None else [given_names] if isinstance(given_names, str) else list(given_names)
    options["donate_argnums"] = tuple(sorted(set(given_nums) | set(nums)))
    if names or given_names:
        options["donate_argnames"] = tuple(sorted(set(given_names) | set(names)))
    return original(real_fun, **options)


class Retraces:
    """Whether the program's Python, traced again at the end of the run,
    still traces the run's program: once per function, at its largest kept
    signature, through a new function object (retrace.fresh: JAX's trace
    cache does not answer), through rerun.py, its jaxpr's fingerprint against the
    run's own trace's. ``refusal`` is None where a re-trace may be used, else
    why not (retrace.Refused); ``note`` what a function's figures from
    re-traces are (for the run's events)."""

    def __init__(self, probe):
        self.probe = probe
        self.checked: dict = {}  # function_id -> None or Refused
        self.unchecked: set = set()  # function_ids with no run's trace to compare with (jax.pmap's)

    def refusal(self, state, real):
        fid = state.function_id
        if fid not in self.checked:
            self.checked[fid] = self._check(state, real)
        return self.checked[fid]

    def _check(self, state, real):
        probe, slot = self.probe, state.plan
        sig = max(slot.abstract, key=lambda s: slot.peaks.get(s) or -1) if slot.abstract else None
        trace = slot.traces.get(sig) if sig is not None else None
        original = next((o for name, o, _ in probe._patched if name == state.plan.jit), None)
        real_fun = getattr(real, "__wrapped__", None)
        if trace is None or original is None or real_fun is None:
            self.unchecked.add(state.function_id)
            return None
        wrapper = state.row.get("wrapper") or "jax.jit"
        jitted = original(fresh(real_fun), **slot.options)
        ab = slot.abstract[sig]
        args, kwargs = arguments(probe._jax, ab, placed(probe._jax, list(ab.flat)))

        def again():
            with lowering(jitted, wrapper), unseen_compile(probe._jax):
                return jitted.trace(*args, **kwargs)

        t, why = run_programs_python(again)
        if why is not None:
            return Refused(why)
        try:
            same = fingerprint(t.jaxpr) == trace.fingerprint()
        except Exception:
            self.unchecked.add(state.function_id)
            return None
        return None if same else Refused(CHANGED)

    def note(self, state) -> str:
        """How the figures from re-traces of ``state``'s function were checked (for an event)."""
        if self.checked.get(state.function_id) is not None:
            return f"not given: {self.checked[state.function_id].reason}"
        if state.function_id in self.unchecked:
            return (f"{RETRACED}; not checked against the run's own trace (none was kept for it): a global "
                    f"the program changed since would not be seen")
        return f"{RETRACED}; the re-trace at the run's own shapes traced the run's program"


def function_donors(writer, function_id: int) -> list:
    """The donation rule (donors.py) on the function's sampled calls in the journal."""
    return donors(_calls(writer.jit_call_leaves(function_id)))


def _calls(rows) -> list:
    """(call_index, inputs, outputs, inputs_alive) journal rows as donors.Call."""
    calls = []
    for index, inputs, outputs, fates in rows:
        leaves = [_list(inputs), _list(outputs)]
        fates = _list(fates, None)
        calls.append(Call([d for d in leaves[0] if isinstance(d, dict)],
                          [d for d in leaves[1] if isinstance(d, dict)], fates, index == 1))
    return calls


def _own_fix(writer, state, lib, found) -> dict:
    """The fix of a wrapper that donates by an option of its own, as the
    advice prints it (its library's ``donation`` on the other array
    arguments of every sampled call, donors.arguments)."""
    fates = {index: alive for index, _, _, alive in writer.jit_call_leaves(state.function_id)}
    rows = [(index, inputs, outputs, fates.get(index))
            for index, inputs, outputs, _, _ in writer.jit_sampled_calls(state.function_id)]
    chosen = {d.argument for d in found}
    return lib.donation([o for o in array_arguments(_calls(rows)) if o[0] not in chosen])


def _own_function(probe, state, real, trace):
    """(the jit the program used, the jitted function's own function: with
    ``trace``, the run's jaxpr evaluated, no Python of the program's run),
    or why not (a string)."""
    original = next((o for name, o, _ in probe._patched if name == state.plan.jit), None)
    real_fun = getattr(real, "__wrapped__", None)
    if original is None or real_fun is None:
        return "the jitted function's own function is not reachable"
    if trace is not None:
        real_fun = replay(probe._jax, real_fun, trace, lambda args, kwargs: probe._dynamic(state, args, kwargs))
    return original, real_fun


def own_donation(probe, state, real, lib, facts, ab, trace=None):
    """The wrapper's fix (``facts``) compiled as the wrapper makes it
    (its library's ``donated_call``): (jitted function, args, kwargs), or
    why not (a string). With ``trace``, the function evaluates the run's
    jaxpr (no Python of the program's run)."""
    own = _own_function(probe, state, real, trace)
    if isinstance(own, str):
        return own
    original, real_fun = own
    args, kwargs = arguments(probe._jax, ab, placed(probe._jax, list(ab.flat)))
    try:
        fixed, args, kwargs = lib.donated_call(real_fun, args, kwargs, list(state.param_names or ()), facts)
    except Exception as exc:
        return f"the fix could not be made: {described(exc)}"[:500]
    return original(fixed, **dict(state.plan.options)), args, kwargs


def donated_arguments(found) -> tuple[set, set]:
    """(positions, names) to add to the wrapper's donation for the donors ``found``."""
    return ({d.position for d in found if not d.keyword and isinstance(d.position, int)},
            {d.argument for d in found if d.keyword})


def _largest_states(probe) -> list:
    """The functions with the largest call peaks (a program that jits a new function every step has thousands)."""
    return sorted((s for s in probe._states if s.plan is not None), key=lambda s: -(s.plan.best or 0))[:VERIFY_MOST]


def _signatures(slot) -> list:
    """The kept signatures, largest call peak with the most live before a call of it first (the
    run's true peak: a step whose first call, with a Python int, ran beside less than its later ones)."""
    return sorted(slot.abstract, key=lambda s: -((slot.peaks.get(s) or 0) + slot.live.get(s, 0)))


def verify(planner, budget_s: float) -> None:
    """The advice's changes compiled at the end of the run (jit_whatif rows),
    within ``budget_s`` seconds: donations (``donation_jobs``) and shardings
    (``sharding_jobs``) in order of what each could take off the run's true
    peak, largest first (budget.py), then remat (remat.py)."""
    deadline = time.monotonic() + budget_s
    probe = planner.probe
    states = _largest_states(probe)
    room = rooms(probe.writer, [s.function_id for s in states])
    rows = in_order(donation_jobs(planner, states, room, budget_s, deadline)
                    + sharding_jobs(planner, states, budget_s, deadline))
    rows += verify_remats(planner, budget_s, deadline, _largest_states, _signatures, OVER_BUDGET,
                          lambda state: next((o for name, o, _ in probe._patched if name == state.plan.jit), None))
    if rows:
        planner.probe.writer.add_jit_whatif(rows)
    for state in _largest_states(planner.probe):
        if "whatif" in planner.retraced.get(state.function_id, ()):  # no trace of the run's kept (jax.pmap)
            name = state.row.get("name", state.function_id)
            planner.probe.writer.add_event("whatif", f"{name}: {planner.retraces.note(state)}"[:2000])


def donation_jobs(planner, states: list, room: dict, budget_s: float, deadline: float) -> list[Job]:
    """For each of the functions ``states`` whose arguments the donation
    rule names: a job (``_donate``) whose bound is what donating them could
    take off the run's true peak (budget.donation_bound, within its
    function's ``room``)."""
    probe = planner.probe
    writer = probe.writer
    jobs = []
    for place, state in enumerate(states):
        found = function_donors(writer, state.function_id)
        if not found:
            continue
        nums, names = donated_arguments(found)
        change = json.dumps({"donate": [d.argument for d in found], "argnums": sorted(nums),
                             "argnames": sorted(names)})
        bound = donation_bound(found, room.get(state.function_id))
        if not state.plan.abstract:  # its arguments' shapes were not kept: a function past the largest few
            row = (state.function_id, "", change, *(None,) * 5, 0.0, "", NOT_KEPT)
            jobs.append(Job(bound, DONATE, place, lambda row=row: [row]))
            continue
        real = planner.real_of(state)
        wrapper = state.row.get("wrapper") or "jax.jit"
        lib = BY_NAME.get(wrapper)
        own = lib if lib is not None and lib.rejit is None and lib.donated_call is not None else None
        facts = None
        if own is not None:  # the wrapper's own option: its fix as the advice prints it
            facts = _own_fix(writer, state, own, found)
            change = json.dumps({**json.loads(change), "option": facts.get("option"),
                                 "pass_first": facts.get("pass_first") or []})
        donation = (real, nums, names, own, facts, change)
        jobs.append(Job(bound, DONATE, place, functools.partial(_donate, planner, state, donation, budget_s,
                                                                  deadline)))
    return jobs


def _donate(planner, state, donation, budget_s: float, deadline: float) -> list:
    """The function's kept signatures compiled with ``donation`` (jit_whatif
    rows), largest call peak first; then, where one compiled, the
    signatures it compiled that no kept call ran (``_unsampled``)."""
    slot = state.plan
    rows, ok = [], False
    _, nums, names, own, *_ = donation
    # the donated lowerings compiled (beside the program too): a signature that lowers to one of them is that compile
    seen: dict = planner.probe.early.lowerings(state.function_id, nums, names) if own is None else {}
    compiled: list = []  # the abstract arguments of the signatures compiled
    for sig in _signatures(slot):
        ab = slot.abstract[sig]
        twin = any(weak_twins(ab, other) for other in compiled)
        fig, seconds, error = _donated(planner, state, donation, sig, ab, slot.traces.get(sig), budget_s,
                                       deadline, early=True, seen=seen, twin=twin)
        if error is None:
            compiled.append(ab)
        ok = ok or error is None
        rows.append((state.function_id, sig, donation[-1], *(fig or (None,) * 5), float(seconds),
                     str(ab.platform or ""), error))
    return rows + (_unsampled(planner, [(state, donation)], budget_s, deadline) if ok else [])


def _donated(planner, state, donation, sig: str, ab, trace, budget_s: float, deadline: float, early=False,
             seen: dict | None = None, twin: bool = False):
    """One signature of ``state``'s function compiled with ``donation``
    ((the jitted function, argnums, argnames, the wrapper's own library or
    None, its fix's facts, the change's JSON)), from its abstract arguments
    ``ab``, replaying the run's ``trace`` where kept (else a
    re-trace): (figures or None, seconds, error or None). ``early``: the
    compile made beside the program (early.py) stands in where it was made.
    ``seen``: as ``compile_call``'s; ``twin``: the signature differs from
    one compiled in ``seen`` only in weak types (``weak_twins``): past the
    budget it is still lowered, and where it lowers to a program compiled
    (the same text), that compile's figures are its own."""
    probe = planner.probe
    real, nums, names, own, facts, _ = donation
    wrapper = state.row.get("wrapper") or "jax.jit"
    done = probe.early.donation(state.function_id, sig, nums, names) \
        if early and trace is not None and own is None else None
    call = None
    if real is None:
        fn = DROPPED
    elif own is not None:
        fn = own_donation(probe, state, real, own, facts, ab, trace)
        if not isinstance(fn, str):
            fn, *call = fn
    else:
        fn = rejit(probe, state, real, nums, names, trace)
    refused = None if trace is not None or isinstance(fn, str) else planner.retraces.refusal(state, real)
    if done is not None:  # compiled beside the program (early.py), as it would be now
        return done[0], done[1], None
    if isinstance(fn, str):
        return None, 0.0, f"not verified: {fn}"
    if refused is not None:
        return None, 0.0, f"not verified: {refused.reason}"
    over = time.monotonic() > deadline
    if over and not (twin and seen):
        return None, 0.0, f"{OVER_BUDGET} ({budget_s:g} s; run --verify-seconds)"
    probe.progress(f"verifying the donation of {state.row.get('name', state.function_id)}")
    if call:  # the wrapper's fix: its own call of jax.jit's function
        compiled, seconds, error, _ = compile_call(probe._jax, fn, *call, "jax.jit", retraced=trace is None,
                                                   seen=seen, lower_only=over)
        fig = compiled[0] if compiled else None
    else:
        fig, seconds, error, _ = compile_figures(probe._jax, fn, ab, wrapper=wrapper, retraced=trace is None,
                                                 seen=seen, lower_only=over)
    if error == NOT_SEEN:
        return None, seconds, f"{OVER_BUDGET} ({budget_s:g} s; run --verify-seconds)"
    if trace is None:
        planner.retraced.setdefault(state.function_id, set()).add("whatif")
    return fig, seconds, None if error is None else f"not verified: {_failed(error)}"


def _unsampled(planner, verified: list, budget_s: float, deadline: float) -> list:
    """The signatures that the functions ``verified`` compiled and no kept
    call ran (the leftover batch at each epoch's end), each compiled with the
    same donation from a kept signature's arguments with its shapes
    (unsampled.py), largest recorded call peak first across the functions
    (the one a missing figure would leave at the true peak goes first, in
    the budget): jit_whatif rows, whose error says why a signature was not
    (its text starts "not verified: not sampled" where its arguments could
    not be made)."""
    writer = planner.probe.writer
    jax = planner.probe._jax
    todo = [(peak_of(r[1:]) or 0, n, state, donation, r) for n, (state, donation) in enumerate(verified)
            for r in writer.jit_compiled_signatures(state.function_id) if r[0] not in state.plan.abstract]
    out = []
    for _, _, state, donation, (sig, *recorded) in sorted(todo, key=lambda t: (-t[0], t[1])):
        slot, change = state.plan, donation[-1]
        trace = slot.traces.get(sig)
        made = template_for(jax, slot, sig, trace)
        if isinstance(made, str):
            out.append((state.function_id, sig, change, *(None,) * 5, 0.0, "", made))
            continue
        _, ab = made
        fig, seconds, error = _donated(planner, state, donation, sig, ab, trace, budget_s, deadline)
        made_sizes = tuple(fig[:2]) if fig else None
        if made_sizes and error is None and None not in recorded[:2] and made_sizes != tuple(recorded[:2]):
            fig, error = None, (f"{SIZES_DIFFER} (arguments and outputs {made_sizes} bytes, against "
                                f"{tuple(recorded[:2])})")
        out.append((state.function_id, sig, change, *(fig or (None,) * 5), float(seconds),
                    str(ab.platform or ""), error))
    return out


NOT_KEPT = ("not verified: its arguments' shapes were not kept (only the functions with the 8 largest call peaks "
            "keep them)")
DROPPED = "the program dropped the jitted function before the end of the run"
COMPILE_FAILED = "XLA's compile failed"
SHARD_TRIES = 2  # the arrays' best dimensions, then their next best: a mesh with explicit axes refuses some


def _to_shard(jax, flat: list) -> list[tuple]:
    """(index in ``flat``, its options (shard_options), its mesh
    objects) for each replicated input that the rule (replicas.py) would
    shard."""
    named = jax.sharding.NamedSharding
    meshes, objects = [], []
    for x in flat:
        s = getattr(x, "sharding", None)
        if isinstance(s, named) and dict(s.mesh.shape) not in meshes:
            meshes.append(dict(s.mesh.shape))
            objects.append(s.mesh)
    out = []
    for j, x in enumerate(flat):
        s = getattr(x, "sharding", None)
        if not isinstance(s, named) or not isinstance(x, jax.ShapeDtypeStruct):
            continue
        per_device = array_bytes(x.shape, x.dtype)
        if not candidate(x.shape, per_device, len(s.device_set), s.is_fully_replicated):
            continue
        mine = meshes_of(dict(s.mesh.shape), meshes)
        mesh_objects = [s.mesh] + [o for o, m in zip(objects, meshes) if m != dict(s.mesh.shape)]
        options = shard_options(list(x.shape), mine)
        if options:
            out.append((j, options, mesh_objects))
    return out


def sharding_jobs(planner, states: list, budget_s: float, deadline: float) -> list[Job]:
    """For each of the functions ``states`` whose kept signatures have
    replicated inputs the sharding rule (replicas.py) would shard: a job
    (``_shard``) whose bound is the bytes sharding them takes off each
    device (replicas.saving, its signature that saves most)."""
    jax = planner.probe._jax
    jobs = []
    for place, state in enumerate(states):
        slot = state.plan
        if not slot.abstract or (state.row.get("wrapper") or "jax.jit") == "jax.pmap":
            continue
        chosen = {sig: c for sig in _signatures(slot) if (c := _to_shard(jax, list(slot.abstract[sig].flat)))}
        if not chosen:
            continue
        bound = max(sum(saving(array_bytes(x.shape, x.dtype), options[0][2])
                        for j, options, _ in c for x in (slot.abstract[sig].flat[j],)) for sig, c in chosen.items())
        jobs.append(Job(bound, SHARD, place, functools.partial(_shard, planner, state, chosen, budget_s,
                                                                     deadline)))
    return jobs


def _shard(planner, state, by_sig: dict, budget_s: float, deadline: float) -> list:
    """Each of the function's kept signatures (``by_sig``: signature -> its
    inputs to shard, ``_to_shard``) compiled with them sharded as the
    finding prints (jit_whatif rows whose change is ``{"shard": [...],
    "gathered": [...]}``), largest call peak first. The compile's outputs
    tell whether the step keeps them sharded: an output of a sharded
    input's shape and dtype that comes back whole on every device (a
    ``with_sharding_constraint`` or ``filter_shard`` inside the step) is
    ``gathered``: the next call would hold it whole again. Where it keeps
    them sharded, the functions that made them (``_makers``)."""
    probe = planner.probe
    jax = probe._jax
    slot = state.plan
    wrapper = state.row.get("wrapper") or "jax.jit"
    real = planner.real_of(state)
    rows = []
    for sig, chosen in by_sig.items():
        ab = slot.abstract[sig]
        flat = list(ab.flat)
        error, fig, seconds, change = None, None, 0.0, {}
        for attempt in range(SHARD_TRIES):
            shard, variant = [], list(flat)
            for j, options, mesh_objects in chosen:
                m, axis, size, dim = options[min(attempt, len(options) - 1)]
                x = flat[j]
                parts = [None] * len(x.shape)
                parts[dim] = axis
                variant[j] = jax.ShapeDtypeStruct(
                    x.shape, x.dtype, weak_type=x.weak_type,
                    sharding=jax.sharding.NamedSharding(mesh_objects[m], jax.sharding.PartitionSpec(*parts)))
                key = ab.keys[j] if j < len(ab.keys) else None
                shard.append({"leaf": list(key) if key else None, "shape": list(x.shape), "dtype": str(x.dtype),
                              "axis": str(axis), "axis_size": int(size), "dim": int(dim),
                              "spec": spec(len(x.shape), dim, str(axis))})
            change = {"shard": shard, "gathered": []}
            if real is None:
                error = f"not verified: {DROPPED}"
                break
            if time.monotonic() > deadline:
                error = f"{OVER_BUDGET} ({budget_s:g} s; run --verify-seconds)"
                break
            trace = slot.traces.get(sig)  # the run's own: replayed, no Python of the program's run again
            fn = rejit(probe, state, real, set(), set(), trace) if trace is not None else real
            refused = None if trace is not None else planner.retraces.refusal(state, real)
            if isinstance(fn, str) or refused is not None:
                error = f"not verified: {fn if isinstance(fn, str) else refused.reason}"
                break
            probe.progress(f"verifying the sharding of {state.row.get('name', state.function_id)}")
            done, took, failed, _ = compile_abstract(jax, fn, ab, variant, wrapper, retraced=trace is None)
            seconds += took
            if trace is None:
                planner.retraced.setdefault(state.function_id, set()).add("whatif")
            if done is None:
                error = f"not verified: {_failed(failed)}"
                if isinstance(failed, Refused):
                    break
                continue
            fig, compiled = done
            change["gathered"] = _gathered(jax, compiled, shard)
            error = None
            break
        rows.append((state.function_id, sig, json.dumps(change), *(fig or (None,) * 5), float(seconds),
                     str(ab.platform or ""), error))
        if fig is not None and not change["gathered"] and error is None:
            made = {(tuple(a["shape"]), a["dtype"]): (a, mesh_objects[options[min(attempt, len(options) - 1)][0]])
                    for a, (j, options, mesh_objects) in zip(shard, chosen)}
            rows += _makers(planner, state, made, budget_s, deadline)
    return rows


def _makers(planner, step, made: dict, budget_s: float, deadline: float) -> list:
    """The program's jitted functions that made the step's replicated
    inputs (a sampled call's output is the very array a call of the step
    took), each compiled with those outputs sharded as the finding prints
    (``jax.jit(init, out_shardings=...)``): jit_whatif rows whose change is
    ``{"shard_out": [...], "for": the step's function_id}``. Sharding an
    array after a function made it whole leaves that call's peak whole."""
    probe = planner.probe
    jax = probe._jax
    writer = probe.writer
    wanted = {}
    for _, inputs, _, _, _ in writer.jit_sampled_calls(step.function_id):
        for leaf in _list(inputs):
            if isinstance(leaf, dict) and leaf.get("replicated") and leaf.get("id") is not None:
                key = (tuple(leaf.get("shape") or ()), str(leaf.get("dtype")))
                if key in made:
                    wanted[int(leaf["id"])] = key
    rows = []
    for state in _largest_states(probe):
        slot = state.plan
        if state is step or not slot.abstract or (state.row.get("wrapper") or "jax.jit") != "jax.jit":
            continue
        outs: dict = {}  # output leaf index -> key
        for _, _, outputs, _, _ in writer.jit_sampled_calls(state.function_id):
            for i, leaf in enumerate(_list(outputs)):
                if isinstance(leaf, dict) and leaf.get("id") is not None and int(leaf["id"]) in wanted \
                        and (tuple(leaf.get("shape") or ()), str(leaf.get("dtype"))) == wanted[int(leaf["id"])]:
                    outs[i] = wanted[int(leaf["id"])]
        if not outs:
            continue
        real = planner.real_of(state)
        for sig in _signatures(slot)[:1]:
            ab, trace = slot.abstract[sig], slot.traces.get(sig)
            entries = [dict(made[k][0], output=i) for i, k in sorted(outs.items())]
            change = json.dumps({"shard_out": entries, "for": int(step.function_id)})
            fn = rejit(probe, state, real, set(), set(), trace) if real is not None and trace is not None else None
            if fn is None or isinstance(fn, str) or time.monotonic() > deadline:
                why = OVER_BUDGET if time.monotonic() > deadline else f"not verified: {fn or DROPPED}"
                rows.append((state.function_id, sig, change, *(None,) * 5, 0.0, str(ab.platform or ""), why))
                continue
            # inputs on one device as uncommitted (a PRNG key): jit places them beside the sharded outputs
            flat = [jax.ShapeDtypeStruct(x.shape, x.dtype, weak_type=x.weak_type)
                    if isinstance(x, jax.ShapeDtypeStruct) and len(getattr(x.sharding, "device_set", ())) == 1 else x
                    for x in ab.flat]
            done, took, failed, _ = compile_abstract(jax, fn, ab, flat, "jax.jit", retraced=False)
            if done is None:
                rows.append((state.function_id, sig, change, *(None,) * 5, took, str(ab.platform or ""),
                             f"not verified: {_failed(failed)}"))
                continue
            shardings = jax.tree_util.tree_leaves(done[1].output_shardings)
            for i, key in outs.items():
                if i < len(shardings):
                    a, mesh = made[key]
                    parts = [None] * len(a["shape"])
                    parts[a["dim"]] = a["axis"]
                    shardings[i] = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*parts))
            original = next((o for name, o, _ in probe._patched if name == state.plan.jit), None)
            replayed = replay(probe._jax, real.__wrapped__, trace, lambda args, kwargs, state=state: probe._dynamic(state, args, kwargs))
            options = dict(slot.options)
            options["out_shardings"] = jax.tree_util.tree_unflatten(
                jax.tree_util.tree_structure(done[1].output_shardings), shardings)
            again, took2, failed, _ = compile_abstract(jax, original(replayed, **options), ab, flat, "jax.jit",
                                                       retraced=False)
            rows.append((state.function_id, sig, change, *(again[0] if again else (None,) * 5), took + took2,
                         str(ab.platform or ""), None if again else f"not verified: {_failed(failed)}"))
    return rows


def _failed(error: str) -> str:
    """A verifying compile's error as the row says it."""
    return error.reason if isinstance(error, Refused) else f"{COMPILE_FAILED}: {error}"


def _gathered(jax, compiled, shard: list[dict]) -> list[int]:
    """The entries of ``shard`` (by index) of whose shape and dtype the
    compiled step returns an output held whole on every device."""
    try:
        outs = jax.tree_util.tree_leaves(compiled.out_info)
    except Exception:
        return []
    whole = {(tuple(o.shape), str(o.dtype)) for o in outs
             if getattr(o, "sharding", None) is not None and len(o.sharding.device_set) > 1
             and o.sharding.is_fully_replicated}
    return [i for i, a in enumerate(shard) if (tuple(a["shape"]), a["dtype"]) in whole]


def _list(text, default=()):
    try:
        v = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        v = None
    return v if isinstance(v, list) else (list(default) if default is not None else None)
