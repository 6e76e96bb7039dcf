"""The user's traceback, as python would show it: without jaxmemprof's and
runpy's frames above the script, nor the jit probe's between the script and a
jitted function (which exist only under run), for each exception python prints
with it. An exception's class name and text are read as python's own printing
reads them, never failing, and JAX's out-of-memory error is told apart.
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


def is_out_of_memory(exc: BaseException) -> bool:
    """JAX's RESOURCE_EXHAUSTED error (raised as JaxRuntimeError/XlaRuntimeError)."""
    try:
        names = "".join(_TYPE_NAME.__get__(t) for t in _TYPE_MRO.__get__(type(exc)))
    except Exception:
        return False
    return "RuntimeError" in names and "RESOURCE_EXHAUSTED" in safe_str(exc)[:200]


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
