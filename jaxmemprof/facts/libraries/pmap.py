"""jax.pmap: the arguments are the user's, as for jax.jit; its static
arguments are ``static_broadcasted_argnums``. It has no compile cache to
watch: each new signature is analysed (the probe tells by the jitted
function's ``_cache_size``)."""

from __future__ import annotations

NAME = "jax.pmap"
PATCHES = "pmap"
STATIC_ARGNUMS = "static_broadcasted_argnums"
SPELLING = r"(?:jax\.)?pmap"
VERB = "pmap"
REJIT = "pmap"
