"""Once the script is over, its own threads stop where python stops them.

Python ends a program's daemon threads as it finalises, right after the
atexit handlers: from then on they run none of the program's code.
jaxmemprof's end phase (the last snapshot and its holder search, the
compiles, the summary) comes after the atexit handlers, so a daemon thread
of the program's (a heartbeat, a logger, a prefetcher) would go on acting
through it: printing, writing files, putting arrays on the device.

``park_program_threads`` stops them instead, without running anything of
theirs: every thread there is, but the main thread and jaxmemprof's own,
gets a profile function that blocks the thread for good the next time it
is about to run the program's own code (a call, a return, or a call into C
from a file that is not a library's, the standard library's or
jaxmemprof's), which is where python's finalisation would have stopped it.
The program's thread is not woken, told or unwound (no exception, no
``finally``); a thread blocked in C (a sleep, a read) stays there. Library
code runs on (JAX's own); a thread that reaches the program's code with a
logging or an import frame on its stack (which may hold a lock the end
phase takes: a handler's, the module's) is stopped at its first event with
none there, once the lock is given back. Likewise a thread inside a
``with`` block (where the program holds its locks: ``with lock:``), or
calling a ``with``'s ``__exit__``, is stopped at its first event outside
it, if it leaves within ``WITH_GRACE_S`` of the script's end (a block it
stays in past that is not waited for: the end phase's re-traces of the
program's Python have a deadline, capture/jit/rerun.py). What a ``with``
covers is read from the code's exception table (3.11 and later; 3.10 has
none, and its threads are not parked). A lock taken by ``acquire()`` is
not seen. Threads started later (the end phase's own) are left alone.

CPython 3.12 and later set the function on every thread through
``sys._setprofileallthreads``; 3.11 through its C API (each thread state's
``_PyEval_SetProfile``), with a C callback. Where neither is there, nothing
is done (the threads act on, as they did before).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

from jaxmemprof.capture.threads import ours as our_threads

_GUARDED = ("/logging/", "<frozen importlib._bootstrap")  # frames that may hold a lock the end phase takes
_DEPTH = 64  # how far down a stack is looked at for a guarded frame
WITH_GRACE_S = 2.0  # how long a thread inside a ``with`` block is let run to leave it

_forever = threading.Lock()
_state: dict = {"parked": 0}
_keep: list = []  # the C callback, alive for the process's life


def parked() -> int:
    """How many of the program's threads have been stopped so far."""
    return _state["parked"]


def park_program_threads(is_program: Callable[[str], bool]) -> int:
    """Stop the program's threads at their next step into the program's
    own code (``is_program(filename)``), from the main thread once the
    script is over. The number of threads watched (every thread but the
    main thread and jaxmemprof's ``jaxmemprof-*``); 0 where this Python
    offers no way. Never raises."""
    try:
        return _park(is_program)
    except Exception:
        return 0


def _park(is_program: Callable[[str], bool]) -> int:
    ours = {threading.main_thread().ident, threading.get_ident(), *our_threads()}
    ours.update(t.ident for t in threading.enumerate() if t.name.startswith("jaxmemprof-"))
    others = [t for t in threading.enumerate() if t.ident not in ours]
    if not others:
        return 0
    verdicts: dict = {}
    pending: set = set()  # threads that reached the program's code under a guarded frame

    def program_code(frame) -> bool:
        filename = frame.f_code.co_filename
        v = verdicts.get(filename)
        if v is None:
            try:
                v = verdicts[filename] = bool(is_program(filename))
            except Exception:
                v = verdicts[filename] = False
        return v

    def guarded(frame) -> bool:
        for _ in range(_DEPTH):
            if frame is None:
                return False
            name = frame.f_code.co_filename
            if any(g in name for g in _GUARDED):
                return True
            frame = frame.f_back
        return False

    since = time.monotonic()

    def to_stop(frame, entering: bool) -> bool:
        """Whether this thread stops here: it is in (or has been in) the
        program's code, and no guarded frame is on its stack now (a frame
        being entered holds nothing yet), nor, for ``WITH_GRACE_S``, a frame
        inside a ``with`` block."""
        ident = threading.get_ident()
        if ident not in pending and not program_code(frame):
            return False
        below = frame.f_back if entering else frame
        if guarded(below) or (time.monotonic() - since < WITH_GRACE_S and in_with_block(below)):
            pending.add(ident)
            return False
        return True

    if not _forever.locked():
        _forever.acquire()
    if hasattr(sys, "_setprofileallthreads"):  # 3.12 and later
        def on_event(frame, event, arg):
            if threading.get_ident() in ours:
                sys.setprofile(None)
            elif to_stop(frame, event == "call"):
                _stop()
        sys._setprofileallthreads(on_event)
        sys.setprofile(None)  # not this thread's
    else:
        if not _set_each_thread_state(ours, to_stop):
            return 0
    return len(others)


def in_with_block(frame) -> bool:
    """Whether a frame of this stack (the thread's own: read in it) is
    inside a ``with`` block or calling its ``__exit__``."""
    for _ in range(_DEPTH):
        if frame is None:
            return False
        if _inside_with(frame.f_code, frame.f_lasti):
            return True
        frame = frame.f_back
    return False


_codes: dict = {}  # code object -> (exception table entries, with handlers' offsets, with exits' offsets)


def _inside_with(code, offset: int) -> bool:
    got = _codes.get(code)
    if got is None:
        got = _codes[code] = _with_parts(code)
    entries, handlers, exits = got
    if offset in exits:
        return True
    for _ in range(16):  # out through the handlers that cover each other, innermost first
        target = next((t for start, end, t in entries if start <= offset < end), None)
        if target is None:
            return False
        if target in handlers:
            return True
        offset = target
    return False


def _with_parts(code) -> tuple:
    """``code``'s exception table, the offsets of its ``with`` handlers
    (WITH_EXCEPT_START among their first instructions) and of the calls of
    a ``with``'s ``__exit__`` on the way out (three Nones, then the call)."""
    import dis

    parse = getattr(dis, "_parse_exception_table", None)
    if parse is None:
        return (), frozenset(), frozenset()
    try:
        entries = tuple((e.start, e.end, e.target) for e in parse(code))
        instructions = list(dis.get_instructions(code))
    except Exception:
        return (), frozenset(), frozenset()
    at = {ins.offset: i for i, ins in enumerate(instructions)}
    handlers = set()
    for _, _, target in entries:
        i = at.get(target)
        if i is not None and any(ins.opname == "WITH_EXCEPT_START" for ins in instructions[i:i + 3]):
            handlers.add(target)
    exits = set()
    for i, ins in enumerate(instructions):
        if ins.opname == "LOAD_CONST" and ins.argval is None and i + 3 < len(instructions) and all(
                x.opname == "LOAD_CONST" and x.argval is None for x in instructions[i + 1:i + 3]):
            for x in instructions[i + 3:i + 5]:
                if x.opname in ("CALL", "PRECALL"):
                    exits.add(x.offset)
    return entries, frozenset(handlers), frozenset(exits)


def _stop() -> None:
    _state["parked"] += 1
    _forever.acquire()  # for good: the process ends with the thread here


def _set_each_thread_state(ours: set, to_stop) -> bool:
    """3.11: the C profile function set on every thread state through the
    C API, which takes it for another thread's state too (with the GIL
    held, as here)."""
    import ctypes

    api = ctypes.pythonapi
    needed = ("PyInterpreterState_Get", "PyInterpreterState_ThreadHead", "PyThreadState_Next", "PyThreadState_Get",
              "_PyEval_SetProfile")
    if not all(hasattr(api, n) for n in needed):
        return False
    api.PyInterpreterState_Get.restype = ctypes.c_void_p
    api.PyInterpreterState_ThreadHead.restype = ctypes.c_void_p
    api.PyInterpreterState_ThreadHead.argtypes = [ctypes.c_void_p]
    api.PyThreadState_Next.restype = ctypes.c_void_p
    api.PyThreadState_Next.argtypes = [ctypes.c_void_p]
    api.PyThreadState_Get.restype = ctypes.c_void_p
    api._PyEval_SetProfile.restype = ctypes.c_int
    api._PyEval_SetProfile.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    kind = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.py_object, ctypes.c_int, ctypes.c_void_p)

    def on_event(_obj, frame, what, _arg):
        try:
            if threading.get_ident() in ours:
                api._PyEval_SetProfile(api.PyThreadState_Get(), None, None)
            elif to_stop(frame, what == 0):  # PyTrace_CALL
                _stop()
        except BaseException:
            pass
        return 0

    callback = kind(on_event)
    _keep.append(callback)
    address = ctypes.cast(callback, ctypes.c_void_p)
    ts = api.PyInterpreterState_ThreadHead(api.PyInterpreterState_Get())
    here = api.PyThreadState_Get()
    while ts:
        if ts != here:
            api._PyEval_SetProfile(ts, address, None)
        ts = api.PyThreadState_Next(ts)
    return True
