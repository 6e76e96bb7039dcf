"""flax.nnx.jit: it calls jax.jit with the user's arguments, as pytrees of
their state, in the same places (jax.jit's mapping applies); a module's
state it replaces is freed during the call (``dropped``)."""

from __future__ import annotations

import contextlib
import sys

NAME = "flax.nnx.jit"
FRAME = ("flax", "jit")
REJIT = "jit"
SPELLING = r"(?:(?:flax\.)?nnx\.)?jit"
DECORATOR_TAKES_OPTIONS = True
VERB = "nnx.jit"
DONATE_BY_NAME = True  # as flax's docs write it


def lowering(fun):
    """nnx.jit's function merges the module's graph in an update context
    named by the nnx.jit object (its ``ctxtag``), which nnx.jit's call
    enters: tracing it from outside that call enters it too."""
    graph = sys.modules.get("flax.nnx.graphlib") or sys.modules.get("flax.nnx.graph")
    tag = getattr(getattr(fun, "__wrapped__", None), "ctxtag", None)
    if graph is not None and tag is not None and hasattr(graph, "update_context"):
        return graph.update_context(tag)
    return contextlib.nullcontext()


REMAT = "nnx.remat"


def _linen_remat(fn, policy):
    """A linen Module's method as ``@nn.remat`` above ``@nn.compact`` makes it: lifted, then wrapped as linen
    wraps a Module's methods when the class is made."""
    linen = sys.modules["flax.linen"]
    from flax.linen.module import wrap_method_once

    return wrap_method_once(linen.remat(fn, policy=policy))


def remats(cls):
    """nnx.remat wraps a flax nnx Module's method; nn.remat a linen Module's ((spelling, wrap))."""
    nnx, linen = sys.modules.get("flax.nnx"), sys.modules.get("flax.linen")
    if cls is None:
        return False
    if nnx is not None and issubclass(cls, nnx.Module):
        return True
    if linen is not None and issubclass(cls, linen.Module):
        return ("nn.remat", _linen_remat)
    return False


def remat(fn, policy):
    return sys.modules["flax.nnx"].remat(fn, policy=policy)
