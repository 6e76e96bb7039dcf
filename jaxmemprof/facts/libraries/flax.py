"""Flax. flax.nnx.jit: it calls jax.jit with the user's arguments, as pytrees
of their state, in the same places (jax.jit's mapping applies); a module's
state it replaces is freed during the call (``dropped``); each array's owner
is its variable's path in the module, its tag the variable's type
(``nnx.Param``, ``nnx.OptState``). A linen program jits with jax.jit; its
remat is ``nn.remat``."""

from __future__ import annotations

import contextlib
import os
import sys

from jaxmemprof.facts.libraries import OPTIMIZER, PARAMETERS, STATE

NAME = "flax.nnx.jit"
FRAME = ("flax", "jit")
REJIT = "jit"
SPELLING = r"(?:(?:flax\.)?nnx\.)?jit"
DECORATOR_TAKES_OPTIONS = True
VERB = "nnx.jit"
DONATE_BY_NAME = True  # as flax's docs write it
WORDS = {"remat": ("flax linen: nn.remat", "flax nnx: nnx.remat"),
         "shard_where_made": "with flax.nnx, nnx.with_partitioning on the parameter's initializer"}
# An nnx variable keeps its array in a slot (flax 0.11: ``raw_value``) or its dict (0.12: ``_raw_value``); the
# program reads it as ``.value``. An nnx State keeps its entries in ``_mapping``; the program indexes the State.
ATTRIBUTES = {"flax.nnx.variablelib.Variable": {"raw_value": "value", "_raw_value": "value"},
              "flax.nnx.statelib.State": {"_mapping": ""}}
_OPTIMIZER_TAGS = ("nnx.OptState", "nnx.OptArray", "nnx.OptVariable")


def owners(frame) -> dict:
    """id(array) -> (path in the user's module, ``nnx.<VariableType>``) for
    the arguments of the flax.nnx.jit call that ``frame`` (the jax.jit call)
    is made from: flax.nnx passes jax.jit a flat list of each module's state,
    whose own path says nothing of the module."""
    nnx, graph = sys.modules.get("flax.nnx"), sys.modules.get("flax.nnx.graph")
    is_node = getattr(graph, "is_graph_node", None) or getattr(nnx, "is_graph_node", None)
    if nnx is None or is_node is None:
        return {}
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__call__" and f"nnx{os.sep}transforms" in code.co_filename:
            break
        frame = frame.f_back
    if frame is None:
        return {}
    args, kwargs = frame.f_locals.get("args"), frame.f_locals.get("kwargs")
    wrapped = frame.f_locals.get("self")
    # the user's function: nnx.jit's ``fun`` (flax 0.12), else what functools.update_wrapper kept (0.11)
    fn = getattr(wrapped, "fun", None) or getattr(wrapped, "__wrapped__", None)
    names = list(getattr(getattr(fn, "__code__", None), "co_varnames", ()))
    out: dict = {}
    values = [(names[i] if i < len(names) else f"arg{i}", v) for i, v in enumerate(args or ())]
    values += list((kwargs or {}).items())
    for name, value in values:
        if not is_node(value):
            continue
        for path, var in nnx.to_flat_state(nnx.state(value)):
            array = var.get_value() if hasattr(var, "get_value") else getattr(var, "value", None)
            where = name + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
            out.setdefault(id(array), (where, f"nnx.{type(var).__name__}"))
    return out


def role(tag: str) -> str | None:
    """nnx's variable types: Param, the optimizer's, the rest (BatchStat, a Variable of the user's) state."""
    if tag in _OPTIMIZER_TAGS:
        return OPTIMIZER
    if tag == "nnx.Param":
        return PARAMETERS
    return STATE if tag.startswith("nnx.") else None


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
    wraps a Module's methods when the class is made. Its positional arguments that are no arrays (a
    ``train`` flag that BatchNorm and Dropout branch on) are static, as ``static_argnums`` (``self`` is
    0) makes them, else the flag is traced and the method's ``if``/``not`` on it fails
    (TracerBoolConversionError); the wrap's ``static_argnums`` attribute keeps the positions it made
    static, for the printed fix, and ``by_keyword`` the names of such arguments passed by keyword, which
    static_argnums cannot reach (capture/jit/remat.py says so where the compile failed)."""
    import functools

    linen = sys.modules["flax.linen"]
    from flax.linen.module import wrap_method_once

    made: dict = {}

    def method(self, *args, **kwargs):
        static = tuple(i + 1 for i, a in enumerate(args) if _static(a))
        named = [k for k, v in kwargs.items() if _static(v) and k not in wrapped.by_keyword]
        if named:  # traced, as nn.remat's static_argnums cannot reach them
            wrapped.by_keyword = (*wrapped.by_keyword, *named)
        if static not in made:
            made[static] = linen.remat(fn, policy=policy, static_argnums=static) if static else \
                linen.remat(fn, policy=policy)
            wrapped.static_argnums = tuple(sorted(set(wrapped.static_argnums) | set(static)))
        return made[static](self, *args, **kwargs)

    functools.update_wrapper(method, fn)
    wrapped = wrap_method_once(method)
    wrapped.static_argnums = ()
    wrapped.by_keyword = ()
    return wrapped


def _static(value) -> bool:
    """A value that tracing would make an array where the method wants it as it is (a flag it branches on,
    a size): a Python scalar or string, or a tuple of them (None has no leaves to trace)."""
    if isinstance(value, tuple):
        return bool(value) and all(_static(v) for v in value)
    return isinstance(value, (bool, int, float, complex, str))


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
