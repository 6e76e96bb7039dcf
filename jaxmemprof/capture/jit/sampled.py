"""What a sampled call of a jitted function records (the probe's, capture/jit/probe.py):
every array leaf of its arguments, mapped to the user's arguments and named as
the program's libraries name them; the bytes live on each device just before
it; and, once it returned, its outputs and the call's row in the journal, with
what the next call checks of each input leaf (liveness.py)."""

from __future__ import annotations

import json
import sys
import time
import weakref
from typing import Any

from jaxmemprof.capture.arrays import is_deleted as _is_deleted
from jaxmemprof.capture.jit.frames import user_frame
from jaxmemprof.capture.jit.liveness import frame_windows, on_death
from jaxmemprof.capture.jit.owners import Previous, host_leaf as _host_leaf, leaf as _leaf, path_text
from jaxmemprof.facts.libraries import names as library_names, owners as library_owners, tags as library_tags


class SampledCalls:
    """The probe's recording of its sampled calls (a mixin of JitProbe, whose
    fields it reads: _jax, observer, writer, _lock, _next_call,
    _live_before_left)."""

    _jax: Any
    _tracer_type: Any
    observer: Any
    writer: Any
    _lock: Any
    _next_call: int
    _live_before_left: int

    def _is_array(self, x) -> bool:
        return isinstance(x, self._jax.Array) and not isinstance(x, self._tracer_type)

    def _describe_inputs(self, state, args, kwargs):
        tu = self._jax.tree_util
        leaves: list = []
        refs: list = []
        deaths: dict[int, tuple] = {}
        first: dict[int, int] = {}  # id of an array -> its first leaf: one array passed twice cannot be donated twice
        # Where each leaf came from, when the previous call was sampled too;
        # its owner and tag as the program's libraries name them (owners.py).
        previous = state.previous if state.previous is not None and state.previous.call == state.calls - 1 else None
        library = library_owners(state.row.get("wrapper"), sys._getframe(2))
        ndarray = getattr(sys.modules.get("numpy"), "ndarray", ())  # the program's numpy, if it has one
        arguments = list(state.arguments(state, args, kwargs))
        # what a library names that JAX knows only by flat index (equinox's State: by the model's StateIndex)
        named = library_names(tu, [(name, value) for _, name, _, _, value in arguments])
        for position, name, keyword, donated, value in arguments:
            tags = library_tags(tu, value)
            for path, leaf in tu.tree_flatten_with_path(value)[0]:
                key = path_text(tu, value, path)
                if self._is_array(leaf):
                    d = _leaf(leaf, key)
                elif ndarray and isinstance(leaf, ndarray):
                    d = _host_leaf(leaf, key)  # a numpy argument: copied to the device for the call
                else:
                    continue
                d.update(arg=position, name=name, kw=keyword, donated=bool(donated),
                         same_as=first.setdefault(id(leaf), len(leaves)))
                owner, tag = library.get(id(leaf), (named.get(id(leaf)) or f"{name}{key}", tags.get(id(leaf))))
                d["owner"] = owner
                if tag is not None:
                    d["tag"] = tag
                if previous is not None:
                    d["from"] = previous.origin(leaf)
                leaves.append(d)
                try:
                    refs.append(weakref.ref(leaf, on_death(len(refs), deaths, self.observer)))
                except TypeError:
                    refs.append(None)
        return leaves, refs, deaths

    def _live_before(self, state):
        """The bytes live on each device just before a sampled call of a
        user's function (JSON), so that the call's true peak does not depend
        on when the sampler last looked; None past LIVE_BEFORE_CALLS."""
        observer = self.observer
        if observer is None or not state.user or self._live_before_left <= 0:
            return None
        self._live_before_left -= 1
        live = observer.live_bytes_by_device()
        return None if live is None else json.dumps(live, sort_keys=True)

    def _record_call(self, state, inputs, out):
        leaves, refs, deaths, signature, live_before = inputs
        tu = self._jax.tree_util
        flat = [(path, leaf) for path, leaf in tu.tree_flatten_with_path(out)[0] if self._is_array(leaf)]
        outputs = [_leaf(leaf, path_text(tu, out, path)) for path, leaf in flat]
        state.previous = Previous(state.calls, refs, [leaf for _, leaf in flat])
        for d, r in zip(leaves, refs):
            obj = r() if r is not None else None
            d["deleted_after"] = bool(obj is not None and _is_deleted(obj))
        frame = user_frame(sys._getframe(1))
        with self._lock:
            call_id = self._next_call
            self._next_call += 1
        self.writer.add_jit_call((
            call_id, state.function_id, state.calls, time.time(), time.monotonic(),
            frame.f_code.co_filename if frame else "", frame.f_lineno if frame else 0,
            frame.f_code.co_name if frame else "",
            json.dumps(leaves), json.dumps(outputs), None if signature is None else signature, live_before,
        ))
        state.samples += 1
        state.resample = False
        state.pending = (call_id, refs, deaths, frame_windows(frame))

