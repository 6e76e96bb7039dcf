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
from jaxmemprof.capture.threads import start_thread

_GUARDED = ("/logging/", "<frozen importlib._bootstrap")  # frames that may hold a lock the end phase takes
_DEPTH = 64  # how far down a stack is looked at for a guarded frame
_SWITCH_S = 1e-5  # the switch interval while the exceptions are sent (3.10, 3.11)
_POLL_S = 0.05  # how often jaxmemprof-parking looks at the threads that have not taken theirs

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
    watch = _Watch(is_program)
    _state["watch"] = watch
    if not _forever.locked():
        _forever.acquire()
    return _interrupt_each(others, watch)


class _Watch:
    """Where a thread of the program's stops: its verdicts on files, the
    threads seen in the program's code under a guarded frame, the time the
    script ended."""

    def __init__(self, is_program: Callable[[str], bool]):
        self.is_program = is_program
        self.verdicts: dict = {}

    def program_code(self, frame) -> bool:
        filename = frame.f_code.co_filename
        v = self.verdicts.get(filename)
        if v is None:
            try:
                v = self.verdicts[filename] = bool(self.is_program(filename))
            except Exception:
                v = self.verdicts[filename] = False
        return v

    def in_program(self, frame) -> bool:
        """Whether a frame of this stack is the program's."""
        for _ in range(_DEPTH):
            if frame is None:
                return False
            if self.program_code(frame):
                return True
            frame = frame.f_back
        return False

    def to_stop(self, frame, event: str, arg) -> bool:
        """While a thread that may hold a lock unwinds from the exception:
        whether it stops at this event. Never under a guarded frame (its
        handlers give back logging's and the import system's locks), nor
        at a lock's own ``__exit__``/``release`` (a ``with lock:`` gives the
        lock back), nor in the library's code that a ``with`` runs on the way
        out (a Condition's __exit__); otherwise at its first call or return,
        before any code of the program's (a ``with``'s __exit__ of the
        program's: the thread stops before it, with what it holds)."""
        if event not in ("call", "c_call", "return") or _guarded(frame):
            return False
        if event == "c_call":
            return not _releases_lock(arg) and (self.program_code(frame) or not in_with_block(frame))
        if event == "call":
            return self.program_code(frame) or not in_with_block(frame.f_back)
        return not in_with_block(frame.f_back)  # a return: into a caller's ``with`` (its __exit__ next), or not


def _releases_lock(fn) -> bool:
    return getattr(fn, "__name__", "") in ("__exit__", "release") and isinstance(getattr(fn, "__self__", None),
                                                                               _LOCK_TYPES)


_LOCK_TYPES = tuple({type(threading.Lock()), type(threading.RLock())})


def _guarded(frame) -> bool:
    for _ in range(_DEPTH):
        if frame is None:
            return False
        name = frame.f_code.co_filename
        if any(g in name for g in _GUARDED):
            return True
        frame = frame.f_back
    return False


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
    if not entries:
        return False
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
    a ``with``'s ``__exit__`` (on the way out: three Nones, then the call;
    on an exception: WITH_EXCEPT_START). 3.10 has no exception table: every
    offset from a SETUP_WITH to the end of its handler counts as an exit."""
    import dis

    try:
        instructions = list(dis.get_instructions(code))
    except Exception:
        return (), frozenset(), frozenset()
    parse = getattr(dis, "_parse_exception_table", None)
    if parse is None:
        return (), frozenset(), _with_ranges_310(instructions)
    try:
        entries = tuple((e.start, e.end, e.target) for e in parse(code))
    except Exception:
        return (), frozenset(), frozenset()
    at = {ins.offset: i for i, ins in enumerate(instructions)}
    handlers = set()
    for _, _, target in entries:
        i = at.get(target)
        if i is not None and any(ins.opname == "WITH_EXCEPT_START" for ins in instructions[i:i + 3]):
            handlers.add(target)
    exits = {ins.offset for ins in instructions if ins.opname == "WITH_EXCEPT_START"}
    for i, ins in enumerate(instructions):
        if ins.opname == "LOAD_CONST" and ins.argval is None and i + 3 < len(instructions) and all(
                x.opname == "LOAD_CONST" and x.argval is None for x in instructions[i + 1:i + 3]):
            for x in instructions[i + 3:i + 5]:
                if x.opname in ("CALL", "PRECALL"):
                    exits.add(x.offset)
    return entries, frozenset(handlers), frozenset(exits)


def _with_ranges_310(instructions: list) -> frozenset:
    """3.10: the offsets inside a ``with`` (its body and normal exit, from
    SETUP_WITH to its handler) and of its handler (to its POP_EXCEPT)."""
    inside: set = set()
    for ins in instructions:
        if ins.opname in ("SETUP_WITH", "SETUP_ASYNC_WITH") and isinstance(ins.argval, int):
            handler = ins.argval
            ends = [x.offset for x in instructions if x.offset >= handler and x.opname == "POP_EXCEPT"]
            last = ends[0] if ends else handler
            inside.update(x.offset for x in instructions if ins.offset < x.offset <= last)
    return frozenset(inside)


def _stop() -> None:
    _state["parked"] += 1
    _forever.acquire()  # for good: the process ends with the thread here


class _Parked(SystemExit):
    """The exception a thread of the program's is sent on 3.10 and 3.11.
    Its construction runs in that thread, as the interpreter normalises it
    at the first frame with a handler (``try``, ``with``) around the point
    where the thread was: there, unless its stack may hold a lock the end
    phase needs, it blocks for good, before any handler of the program's
    runs. A SystemExit, so that where it is let go on and reaches the top
    of the thread, the thread ends without a word (threading's excepthook
    ignores SystemExit), and ``except Exception`` does not catch it."""

    def __init__(self, *args):
        _arrived()
        super().__init__(*args)


class _Freeze:
    """What a thread of the program's is sent on 3.10 and 3.11, where an
    exception sent as a class is made (normalised) only at the first frame
    with a handler, after the frames without one are left: their value
    stacks emptied, a generator that a ``for`` of theirs was iterating
    closed (its ``finally`` run: measured, where python runs none). An
    object that is not an exception class is refused at once, where the
    thread is, by a SystemError whose message has the object's repr: that
    repr runs first, in the thread, before anything is left. It stops the
    thread there (as ``_Parked``'s construction on 3.12 and later), or, where
    the thread may hold a lock, lets the SystemError go on."""

    def __repr__(self) -> str:
        _arrived()
        return "jaxmemprof's parking"


def _arrived() -> None:
    """In the thread the exception was sent to (its own frames, read in it)."""
    watch = _state.get("watch")
    ident = threading.get_ident()
    if watch is None or ident in our_threads():
        return  # the flag's holder (below), or a thread of ours that took the ident of one that ended
    _state.get("waiting", {}).pop(ident, None)
    frame = sys._getframe(2)  # where the thread is (3.12 and later), the frame whose handler is next (3.10, 3.11)
    if not (_guarded(frame) or in_with_block(frame)):
        _stop()
    # Its stack may hold a lock: the exception is let go on, its handlers
    # give the lock back (a ``with lock:``'s __exit__, logging's
    # ``finally``), and the thread stops at its first step into the
    # program's code (this thread's own profile function, set in it).

    def on_event(frame, event, arg):
        if watch.to_stop(frame, event, arg):
            _stop()
    sys.setprofile(on_event)


def _interrupt_each(others: list, watch: _Watch) -> int:
    """3.10 and 3.11: each thread with a frame of the program's on its
    stack (read through ``sys._current_frames()``) is sent ``_Parked``
    through ``PyThreadState_SetAsyncExc``, which finds the thread by its
    ident under the runtime's lock within the one call (no thread state is
    held between calls). A thread with none (a library's, an idle pool
    worker) runs on. The number sent."""
    send = _SEND
    if send is None:
        return 0
    frames = sys._current_frames()
    targets = [t for t in others if t.ident is not None and watch.in_program(frames.get(t.ident))]
    del frames
    if not targets:
        return 0
    switch = sys.getswitchinterval()
    sys.setswitchinterval(_SWITCH_S)  # the GIL back soon after each step (the program's threads are busy)
    try:
        _state.update(waiting={t.ident: t for t in targets})
        start_thread(_hold_flag, "jaxmemprof-parking", (send,))
        sent = 0
        for t in targets:
            # Alive now: its ident is not another's (an ident is given again
            # only once its thread is gone).
            if t.is_alive() and send(t.ident, _SENT) == 1:
                sent += 1
            else:
                _state["waiting"].pop(t.ident, None)
    finally:
        sys.setswitchinterval(switch)
    return sent


def _resolve():
    """``PyThreadState_SetAsyncExc``, looked up as jaxmemprof is imported
    (before the program runs: none of its audit hooks sees the lookup)."""
    try:
        import ctypes

        return ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.py_object)(
            ("PyThreadState_SetAsyncExc", ctypes.pythonapi))
    except Exception:
        return None


_SEND = _resolve()
_SENT = _Parked if sys.version_info >= (3, 12) else _Freeze()


def _hold_flag(send) -> None:
    """jaxmemprof-parking. The interpreter raises the flag that makes a
    thread look for an asynchronous exception for all threads at once, and
    the first thread that takes its own lowers it: the others would see
    theirs only when the GIL next changes hands in the middle of their
    bytecode (a thread that wakes, prints and sleeps again: seldom). So
    this thread keeps one of its own sent while it waits in C (the flag
    stays up), takes it every ``_POLL_S``, and sends itself another while
    a thread sent one is alive and has not taken it; then it ends, the flag
    down."""
    me = threading.get_ident()
    while True:
        if send(me, _Parked) != 1:
            return
        took = False
        try:
            _poll.acquire(timeout=_POLL_S)  # never given: a wait in C, the exception pending
            time.sleep(0)  # taken here at the latest, with the flag up
        except _Parked:
            took = True
        waiting = _state["waiting"]
        for ident, t in list(waiting.items()):
            if not t.is_alive():  # ended without taking it (in its last steps, in C)
                waiting.pop(ident, None)
        if not waiting:
            if not took:  # the flag was lowered by another thread: this one's is left, never taken
                send(me, None)
            return


_poll = threading.Lock()
_poll.acquire()
