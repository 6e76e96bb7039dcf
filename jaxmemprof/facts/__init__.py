"""The JAX facts layer: what is true of JAX, XLA, the devices and the
libraries, one rule each, shared by the recorder (capture/) and the analyses
(analysis/), plain Python that imports nothing else of jaxmemprof's:

- truepeak.py: the true peak's arithmetic (XLA's call peak from its figures,
  each call's peak on its devices); donors.py: which arguments to donate;
  replicas.py: which replicated inputs a mesh could shard; flow.py: how a
  jitted function's arguments flow from call to call;
- paths.py: which files are library code; source.py: a line of the user's
  source; devices.py: a device's name as every output shows it;
- tpus.py: the TPU slices --target compiles for;
- backends/: one module per backend (CPU, GPU, TPU): its counters, its fit
  rule, which advice applies;
- libraries/: one module per library (flax, equinox, optax, haiku, and JAX's
  own wrappers): its jit wrapper, what it calls its arrays, its remat and
  donation spelling.
"""
