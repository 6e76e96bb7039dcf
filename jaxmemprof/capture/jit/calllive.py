"""The bytes live before every call of a jitted function, counted cheaply
(docs/advice.md, "The true peak over every call").

The probe samples a few calls of each function in full (their leaves, what
became of them); the true peak needs every call: a call that no sample saw
may run beside arrays the program keeps by then. So each call the probe
sees (every call of a user's function: sampled, or once quiet through
``QuietCounted``) counts the bytes live on each device just before it, from
``jax.live_arrays()`` with each array's bytes per device kept from the first
time it is seen until it dies (looked up by id in C, ``map``, where reading
its sharding costs about 0.6 µs an array).

What is written (the journal's ``jit_call_live``): a row only where a
function's call finds more live on a device than any of its calls before
(the calls that may hold its largest true peak: the model takes the largest
over them), each with the call's number and the signature it ran where the
function has only one; and at the end, a row per function with the calls
seen and counted. The count's cost is held to ``SHARE`` of the run's wall
time (after ``FREE_S`` seconds of it): past that a call is not counted, and
the report says that its figure is a lower bound.
"""

from __future__ import annotations

import json
import sys
import time
import weakref
from typing import Any

from jaxmemprof.capture.arrays import add_device_bytes

# The counts' CPU may take this share of the run's wall time ...
SHARE = 0.01
# ... after this many seconds of it (a short program's calls are all counted).
FREE_S = 0.05


class CallLive:
    """Counts the bytes live before each call the probe sees (``before``),
    and writes the calls that may hold a function's largest true peak
    (``after``) and, at the end, the counts (``flush``)."""

    def __init__(self, probe):
        self.probe = probe  # its writer, and its observer: the sampler (its lock, its per-shard views)
        self._t0 = time.perf_counter()
        self.spent = 0.0  # seconds spent counting
        self._sizes: dict = {}  # id(array) -> its bytes on self._one, or ((device, bytes), ...)
        self._refs: dict = {}  # id(array) -> its weak reference, whose callback forgets both at its death
        self._one = None  # the device of the first array seen whole on one device
        self._kinds: dict = {}  # (shape, dtype, sharding) -> its value in _sizes

    def before(self, state) -> dict | None:
        """{device: bytes} live now, just before a call of ``state``'s function
        (its arguments among them); None where not counted (over the budget,
        a snapshot in progress on another thread, JAX not up)."""
        state.seen += 1
        t0 = time.perf_counter()
        if self.spent > FREE_S + SHARE * (t0 - self._t0):
            state.uncounted += 1
            return None
        jax = sys.modules.get("jax")
        observer = self.probe.observer
        lock = observer.holding() if observer is not None else None
        # The sampler's lock: a list of every live array is held here as the sampler's is (an array the
        # program drops meanwhile dies as it is let go, which the liveness checks then know to be ours).
        # Not where this thread holds it already (a snapshot of its own under way). Taken inside the try,
        # and let go where this thread holds it: an exception that comes between the take and the try (a
        # SIGINT's, the parking's at the script's end) would otherwise keep it, and every snapshot after
        # (the end's) would wait for it for ever.
        if jax is None or (lock is not None and lock._is_owned()):
            state.uncounted += 1
            return None
        got = False
        try:
            got = lock is None or lock.acquire(blocking=False)
            if not got:
                state.uncounted += 1
                return None
            live = jax.live_arrays()
            out = self._count(live, getattr(observer, "_aliases", None) or {})
        except Exception:
            out = None
        finally:
            live = None
            if lock is not None and (got or lock._is_owned()):
                lock.release()
            self.spent += time.perf_counter() - t0
        if out is None:
            state.uncounted += 1
        return out

    def _count(self, live, aliases) -> dict:
        """{device: bytes} of ``live``: each array's bytes from ``_sizes`` (an
        int where it is whole on the first device seen, its pairs otherwise),
        looked up in C (``map``); an array not seen before is read once."""
        sizes = self._sizes
        values: list = list(map(sizes.get, map(id, live)))
        if None in values:
            for j, v in enumerate(values):
                if v is None:
                    values[j] = self._read(live[j], aliases)
        try:
            total = sum(values)  # all whole on one device (a tuple among them: TypeError)
            return {self._one: total} if self._one is not None else {}
        except TypeError:
            pass
        out: dict = {}
        for v in values:
            pairs: Any = ((self._one, v),) if type(v) is int else v
            for d, b in pairs:
                out[d] = out.get(d, 0) + b
        return out

    def _read(self, a, aliases):
        """An array's bytes as ``_count`` keeps them, kept until it dies (a weak
        reference's callback forgets it then: an id is never read as another
        array's)."""
        key = id(a)
        view = aliases.get(key)
        if view is not None and view() is a:
            value: Any = 0  # a per-shard view of the sampler's: its array's bytes are counted
        else:
            try:  # arrays of one shape, dtype and sharding have the same bytes on each device: read once
                kind = (a.shape, a.dtype, a.sharding)
                value = self._kinds.get(kind)
            except Exception:  # an unhashable sharding
                kind, value = None, None
            if value is None:
                per: dict = {}
                add_device_bytes(a, per)
                if len(per) == 1 and self._one is None:
                    self._one = next(iter(per))
                value = per[self._one] if len(per) == 1 and self._one in per else tuple(per.items())
                if kind is not None and len(self._kinds) < 10_000:
                    self._kinds[kind] = value
        sizes, refs = self._sizes, self._refs

        def gone(ref, key=key):
            if refs.get(key) is ref:
                del refs[key]
                sizes.pop(key, None)

        try:
            refs[key] = weakref.ref(a, gone)
        except TypeError:
            return value  # not weakly referable: read again at each call
        sizes[key] = value
        return value

    def after(self, state, live: dict, signature: str | None, sampled: bool = False) -> None:
        """The call of ``state``'s function counted as ``live`` ran (with
        ``signature``, where known): written where it found more on a device
        than any of the function's counted calls before, unless ``sampled``
        (its jit_calls row has the bytes live before it already)."""
        top = state.live_top
        state.counted += 1
        slot = state.plan
        if signature is not None and slot is not None and live:
            most = max(live.values())
            if most > slot.live.get(signature, -1):
                slot.live[signature] = most
        if all(top.get(d, -1) >= b for d, b in live.items()):
            return
        state.live_top = {d: max(top.get(d, 0), b) for d, b in {**top, **live}.items()}
        if sampled:
            return
        self.probe.writer.add_jit_call_live([(state.function_id, state.seen, time.time(), json.dumps(live, sort_keys=True),
                                        signature, state.counted, state.seen, "max")])

    def flush(self, states) -> None:
        """The calls each function was seen and counted at, to the end; the
        weak references to the program's arrays let go (no callback of ours
        left on them past the run)."""
        self._refs.clear()
        self._sizes.clear()
        self.probe.writer.add_jit_call_live([(s.function_id, s.seen, time.time(), None, None, s.counted, s.seen, "end")
                                             for s in states if s.seen])

    def quiet(self, probe, real, state, args, kwargs):
        """A quiet call of a user's function (proxy.QuietCounted): a step
        counted as one (``probe.stepped``), its live bytes counted, then the
        jitted function called."""
        if state.step:
            probe.stepped(state)
        tracing = probe._tracing
        if not probe.active or state.off or (tracing is not None and tracing()):
            return real(*args, **kwargs)
        live = self.before(state)
        out = real(*args, **kwargs)
        if live is not None:
            self.after(state, live, only_signature(state))
        return out


def only_signature(state) -> str | None:
    """The signature a call of ``state``'s function ran, where it has only
    one compiled and analysed (else None: the model bounds the call by its
    signatures)."""
    if len(state.signatures) == 1 and state.cache <= 1:
        return next(iter(state.signatures))
    return None
