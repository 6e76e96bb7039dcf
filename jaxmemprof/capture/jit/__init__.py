"""The jit probe, as one module per concern (moving here from
capture/jitprobe.py, which holds JitProbe until the move is done):

- ``liveness``: what became of a sampled call's inputs (dropped, held, ...);
- ``frames``: the user's frames.
"""
