r"""The jit wrappers jaxmemprof knows, one module each: a new library is one
new file here. A module says how its wrapper is recognised and how the
arguments jax.jit gets map to the user's (for the jit probe, capture/jit/),
and how a fix is written for it (for the donation advice and its words):

- ``NAME``: how the user spells the wrapper (``flax.nnx.jit``);
- ``PATCHES``: for JAX's own (jax.jit, jax.pmap), the function of the ``jax``
  module the probe replaces, and ``STATIC_ARGNUMS``, its keyword for the
  arguments it compiles for by value;
- ``FRAME``: for a library's, (installed package, function) of the
  outermost library frame between the user's line and jax.jit;
- ``options(frames)``: the wrapper's options read from those frames
  (equinox's ``donate``), ``{}`` if not given;
- ``jits_its_own(params)`` and ``arguments(state, args, kwargs)``: whether
  the function jax.jit got is the wrapper's own (over its split of the
  user's arguments, by its parameter names), and then the user's
  arguments in that call; if not given, the wrapper passes the user's
  arguments in jax.jit's places (``jax.arguments``);
- ``STATIC_LEAVES``: every leaf that is not an array is static;
- ``REJIT``: the function of the ``jax`` module that jits the wrapper's
  function anew with other ``donate_argnums`` (``run --plan``'s donated
  variant); None (the default) where the wrapper decides donation inside its
  own call;
- ``lowering(fun)``: what tracing ``fun`` (the function jax.jit got) needs
  around it outside the wrapper's own call; if not given, nothing;
- ``SPELLING``: a regular expression for the wrapper as the line that
  applies it spells it (``(?:jax\.)?jit``), and ``DECORATOR_TAKES_OPTIONS``:
  whether a bare decorator of it takes options when called (``@nnx.jit(...)``)
  or needs ``functools.partial`` (``@functools.partial(jax.jit, ...)``);
- ``VERB``: how a fix says "jit it" (``nnx.jit``; ``jit`` if not given);
- ``DONATE_BY_NAME``: a fix names the arguments to donate
  (``donate_argnames``), as the library's docs do;
- ``DONATE_OPTION``: the wrapper's own option that donates (equinox's
  ``donate``, which takes ``"all"`` or ``"all-except-first"``), where it has
  no ``donate_argnums``;
- ``remats(cls)``: whether the library's remat wraps a method of ``cls``
  (``None``: a plain function), as (spelling, wrap) where a kind of its own
  differs (flax linen's ``nn.remat``), or why it cannot be wrapped from
  outside (a string); ``REMAT``, its spelling (``nnx.remat``), and ``remat(fn,
  policy)``, ``fn`` wrapped so (capture/jit/remat.py, at the end of a run).

Nothing here imports the library (or jax)."""

from __future__ import annotations

import contextlib
import importlib
import os

from jaxmemprof.libraries import jax as _jax


def _no_options(frames) -> dict:
    return {}


def _not_its_own(params) -> bool:
    return False


def _no_remat(cls) -> bool:
    return False


def _no_context(fun):
    return contextlib.nullcontext()


class Library:
    """One module of this package, with what it leaves out filled in."""

    __slots__ = ("name", "patches", "static_argnums", "frame", "options", "jits_its_own", "arguments",
                 "static_leaves", "rejit", "lowering", "spelling", "decorator_takes_options", "verb",
                 "donate_by_name", "donate_option", "remats", "remat_spelling", "remat")

    def __init__(self, module):
        self.name: str = module.NAME
        self.patches: str | None = getattr(module, "PATCHES", None)
        self.static_argnums: str | None = getattr(module, "STATIC_ARGNUMS", None)
        self.frame: tuple | None = getattr(module, "FRAME", None)
        self.options = getattr(module, "options", _no_options)
        self.jits_its_own = getattr(module, "jits_its_own", _not_its_own)
        self.arguments = getattr(module, "arguments", _jax.arguments)
        self.static_leaves: bool = getattr(module, "STATIC_LEAVES", False)
        self.rejit: str | None = getattr(module, "REJIT", None)
        self.lowering = getattr(module, "lowering", _no_context)
        self.spelling: str = module.SPELLING
        self.decorator_takes_options: bool = getattr(module, "DECORATOR_TAKES_OPTIONS", False)
        self.verb: str = getattr(module, "VERB", "jit")
        self.donate_by_name: bool = getattr(module, "DONATE_BY_NAME", False)
        self.donate_option: str | None = getattr(module, "DONATE_OPTION", None)
        self.remats = getattr(module, "remats", _no_remat)
        self.remat_spelling: str | None = getattr(module, "REMAT", None)
        self.remat = getattr(module, "remat", None)


def _modules() -> list[str]:
    here = os.path.dirname(os.path.abspath(__file__))
    return sorted(n[:-3] for n in os.listdir(here) if n.endswith(".py") and n != "__init__.py")


LIBRARIES = tuple(Library(importlib.import_module(f"{__name__}.{name}")) for name in _modules())
# How the user spells a wrapper -> its Library.
BY_NAME = {lib.name: lib for lib in LIBRARIES}
# The functions of the jax module the probe replaces: (name in jax, how the user spells it).
PATCHED = tuple((lib.patches, lib.name) for lib in LIBRARIES if lib.patches)
# Library wrappers around jax.jit that the probe knows by name: (installed
# package, the wrapper's function) of the outermost library frame between the
# user's line and jax.jit -> how the user spells it.
KNOWN_WRAPPERS = {lib.frame: lib.name for lib in LIBRARIES if lib.frame}
# The user's arguments in a call of jax.jit's (or of a wrapper that passes them in its places).
plain_arguments = _jax.arguments
