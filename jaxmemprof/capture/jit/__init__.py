"""The jit probe, as one module per concern (moving here from
capture/jitprobe.py, which holds JitProbe until the move is done):

- ``liveness``: what became of a sampled call's inputs (dropped, held, ...);
- ``site``: where jax.jit was applied, seen from the user's code;
- ``frames``: the user's frames;
- ``libraries``: one module per wrapper (jax.jit, jax.pmap, flax.nnx.jit,
  equinox.filter_jit): how it is recognised, how its arguments map to the
  user's.
"""
