"""A frame's local variables, read without writing anything back.

On Python 3.11 and 3.12, ``frame.f_locals`` is not a read: it copies the
frame's fast locals into a dict kept on the frame (the one ``locals()``
returns), and a trace function's trampoline later writes that dict back into
the frame. Reading it from another thread therefore changes the program: a
dict the program holds from ``locals()`` gains or loses names, a value the
frame has dropped stays alive in the dict, and clearing the dict afterwards
deletes the frame's locals when a trace function is set (an
``UnboundLocalError`` in the program).

Here the slots are read where the interpreter keeps them, the frame's
``localsplus`` array, in one call of C code: a pipeline of C iterators
(``map``, ``operator``, ctypes' ``from_address``, ``PyObj_FromPtr``) driven by
one ``list()``, so that no bytecode runs between reading a slot's pointer and
taking a reference to its object, and the thread that owns the frame cannot
run in between (the GIL is released only between bytecodes, or by the
garbage collector's finalizers, which are held off for that call). The
layout is checked once against a frame of known locals; where it does not
match (another Python, a debug build) frames that are running are not read
(``readable()`` is false) and only what 3.13's read-only ``f_locals`` proxy
gives is used.

Python 3.13 and later: ``frame.f_locals`` is a proxy that reads the frame's
slots (PEP 667), nothing to work around.
"""

from __future__ import annotations

import ctypes
import gc
import itertools
import operator
import sys
import types

_PROXY = sys.version_info >= (3, 13)
# struct _frame: PyObject_HEAD, f_back, then f_frame (the _PyInterpreterFrame);
# the _PyInterpreterFrame's localsplus follows 72 bytes of specials on 3.11
# and 3.12 (64-bit).
_F_FRAME = 2 * ctypes.sizeof(ctypes.c_void_p) + ctypes.sizeof(ctypes.c_void_p)
_LOCALSPLUS = 72
_UNBOUND = object()  # what an empty slot reads as (its id stands in for NULL)
_checked: bool | None = None


def _names(code: types.CodeType) -> list:
    """The names of a code object's slots, in the interpreter's order: its
    variables (arguments first), then cells not also arguments, then free
    variables."""
    names = list(code.co_varnames)
    names.extend(c for c in code.co_cellvars if c not in code.co_varnames)
    names.extend(code.co_freevars)
    return names


def _raw(frame, n: int) -> list:
    """The objects in the first ``n`` slots of ``frame``'s localsplus, each a
    new reference, ``_UNBOUND`` for an empty slot. One C-driven call."""
    from _ctypes import PyObj_FromPtr

    slots_type = ctypes.c_size_t * n
    unbound = id(_UNBOUND)
    f_frame = map(operator.attrgetter("value"), map(ctypes.c_size_t.from_address, [id(frame) + _F_FRAME]))
    slots = itertools.chain.from_iterable(map(operator.itemgetter(slice(None)),
                                              map(slots_type.from_address, map(operator.add, f_frame,
                                                                                [_LOCALSPLUS]))))
    # Both copies of a slot's pointer are read in the same call; the tee's
    # buffer is filled as the pipeline runs, within it.
    a, b = itertools.tee(slots)
    pointers = map(operator.add, a, map(operator.mul, map(operator.not_, b), itertools.repeat(unbound)))
    pipeline = map(PyObj_FromPtr, pointers)
    was_enabled = gc.isenabled()
    if was_enabled:
        gc.disable()
    try:
        return list(pipeline)
    finally:
        if was_enabled:
            gc.enable()


def _probe(x, y):
    z = [x]
    unset = 1
    del unset

    def inner():
        return z, x

    return sys._getframe(), inner


def _layout_holds() -> bool:
    """Whether this Python's frames have the layout ``_raw`` reads: a
    finished frame of known locals (its own copy, owned by the frame object)
    read both ways."""
    global _checked
    if _checked is None:
        _checked = False
        if (3, 11) <= sys.version_info < (3, 13) and ctypes.sizeof(ctypes.c_void_p) == 8 \
                and not hasattr(sys, "gettotalrefcount"):
            try:
                x, y = object(), object()
                frame, inner = _probe(x, y)
                names = _names(frame.f_code)
                got = _raw(frame, len(names))
                values = dict(zip(names, got))
                x_cell, z_cell = values.get("x"), values.get("z")
                _checked = (len(got) == len(names) and values.get("y") is y and values.get("unset") is _UNBOUND
                            and values.get("inner") is inner
                            and type(x_cell) is types.CellType and type(z_cell) is types.CellType
                            and x_cell.cell_contents is x and z_cell.cell_contents == [x])
                del frame, inner, got, values, x_cell, z_cell
            except Exception:
                _checked = False
    return _checked


def readable() -> bool:
    """Whether a running frame's locals can be read without changing it."""
    return _PROXY or _layout_holds()


def frame_locals(frame) -> list:
    """(name, value) of ``frame``'s bound locals (a cell's contents for a
    cell), read without writing to the frame; [] where that cannot be done."""
    try:
        if _PROXY:
            loc = frame.f_locals
            if type(loc) is dict:  # a module or class body: its namespace, not the frame's
                return []
            return list(loc.items())
        if not _layout_holds():
            return []
        names = _names(frame.f_code)
        values = _raw(frame, len(names))
    except Exception:
        return []
    out = []
    for name, value in zip(names, values):
        if value is _UNBOUND:
            continue
        if type(value) is types.CellType:
            try:
                value = value.cell_contents
            except ValueError:  # an empty cell
                continue
        out.append((name, value))
    return out
