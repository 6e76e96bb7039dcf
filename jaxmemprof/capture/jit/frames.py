"""Frames, seen from the probe: which is the user's (the site rule: not
jaxmemprof, JAX, a library or the standard library)."""

from __future__ import annotations

import os

from jaxmemprof.paths import is_builtin_library

_library_cache: dict[str, bool] = {}


def _is_library(filename: str) -> bool:
    v = _library_cache.get(filename)
    if v is None:
        v = _library_cache[filename] = is_builtin_library(
            os.path.abspath(filename) if filename and not filename.startswith("<") else filename)
    return v


def _user_frame(f):
    """The innermost frame of ``f`` and its callers that is the user's code
    (the site rule: not jaxmemprof, JAX, a library or the standard library)."""
    while f is not None and _is_library(f.f_code.co_filename):
        f = f.f_back
    return f
