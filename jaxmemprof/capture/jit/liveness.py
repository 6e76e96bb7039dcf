"""What became of a sampled call's input leaves, told at the function's next
call (or at the end of the run): each leaf is held weakly, and the frame and
instruction at which it was freed are noted (``_on_death``). A leaf freed at
the call, or in the loads and stores right after it (``_windows``), as in
``state = step(state)`` or the caller's ``return step(state)``, was
``dropped``: nothing of the program's can have used it after the call. One
freed once other code had run is ``dropped-later`` (that code may have used
it)."""

from __future__ import annotations

import contextlib
import dis
import sys

from jaxmemprof.capture.arrays import is_deleted as _is_deleted
from jaxmemprof.capture.jit.frames import is_library, user_frame

# Instructions that run no code of the program's: after a call, an input that
# dies while only these ran cannot have been used after the call. Each
# Python the project declares (3.11-3.13) has its own names for them; a
# move missing here ends the window early, and the old state of
# ``a, b = step(a, b)`` reads as used after the call (3.13 compiles those
# stores to one STORE_FAST_STORE_FAST): tests/test_liveness_opcodes.py
# checks every load and store of locals the running Python has.
_MOVES = frozenset({
    "CACHE", "NOP", "EXTENDED_ARG", "POP_TOP", "COPY", "SWAP", "PUSH_NULL", "KW_NAMES",
    "UNPACK_SEQUENCE", "UNPACK_EX", "BUILD_TUPLE", "BUILD_LIST",
    "LOAD_FAST", "LOAD_CONST", "LOAD_NAME", "LOAD_GLOBAL", "LOAD_DEREF", "LOAD_CLOSURE",
    "STORE_FAST", "STORE_NAME", "STORE_GLOBAL", "STORE_DEREF", "DELETE_FAST", "DELETE_NAME",
    # 3.12: a local's load that checks it is bound; the save and restore of a
    # name around an inlined comprehension (PEP 709); the locals of a class
    # body
    "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "STORE_FAST_MAYBE_NULL", "LOAD_LOCALS",
    # 3.13: two locals loaded or stored by one instruction
    "LOAD_FAST_LOAD_FAST", "STORE_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST",
})
_RETURNS = frozenset({"RETURN_VALUE", "RETURN_CONST"})
_window_cache: dict = {}


def _window(code, lasti: int) -> tuple[frozenset, bool]:
    """The offsets of ``code`` from the call at ``lasti`` on through the
    loads and stores after it, and whether the frame then returns the
    result (the caller's statement then goes on with it)."""
    key = (code, lasti)
    hit = _window_cache.get(key)
    if hit is None:
        offsets, returns = {lasti}, False
        for ins in dis.get_instructions(code):
            if ins.offset <= lasti:
                continue
            if ins.opname in _MOVES:
                offsets.add(ins.offset)
            else:
                returns = ins.opname in _RETURNS
                if returns:
                    offsets.add(ins.offset)
                break
        hit = _window_cache[key] = (frozenset(offsets), returns)
    return hit


def frame_windows(frame) -> set:
    """(frame id, code, offset) at which an input's death means that nothing
    of the program's ran between the call and it: in the calling frame, and
    in its callers while each returns the result at once."""
    out: set = set()
    while frame is not None:
        offsets, returns = _window(frame.f_code, frame.f_lasti)
        out.update((id(frame), frame.f_code, o) for o in offsets)
        if not returns:
            break
        frame = frame.f_back
        if frame is not None and is_library(frame.f_code.co_filename):
            break
    return out


# An input leaf that died as the sampler let go of it (the program had dropped it meanwhile).
_LET_GO = object()


def on_death(index: int, deaths: dict, observer=None):
    """A weakref callback noting where in the user's code (frame id, code,
    offset of the instruction running) an input leaf was freed, or that the
    sampler's list of live arrays was its last holder (``_LET_GO``)."""

    def died(_ref):
        if observer is not None and observer.owned_by_this_thread():
            deaths[index] = _LET_GO
            return
        try:
            f = user_frame(sys._getframe(1))
        except ValueError:  # freed with no Python frame running (interpreter exit)
            return
        if f is not None:
            deaths[index] = (id(f), f.f_code, f.f_lasti)

    return died


def call_fates(refs, deaths, windows, observer):
    """What became of a sampled call's input leaves (its weakrefs, where
    each died, the call's windows): ``held`` (still referenced), ``dropped``
    (freed during the call, as nnx.jit does when it replaces a module's
    state, or after it before anything else ran: only loads and stores, as
    in ``state = step(state)``, or the caller's ``return step(state)``, so
    nothing can have used it after the call), ``dropped-later`` (freed once
    other code had run, which may have used it), ``deleted`` (donated) or
    ``unknown``. None when the program dropped a leaf while the sampler held
    it: where cannot be told, and this call says nothing."""
    fates = []
    # While the sampler takes a snapshot it holds every live array: an
    # input it holds looks held. Wait for it to let go (milliseconds).
    with observer.holding() if observer is not None else contextlib.nullcontext():
        for i, r in enumerate(refs):
            obj = r() if r is not None else None
            if r is None:
                fates.append("unknown")
            elif obj is not None:
                fates.append("deleted" if _is_deleted(obj) else "held")
                del obj
            elif deaths.get(i) is _LET_GO:
                return None
            elif i in deaths:
                fates.append("dropped" if deaths[i] in windows else "dropped-later")
            else:
                fates.append("unknown")
    return fates
