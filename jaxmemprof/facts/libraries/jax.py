"""jax.jit, called by the user directly (or by a wrapper that passes the
user's arguments in its places): the arguments are the user's."""

from __future__ import annotations

NAME = "jax.jit"
PATCHES = "jit"
STATIC_ARGNUMS = "static_argnums"
SPELLING = r"(?:jax\.)?jit"
REJIT = "jit"


def arguments(state, args, kwargs):
    """The arguments of a jax.jit call (flax.nnx.jit passes the user's
    arguments, as pytrees of their state, in the same places): (position or
    None, name, passed by keyword, donated, value)."""
    names = state.param_names
    for i, value in enumerate(args):
        name = names[i] if i < len(names) else ""
        yield i, name, False, i in state.donate_argnums or name in state.donate_argnames, value
    for name, value in kwargs.items():
        donated = name in state.donate_argnames or (
            name in names and names.index(name) in state.donate_argnums)
        yield (names.index(name) if name in names else None), name, True, donated, value


REMAT = "jax.checkpoint"
WORDS = {"remat": "plain JAX: jax.checkpoint"}


def remats(cls) -> bool:
    """jax.checkpoint wraps a plain function (a module's global)."""
    return cls is None


def remat(fn, policy):
    import sys

    return sys.modules["jax"].checkpoint(fn, policy=policy)
