"""The proxy that stands for a jitted function, in two states: ``Probed``,
whose calls go through the probe, and ``_QuietProbed``, once the function's
samples are taken, whose calls reach the jitted function with no Python code
in between (and are no longer counted); a user's function's quiet calls
still have their live bytes counted (``QuietCounted``). The probe turns a quiet proxy back
(``JitProbe._wake``) when the function may have compiled anew."""

from __future__ import annotations

import copy
import functools
import operator
import types

from jaxmemprof.capture.jit.frames import drop_own_frames


class Probed:
    """Stands for a jitted function: calls go through the probe; everything
    else (``.lower``, ``.trace``, ``.eval_shape``, attributes, pickling and
    copies) goes to it."""

    __slots__ = ("_real", "_probe", "_state", "__weakref__", "__dict__")

    def __init__(self, real, probe, state):
        self._real = real
        self._probe = probe
        self._state = state
        try:
            functools.update_wrapper(self, real)
        except (AttributeError, TypeError):
            pass
        if "__wrapped__" in getattr(real, "__dict__", {}):
            self.__wrapped__ = real.__wrapped__  # the user's function, as for the jitted one

    def __call__(self, *args, **kwargs):
        state = self._state
        try:
            out = self._probe.call(self._real, state, args, kwargs)
        except BaseException as exc:
            drop_own_frames(exc)
            raise
        if state.quiet and self._probe.active:
            # Sampling done: from now on calls go straight to the jitted
            # function, at no cost; JitProbe.poll watches for new compilations.
            state.counted_all = False
            # first: a wake-up in between then still turns it back
            self.__class__ = QuietStep if state.step else QuietCounted if state.user else QuietProbed
            if not state.off:
                self._probe._quiet.add(state)
        return out

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        return types.MethodType(self, instance)

    def __getattr__(self, name):
        return getattr(self._real, name)

    # What jax.stages.Wrapped, a runtime-checkable protocol, asks of a jitted function besides __call__, where
    # isinstance() finds it: Python 3.12 and later look on the type (inspect.getattr_static), not through
    # __getattr__. The jitted function's own, read when asked (an AttributeError where it has none).
    lower = property(lambda self: self._real.lower)
    trace = property(lambda self: self._real.trace)

    def __reduce_ex__(self, protocol):
        # pickle sees the jitted function itself, as under python
        # (itemgetter(0)((real,)) is real: nothing of jaxmemprof in the pickle)
        return operator.itemgetter(0), ((self._real,),)

    def __copy__(self):
        return self._probe.copy_of(self, copy.copy(self._real))

    def __deepcopy__(self, memo):
        return self._probe.copy_of(self, copy.deepcopy(self._real, memo))

    def __dir__(self):
        return dir(self._real)

    def __repr__(self):
        return repr(self._real)

    def __hash__(self):
        return hash(self._real)

    def __eq__(self, other):
        return self._real == (other._real if isinstance(other, Probed) else other)


class QuietProbed(Probed):
    """A Probed whose sampling is done: calling it calls the jitted function
    with no Python code in between (``__call__`` is looked up on the type
    and resolves, through a C-level getter, to the jitted function)."""

    __slots__ = ()
    __call__ = property(operator.attrgetter("_real"))


class QuietCounted(QuietProbed):
    """A quiet Probed of a user's function: each call's live bytes are
    counted as it begins (``JitProbe.quiet_call``: the true peak over every
    call, capture/jit/calllive.py), and, for the program's step, counted
    as a step; then it goes straight to the jitted function."""

    __slots__ = ()

    def __call__(self, *args, **kwargs):
        try:
            return self._probe.live.quiet(self._probe, self._real, self._state, args, kwargs)
        except BaseException as exc:
            drop_own_frames(exc)
            raise


class QuietStep(QuietCounted):
    """A QuietCounted of the program's step (JitProbe.stepped)."""

    __slots__ = ()
