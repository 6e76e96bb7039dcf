"""Observe the program's jitted functions without changing what they compute.

``jax.jit`` and ``jax.pmap`` are replaced, in the ``jax`` module only (JAX's
own internals keep the originals), by functions returning a thin proxy around
the real jitted function; library wrappers that call ``jax.jit`` (flax.nnx.jit,
equinox.filter_jit) are seen through, and named. To the program the proxy is
the jitted function (docs/advice.md lists how). Nothing here imports jax: the
probe is installed when the program imports it.

- ``probe``: JitProbe, installing the probe, a call's path, what is sampled;
- ``proxy``: Probed and _QuietProbed, the proxy in its two states;
- ``liveness``: what became of a sampled call's inputs (dropped, held, ...);
- ``programs``: XLA's figures for each compiled signature, and its text;
- ``site``: where jax.jit was applied, seen from the user's code;
- ``state``: what the probe holds for each function;
- ``frames``: the user's frames, and the probe's left out of tracebacks;
- ``libraries``: one module per wrapper (jax.jit, jax.pmap, flax.nnx.jit,
  equinox.filter_jit): how it is recognised, how its arguments map to the
  user's.
"""

from jaxmemprof.capture.jit.probe import JitProbe
from jaxmemprof.capture.jit.proxy import Probed, QuietProbed

__all__ = ["JitProbe", "Probed", "QuietProbed"]
