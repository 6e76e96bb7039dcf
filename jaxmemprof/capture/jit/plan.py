"""``run --plan``: the user's step compiled at other batch sizes at the end
of the run, from its arguments' shapes, dtypes and shardings
(``jax.ShapeDtypeStruct``: no array is allocated), and XLA's figures for
each written to ``jit_plans``. Without ``--plan``, what is kept here (the
sampled calls' abstract arguments, the largest functions held) serves the
donation advice's verifying compiles at the end (whatif.py), and nothing is
planned.

- At a sampled call of a user's function (``Planner.abstract``, before the call): the call's arguments
  as ``lower()`` takes them, every array as a ShapeDtypeStruct (shape, dtype, sharding, weak type),
  static arguments and Python scalars as they are, each array named by its input leaf's key
  (``flow.leaf_key``). After the call (``Planner.keep``): kept per signature (the function's largest
  few), and the jitted function itself held for the ``PLAN_FUNCTIONS`` functions with the largest XLA
  call peaks so far (a step jitted in ``main()`` is dropped before the end).
- At the end (``Planner.run``, the last of JitProbe.uninstall's steps): the function with the run's
  largest XLA call peak (and the next, if its peak is at least ``PLAN_SHARE`` of it) is planned from its
  largest signature: the batch is the inputs ``flow.batch_keys`` names, its size the one they share at
  ``axis`` (by bytes); the step is compiled for the recorded batch times each scale (``variant``
  recorded), and, at the recorded batch and the largest scale, with the carried state donated
  (``donated``: jax.jit, flax.nnx.jit and jax.pmap, jitted anew with donate_argnums) and every float32
  argument as bfloat16 (``bfloat16``). Each row has XLA's figures per device, the live bytes outside the
  call (live before the recorded call, less its arguments), what the compile took, and the backend.
- Under ``run --target SLICE`` (targets.py), the same functions compiled for that TPU slice, to
  ``jit_targets``: at the recorded batch, donated and in bfloat16; with ``--plan`` (or where the slice
  refuses the recorded batch) the largest batch that fits one of its devices, searched by compiling for it.
- A call that ran out of memory (oom.py): its signature compiled at the end for what fits.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass

from jaxmemprof.capture.jit.oom import batch_multiple, what_fits
from jaxmemprof.capture.jit.unsampled import prune_traces
from jaxmemprof.capture.jit.compiles import compile_figures
from jaxmemprof.capture.jit.whatif import (VERIFY_MIN_S, VERIFY_SHARE, Retraces, donated_arguments, function_donors,
                                           rejit, verify)
from jaxmemprof.facts.flow import CARRIED, UNKNOWN, batch_keys, flows, leaf_key
from jaxmemprof.facts.tpus import out_of_memory
from jaxmemprof.facts.truepeak import live_outside, peak_of, peak_on_device, placement
from jaxmemprof.units import array_bytes
from jaxmemprof.xla.oom import read as read_oom
from jaxmemprof.xla.scratch import dump_scratch
from jaxmemprof.capture.tracebacks import described

# Functions planned at most, and the share of the largest call peak a second one needs.
PLAN_FUNCTIONS = 2
PLAN_SHARE = 0.5
DEFAULT_SCALES = (0.5, 2.0, 4.0, 8.0)
SEARCH_COMPILES = 8  # compiles at most in the search for the largest batch that fits (--plan-device-memory)
# Signatures whose abstract arguments are kept per function (the largest by XLA's call peak), and
# functions they are kept for (the largest by their largest call peak).
MAX_SIGNATURES = 4
KEEP_FUNCTIONS = 8
CONST_BYTES = 1 << 20  # a kept trace's constants, at most, past the PLAN_FUNCTIONS largest (retrace.Trace)
RECORDED, DONATED, NARROW = "recorded", "donated", "bfloat16"


@dataclass(frozen=True)
class PlanOptions:
    """What ``run --plan`` was asked: the scales of the recorded batch to compile for, and the batch's
    dimension (None: 0, or 1 under jax.pmap, whose dimension 0 is the devices)."""

    scales: tuple = DEFAULT_SCALES
    axis: int | None = None
    # --plan-device-memory: the device's bytes, and the largest per-device
    # peak that fits it by the report's fit rule (the CLI reckons it)
    device_bytes: int | None = None
    fit_peak_bytes: int | None = None

    def settings(self) -> dict:
        return {"scales": list(self.scales), "axis": self.axis, "device_bytes": self.device_bytes,
                "fit_peak_bytes": self.fit_peak_bytes}


class Slot:
    """What the plan keeps for one function: how it was jitted (the jax function, its options), its
    abstract arguments per signature, XLA's call peak per signature, and the jitted function while it
    is among the largest."""

    __slots__ = ("jit", "options", "abstract", "peaks", "real", "best", "traces", "live")

    def __init__(self, jit: str, options: dict):
        self.jit = jit  # "jit" or "pmap": the jax function that made it
        self.options = options  # what it was given (donate_argnums, static_argnums, shardings, ...)
        self.abstract: dict = {}  # signature -> Abstract
        self.peaks: dict = {}  # signature -> XLA's call peak (None: not analysed)
        self.real = None  # the jitted function, held while among the PLAN_FUNCTIONS largest
        self.best = None  # its largest call peak so far
        # signature -> retrace.Trace: the jaxpr JAX traced for it during the run (kept with its abstract
        # arguments), which the compiles at the end replay instead of tracing the program's Python again
        self.traces: dict = {}
        # signature -> the most bytes live on a device before a call that ran it (calllive.py): of two
        # signatures with one call peak, the one run beside more is the run's true peak
        self.live: dict = {}


class Abstract:
    """One call's arguments as ``lower()`` takes them: the dynamic ones flattened (arrays as
    ShapeDtypeStructs), the static ones as they are."""

    __slots__ = ("treedef", "flat", "keys", "static", "static_kw", "devices", "platform", "signature",
                 "batch_static")

    def __init__(self, treedef, flat, keys, static, static_kw, devices, platform, signature):
        self.treedef, self.flat, self.keys = treedef, flat, keys
        self.static, self.static_kw = static, static_kw
        self.devices, self.platform, self.signature = devices, platform, signature
        self.batch_static = None  # the static argument that sets the batch (plan), where one does


class Planner:
    """The plan's part of a JitProbe (``probe.planner``)."""

    def __init__(self, probe, options: PlanOptions | None = None, verify_s: float | None = None, targets: tuple = ()):
        self.probe = probe
        self.targets = tuple(targets)  # run --target: TPU slices to compile the planned functions for
        self.options = options  # run --plan's; None: the advice's changes verified, nothing planned
        self.verify_s = verify_s  # run --verify-seconds: the verifying compiles' budget (None: a share of the run)
        self.top: list = []  # the states with the largest call peaks so far, largest first (KEEP_FUNCTIONS)
        # At the end: whether a re-trace of a function's Python still traces the run's program, and the
        # functions some of whose figures came from re-traces (function_id -> what: whatif, plan, target)
        self.retraces = Retraces(probe)
        self.retraced: dict = {}
        self.failure = None  # the call that ran out of memory (oom.failed), compiled at the end (oom.what_fits)

    # -- during the run ----------------------------------------------------------------

    def slot(self, jit: str, options: dict) -> Slot:
        return Slot(jit, dict(options))

    def abstract(self, state, args, kwargs, inputs) -> Abstract | None:
        """The call's arguments as ShapeDtypeStructs, before the call (a donated array is deleted by it)."""
        import numpy as np

        probe = self.probe
        jax = probe._jax
        leaves, refs, signature = inputs[0], inputs[1], inputs[3]
        if signature is None:
            return None
        key_of = {}
        for d, r in zip(leaves, refs):
            obj = r() if r is not None else None
            if obj is not None:
                key_of.setdefault(id(obj), leaf_key(d))  # numpy arguments too: a numpy-fed step's batch
        nums, names, params = state.jit_static
        static = {i % len(args) for i in nums if isinstance(i, int) and -len(args) <= i < len(args)}
        static.update(i for i, name in enumerate(params[:len(args)]) if name in names)
        dynamic = probe._dynamic(state, args, kwargs)
        flat, treedef = jax.tree_util.tree_flatten(dynamic)
        out, keys, devices, platform = [], [], set(), None
        for x in flat:
            if probe._is_array(x):
                sharding = x.sharding
                out.append(jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding,
                                                weak_type=bool(getattr(x, "weak_type", False))))
                keys.append(key_of.get(id(x)))
                for d in sharding.device_set:
                    devices.add(str(d))
                    platform = platform or d.platform
            elif isinstance(x, (np.ndarray, np.generic)):
                out.append(jax.ShapeDtypeStruct(np.shape(x), x.dtype))
                keys.append(key_of.get(id(x)))
            else:
                out.append(x)  # a Python scalar, traced weakly typed as the call traced it
                keys.append(None)
        return Abstract(treedef, out, keys, {i: args[i] for i in sorted(static)},
                        {k: v for k, v in kwargs.items() if k in names}, sorted(devices), platform, signature)

    def keep(self, state, abstract: Abstract, real) -> None:
        """After the call (its signature analysed by now): keep its abstract arguments among the
        function's largest signatures, while the function is among the KEEP_FUNCTIONS largest, and hold
        the jitted function while it is among the PLAN_FUNCTIONS largest (a program that jits a new
        function at every step keeps a few, not one per step)."""
        slot = state.plan
        sig = abstract.signature
        if slot.peaks.get(sig) is None:
            slot.peaks[sig] = peak_of(self.probe.writer.jit_compile_figures(state.function_id, sig))
        if sig not in slot.abstract:
            slot.abstract[sig] = abstract
            if len(slot.abstract) > MAX_SIGNATURES:
                smallest = min(slot.abstract, key=lambda s: slot.peaks.get(s) or -1)
                del slot.abstract[smallest]
        known = [p for p in slot.peaks.values() if p is not None]
        slot.best = max(known) if known else None
        top = [s for s in self.top if s is not state]
        if slot.best is not None:
            top.append(state)
        top.sort(key=lambda s: -s.plan.best)
        for s in top[KEEP_FUNCTIONS:]:  # no longer among the largest: nothing of it kept
            s.plan.abstract.clear()
            s.plan.traces.clear()
            s.plan.real = None
        if state not in top[:KEEP_FUNCTIONS]:
            slot.abstract.clear()
        prune_traces(slot)  # its kept signatures' traces, and a few of signatures no kept call ran (unsampled.py)
        self.top = top[:KEEP_FUNCTIONS]
        for i, s in enumerate(self.top):
            if i >= PLAN_FUNCTIONS:  # not held, nor the device arrays its traces' constants are (a closure's)
                s.plan.real = None
                s.plan.traces = {k: t for k, t in s.plan.traces.items() if t.const_bytes <= CONST_BYTES}
            elif s is state:
                s.plan.real = real

    # -- at the end ------------------------------------------------------------------------

    def real_of(self, state):
        """The jitted function: held by the plan, or still the program's; None once dropped."""
        if state.plan.real is not None:
            return state.plan.real
        proxy = state.proxy() if state.proxy is not None else None
        return proxy._real if proxy is not None else None

    def run(self, ended_by: str | None = None) -> None:
        """At the end of the run: the advice's donations compiled and shardings (whatif.verify), then,
        under run --plan, the functions that hold the run's largest XLA call peaks planned, and under run
        --target compiled for each slice (not after a SIGTERM: seconds of compiles for each slice would
        outlast a scheduler's grace period); then nothing of the program's is held any more."""
        try:
            budget = self.verify_s if self.verify_s is not None else max(
                VERIFY_MIN_S, VERIFY_SHARE * (time.monotonic() - self.probe._t_install))
            if budget > 0:
                try:
                    verify(self, budget)
                except Exception as exc:  # the advice then says its figure is not verified; the run is recorded
                    self.probe.writer.add_event("whatif", f"not verified: {described(exc)}"[:2000])
            try:  # what fits, where a call ran out of memory: within the same budget again
                what_fits(self, budget, search, given=self.verify_s is not None)
            except Exception as exc:
                self.probe.writer.add_event("oom-fit", json.dumps({"error": described(exc)[:2000]}))
            if self.options is not None:
                self._plan()
            if self.targets and ended_by == "SIGTERM":
                for name in self.targets:
                    self.probe.writer.add_event("target", f"{name}: not compiled: the run was ended by SIGTERM, and "
                                                          f"compiling for a slice takes seconds a scheduler may not give")
            elif self.targets:
                self._compile_for_targets()
        finally:
            for s in self.probe._states:
                if s.plan is not None:
                    s.plan.real = None
                    s.plan.abstract.clear()
                    s.plan.traces.clear()

    def _chosen(self, say) -> list:
        """(function, jitted function, why) for the functions that hold the
        run's largest XLA call peaks; ``say(text)`` is told why others are
        not (``text``: "nothing planned: ..." or "NAME: not planned: ...")."""
        probe = self.probe
        ready = []
        for s in probe._states:
            slot = s.plan
            if slot is None or not slot.abstract or slot.best is None:
                continue
            ready.append((slot.best, s, self.real_of(s)))
        if not ready:
            say("nothing planned: no jitted function of the program's was sampled with XLA's figures")
            return []
        ready.sort(key=lambda x: -x[0])
        largest = ready[0][0]
        chosen = [x for x in ready[:PLAN_FUNCTIONS] if x[0] >= PLAN_SHARE * largest]
        out = []
        for rank, (peak, state, real) in enumerate(chosen, start=1):
            name = state.row.get("name", state.function_id)
            if real is None:
                say(f"{name}: not planned: the program dropped the jitted function before the end of the run")
                continue
            out.append((state, real, {"rank": rank, "call_peak_bytes": int(peak),
                                      "largest_call_peak_bytes": int(largest),
                                      "not_planned": [[str(s.row.get("name", s.function_id)), int(p)]
                                                      for p, s, _ in ready if all(s is not c[1] for c in chosen)][:5]}))
        return out

    def _plan(self) -> None:
        """Plan the functions that hold the run's largest XLA call peaks."""
        for state, real, why in self._chosen(lambda text: self.probe.writer.add_event("plan", text)):
            try:
                self._plan_one(state, real, why)
            except Exception as exc:  # a plan that fails says why; the run is recorded
                name = state.row.get("name", state.function_id)
                self.probe.writer.add_event("plan", f"{name}: not planned: {described(exc)}"[:2000])

    def _compile_for_targets(self) -> None:
        """The planned functions compiled for each run --target slice (targets.py)."""
        from jaxmemprof.capture.jit.targets import libtpu_log, targets

        writer = self.probe.writer
        said: list = []
        chosen = self._chosen(said.append)
        for name in self.targets:  # each slice's own line, so that its report and gate can say why
            for text in said:
                writer.add_event("target", f"{name}: not compiled: {text}")
        if not chosen:  # nothing to compile: libtpu is not even loaded
            return
        with libtpu_log() as log:
            self.probe.progress(f"libtpu's devices for {', '.join(self.targets)}")
            found, refused = targets(list(self.targets))
            for name, why in refused:
                writer.add_event("target", f"{name}: not compiled: libtpu refused the slice: {why}")
            for target in found:
                for state, real, why in chosen:
                    try:
                        self._plan_one(state, real, why, target)
                    except Exception as exc:  # the target's figures are then missing, and the report says why
                        fname = state.row.get("name", state.function_id)
                        writer.add_event("target", f"{target.name}: {fname}: not compiled: "
                                                   f"{described(exc)}"[:2000])
        if log.text:
            writer.add_event("target-log", log.text[-4000:])

    def _plan_one(self, state, real, why: dict, target=None) -> None:
        """Compile the function ``state`` at other batches (run --plan), or
        for ``target`` (targets.Slice: at the recorded batch and its fixes;
        at the plan's batches too under --plan)."""
        writer, slot = self.probe.writer, state.plan
        name = state.row.get("name", state.function_id)
        sig = max(slot.abstract, key=lambda s: slot.peaks.get(s) or -1)
        ab = recorded_ab = slot.abstract[sig]
        planning = self.options is not None
        wrapper = state.row.get("wrapper") or "jax.jit"
        if target is not None and wrapper == "jax.pmap":
            writer.add_event("target", f"{target.name}: {name}: not compiled: a jax.pmap step places its inputs "
                                       f"itself, on the devices of the run")
            return
        if target is not None:
            moved = target.moved(self.probe._jax, recorded_ab)
            if isinstance(moved, str):
                writer.add_event("target", f"{target.name}: {name}: not compiled: {moved}")
                return
            ab = Abstract(ab.treedef, moved[0], ab.keys, ab.static, ab.static_kw, moved[1], "tpu", ab.signature)
            ab.batch_static = recorded_ab.batch_static
        figures = writer.jit_compile_figures(state.function_id, sig)
        calls = writer.jit_sampled_calls(state.function_id)
        parsed = [(_loads(inputs, []), signature, _loads(live, None)) for _, inputs, _, signature, live in calls]
        flow = flows(leaves for leaves, _, _ in parsed)
        given_axis = self.options.axis if planning else None
        axis = given_axis if given_axis is not None else (1 if wrapper == "jax.pmap" else 0)
        kind = "plan" if target is None else "target"
        self.doing = f"compiling {name} for {target.name}" if target else f"planning {name}"  # the progress line
        told = self._batch(state, real, ab, flow, axis, wrapper, figures if target is None else None, kind,
                           statics=planning, say=planning or target is None)
        if told is None:
            if target is None:
                return
            told = (None, [], None, None)  # a target's recorded batch is compiled all the same
        batch, scaled, how, static = told
        # The live bytes outside the call: before the sampled call of this
        # signature that found the most live, less its arguments there (on
        # the run's devices, for a target too), those already on the call's
        # devices (truepeak.placement: an array copied onto them stays alive).
        before = [(live, placement(inputs, outputs)[1]) for (_, inputs, outputs, signature, _), (_, _, live)
                  in zip(calls, parsed) if signature == sig and isinstance(live, dict)]
        if state.live_top:  # every call counted (calllive.py): the most live before any of its calls
            before.append((dict(state.live_top), before[0][1] if before else 1.0))
        live, share = max(before, key=lambda b: max(b[0].values(), default=0)) if before else (None, 1.0)
        outside = None if live is None else {
            d: v for d, v in live_outside(live, (figures or (0,))[0], share, recorded_ab.devices).items()
            if target is None or d in recorded_ab.devices}  # a target's: the call's own devices (its busiest)
        leaf_of = {leaf_key(d): d for leaves, signature, _ in parsed if signature == sig for d in leaves}
        owners = sorted({str(leaf_of.get(ab.keys[j], {}).get("owner") or f"{ab.keys[j][1]}{ab.keys[j][2]}")
                         for j in scaled}) if static is None else [f"{static[1]} (static)"]
        base = {"planned": why, "batch_inputs": owners, "batch_flow": how, "signature_call_peak_bytes":
                peak_of(figures)}
        rows = []

        def row(variant, b, fig, seconds, detail, error=None):
            r = (state.function_id, sig, variant, None if b is None else int(b),
                 None if batch is None else int(batch), int(axis),
                 *(None if fig is None else int(v or 0) for v in (fig or (None,) * 5)),
                 json.dumps(ab.devices), None if outside is None else json.dumps(outside),
                 float(seconds), str(ab.platform or ""), json.dumps({**base, **detail}),
                 None if error is None else str(error)[:2000])
            if target is None:
                rows.append(r)
            else:  # a target's, each as it is compiled (seconds each): a signal meanwhile keeps those done
                writer.add_jit_targets(target.name, [r])

        donated = self._donated(state, real, ab, flow, leaf_of)
        trace = slot.traces.get(sig)  # the run's own: what a compile at the run's shapes replays
        replays = {}  # id of the jitted function -> the same over the run's trace
        refusals = {}  # batch -> what XLA:TPU's refusal there says the call needs (its temporaries), if it says

        def compile_at(fn, b, narrow, detail, dump_to=None):
            variant = DONATED if fn is not real else NARROW if narrow else RECORDED
            use = None
            if trace is not None and not narrow and (b is None or b == batch):  # the run's own shapes
                if id(fn) not in replays:
                    replays[id(fn)] = rejit(self.probe, state, real, *(donated[1].values() if fn is not real else
                                                                       ((), ())), trace=trace)
                use = replays[id(fn)] if not isinstance(replays[id(fn)], str) else None
            detail = {"scale": 1.0 if b is None or not batch else b / batch, **detail,
                      "traced": "run" if use is not None else "re-trace"}
            refused = None if use is not None else self.retraces.refusal(state, real)
            self.retraced.setdefault(state.function_id, set()).update(() if use is not None else (kind,))
            if refused is not None:
                row(variant, b, None, 0.0, detail, refused)
                return None
            early = self.probe.early.donation(state.function_id, sig, *donated[1].values()) if (  # the advice's
                use is not None and fn is not real and target is None and b == batch) else None  # made beside the run
            fig, seconds, error, said = early or self._compile(use or fn, ab, scaled, axis, b, narrow=narrow,
                                                               wrapper=wrapper, dump_to=dump_to, retraced=use is None)
            row(variant, b, fig, seconds, {**detail, "warnings": said}, error)
            if fig is None and out_of_memory(error):  # XLA:TPU: it does not fit (a target's or the run's own)
                refusals[b] = getattr(read_oom(str(error)), "needed_bytes", None)
                return TOO_LARGE
            return fig

        if target is not None:  # the target's own figures at the recorded batch
            with dump_scratch(writer) as dump:  # and XLA:TPU's buffers by line (a directory inside the run)
                figures = compile_at(real, batch, False, {"source": "target"}, dump_to=dump)
                if figures is not None and figures is not TOO_LARGE:
                    self._target_buffers(target, state, sig, dump)
            if figures is TOO_LARGE:  # XLA:TPU refused it for the device's memory: the search goes down
                figures, refused_at = None, batch
            else:
                refused_at = None
        elif figures is not None:
            row(RECORDED, batch, figures, 0.0, {"scale": 1.0, "source": "run"})
        multiple = batch_multiple(ab, scaled, axis)  # a batch sharded over n devices: multiples of n
        sizes = _sizes(batch, self.options.scales, multiple) if planning and batch else []
        busiest = max((v for d, v in (outside or {}).items() if d in recorded_ab.devices), default=0)
        known = {}  # batch -> the busiest device's peak there
        if figures is not None and batch:
            known[batch] = peak_on_device(busiest, figures)
        elif target is not None and refused_at:
            known[refused_at] = math.inf
        for _scale, b in sizes:
            fig = compile_at(real, b, False, {"source": "compiled"})
            if fig is not None:
                known[b] = _peak(busiest, fig)
        ends = [(1.0, batch)] + ([sizes[-1]] if sizes else [])
        limit = (target.fit_peak_bytes if target is not None and (planning or refused_at)  # refused: searched anyway
                 else self.options.fit_peak_bytes if planning and target is None else None)
        if limit is not None and known:
            # --plan-device-memory (or a target's chip): the largest batch that fits, found by compiles;
            # each fix compiled there too. A refused batch's peak: what XLA:TPU said it needs (_peak).
            for b in [b for b, p in known.items() if p == math.inf]:
                known[b] = _peak(busiest, TOO_LARGE, refusals.get(b), limit)
            def search_at(b):
                fig = compile_at(real, b, False, {"source": "search"})
                return None if fig is None else _peak(busiest, fig, refusals.get(b), limit)

            found = search(known, limit, search_at, multiple=multiple)
            if found and found not in (b for _, b in ends):
                ends.append((found / batch, found))
        if isinstance(donated, str):
            writer.add_event(kind, (f"{target.name}: " if target else "") + f"{name}: donation not compiled: {donated}")
        else:
            fn, what = donated
            for _, b in ends:
                compile_at(fn, b, False, {"source": "compiled", "donated": what})
        wide = [j for j, x in enumerate(ab.flat) if hasattr(x, "shape") and str(x.dtype) == "float32"]
        for _, b in ends if wide else ():
            compile_at(real, b, True, {"source": "compiled", "narrowed": len(wide)})
        if target is None:
            writer.add_jit_plans(rows)
        if kind in self.retraced.get(state.function_id, ()):  # what those figures are, in the run's words
            writer.add_event(kind, (f"{target.name}: " if target else "") + f"{name}: figures at other batches "
                                   f"or dtypes {self.retraces.note(state)}"[:2000])

    def _target_buffers(self, target, state, sig: str, dump: str) -> None:
        """XLA:TPU's buffers in the device's memory live at the program's
        peak, with the op and user line that made each (its dump's buffer
        assignment: xla/dump.py), to jit_target_buffers."""
        from jaxmemprof.xla.dump import read_dump

        try:
            programs = read_dump(dump)
        except Exception as exc:  # the figures stand; only the lines are missing, and said
            programs, why = [], f"{type(exc).__name__}: {exc}"
        else:
            why = "its dump held no buffer assignment"
        if not programs:
            self.probe.writer.add_event("target", f"{target.name}: {state.row.get('name', state.function_id)}: "
                                                  f"no buffers by line: {why}"[:2000])
            return
        p = max(programs, key=lambda p: p.peak_bytes)
        self.probe.writer.add_jit_target_buffers(
            [(target.name, state.function_id, sig, b.name, b.bytes, b.shape, b.kind, b.op, json.dumps(b.frames),
              p.peak_bytes) for b in p.buffers if b.at_peak])

    def _batch(self, state, real, ab: Abstract, flow: dict, axis: int, wrapper: str, figures, kind: str,
               statics: bool = True, say: bool = True):
        """(batch, the flat positions of the inputs that carry it, how it
        was told, the static argument that sets it or None), the batch told
        from the calls' flow (or, with ``statics``, a static argument whose
        doubling changes XLA's figures); None when it cannot be told (an
        event under ``kind`` says why, if ``say``)."""
        writer = self.probe.writer if say else None
        name = state.row.get("name", state.function_id)
        shapes = {}
        for key, x in zip(ab.keys, ab.flat):
            if key is not None and hasattr(x, "shape"):
                shapes.setdefault(key, (tuple(x.shape), x))
        keys, how = batch_keys(flow, usable=lambda k: k in shapes and len(shapes[k][0]) > axis
                               and not _rng_key(*shapes[k]))
        if not keys and all(v == UNKNOWN for v in flow.values()):
            if writer is None:
                return None
            writer.add_event(kind, f"{name}: not planned: called once (or no two calls in a row were sampled), "
                                   f"so no input could be seen to be new at every call or the same at every call "
                                   f"(the batch is told from call to call: run two steps at least)")
            return None
        if keys:
            by_size: dict = {}
            for k in keys:
                shape, x = shapes[k]
                by_size[shape[axis]] = by_size.get(shape[axis], 0) + array_bytes(shape, x.dtype)
            batch = max(by_size, key=lambda b: (by_size[b], b))
            scaled = [j for j, (key, x) in enumerate(zip(ab.keys, ab.flat))
                      if key in keys and len(getattr(x, "shape", ())) > axis and x.shape[axis] == batch]
            return batch, scaled, how, None
        if not statics:
            return None
        # The static argument that sets the batch, where no array input has one.
        static = _static_batch(state, ab)
        if isinstance(static, str):
            writer.add_event(kind, f"{name}: not planned: no input with a dimension {axis} that is new at "
                                   f"every call or the same at every call (--plan-axis names another), {static}")
            return None
        ab.batch_static = static[2]
        refused = self.retraces.refusal(state, real)  # doubled: traced again
        self.retraced.setdefault(state.function_id, set()).add(kind)
        if figures is None and refused is None:  # a target's: its own at the recorded batch, to compare with
            figures, *_ = self._compile(real, ab, [], axis, None, narrow=False, wrapper=wrapper)
        doubled = None if refused is not None else self._compile(real, _with_static(ab, static[0] * 2), [], axis,
                                                                  None, narrow=False, wrapper=wrapper)[0]
        if refused is not None:
            writer.add_event(kind, f"{name}: not planned: its static argument {static[1]} = {static[0]} could not be "
                                   f"compiled at twice that value: {refused.reason}")
            return None
        if doubled is None or figures is None:
            writer.add_event(kind, f"{name}: not planned: its static argument {static[1]} = {static[0]} could not be "
                                   f"compiled at {'twice ' if figures is not None else ''}that value, to tell whether "
                                   f"it sets the batch")
            return None
        if peak_of(doubled) == peak_of(figures):
            writer.add_event(kind, f"{name}: not planned: no input with a dimension {axis} that is new at "
                                   f"every call or the same at every call, and its static argument "
                                   f"{static[1]} = {static[0]} does not change XLA's figures")
            return None
        return static[0], [], "static", static

    def _donated(self, state, real, ab: Abstract, flow: dict, leaf_of: dict):
        """The function jitted anew with what the donation advice donates
        (donors.py, as the report's finding), else its carried state, and
        what that donates; or why it cannot be compiled from outside (a string)."""
        nums, names = donated_arguments(function_donors(self.probe.writer, state.function_id))
        carried = {k for k in ab.keys if k is not None and flow.get(k) == CARRIED}
        for key in carried if not nums and not names else ():  # no advice: what each call gets from the last
            leaf = leaf_of.get(key, {})
            if leaf.get("donated"):
                continue
            if leaf.get("kw"):
                names.add(str(leaf.get("name")))
            elif isinstance(leaf.get("arg"), int):
                nums.add(int(leaf["arg"]))
        if not nums and not names:
            return "no carried argument left to donate"
        fn = rejit(self.probe, state, real, nums, names)
        return fn if isinstance(fn, str) else (fn, {"argnums": sorted(nums), "argnames": sorted(names)})

    def _compile(self, fn, ab: Abstract, scaled, axis, batch, narrow: bool, wrapper: str = "jax.jit",
                 dump_to: str | None = None, retraced: bool = True):
        """XLA's figures at ``batch``: the ``scaled`` inputs' dimension set to
        it, or, with none (a batch set by a static argument: ``ab.batch_static``),
        that argument."""
        if not scaled and ab.batch_static is not None and batch is not None:
            ab = _with_static(ab, batch)
        self.probe.progress(f"{getattr(self, 'doing', 'compiling')}{'' if batch is None else f' at batch {batch}'}"
                            f"{' in bfloat16' * narrow}")
        return compile_figures(self.probe._jax, fn, ab, scaled, axis, batch, narrow, wrapper, dump_to, retraced)


# A compile that XLA:TPU refused for its memory ("RESOURCE_EXHAUSTED: Ran out of memory on HBM"),
# a target's or the run's own on a TPU: the batch does not fit, which the fit search counts as a
# peak above any device's, and goes on below it.
TOO_LARGE = object()


def _peak(busiest: int, fig, needed: int | None = None, limit: int | None = None) -> float:
    """A device's peak from XLA's figures; where XLA:TPU refused the compile (``TOO_LARGE``), the ``needed``
    bytes its message names (temporaries: at least the call's peak) if past ``limit``, else infinite."""
    if fig is not TOO_LARGE:
        return peak_on_device(busiest, fig)
    return busiest + needed if needed and limit is not None and busiest + needed > limit else math.inf


def _rng_key(shape, x) -> bool:
    """A PRNG key (new at every call, yet no batch): a typed key, or a raw uint32[2]."""
    dtype = str(x.dtype)
    return dtype.startswith("key<") or (dtype == "uint32" and tuple(shape) == (2,))


def _static_batch(state, ab: Abstract):
    """(value, name, position or keyword) of the static argument that sets the batch: the one
    Python int (more than 1) among the call's static arguments, or the one
    of them named like a batch; else why none (a string)."""
    params = list(state.jit_static[2]) if state.jit_static else []
    ints = [(k, v) for k, v in list(ab.static.items()) + list(ab.static_kw.items())
            if isinstance(v, int) and not isinstance(v, bool) and v > 1]
    named = [(k, v) for k, v in ints if "batch" in str(params[k] if isinstance(k, int) and k < len(params) else k)]
    chosen = named if len(named) == 1 else ints if len(ints) == 1 else []
    if not chosen:
        return ("and no static argument is a Python int that could be the batch: make the batch an array "
                "argument (its dimension 0), or a static argument named like batch_size"
                if not ints else "and several static Python ints, none named like batch_size: name the batch's "
                                 "static argument batch_size")
    k, v = chosen[0]
    name = params[k] if isinstance(k, int) and k < len(params) else str(k)
    return v, name, k


def _with_static(ab: Abstract, value: int) -> Abstract:
    """``ab`` with its batch's static argument (``ab.batch_static``) set to ``value``."""
    k = ab.batch_static
    static, static_kw = dict(ab.static), dict(ab.static_kw)
    (static if isinstance(k, int) else static_kw)[k] = value
    out = Abstract(ab.treedef, ab.flat, ab.keys, static, static_kw, ab.devices, ab.platform, ab.signature)
    out.batch_static = k
    return out


def search(known: dict, target: int, compile_at, most: int = SEARCH_COMPILES, multiple: int = 1) -> int:
    """The largest batch whose peak is at most ``target``, by at most
    ``most`` compiles (``compile_at(batch)`` -> its peak, None where it
    fails). Past the batches known to fit: along the line through the two
    largest, at most 16 times the largest. Between the largest known to fit
    and the smallest known not to, in turn: where the line between them
    crosses ``target`` (within the middle half of the bracket), then half
    way (so that a jump in XLA's figures still narrows it fast); after a
    line's guess that fits, 1 % past it first (on a line, that settles it).
    Done when the two are within 1 % of each other. ``known``: batch ->
    peak, compiled already (grown here); ``multiple``: every batch tried is
    one of its multiples (a batch sharded over that many devices). 0: not
    even the smallest fits."""
    last = None
    for i in range(most + 1):
        fit = [b for b, p in known.items() if p <= target]
        lo = max(fit) if fit else 0
        hi = min((b for b, p in known.items() if p > target and b > lo), default=None)
        step = max(multiple, lo // 100)
        if (hi is not None and hi - lo <= step) or i == most:
            return lo
        exact = False
        if hi is None:
            (b0, p0), (b1, p1) = sorted(known.items())[-2:] if len(known) >= 2 else ((0, 0), max(known.items()))
            slope = (p1 - p0) / (b1 - b0) if b1 > b0 else 0.0
            guess = b1 + (target - p1) / slope if slope > 0 else 2 * b1
            guess, kind = min(max(guess, lo + step), 16 * max(known)), "past"
        elif lo == 0:
            (b0, p0), (b1, p1) = sorted(known.items())[:2] if len(known) >= 2 else ((0, 0), min(known.items()))
            if math.isfinite(p1) and p0 - (p1 - p0) / max(b1 - b0, 1) * (b0 - multiple) > target:  # inf: refused
                return 0  # the line through the two smallest says not even the smallest batch fits
            guess, kind = hi / 2, "halve"
        elif last == "line-fit":
            guess, kind = lo + step, "confirm"
        elif last in ("line", "confirm"):
            guess, kind = (lo + hi) / 2, "halve"
        else:
            line = lo + (target - known[lo]) * (hi - lo) / max(known[hi] - known[lo], 1)
            quarter = (hi - lo) / 4
            guess, kind = min(max(line, lo + quarter), hi - quarter), "line"
            exact = guess == line
        guess = int(round(guess))
        if hi is not None:
            guess = min(max(guess, lo + 1), hi - 1)
        guess = guess // multiple * multiple
        if guess in known or guess <= 0 or (hi is not None and not lo < guess < hi):
            return lo
        peak = compile_at(guess)
        if peak is None:
            return lo
        known[guess] = peak
        last = "line-fit" if kind == "line" and exact and peak <= target else kind
    return max((b for b, p in known.items() if p <= target), default=0)


def _sizes(batch: int, scales, multiple: int = 1) -> list:
    """(scale, batch) for each scale of the recorded batch: whole (a
    multiple of ``multiple``), at least that, each once, the recorded one
    left out, in increasing order."""
    out = {}
    for s in scales:
        b = max(multiple, int(round(batch * float(s) / multiple)) * multiple)
        if b != batch:
            out.setdefault(b, float(s))
    return [(out[b], b) for b in sorted(out)]


def _loads(text, default):
    try:
        v = json.loads(text) if isinstance(text, str) else default
    except ValueError:
        return default
    return v if isinstance(v, type(default)) or default is None else default
