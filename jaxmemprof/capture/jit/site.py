"""Where jax.jit was applied, seen from the user's code: the user's line,
the library wrapper in between (recognised by ``libraries``), and the
user's own function behind what was jitted."""

from __future__ import annotations

import functools
import inspect
import os
import types

from jaxmemprof.capture import library_roots
from jaxmemprof.capture.jit.frames import is_library
from jaxmemprof.facts.libraries import BY_NAME, KNOWN_WRAPPERS
from jaxmemprof.facts.paths import installed_part

# Names under which a wrapper's frame holds the user's function.
_FUNCTION_LOCALS = ("fun", "f", "fn", "func", "function")


def _unwrap(fun):
    """The Python function behind ``fun``: through ``__wrapped__``,
    ``functools.partial`` and bound methods."""
    for _ in range(32):
        if isinstance(fun, functools.partial):
            fun = fun.func
        elif isinstance(fun, types.MethodType):
            fun = fun.__func__
        elif getattr(fun, "__wrapped__", None) is not None and fun.__wrapped__ is not fun:
            fun = fun.__wrapped__
        else:
            break
    return fun


def is_user_function(fun) -> bool:
    code = getattr(fun, "__code__", None)
    return code is not None and not is_library(code.co_filename)


def signature_names(fun) -> list[str]:
    try:
        return list(inspect.signature(fun).parameters)
    except (TypeError, ValueError):
        return []


def _wrapper_of(frames) -> str | None:
    """How the user spells the library wrapper whose frames (innermost
    first) lie between the user's line and jax.jit: ``flax.nnx.jit``, or
    ``package:function`` for one not known; None when the user called
    jax.jit directly."""
    for f in reversed(frames):
        part = installed_part(os.path.abspath(f.f_code.co_filename), library_roots.current())
        if part is None:  # the standard library, or jaxmemprof itself
            continue
        package = part.replace("\\", "/").split("/", 1)[0]
        if package == "jaxmemprof":
            continue
        if package in ("jax", "jaxlib"):
            return None
        return KNOWN_WRAPPERS.get((package, f.f_code.co_name), f"{package}:{f.f_code.co_name}")
    return None


class Site:
    """Where jax.jit was applied, seen from the user's code: the user's line,
    the library wrapper in between (if any), the user's own function and the
    wrapper's options (equinox's ``donate``)."""

    __slots__ = ("frame", "wrapper", "function", "options")

    def __init__(self, caller, fun, wrapper_default):
        frames = []
        f = caller
        while f is not None and is_library(f.f_code.co_filename):
            frames.append(f)
            f = f.f_back
        self.frame = f
        self.wrapper = _wrapper_of(frames) or wrapper_default
        self.function = self._find_function(fun, frames)
        library = BY_NAME.get(self.wrapper)
        self.options = library.options(frames) if library is not None else {}

    @staticmethod
    def _find_function(fun, frames):
        target = _unwrap(fun)
        if is_user_function(target):
            return target
        for fr in frames:  # a wrapper that jits a function of its own holds the user's
            for name in _FUNCTION_LOCALS:
                v = fr.f_locals.get(name)
                if v is not None and callable(v):
                    u = _unwrap(v)
                    if is_user_function(u):
                        return u
        return target
