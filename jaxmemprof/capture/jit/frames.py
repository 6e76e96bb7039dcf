"""Frames, seen from the probe: which is the user's (the site rule: not
jaxmemprof, JAX, a library or the standard library; a library installed
anywhere on the program's sys.path outside its own tree too:
capture/library_roots.py), and the probe's own frames left out of the
tracebacks of the program's errors."""

from __future__ import annotations

import os

from jaxmemprof.capture.library_roots import is_library as is_library


def user_frame(f):
    """The innermost frame of ``f`` and its callers that is the user's code
    (the site rule: not jaxmemprof, JAX, a library or the standard library)."""
    while f is not None and is_library(f.f_code.co_filename):
        f = f.f_back
    return f


# The probe's files: every module of this package (capture/jit/).
_PROBE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def drop_own_frames(exc: BaseException) -> None:
    """Leave the probe's frames out of an error the program's call raised:
    its traceback reads as under python (the error goes on from there)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_PROBE_DIR):
        tb = tb.tb_next
    head = tb
    while tb is not None and tb.tb_next is not None:
        if tb.tb_next.tb_frame.f_code.co_filename.startswith(_PROBE_DIR):
            tb.tb_next = tb.tb_next.tb_next
        else:
            tb = tb.tb_next
    exc.__traceback__ = head
