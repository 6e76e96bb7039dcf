"""flax.nnx.jit: it calls jax.jit with the user's arguments, as pytrees of
their state, in the same places (jax.jit's mapping applies); a module's
state it replaces is freed during the call (``dropped``)."""

from __future__ import annotations

NAME = "flax.nnx.jit"
FRAME = ("flax", "jit")
