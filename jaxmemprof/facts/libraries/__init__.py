r"""The libraries jaxmemprof knows, one module each: a new library is one new
file here, and nothing outside this package names one (tests/test_architecture.py).
A module says how the library's jit wrapper, if it has one, is recognised and
how the arguments jax.jit gets map to the user's (for the jit probe,
capture/jit/), what the library calls the arrays it holds (for the roles), how
its remat is spelled and made, and how a fix is written for it (for the advice
and its words). Every name but ``PACKAGE`` (or ``NAME``) may be left out:

- ``PACKAGE``: the installed package (``flax``); by default the first part of
  ``NAME``;
- ``NAME``: how the user spells the library's jit wrapper (``flax.nnx.jit``);
  a library without one (a Haiku program jits with jax.jit) leaves it out, and
  the wrapper's names below do not apply to it;
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
- ``owners(frame)``: id(array) -> (its path in the user's tree, its tag) for
  the arguments of the wrapper's call that the jax.jit call ``frame`` is made
  from, where jax.jit sees only a flat list of them (flax.nnx);
- ``names(tu, arguments)``: id(leaf) -> its path as the program writes it,
  for the leaves of a jitted call's arguments ((name, value) pairs) that sit
  in a container of the library's that JAX knows only by flat index
  (equinox's ``State``: ``state.get(model.bn.state_index)[0]``);
- ``argument_words(op, params)``: the user's arguments an argument buffer of
  XLA's (named ``op``) holds, as a report names them (``argument x, y``), where
  the wrapper passes jax.jit parts of its own (equinox); None: not its own;
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
  ``donate``), where it has no ``donate_argnums``; ``DONATES_EVERY_ARRAY``:
  its values that donate every array by design (no warning of an unusable
  donation is worth a finding); ``donation(others)``: the fix's facts
  (``change``, ``option``, ...; ``edited_line`` where no line can show it)
  for donating the arguments the advice chose when ``others`` ((label,
  position, bytes, dropped after each call) of the other array arguments)
  would go with them; ``fix_words(x, site, listed)``: (the full fix, the
  short one) for a change of its own kind (``x``: the finding's facts;
  ``listed``: how the words list names), else None; ``donated_call(fun,
  args, kwargs, params, facts)``: where the wrapper decides donation inside
  its own call (no ``REJIT``), the fix ``facts`` (``donation``'s) as the
  wrapper makes it, for the end's compile: (the function to jit with the
  run's jax.jit options, its call's args, kwargs) from ``fun`` (the function
  jax.jit got, or its replay) and its call in the run (arrays abstract);
- ``tags(tu, value)``: id(leaf) -> what the library calls the container a
  leaf of ``value`` sits in (``optax.ScaleByAdamState``), for any jitted
  call's arguments; ``role(tag)``: what a tag of its own says the array is
  (``PARAMETERS``, ``OPTIMIZER``, ``STATE`` below), else None;
- ``remats(cls)``: whether the library's remat wraps a method of ``cls``
  (``None``: a plain function), as (spelling, wrap) where a kind of its own
  differs (flax linen's ``nn.remat``), or why it cannot be wrapped from
  outside (a string); ``REMAT``, its spelling (``nnx.remat``), and ``remat(fn,
  policy)``, ``fn`` wrapped so (capture/jit/remat.py, at the end of a run);
  ``remat_words(what, chosen, where)``: the printed fix for a method
  ``what`` (``chosen``: the policy argument, or ''), where decorating it where
  it is defined (``@nnx.remat``) is not how the library is used;
- ``ATTRIBUTES``: for a class of the library (``module.QualName``) whose
  instances keep arrays under an attribute of another name than the one
  the program reads them by, {stored name: how the program reads it}
  (flax's ``Variable``: ``_raw_value`` is read as ``value``), ``""`` where
  the program indexes the object itself (flax's ``State``: its
  ``_mapping``'s items are ``state['l1']``), for the holder search's chains
  (capture/py_holders.py);
- ``WORDS``: the library's part of the advice's words, by topic (``phrases``
  below): ``remat`` (how each of its kinds spells remat), ``reshard`` (what
  re-shards inside a step), ``shard_where_made`` (how a parameter is made
  sharded), ``static`` (what makes an argument static), ``donate_option``
  (its donation option as a column shows it), ``donate_every_array`` and
  ``donate_all_but_first`` (its options that do so), ``donate_change`` (its
  donation changes' kinds, for the glossary); a string or a tuple of them.

Nothing here imports the library (or jax) when loaded: a function that needs it
finds it in ``sys.modules``, where the program put it (and imports a part of it
only when called at the end of a run of a program that uses it: flax's and
haiku's method wrappers)."""

from __future__ import annotations

import contextlib
import importlib
import os

from jaxmemprof.facts.libraries import jax as _jax


# What a library's tag says an array is (``role(tag)``): analysis/roles.py's roles of the same names.
PARAMETERS, OPTIMIZER, STATE = "parameters", "optimizer state", "other state"


def _no_options(frames) -> dict:
    return {}


def _not_its_own(params) -> bool:
    return False


def _no_remat(cls) -> bool:
    return False


def _no_context(fun):
    return contextlib.nullcontext()


def _no_owners(frame) -> dict:
    return {}


def _none(*args):
    return None


class Library:
    """One module of this package, with what it leaves out filled in."""

    __slots__ = ("package", "name", "patches", "static_argnums", "frame", "options", "jits_its_own", "arguments",
                 "owners", "names", "argument_words", "static_leaves", "rejit", "lowering", "spelling",
                 "decorator_takes_options", "verb", "donate_by_name", "donate_option", "donates_every_array",
                 "donation", "fix_words", "donated_call", "tags", "role", "remats", "remat_spelling", "remat",
                 "remat_words", "attributes", "words")

    def __init__(self, module):
        self.name: str | None = getattr(module, "NAME", None)
        self.package: str = getattr(module, "PACKAGE", None) or str(self.name).split(".")[0]
        self.patches: str | None = getattr(module, "PATCHES", None)
        self.static_argnums: str | None = getattr(module, "STATIC_ARGNUMS", None)
        self.frame: tuple | None = getattr(module, "FRAME", None)
        self.options = getattr(module, "options", _no_options)
        self.jits_its_own = getattr(module, "jits_its_own", _not_its_own)
        self.arguments = getattr(module, "arguments", _jax.arguments)
        self.owners = getattr(module, "owners", _no_owners)
        self.names = getattr(module, "names", None)
        self.argument_words = getattr(module, "argument_words", None)
        self.static_leaves: bool = getattr(module, "STATIC_LEAVES", False)
        self.rejit: str | None = getattr(module, "REJIT", None)
        self.lowering = getattr(module, "lowering", _no_context)
        self.spelling: str = getattr(module, "SPELLING", "")
        self.decorator_takes_options: bool = getattr(module, "DECORATOR_TAKES_OPTIONS", False)
        self.verb: str = getattr(module, "VERB", "jit")
        self.donate_by_name: bool = getattr(module, "DONATE_BY_NAME", False)
        self.donate_option: str | None = getattr(module, "DONATE_OPTION", None)
        self.donates_every_array: tuple = tuple(getattr(module, "DONATES_EVERY_ARRAY", ()))
        self.donation = getattr(module, "donation", None)
        self.fix_words = getattr(module, "fix_words", _none)
        self.donated_call = getattr(module, "donated_call", None)
        self.tags = getattr(module, "tags", None)
        self.role = getattr(module, "role", _none)
        self.remats = getattr(module, "remats", _no_remat)
        self.remat_spelling: str | None = getattr(module, "REMAT", None)
        self.remat = getattr(module, "remat", None)
        self.remat_words = getattr(module, "remat_words", None)
        self.attributes: dict[str, dict[str, str]] = getattr(module, "ATTRIBUTES", {})
        words = getattr(module, "WORDS", {})
        self.words: dict[str, tuple] = {k: (v,) if isinstance(v, str) else tuple(v) for k, v in words.items()}


def _modules() -> list[str]:
    here = os.path.dirname(os.path.abspath(__file__))
    return sorted(n[:-3] for n in os.listdir(here) if n.endswith(".py") and n != "__init__.py")


# Every library, JAX's own (jax.jit, jax.pmap) last: their words come after the libraries'.
LIBRARIES = tuple(sorted((Library(importlib.import_module(f"{__name__}.{name}")) for name in _modules()),
                         key=lambda lib: lib.patches is not None))
# The installed packages they are, JAX's own left out: the names no module outside this package uses.
PACKAGES = tuple(sorted({lib.package for lib in LIBRARIES if lib.patches is None and lib.package != "jax"}))
# How the user spells a wrapper -> its Library (the libraries with a jit wrapper).
BY_NAME = {lib.name: lib for lib in LIBRARIES if lib.name}
# The wrappers' names, JAX's own first: jax.jit, jax.pmap, then the libraries'.
WRAPPERS = tuple(sorted(BY_NAME, key=lambda n: BY_NAME[n].patches is None))
# The functions of the jax module the probe replaces: (name in jax, how the user spells it).
PATCHED = tuple((lib.patches, lib.name) for lib in LIBRARIES if lib.patches)
# Library wrappers around jax.jit that the probe knows by name: (installed
# package, the wrapper's function) of the outermost library frame between the
# user's line and jax.jit -> how the user spells it.
KNOWN_WRAPPERS = {lib.frame: lib.name for lib in LIBRARIES if lib.frame}
# The user's arguments in a call of jax.jit's (or of a wrapper that passes them in its places).
plain_arguments = _jax.arguments
# A library class (``module.QualName``) -> {attribute it stores an array under: how the program reads it}.
ATTRIBUTES = {cls: spelled for lib in LIBRARIES for cls, spelled in lib.attributes.items()}
_TAGGERS = tuple(lib.tags for lib in LIBRARIES if lib.tags is not None)
_NAMERS = tuple(lib.names for lib in LIBRARIES if lib.names is not None)


def owners(wrapper, frame) -> dict:
    """id(array) -> (owner, tag) for the arguments of a call of ``wrapper``
    (how the user spells it) whose jax.jit call is ``frame``: {} for a
    wrapper that passes them to jax.jit as the user's own trees."""
    lib = BY_NAME.get(wrapper)
    return lib.owners(frame) if lib is not None else {}


def tags(tu, value) -> dict:
    """id(leaf) -> tag, for the leaves of ``value`` that a library's
    container holds (``tu``: the program's jax.tree_util)."""
    out: dict = {}
    for tagger in _TAGGERS:
        for key, tag in tagger(tu, value).items():
            out.setdefault(key, tag)
    return out


def names(tu, arguments) -> dict:
    """id(leaf) -> its path as the program writes it, for the leaves of a
    jitted call's ``arguments`` ((name, value) pairs) in a library's
    container that JAX knows only by flat index (the libraries' ``names``)."""
    out: dict = {}
    for namer in _NAMERS:
        for key, name in namer(tu, arguments).items():
            out.setdefault(key, name)
    return out


def role_of_tag(tag: str) -> str | None:
    """What a library's tag says an array is (PARAMETERS, OPTIMIZER, STATE), or None."""
    for lib in LIBRARIES:
        role = lib.role(tag)
        if role is not None:
            return role
    return None


def phrases(topic: str) -> tuple[str, ...]:
    """The libraries' words on ``topic`` (their ``WORDS``), JAX's own last."""
    return tuple(p for lib in LIBRARIES for p in lib.words.get(topic, ()))


def remat_words(spelling: str, what: str, chosen: str, where: str) -> str | None:
    """The fix for wrapping the method ``what`` in the remat ``spelling``, in
    its library's words where they are its own, else None (decorate it)."""
    for lib in LIBRARIES:
        if lib.remat_spelling == spelling and lib.remat_words is not None:
            return lib.remat_words(what, chosen, where)
    return None


def remat_spelling(wrapper) -> str:
    """The remat of the library whose wrapper jitted a step (jax.checkpoint for JAX's own, or one unknown)."""
    lib = BY_NAME.get(wrapper)
    return (lib.remat_spelling if lib is not None else None) or BY_NAME["jax.jit"].remat_spelling or "jax.checkpoint"
