"""A frame's local variables, read only where reading cannot harm the program.

Only the frames of the thread that calls ``own_stack()`` are ever read: the
program's own thread, at a point it offers (a step's snapshot taken in
``jaxmemprof.mark()``, its own ``jaxmemprof.snapshot()``, a call of its jitted
step), where every frame below ours is suspended in a call and no other
thread can run it. Frames of other threads are never read, by any means: a
read from another thread cannot be made safe (a pointer read there may be
freed by the frame's thread before it is referenced: audit hooks, finalizers,
trace functions and the eval breaker all run bytecode, and 3.13.0's
``f_locals`` proxy crashes on frames other threads run). No raw pointer, no
ctypes: only what the interpreter offers.

- Python 3.13 and later: ``frame.f_locals`` is a proxy that reads the frame's
  slots (PEP 667) and writes nothing: used as it is, on this thread's frames.
- Python 3.11 and 3.12: ``frame.f_locals`` copies the frame's variables into a
  dict cached on the frame (the one ``locals()`` returns) and returns it; a
  trace or profile function's trampoline writes that dict back into the frame.
  Left filled, the dict would keep each value alive after the program rebinds
  it (a step's parameters kept a step longer). The protocol
  (docs/holders.md, "Frames: what is read, and when"):

  1. no frame is read while a trace or profile function is set in this thread
     (``sys.gettrace()``, ``sys.getprofile()``): a trampoline may be between
     its copy and its write-back (a debugger stopped in the frame, whose user
     may have assigned to the dict), and a refresh or a clear then would
     change or delete the frame's variables;
  2. a frame whose code calls ``locals``, ``vars``, ``exec`` or ``eval`` is not
     read: the program may hold that dict, or keep names in it that are not
     the frame's variables, and a refresh would change what it sees;
  3. otherwise the dict is refreshed and its items copied, and then emptied
     unless something besides the frame holds it (``sys.getrefcount``): it then
     keeps nothing alive. A later ``locals()`` or trampoline refreshes it from
     the frame first (the read set the frame's ``f_fast_as_locals``), so it
     sees what it would have seen.

Where a frame is not read, ``Unread`` says why, so that the run can say which
holders could not be named.
"""

from __future__ import annotations

import sys
import types

_PROXY = sys.version_info >= (3, 13)
_CO_OPTIMIZED = 0x1
# Names whose call in a frame's code hands the program the frame's dict (3.11, 3.12).
_DICT_USERS = frozenset(("locals", "vars", "exec", "eval"))

# Why a frame was not read.
TRACED = "a trace or profile function is set in the program's thread"
USES_LOCALS = "its code calls locals(), vars(), exec() or eval()"
OTHER_THREAD = "threads other than the searching one"


class Unread:
    """The program's frames a search did not read, by reason: reason -> the
    functions (qualified names), in the order met."""

    def __init__(self):
        self.by_reason: dict = {}

    def add(self, reason: str, function: str) -> None:
        names = self.by_reason.setdefault(reason, [])
        if function not in names:
            names.append(function)

    def __bool__(self) -> bool:
        return bool(self.by_reason)

    def text(self) -> str:
        """One line: the functions whose locals were not read, and why."""
        parts = []
        for reason, names in self.by_reason.items():
            shown = ", ".join(names[:3]) + (f" +{len(names) - 3} more" if len(names) > 3 else "")
            parts.append(f"{shown} ({reason})")
        return "locals not read: " + "; ".join(parts)


def own_stack(skip: int = 1) -> list:
    """The frames of the calling thread, innermost first, from ``skip``
    frames above this call."""
    frames = []
    f: types.FrameType | None = sys._getframe(skip)
    while f is not None:
        frames.append(f)
        f = f.f_back
    return frames


def traced() -> bool:
    """Whether a trace or profile function is set in this thread."""
    return sys.gettrace() is not None or sys.getprofile() is not None


def _qualname(code: types.CodeType) -> str:
    return code.co_qualname if hasattr(code, "co_qualname") else code.co_name


def frame_locals(frame: types.FrameType, unread: Unread | None = None) -> list:
    """(name, value) of the bound locals of ``frame``, a frame of the calling
    thread (a cell's contents for a cell); [] where it must not be read (the
    reason added to ``unread``). Never call it on another thread's frame."""
    code = frame.f_code
    if not code.co_flags & _CO_OPTIMIZED:  # a module or class body: its namespace, not the frame's
        return []
    try:
        if _PROXY:
            return list(frame.f_locals.items())
        if traced():
            if unread is not None:
                unread.add(TRACED, _qualname(code))
            return []
        if not _DICT_USERS.isdisjoint(code.co_names):
            if unread is not None:
                unread.add(USES_LOCALS, _qualname(code))
            return []
        d = frame.f_locals  # refreshed from the frame's slots (PyFrame_FastToLocalsWithError)
        if type(d) is not dict:
            return []
        items = list(dict.items(d))
        # The frame's reference, ours (d) and getrefcount's argument: nothing else holds it.
        if sys.getrefcount(d) <= 3:
            dict.clear(d)  # its values are the frame's own: clearing frees none of them
        del d
        return items
    except Exception:
        return []
