"""Haiku (dm-haiku): no jit wrapper of its own (a program jits its step, or
``hk.transform``'s apply, with jax.jit), so the probe sees the user's
arguments as jax.jit's. What is its own is remat: ``hk.remat`` works only
inside the transform, so a module's method is wrapped at the call (the
module made and called through it), never decorated where it is defined."""

from __future__ import annotations

import functools
import sys

PACKAGE = "haiku"
REMAT = "hk.remat"
WORDS = {"remat": "haiku: hk.remat"}


def remats(cls) -> bool:
    """hk.remat wraps a haiku Module's method (at the end of a run, called inside the transform)."""
    hk = sys.modules.get("haiku")
    return cls is not None and hk is not None and issubclass(cls, hk.Module)


def remat(fn, policy):
    """``fn``, a Module's method as defined, wrapped in hk.remat when it is
    called (inside the transform, where hk.remat may be applied), the module
    itself left out of what the checkpoint traces (as ``hk.remat(module)(x)``
    in place of ``module(x)``), then in the module's name scope as haiku wraps
    a Module's methods when the class is made."""
    hk = sys.modules["haiku"]
    from haiku._src.module import wrap_method

    def checkpointed(module, *args, **kwargs):
        return hk.remat(lambda *a, **k: fn(module, *a, **k), policy=policy)(*args, **kwargs)

    @functools.wraps(fn)
    def wrapped(module, *args, **kwargs):
        return wrap_method(fn.__name__, checkpointed, lambda: type(module))(module, *args, **kwargs)

    return wrapped


def remat_words(what: str, chosen: str, where: str) -> str:
    """The fix for a method ``what`` (``Block.__call__``) with the policy
    argument ``chosen`` ('' for the default): hk.remat is applied inside the
    transform, to the module where the program calls it."""
    cls, _, method = what.rpartition(".")
    option = f", {chosen}" if chosen else ""
    called = f"hk.remat({cls}(...){option})(x)" if method == "__call__" else \
        f"hk.remat(module.{method}{option})(x)"
    plain = f"{cls}(...)(x)" if method == "__call__" else f"module.{method}(x)"
    return f"call {cls} through hk.remat inside the transform: {called} for {plain}  ({what} at {where})"
