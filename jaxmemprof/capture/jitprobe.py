"""Observe the program's jitted functions without changing what they compute.

``jax.jit`` is replaced, in the ``jax`` module only (JAX's own internals keep
the original), by a function returning a thin proxy around the real jitted
function. The proxy records:

- per function: name, where it is defined and where ``jax.jit`` was applied,
  its ``donate_argnums/argnames`` and ``static_argnums/argnames``;
- per compiled signature: XLA's ``memory_analysis()`` (arguments, outputs,
  alias, temporaries, generated code), read through the AOT path with the
  same arguments, which hits the compile cache;
- for a sample of calls after the first: every array leaf of the arguments
  (argument position and name, pytree path, shape, dtype, sharding, device
  bytes, donated or not) and of the outputs, and, checked at the function's
  next call, whether each input leaf was still held by the caller.

Once a function's samples are taken its proxy becomes a ``_QuietProbed``,
whose calls reach the jitted function with no Python code in between (and
are no longer counted); a JAX compile event, or a snapshot that finds the
function's compile cache grown, turns it back, and the first of the next
1,000 calls with a signature not analysed yet is analysed. Nothing here
imports jax: the probe is installed when the program imports it.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import inspect
import json
import math
import operator
import os
import sys
import threading
import time
import types
import weakref

from jaxmemprof.capture.sampler import is_deleted as _is_deleted

_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SKIP_FILES = (os.path.abspath(functools.__file__),)


def _caller_frame(depth: int = 2):
    """The first frame outside jaxmemprof and functools."""
    f = sys._getframe(depth)
    while f is not None:
        fn = os.path.abspath(f.f_code.co_filename)
        if not fn.startswith(_OWN_DIR) and fn not in _SKIP_FILES:
            return f
        f = f.f_back
    return None


def _normalise(value) -> list:
    if value is None:
        return []
    if isinstance(value, (int, str)):
        return [value]
    return list(value)


class _FunctionState:
    __slots__ = ("function_id", "calls", "samples", "pending", "compiles", "analyse_next", "hunt", "signatures",
                 "param_names", "donate_argnums", "donate_argnames", "cache", "quiet", "proxy",
                 "counted_all")

    def __init__(self, function_id, param_names, donate_argnums, donate_argnames):
        self.function_id = function_id
        self.calls = 0
        self.samples = 0
        self.pending = None  # (call_id, [weakrefs]) of the last sampled call
        self.compiles = 0
        self.analyse_next = False
        self.hunt = 0  # calls left to find a signature compiled while quiet
        self.signatures: set = set()  # signatures analysed
        self.param_names = param_names
        self.donate_argnums = donate_argnums
        self.donate_argnames = donate_argnames
        self.cache = 0  # the jitted function's compile-cache size after the last call
        self.quiet = False  # all samples taken: calls go straight to the jitted function
        self.proxy = None  # weak reference to its Probed (never to the jitted function itself,
        # which the program may drop, with everything its closure holds)
        self.counted_all = True  # every call counted (False once it went quiet)


class JitProbe:
    """Install with :meth:`install`; every function jitted afterwards through
    ``jax.jit`` is observed. ``sample_first``: calls sampled after the
    first; then one call in ``sample_every``; at most ``max_samples`` per
    function."""

    def __init__(self, writer, *, sample_first: int = 3, sample_every: int = 50, max_samples: int = 20):
        self.writer = writer
        self.sample_first = sample_first
        self.sample_every = sample_every
        self.max_samples = max_samples
        self.active = True
        self.failed = False
        self._original_jit = None
        self._jax = None
        self._hook = None
        self._jit_fn = None
        self._monitoring = None
        self._listener = None
        self._quiet: set = set()  # states whose calls go straight to the jitted function
        self._next_function = 1
        self._next_call = 1
        self._lock = threading.Lock()
        self._states: list[_FunctionState] = []
        self.warned = False

    # -- installing ----------------------------------------------------------------

    def install(self) -> None:
        jax = sys.modules.get("jax")
        if jax is not None and hasattr(jax, "jit"):
            self._patch(jax)
            return
        self._hook = _PostImportHook("jax", self._patch)
        sys.meta_path.insert(0, self._hook)

    def uninstall(self) -> None:
        """Stop observing (proxies made so far keep working, unprobed) and
        record the final call counts and pending liveness checks."""
        self.active = False
        if self._hook is not None and self._hook in sys.meta_path:
            sys.meta_path.remove(self._hook)
        if self._jax is not None and self._original_jit is not None:
            if getattr(self._jax, "jit", None) is self._jit_fn:
                self._jax.jit = self._original_jit
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
        self._guard(self._flush)

    def _patch(self, jax) -> None:
        if self._original_jit is not None:
            return
        self._jax = jax
        self._original_jit = jax.jit
        self._jit_fn = self._make_jit(jax.jit)
        jax.jit = self._jit_fn
        try:
            import jax.monitoring as monitoring

            self._listener = _compile_listener(weakref.ref(self))
            monitoring.register_event_duration_secs_listener(self._listener)
            self._monitoring = monitoring
        except Exception:  # an older JAX: snapshots still notice new compilations
            self._monitoring = None

    def _guard(self, fn, *args):
        """Run ``fn``; on any error stop probing (warn once), never failing
        the program."""
        if self.failed:
            return None
        try:
            return fn(*args)
        except Exception as exc:
            self.failed = True
            if not self.warned:
                self.warned = True
                sys.stderr.write(f"jaxmemprof: warning: jit probe stopped: {type(exc).__name__}: {exc}\n")
                try:
                    self.writer.add_event("probe-error", f"{type(exc).__name__}: {exc}")
                except Exception:
                    pass
            return None

    # -- the replacement for jax.jit -----------------------------------------------

    def _make_jit(self, original):
        probe = self

        @functools.wraps(original)
        def jit(*args, **kwargs):
            if not args:  # @jax.jit(donate_argnums=...): a decorator factory
                decorator = original(**kwargs)
                frame = _caller_frame()

                def decorate(fun):
                    return probe._wrap(decorator(fun), fun, kwargs, frame)

                return decorate
            return probe._wrap(original(*args, **kwargs), args[0], kwargs, _caller_frame())

        return jit

    def _wrap(self, real, fun, kwargs, frame):
        if not self.active or self.failed:
            return real
        state = self._guard(self._register, fun, kwargs, frame)
        if state is None:
            return real
        proxy = Probed(real, self, state)
        state.proxy = weakref.ref(proxy)
        return proxy

    def _register(self, fun, kwargs, frame) -> _FunctionState:
        target = inspect.unwrap(fun) if callable(fun) else fun
        code = getattr(target, "__code__", None)
        try:
            params = list(inspect.signature(fun).parameters)
        except (TypeError, ValueError):
            params = []
        donate_argnums = _normalise(kwargs.get("donate_argnums"))
        donate_argnames = _normalise(kwargs.get("donate_argnames"))
        with self._lock:
            fid = self._next_function
            self._next_function += 1
        self.writer.add_jit_function((
            fid,
            getattr(target, "__name__", type(target).__name__),
            getattr(target, "__qualname__", getattr(target, "__name__", "")),
            code.co_filename if code else "",
            code.co_firstlineno if code else 0,
            frame.f_code.co_filename if frame else "",
            frame.f_lineno if frame else 0,
            frame.f_code.co_name if frame else "",
            json.dumps(params),
            json.dumps(donate_argnums),
            json.dumps(donate_argnames),
            json.dumps(_normalise(kwargs.get("static_argnums"))),
            json.dumps(_normalise(kwargs.get("static_argnames"))),
            time.time(),
        ))
        state = _FunctionState(fid, params, donate_argnums, donate_argnames)
        self._states.append(state)
        return state

    # -- a call --------------------------------------------------------------------

    def call(self, real, state: _FunctionState, args, kwargs):
        if not self.active or self.failed:
            return real(*args, **kwargs)
        state.calls += 1
        if state.pending is not None:
            self._guard(self._check_liveness, state)
        if self._sync_cache(state):
            # Compiled while quiet, for arguments not known: analyse the first
            # of the next HUNT_CALLS calls whose signature is not analysed yet.
            state.analyse_next, state.hunt = True, HUNT_CALLS
        if state.analyse_next:
            signature = self._guard(self._signature, args, kwargs)
            if state.hunt > 0 and signature in state.signatures:
                state.hunt -= 1
                state.analyse_next = state.hunt > 0
            else:
                state.analyse_next, state.hunt = False, 0
                self._guard(self._memory_analysis, real, state, args, kwargs)
        sample = state.calls > 1 and state.samples < self.max_samples and (
            state.samples < self.sample_first or state.calls % self.sample_every == 0)
        before = _cache_size(real)
        inputs = self._guard(self._describe_inputs, state, args, kwargs) if sample else None
        out = real(*args, **kwargs)
        state.cache = _cache_size(real)
        if state.cache > before:
            state.compiles += 1
            # With donated (now deleted) arguments the AOT path cannot run
            # again on them: analyse at the next call instead, before it runs.
            if not self._guard(self._memory_analysis, real, state, args, kwargs, True):
                state.analyse_next = True
        if inputs is not None:
            self._guard(self._record_call, state, inputs, out)
        state.quiet = state.samples >= self.max_samples and state.pending is None and not state.analyse_next
        return out

    def _describe_inputs(self, state, args, kwargs):
        tu = self._jax.tree_util
        Array = self._jax.Array
        leaves, refs = [], []
        deaths: dict[int, tuple] = {}
        names = state.param_names
        for where, value in [(i, a) for i, a in enumerate(args)] + list(kwargs.items()):
            if isinstance(where, int):
                name = names[where] if where < len(names) else ""
                donated = where in state.donate_argnums or name in state.donate_argnames
            else:
                name = where
                donated = where in state.donate_argnames or (
                    where in names and names.index(where) in state.donate_argnums)
            for path, leaf in tu.tree_flatten_with_path(value)[0]:
                if not isinstance(leaf, Array):
                    continue
                d = _leaf(leaf, tu.keystr(path))
                d.update(arg=where if isinstance(where, int) else None, name=name, kw=not isinstance(where, int),
                         donated=bool(donated))
                leaves.append(d)
                try:
                    refs.append(weakref.ref(leaf, _on_death(len(refs), deaths)))
                except TypeError:
                    refs.append(None)
        return leaves, refs, deaths

    def _record_call(self, state, inputs, out):
        leaves, refs, deaths = inputs
        tu = self._jax.tree_util
        Array = self._jax.Array
        outputs = [_leaf(leaf, tu.keystr(path)) for path, leaf in tu.tree_flatten_with_path(out)[0]
                   if isinstance(leaf, Array)]
        for d, r in zip(leaves, refs):
            obj = r() if r is not None else None
            d["deleted_after"] = bool(obj is not None and _is_deleted(obj))
        frame = _caller_frame()
        with self._lock:
            call_id = self._next_call
            self._next_call += 1
        self.writer.add_jit_call((
            call_id, state.function_id, state.calls, time.time(), time.monotonic(),
            frame.f_code.co_filename if frame else "", frame.f_lineno if frame else 0,
            frame.f_code.co_name if frame else "",
            json.dumps(leaves), json.dumps(outputs),
        ))
        state.samples += 1
        where = (frame.f_code, frame.f_lineno) if frame is not None else None
        state.pending = (call_id, refs, deaths, where)

    def _check_liveness(self, state):
        """What became of the last sampled call's input leaves by the time the
        function was called again (or the run ended): ``held`` (still
        referenced), ``dropped`` (freed by the very statement that made the
        call, as in ``state = step(state)``: nothing can have used it after
        the call), ``dropped-later`` (freed by a later statement, which may
        have used it), ``deleted`` (donated) or ``unknown``."""
        call_id, refs, deaths, where = state.pending
        state.pending = None
        fates = []
        for i, r in enumerate(refs):
            obj = r() if r is not None else None
            if r is None:
                fates.append("unknown")
            elif obj is not None:
                fates.append("deleted" if _is_deleted(obj) else "held")
            elif i in deaths:
                code, line = deaths[i]
                same = where is not None and code is where[0] and where[1] - _STATEMENT_LINES <= line <= where[1]
                fates.append("dropped" if same else "dropped-later")
            else:
                fates.append("unknown")
        self.writer.set_jit_liveness(call_id, json.dumps(fates))

    def _memory_analysis(self, real, state, args, kwargs, after_call: bool = False) -> bool:
        if after_call and any(_is_deleted(leaf) for leaf in self._array_leaves((args, kwargs))):
            return False
        compiled = real.lower(*args, **kwargs).compile()
        ma = compiled.memory_analysis()
        fields = ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes",
                  "temp_size_in_bytes", "generated_code_size_in_bytes", "host_argument_size_in_bytes",
                  "host_output_size_in_bytes", "host_alias_size_in_bytes", "host_temp_size_in_bytes",
                  "host_generated_code_size_in_bytes", "peak_memory_in_bytes")
        values = [_int_or_none(getattr(ma, f, None)) if ma is not None else None for f in fields]
        signature = self._signature(args, kwargs)
        state.signatures.add(signature)
        self.writer.add_jit_compile((state.function_id, state.calls, time.time(), signature[:2000], *values))
        return True

    def _signature(self, args, kwargs) -> str:
        return ", ".join(f"{d['dtype']}[{','.join(map(str, d['shape']))}]"
                         for d in (_leaf(x, "") for x in self._array_leaves((args, kwargs))))

    def _array_leaves(self, tree):
        Array = self._jax.Array
        return [x for x in self._jax.tree_util.tree_leaves(tree) if isinstance(x, Array)]

    def _flush(self):
        for state in self._states:
            self._sync_cache(state)
            if state.pending is not None:
                self._check_liveness(state)
        self.writer.set_jit_counts([(s.function_id, s.calls, s.compiles, int(s.counted_all))
                                    for s in self._states])

    def on_snapshot(self) -> None:
        if self.active:
            self._guard(self.poll)

    def poll(self) -> None:
        """At every snapshot: a quiet function whose compile cache grew is
        observed again (the compile event listener usually said so already);
        functions the program dropped are forgotten."""
        for state in list(self._quiet):
            proxy = state.proxy()
            if proxy is None:
                self._quiet.discard(state)
            elif _cache_size(proxy._real) != state.cache:
                self._wake(state)

    def on_compile(self) -> None:
        """A JAX compile event: some function compiled, which one is not
        said; every quiet function is observed again until its next call."""
        if self.active:
            for state in list(self._quiet):
                self._wake(state)

    def _wake(self, state: "_FunctionState") -> None:
        """Observe a quiet function again, from its next call."""
        self._quiet.discard(state)
        state.quiet = False
        proxy = state.proxy()
        if proxy is not None and type(proxy) is _QuietProbed:
            proxy.__class__ = Probed

    @staticmethod
    def _sync_cache(state: "_FunctionState") -> bool:
        """Count the compilations made while the function was quiet; True if
        there were any."""
        proxy = state.proxy()
        if proxy is None:
            return False
        size = _cache_size(proxy._real)
        if size == state.cache:
            return False
        if size > state.cache:
            state.compiles += size - state.cache
        state.cache = size  # smaller: JAX's caches were cleared
        return True


# After a compilation that happened while a function was quiet, how many calls
# the probe watches for the new signature (its arguments are not known).
HUNT_CALLS = 1000

# A statement spanning lines stores its result on its first line, before the
# line of the call inside it: how far back a death still counts as "at the call".
_STATEMENT_LINES = 10


def _on_death(index: int, deaths: dict):
    """A weakref callback noting where (code, line) an input leaf was freed."""

    def died(_ref):
        try:
            f = sys._getframe(1)
        except ValueError:  # freed with no Python frame running (interpreter exit)
            return
        while f is not None and os.path.abspath(f.f_code.co_filename).startswith(_OWN_DIR):
            f = f.f_back
        if f is not None:
            deaths[index] = (f.f_code, f.f_lineno)

    return died


class Probed:
    """Stands for a jitted function: calls go through the probe; everything
    else (``.lower``, ``.trace``, ``.eval_shape``, attributes) goes to it."""

    __slots__ = ("_real", "_probe", "_state", "__weakref__", "__dict__")

    def __init__(self, real, probe, state):
        self._real = real
        self._probe = probe
        self._state = state
        try:
            functools.update_wrapper(self, real)
        except (AttributeError, TypeError):
            pass

    def __call__(self, *args, **kwargs):
        state = self._state
        out = self._probe.call(self._real, state, args, kwargs)
        if state.quiet and self._probe.active:
            # Sampling done: from now on calls go straight to the jitted
            # function, at no cost; JitProbe.poll watches for new compilations.
            state.counted_all = False
            self.__class__ = _QuietProbed  # first: a wake-up in between then still turns it back
            self._probe._quiet.add(state)
        return out

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        return types.MethodType(self, instance)

    def __getattr__(self, name):
        return getattr(self._real, name)

    def __repr__(self):
        return repr(self._real)

    def __hash__(self):
        return hash(self._real)

    def __eq__(self, other):
        return self._real == (other._real if isinstance(other, Probed) else other)


def _compile_listener(probe_ref):
    """A jax.monitoring listener that wakes the probe's quiet functions on
    JAX's compile events, holding the probe weakly."""

    def listener(event: str, *args, **kwargs) -> None:
        probe = probe_ref()
        if probe is not None and event.startswith("/jax/core/compile/"):
            probe.on_compile()

    return listener


class _QuietProbed(Probed):
    """A Probed whose sampling is done: calling it calls the jitted function
    with no Python code in between (``__call__`` is looked up on the type
    and resolves, through a C-level getter, to the jitted function)."""

    __slots__ = ()
    __call__ = property(operator.attrgetter("_real"))


def _leaf(a, path: str) -> dict:
    shape = [int(d) for d in a.shape]
    dtype = str(a.dtype)
    sharding = a.sharding
    try:
        shard = sharding.shard_shape(a.shape)
        per_shard = math.prod(shard) * a.dtype.itemsize
        device_bytes = per_shard * len(sharding.addressable_devices)
    except Exception:
        device_bytes = int(a.nbytes)
    return {
        "path": path, "shape": shape, "dtype": dtype,
        "sharding": type(sharding).__name__ + (f"({sharding.spec})" if hasattr(sharding, "spec") else ""),
        "memory_kind": getattr(sharding, "memory_kind", None),
        "devices": len(getattr(sharding, "addressable_devices", ()) or ()) or 1,
        "bytes": int(device_bytes),
    }


def _cache_size(real) -> int:
    try:
        return int(real._cache_size())
    except Exception:
        return 0


def _int_or_none(v):
    try:
        return None if v is None else int(v)
    except (TypeError, ValueError):
        return None


class _PostImportHook(importlib.abc.MetaPathFinder):
    """Calls ``callback(module)`` right after ``name`` is first imported,
    before the importer gets it back."""

    def __init__(self, name: str, callback):
        self.name = name
        self.callback = callback

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                loader = spec.loader
                callback = self.callback
                hook = self

                class _Loader(importlib.abc.Loader):
                    def create_module(self, spec):
                        return loader.create_module(spec)

                    def exec_module(self, module):
                        module.__loader__ = module.__spec__.loader = loader
                        loader.exec_module(module)
                        if hook in sys.meta_path:
                            sys.meta_path.remove(hook)
                        callback(module)

                spec.loader = _Loader()
                return spec
        return None
