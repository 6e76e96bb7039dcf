"""The probe: ``jax.jit`` and ``jax.pmap`` replaced, in the ``jax`` module
only (JAX's own internals keep the originals), by functions returning a
proxy (``proxy.Probed``) around the real jitted function; library wrappers
that call ``jax.jit`` are seen through, and named (``libraries``). A call
made while another transformation traces is only counted. The probe records:

- per function: the user's function and where it is defined, the user's line
  that jitted it and the wrapper used, its donation and static arguments;
- per compiled signature: XLA's figures (``programs``);
- for a sample of calls (the first ones, then one in ``sample_every``): every array leaf of the arguments,
  mapped to the user's arguments (argument position and name, pytree path, shape, dtype, sharding, device
  bytes, donated or not) and of the outputs, and, checked at the function's next call, what became of each
  input leaf (``liveness``); for every call of a user's function, the bytes live before it (``calllive``).

Once a function's samples are taken its proxy becomes quiet (a user's
function's calls still have their live bytes counted: calllive.py); a JAX
compile event, or a snapshot that finds the function's compile cache grown,
turns it back, and the first of the next 1,000 calls with a signature not
analysed yet is analysed.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import sys
import threading
import time
from typing import TYPE_CHECKING
import weakref

from jaxmemprof.capture.hooks import AfterImport
from jaxmemprof.capture.jit.frames import drop_own_frames
from jaxmemprof.facts.libraries import BY_NAME, PATCHED, plain_arguments
from jaxmemprof.facts.source import statement_at
from jaxmemprof.capture.jit.calllive import CallLive, only_signature
from jaxmemprof.capture.jit.early import Early
from jaxmemprof.capture.jit.outside import OutsideJit
from jaxmemprof.capture.jit.liveness import call_fates
from jaxmemprof.capture.jit.oom import failed as oom_failed
from jaxmemprof.capture.jit.plan import Planner
from jaxmemprof.capture.jit.programs import Programs
from jaxmemprof.capture.jit.sampled import SampledCalls
from jaxmemprof.capture.jit.proxy import Probed, QuietProbed
from jaxmemprof.capture.jit.site import is_user_function, signature_names, Site
from jaxmemprof.capture.jit.state import HUNT_CALLS, cache_size, compile_listener, FunctionState, step_of
from jaxmemprof.capture.tracebacks import described

if TYPE_CHECKING:
    from jaxmemprof.capture.sampler import Sampler

LIVE_BEFORE_CALLS = 400  # sampled calls whose live bytes before are written, at most, in a run
# A function whose observation fails this often is no longer observed.
MAX_ERRORS = 3
# Functions the program dropped whose lowering is kept for XLA's dump at the end.
_KEEP_DROPPED = 4


def _normalise(value) -> list:
    if value is None:
        return []
    if isinstance(value, (int, str)):
        return [value]
    return list(value)


def _source_line(frame) -> str:
    """The statement at ``frame``'s line as the program has it now (``source.statement_at``: a notebook
    cell's, or a file's before anyone edits it), on which the donation fix is written at report time."""
    if frame is None:
        return ""
    return statement_at(frame.f_code.co_filename, frame.f_lineno, frame.f_globals)


class JitProbe(SampledCalls, Programs):
    """Install with :meth:`install`; every function jitted afterwards through
    ``jax.jit`` or ``jax.pmap`` (directly, or through a library wrapper such
    as ``flax.nnx.jit`` or ``equinox.filter_jit``) is observed.
    ``sample_first``: calls sampled after the first; then one call in
    ``sample_every``; at most ``max_samples`` per function."""

    def __init__(self, writer, *, sample_first: int = 3, sample_every: int = 50, max_samples: int = 20,
                 dump_share: float = 0.01, dump_min_s: float = 0.25, exclude: tuple = (), plan=None,
                 verify_s: float | None = None, targets: tuple = ()):
        self.writer = writer
        # The user's steps compiled anew at the end: the donation advice's arguments donated (within
        # verify_s seconds, None: a share of the run), and under run --plan (plan.PlanOptions; None
        # without) other batch sizes; under run --target, compiled for those TPU slices too.
        self.planner = Planner(self, plan, verify_s, targets)
        self.early = Early(self)  # the end's compiles begun beside the program (early.py)
        self.exclude = tuple(exclude)  # more files JAX should not take for the program's (the launcher)
        # XLA's dumps at the end of the run may take this share of the run's
        # wall time (at least dump_min_s), each dump costing about what the
        # function's compile cost the program.
        self.dump_share = dump_share
        self.dump_min_s = dump_min_s
        self._t_install = time.monotonic()
        self.sample_first = sample_first
        self.sample_every = sample_every
        self.max_samples = max_samples
        self.active = True
        self._jax = None
        self._hook = None
        self._patched: list[tuple[str, object, object]] = []  # (name in jax, original, ours)
        self._monitoring = None
        self._listener = None
        self._tracing = None  # () -> True while a transformation traces, where JAX tells
        self._tracer_type = ()
        self._quiet: set = set()  # states whose calls go straight to the jitted function
        self._next_function = 1
        self._next_call = 1
        self._lock = threading.Lock()
        self._states: list[FunctionState] = []
        self._errors_seen: set = set()
        self._calling = threading.local()  # .state: the function whose call this thread is in
        # The sampler, which holds the program's arrays while it takes a
        # snapshot (Sampler.holding), and counts what is live before a
        # sampled call: set by the session.
        self.observer: Sampler | None = None
        self.live = CallLive(self)  # the bytes live before every call of a user's function (calllive.py)
        self.outside = OutsideJit()  # operations run outside jit, compiled during the run (outside.py)
        self._names: set = set()  # the names of the functions jitted through the probe
        self.on_step = None  # (name) -> bool, set by the session: a call of the step begins (stepped)
        self._step: FunctionState | None = None
        # function_id -> threads inside a call of it now (a quiet function's go straight to XLA): calls_in_flight
        self.in_call: dict = {}
        self.call_ended = 0.0  # monotonic time the last call (the probe's work on it too) ended: Sampler.timed_due
        self._live_before_left = LIVE_BEFORE_CALLS
        self.read_s = 0.0  # time spent reading executables (XLA's figures), all functions
        self.programs_read = 0
        self._fallback_said = False

    # -- installing ----------------------------------------------------------------

    def install(self) -> None:
        jax = sys.modules.get("jax")
        if jax is not None and hasattr(jax, "jit"):
            self._patch(jax)
            return
        self._hook = AfterImport("jax", self._patch)
        sys.meta_path.insert(0, self._hook)

    def uninstall(self, ended_by: str | None = None, end_work: bool = True) -> None:
        """Stop observing (proxies made so far keep working, unprobed) and
        record the final call counts and pending liveness checks (``ended_by``:
        how the run ended, as Session.stop has it). ``end_work``: also XLA's
        dumps and the end's compiles (verify, --plan, --target); without it
        (the end interrupted) only the counts, and nothing of the program's
        held any more."""
        self.active = False
        if self._hook is not None and self._hook in sys.meta_path:
            sys.meta_path.remove(self._hook)
        for name, original, ours in self._patched:
            if getattr(self._jax, name, None) is ours:
                setattr(self._jax, name, original)
        if self._monitoring is not None:
            # Public from JAX 0.8.1; before, only a private one (the listener
            # holds the probe weakly, so one left behind costs nothing).
            unregister = getattr(self._monitoring, "unregister_event_duration_listener", None)
            if unregister is None:
                private = sys.modules.get("jax._src.monitoring")
                unregister = getattr(private, "_unregister_event_duration_listener_by_callback", None)
            try:
                if unregister is not None:
                    unregister(self._listener)
            except Exception:
                pass
        # What it did not compile is compiled here, as before; the compile
        # under way goes on beside the end's own (early.py) until they are done.
        self.early.close(wait=False)
        steps = (self._dump_programs, self._flush, lambda: self.planner.run(ended_by)) if end_work else (self._flush,)
        for step in steps:
            try:
                step()
            except Exception as exc:
                self._error(None, exc)
        if end_work:  # (a skipped end waits for nothing: the thread is a daemon, its compile dropped)
            if self.early.running():
                self.progress("the compile under way beside the end")
            self.early.join()
        self._guard(None, self.early.said)
        if not end_work:
            for s in self._states:  # as the planner lets go at its end
                if s.plan is not None:
                    s.plan.real = None
                    s.plan.abstract.clear()

    def _patch(self, jax) -> None:
        if self._patched:
            return
        self._jax = jax
        for name, wrapper in PATCHED:
            original = getattr(jax, name, None)
            if original is not None:
                ours = self._make_jit(original, wrapper)
                setattr(jax, name, ours)
                self._patched.append((name, original, ours))
        original_eval_shape = getattr(jax, "eval_shape", None)
        if original_eval_shape is not None:
            # JAX's eval_shape uses a jitted function's own static arguments
            # only when it is exactly a PjitFunction: give it the real one.
            @functools.wraps(original_eval_shape)
            def eval_shape(fun, *args, **kwargs):
                return original_eval_shape(fun._real if isinstance(fun, Probed) else fun, *args, **kwargs)

            jax.eval_shape = eval_shape
            self._patched.append(("eval_shape", original_eval_shape, eval_shape))
        core = sys.modules.get("jax._src.core")
        ctx, evaluating = getattr(core, "trace_ctx", None), getattr(core, "EvalTrace", None)
        if ctx is not None and evaluating is not None and hasattr(ctx, "trace"):
            self._tracing = lambda: not isinstance(ctx.trace, evaluating)
        self._tracer_type = getattr(getattr(jax, "core", None), "Tracer", ())
        own = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep  # jaxmemprof/
        for module in ("jax._src.traceback_util", "jax._src.source_info_util"):
            # JAX leaves its own frames out of the tracebacks of errors raised
            # through it, and out of the source lines it gives ops (jaxprs,
            # HLO locations, cache-miss explanations): leave jaxmemprof's out
            # too, so they read as under python.
            for path in (own, *self.exclude):
                try:
                    importlib.import_module(module).register_exclusion(path)
                except Exception:
                    pass
        try:
            import jax.monitoring as monitoring

            self._listener = compile_listener(weakref.ref(self))
            monitoring.register_event_duration_secs_listener(self._listener)
            self._monitoring = monitoring
        except Exception:  # an older JAX: snapshots still notice new compilations
            self._monitoring = None

    def _error(self, state, exc) -> None:
        """Reading a call failed: record it once per function and kind (a run
        event; the program's own output stays its own), and stop observing a
        function that keeps failing. The call itself goes on."""
        key = (state.function_id if state is not None else None, type(exc).__name__)
        if key not in self._errors_seen:
            self._errors_seen.add(key)
            where = f"function {state.function_id}: " if state is not None else ""
            try:
                self.writer.add_event("probe-error", f"{where}{described(exc)}"[:2000])
            except Exception:
                pass
        if state is not None:
            state.errors += 1
            if state.errors >= MAX_ERRORS:
                state.off = True

    def _guard(self, state, fn, *args):
        """``fn(*args)``, or None after recording its error (never failing the program)."""
        try:
            return fn(*args)
        except Exception as exc:
            self._error(state, exc)
            return None

    # -- the replacement for jax.jit and jax.pmap ------------------------------------

    def _make_jit(self, original, wrapper: str):
        probe = self

        @functools.wraps(original)
        def jit(*args, **kwargs):
            try:
                if not args and "fun" not in kwargs:  # @jax.jit(donate_argnums=...): a decorator factory
                    decorator = original(**kwargs)
                    caller = sys._getframe(1)

                    def decorate(fun):
                        try:
                            return probe._wrap(decorator(fun), fun, kwargs, caller, wrapper)
                        except BaseException as exc:
                            drop_own_frames(exc)
                            raise

                    return decorate
                fun = args[0] if args else kwargs["fun"]
                return probe._wrap(original(*args, **kwargs), fun, kwargs, sys._getframe(1), wrapper)
            except BaseException as exc:
                drop_own_frames(exc)
                raise

        return jit

    def _wrap(self, real, fun, kwargs, caller, wrapper):
        return self._observed(real, None, lambda: self._register(real, fun, kwargs, caller, wrapper))

    def _observed(self, real, owner, make_state):
        """A proxy for ``real`` with the state ``make_state()`` gives; ``real``
        itself when the probe is off or that fails (``owner``: the state of
        the function it copies, for the error)."""
        if not self.active:
            return real
        try:
            state = make_state()
        except Exception as exc:
            self._error(owner, exc)
            return real
        proxy = Probed(real, self, state)
        state.proxy = weakref.ref(proxy)
        return proxy

    def _register(self, real, fun, kwargs, caller, wrapper) -> FunctionState:
        site = Site(caller, fun, wrapper)
        target = site.function
        code = getattr(target, "__code__", None)
        jitted = signature_names(fun)
        donate_argnums = _normalise(kwargs.get("donate_argnums"))
        donate_argnames = _normalise(kwargs.get("donate_argnames"))
        jit_static_argnums = _normalise(kwargs.get(BY_NAME[wrapper].static_argnums))
        static_argnums = jit_static_argnums
        static_argnames = _normalise(kwargs.get("static_argnames"))
        arguments, params = plain_arguments, jitted
        library = BY_NAME.get(site.wrapper)
        if library is not None and library.jits_its_own(jitted):
            # The wrapper jits a function of its own (equinox: over arrays
            # donated, arrays not donated, the rest; donation is its "donate"
            # option): the user's arguments are read from that call.
            arguments, params = library.arguments, signature_names(target)
            donate_argnums, donate_argnames, static_argnums = [], [], []
        frame = site.frame
        row = {
            "name": getattr(target, "__name__", type(target).__name__),
            "qualname": getattr(target, "__qualname__", getattr(target, "__name__", "")),
            "file": code.co_filename if code else "",
            "line": code.co_firstlineno if code else 0,
            "jit_file": frame.f_code.co_filename if frame else "",
            "jit_line": frame.f_lineno if frame else 0,
            "jit_function": frame.f_code.co_name if frame else "",
            "jit_source": _source_line(frame),
            "params": json.dumps(params),
            "donate_argnums": json.dumps(donate_argnums),
            "donate_argnames": json.dumps(donate_argnames),
            "static_argnums": json.dumps(static_argnums),
            "static_argnames": json.dumps(static_argnames),
            "t_wall": time.time(),
            "wrapper": site.wrapper,
            "wrapper_options": json.dumps(site.options),
        }
        state = self._add_function(row, params, donate_argnums, donate_argnames, arguments, cache_size(real) < 0,
                                   is_user_function(target))
        state.jit_static = (jit_static_argnums, _normalise(kwargs.get("static_argnames")), jitted)
        if state.user:
            state.plan = self.planner.slot(BY_NAME[wrapper].patches, kwargs)
        return state

    def _add_function(self, row: dict, *state_args) -> FunctionState:
        """A new function id, its jit_functions row, and its state."""
        with self._lock:
            fid = self._next_function
            self._next_function += 1
        row = {"function_id": fid, **row}
        self._names.add(row.get("name"))
        self.writer.add_jit_function(row)
        *args, user = state_args
        state = FunctionState(fid, *args)
        state.user, state.row = user, row
        state.static_argnums = json.loads(row.get("static_argnums") or "[]")
        state.static_argnames = json.loads(row.get("static_argnames") or "[]")
        library = BY_NAME.get(row.get("wrapper"))
        state.static_leaves = library is not None and library.static_leaves
        if state.donate_argnums or state.donate_argnames or json.loads(row.get("wrapper_options") or "{}").get(
                "donate", "none") != "none":
            # After its first call a donating function's arguments are deleted:
            # analyse that call before it runs (the compile is then shared).
            state.analyse_next = True
        self._states.append(state)
        return state

    def copy_of(self, proxy: Probed, real):
        """A copy of a jitted function (copy.copy, copy.deepcopy): a jitted
        function of its own (its own compile cache), observed as the original
        is, under a new function id."""
        old = proxy._state
        row = {k: v for k, v in old.row.items() if k != "function_id"}
        def make_state():
            state = self._add_function(dict(row, t_wall=time.time()), old.param_names, old.donate_argnums,
                                       old.donate_argnames, old.arguments, old.by_signature, old.user)
            state.jit_static = old.jit_static
            if old.plan is not None:
                state.plan = self.planner.slot(old.plan.jit, old.plan.options)
            return state

        return self._observed(real, old, make_state)

    def adopt(self, proxy: Probed) -> bool:
        """Observe ``proxy``, a function another probe made (a notebook's
        kernel-wide probe, notebook/kernel.py), as one of this probe's own from
        its next call: a new function id, its own samples. Its compiles so far
        are not this probe's: XLA's figures of the first signature it runs are
        read at that call. False where it cannot be observed."""
        copy = self.copy_of(proxy, proxy._real)
        if not isinstance(copy, Probed):  # the probe is off, or reading the function failed
            return False
        state = copy._state
        state.proxy = weakref.ref(proxy)
        state.cache = cache_size(proxy._real)
        state.analyse_next = True
        proxy._probe, proxy._state = self, state
        proxy.__class__ = Probed
        return True

    def hand_back(self, owner) -> list:
        """After :meth:`uninstall`: every live proxy this probe observes goes,
        quiet, to ``owner`` (the probe that made it); returns them."""
        out = []
        for state in list(self._states):
            proxy = state.proxy() if state.proxy is not None else None
            if isinstance(proxy, Probed) and proxy._probe is self:
                proxy.__class__ = QuietProbed
                proxy._probe = owner
                out.append(proxy)
        return out

    def forget_dropped(self) -> None:
        """Forget the functions the program dropped (their states)."""
        self._states[:] = [s for s in self._states if s.proxy is not None and s.proxy() is not None]

    # -- a call --------------------------------------------------------------------

    def call(self, real, state: FunctionState, args, kwargs):
        if not self.active or state.off:
            return real(*args, **kwargs)
        if self._traced(args, kwargs):
            # Called while grad, vmap, scan or an outer jit traces: no device
            # call happens, and its arguments are tracers.
            state.traced += 1
            return real(*args, **kwargs)
        state.calls += 1
        if self.on_step is not None:
            self.stepped(state)
        failed = None
        new_signature = False
        if state.pending is not None:
            self._guard(state, self._check_liveness, state)
            self._guard(state, self.early.sampled, state)
        if self._sync_cache(state):
            # Compiled while quiet, for arguments not known: analyse the first
            # of the next HUNT_CALLS calls whose signature is not analysed yet.
            state.analyse_next, state.hunt = True, HUNT_CALLS
        if state.analyse_next:
            signature = self._guard(state, self._signature, state, args, kwargs)
            if signature is None:
                state.analyse_next = state.hunt = 0
            elif state.hunt > 0 and signature in state.signatures:
                state.hunt -= 1
                state.analyse_next = state.hunt > 0
            else:
                state.analyse_next, state.hunt = False, 0
                new_signature = True
                try:
                    self._memory_analysis(real, state, args, kwargs)
                except Exception as exc:  # the program's own error, if the call raises it too
                    failed = exc
        # The first calls (the first included: its inputs are often what the
        # program set up, and may be kept), then one in sample_every; and the
        # first call of each signature analysed, so that each has the bytes
        # live before it.
        sample = new_signature or state.samples < self.max_samples and (
            state.resample or state.calls <= self.sample_first + 1 or state.calls % self.sample_every == 0)
        before = cache_size(real)
        inputs = abstract = None
        if sample:
            signature = self._guard(state, self._signature, state, args, kwargs)
            inputs = self._guard(state, self._describe_inputs, state, args, kwargs)
            if inputs is not None:
                inputs += (signature, self._live_before(state))
                if state.plan is not None:  # its arguments' shapes (plan, whatif), before a donating call deletes them
                    abstract = self._guard(state, self.planner.abstract, state, args, kwargs, inputs)
        calling = self._calling
        outer, calling.state = getattr(calling, "state", None), state
        in_call = self.in_call
        in_call[state.function_id] = in_call.get(state.function_id, 0) + 1
        live = self._guard(state, self.live.before, state) if state.user else None
        try:  # in flight until the probe's work on the call is done too (its inputs and outputs alive)
            try:
                out = real(*args, **kwargs)
            except BaseException as exc:  # out of memory: the call kept, for what fits at the end (oom.py)
                self._guard(state, oom_failed, self, state, exc, real, args, kwargs, inputs, abstract)
                raise
            finally:
                calling.state = outer
            if failed is not None:  # the call went well: reading it failed on its own
                self._error(state, failed)
            if not state.by_signature:
                state.cache = cache_size(real)
                if state.cache > before:
                    state.compiles += 1
                    # With donated (now deleted) arguments the AOT path cannot run
                    # again on them: analyse at the next call instead, before it runs.
                    if not self._guard(state, self._memory_analysis, real, state, args, kwargs, True):
                        state.analyse_next = True
            if inputs is not None:
                # After the call: a signature compiled by it is analysed by now.
                self._guard(state, self._mark_pruned, state, inputs, args, kwargs)
                self._guard(state, self._record_call, state, inputs, out)
                if abstract is not None:
                    self._guard(state, self.planner.keep, state, abstract, real)
            if live is not None:
                self._guard(state, self.live.after, state, live,
                            (inputs[3] if inputs else None) or only_signature(state), bool(inputs and inputs[4] is not None))
            state.quiet = (state.samples >= self.max_samples and state.pending is None and not state.analyse_next) \
                or state.off
            return out
        finally:
            in_call[state.function_id] -= 1
            self.call_ended = time.monotonic()

    def stepped(self, state: FunctionState) -> None:
        """A device call of ``state``'s function begins: counted as a step (state.step_of), its
        snapshot taken between the program's steps (the last one's outputs in its hands)."""
        if self.on_step is not None and self.active:
            self._step = step_of(self._step, state)
            if self._step is state and not self.on_step(state.row.get("name", "") if state.row else ""):
                self.on_step = None  # the program marks its steps itself

    def _traced(self, args, kwargs) -> bool:
        if self._tracing is not None:
            return self._tracing()
        # No trace state to ask (another JAX version): look for tracers.
        try:
            return any(isinstance(x, self._tracer_type) for x in self._jax.tree_util.tree_leaves((args, kwargs)))
        except Exception:
            return False

    def _check_liveness(self, state):
        """Record what became of the last sampled call's input leaves by the
        time the function was called again, or the run ended
        (``liveness.call_fates``)."""
        call_id, refs, deaths, windows = state.pending
        state.pending = None
        fates = call_fates(refs, deaths, windows, self.observer)
        if fates is None:
            # The program dropped a leaf while the sampler held it: where
            # cannot be told. This call says nothing; the next one is
            # sampled instead.
            state.samples -= 1
            state.resample = True
            return
        self.writer.set_jit_liveness(call_id, json.dumps(fates))

    def _flush(self):
        for state in self._states:
            self._sync_cache(state)
            if state.pending is not None:
                self._check_liveness(state)
        self.live.flush(self._states)
        self.outside.flush(self.writer, self._calls_seen())
        self.writer.set_jit_counts([(s.function_id, s.calls, s.compiles, int(s.counted_all), s.traced,
                                     s.backend_compiles) for s in self._states])

    def _calls_seen(self) -> int:
        """The calls of the user's jitted functions seen so far (calllive's count)."""
        return sum(s.seen for s in self._states)

    def calls_in_flight(self) -> list:
        """The functions a call of which is in progress (in the sampling
        thread, as a snapshot starts): a snapshot then sees a moment of that
        call, its inputs resharded or its outputs made."""
        return [fid for fid, n in list(self.in_call.items()) if n > 0]

    def on_snapshot(self) -> None:
        if self.active:
            self._guard(None, self.poll)

    def poll(self) -> None:
        """At every snapshot: a quiet function whose compile cache grew is
        observed again (the compile event listener usually said so already);
        functions the program dropped are forgotten (and the lowering kept
        for their dump, which may hold large constants, freed)."""
        dropped = [s for s in self._states if s.largest is not None and s.proxy() is None]
        # The lowerings of the largest few are kept for their dump at the end
        # (a function jitted in main() is dropped when main() returns, before
        # the end); the rest are freed: a lowering may hold large constants.
        for state in sorted(dropped, key=lambda s: -s.largest[0])[_KEEP_DROPPED:]:
            state.largest = None
        for state in list(self._quiet):
            proxy = state.proxy()
            seen = state.cache
            if proxy is None:
                self._quiet.discard(state)
            elif cache_size(proxy._real) != seen:
                self._wake(state, unless_synced_from=seen)

    def on_compile(self, event: str = "", seconds: float = 0.0, fun_name=None) -> None:
        """A JAX compile event: an XLA compile is counted for the function
        whose call this thread is in, if any (else, one of JAX's own, an
        operation run outside jit, is kept: ``OutsideJit``); which function
        compiled is not said otherwise, so every quiet function is observed
        again until its next call, and functions without a compile cache to
        watch look for a new signature."""
        if not self.active:
            return
        state = getattr(self._calling, "state", None)
        if event.endswith("/backend_compile_duration"):
            if state is not None:
                state.backend_compiles += 1
                state.compile_s += float(seconds) if isinstance(seconds, (int, float)) else 0.0
            elif isinstance(fun_name, str):
                self._guard(None, lambda: self.outside.compiled(fun_name, self._names, self._calls_seen()))
        for state in list(self._quiet):
            self._wake(state)
        for state in self._states:
            if state.by_signature and not state.off:
                state.analyse_next, state.hunt = True, HUNT_CALLS

    def _wake(self, state: FunctionState, unless_synced_from: int | None = None) -> None:
        """Observe a quiet function again, from its next call. From a
        snapshot's poll (another thread), ``unless_synced_from``: the cache
        size the poll saw as the function's; if a call has counted the new
        compilation since (and gone quiet again), the wake-up is stale and
        is not made: it would sample one call more, as a loaded machine's
        timing has it (seen: 22 sampled calls of a program that gets 21)."""
        if unless_synced_from is not None and state.cache != unless_synced_from:
            return
        self._quiet.discard(state)
        state.quiet = False
        proxy = state.proxy()
        if proxy is not None and isinstance(proxy, QuietProbed):  # QuietCounted and QuietStep too
            proxy.__class__ = Probed

    @staticmethod
    def _sync_cache(state: FunctionState) -> bool:
        """Count the compilations made while the function was quiet; True if
        there were any."""
        if state.by_signature:
            return False
        proxy = state.proxy()
        if proxy is None:
            return False
        size = cache_size(proxy._real)
        if size == state.cache:
            return False
        if size > state.cache:
            state.compiles += size - state.cache
        state.cache = size  # smaller: JAX's caches were cleared
        return True

