"""The user's traceback, as python would show it: without jaxmemprof's and
runpy's frames above the script, nor the jit probe's between the script and a
jitted function (which exist only under run), for each exception python prints
with it. An exception's class name and text are read as python's own printing
reads them, never failing, and JAX's out-of-memory error is told apart.

The program's exceptions are data: jaxmemprof reads their text (``message``,
``described``) only where that runs none of the program's Python (a
``__str__`` of Python's or JAX's own, over arguments of plain types), and
never lets anything the reading raises (``SystemExit`` included) through.
``safe_str`` alone calls ``str()`` whatever it runs, where jaxmemprof prints
what python itself would print.
"""

from __future__ import annotations

import os
import runpy
from pathlib import Path

_OWN_DIR = str(Path(__file__).resolve().parent.parent)
_RUNPY = os.path.abspath(runpy.__file__)

# What python's own printing reads of an exception: the fields themselves,
# never a property a subclass puts over them (its __str__ alone is called,
# by the hook, as under python).
_TRACEBACK = BaseException.__dict__["__traceback__"]
_CAUSE = BaseException.__dict__["__cause__"]
_CONTEXT = BaseException.__dict__["__context__"]
_SUPPRESS = BaseException.__dict__["__suppress_context__"]
_TYPE_NAME = type.__dict__["__name__"]
_TYPE_MRO = type.__dict__["__mro__"]
_TYPE_DICT = type.__dict__["__dict__"]
_TYPE_MODULE = type.__dict__["__module__"]
_ARGS = BaseException.__dict__["args"]
# Values whose str() and repr() are Python's own (exactly these types: a subclass may override them).
_PLAIN = frozenset({str, int, float, bool, bytes, type(None)})
# Fields other than args that a builtin exception's own __str__ formats.
_FIELDS = {OSError: ("filename", "filename2"), SyntaxError: ("msg", "filename", "text"), ImportError: ("msg",)}


def type_name(exc: BaseException) -> str:
    """The exception's class name, as tracebacks show it (never failing)."""
    try:
        return _TYPE_NAME.__get__(type(exc))
    except Exception:
        return "BaseException"


def safe_str(exc: BaseException) -> str:
    """``str(exc)``, or what python prints when that fails."""
    try:
        text = str(exc)
        return text if isinstance(text, str) else "<exception str() failed>"
    except BaseException:
        return "<exception str() failed>"


def _plain(v, depth: int = 0) -> bool:
    t = type(v)
    if t in _PLAIN:
        return True
    return t is tuple and depth < 2 and all(_plain(x, depth + 1) for x in v)


def _own_str(cls):
    """The class in ``cls``'s MRO whose ``__str__`` ``str()`` calls, where
    that is Python's or JAX's (its module ``builtins``, ``jax`` or
    ``jaxlib``); None where it is the program's (or a library's)."""
    for c in _TYPE_MRO.__get__(cls):
        if "__str__" in _TYPE_DICT.__get__(c):
            module = _TYPE_MODULE.__get__(c)
            if type(module) is str and (module in ("builtins", "jax", "jaxlib")
                                        or module.startswith(("jax.", "jaxlib."))):
                return c
            return None
    return None


def message(exc: BaseException) -> str | None:
    """``str(exc)`` where reading it runs none of the program's Python: its
    class's ``__str__`` is Python's or JAX's, and what that formats (its
    arguments; an OSError's file names) are of plain types. None where it
    would run the program's code, or fails: nothing raised gets through."""
    try:
        cls = type(exc)
        owner = _own_str(cls)
        if owner is None or not _plain(_ARGS.__get__(exc)):
            return None
        for base, fields in _FIELDS.items():
            if base in _TYPE_MRO.__get__(owner):
                if not all(_plain(base.__dict__[f].__get__(exc)) for f in fields):
                    return None
        text = _TYPE_DICT.__get__(owner)["__str__"](exc)
        return text if type(text) is str else None
    except BaseException:
        return None


def described(exc: BaseException) -> str:
    """``Name: text`` of an exception (``Name`` where its text is empty), its
    text read by ``message``; where reading it would run the program's own
    code, that is said instead. Never raises."""
    name = type_name(exc)
    text = message(exc)
    if text is None:
        return f"{name} (its text is made by the program's own code: not read)"
    return f"{name}: {text}" if text else name


def is_out_of_memory(exc: BaseException, kinds: tuple = ("RuntimeError",)) -> bool:
    """JAX's RESOURCE_EXHAUSTED error (raised as JaxRuntimeError/XlaRuntimeError;
    ``kinds``: the base classes' names it may have), its text read by ``message``."""
    try:
        names = "".join(_TYPE_NAME.__get__(t) for t in _TYPE_MRO.__get__(type(exc)))
    except Exception:
        return False
    return any(k in names for k in kinds) and "RESOURCE_EXHAUSTED" in (message(exc) or "")[:300]


_PROBE_DIR = os.path.join(_OWN_DIR, "capture", "jit", "")  # the jit probe's files


def _ours(tb) -> bool:
    try:
        f = os.path.abspath(tb.tb_frame.f_code.co_filename)
    except Exception:
        return False
    return f.startswith(_OWN_DIR) or f == _RUNPY


def user_traceback(tb):
    """A traceback as python would have it: without jaxmemprof's and runpy's
    frames above the script, nor the jit probe's between the script and a
    jitted function (which exist only under run)."""
    while tb is not None and _ours(tb):
        tb = tb.tb_next
    head = tb
    while tb is not None and tb.tb_next is not None:
        try:
            probe = os.path.abspath(tb.tb_next.tb_frame.f_code.co_filename).startswith(_PROBE_DIR)
        except Exception:
            probe = False
        if probe:
            tb.tb_next = tb.tb_next.tb_next
        else:
            tb = tb.tb_next
    return head


def _chain(exc: BaseException | None):
    """The exception and those python prints with it (its cause or context)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        try:
            cause = _CAUSE.__get__(exc)
            exc = cause if cause is not None else (None if _SUPPRESS.__get__(exc) else _CONTEXT.__get__(exc))
        except Exception:
            return


def trim_traceback(exc: BaseException):
    """Each exception python prints with ``exc`` gets its user traceback;
    returns ``exc``'s."""
    for e in _chain(exc):
        try:
            _TRACEBACK.__set__(e, user_traceback(_TRACEBACK.__get__(e)))
        except Exception:
            pass
    return _TRACEBACK.__get__(exc)
