"""Optax: no jit wrapper (a program jits its step with jax.jit or a library's
wrapper), but its optimizer states are its own NamedTuples
(``ScaleByAdamState``...): an array under one is optimizer state, whatever
the argument holding it is called."""

from __future__ import annotations

from jaxmemprof.facts.libraries import OPTIMIZER

PACKAGE = "optax"


def tags(tu, value) -> dict:
    """id(leaf) -> ``optax.<StateType>`` for the array leaves under an optax
    state (NamedTuples of optax's own modules) in ``value``."""
    def is_state(node) -> bool:
        return type(node).__module__.startswith("optax") and isinstance(node, tuple)

    out: dict = {}
    for node in tu.tree_leaves(value, is_leaf=is_state):
        if is_state(node):
            tag = f"optax.{type(node).__name__}"
            for leaf in tu.tree_leaves(node):
                out.setdefault(id(leaf), tag)
    return out


def role(tag: str) -> str | None:
    return OPTIMIZER if tag.startswith("optax.") else None
