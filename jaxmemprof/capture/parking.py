"""Once the script is over, its own threads stop where python stops them.

Python ends a program's daemon threads as it finalises, right after the
atexit handlers: from then on they run none of the program's code.
jaxmemprof's end phase (the last snapshot and its holder search, the
compiles, the summary) comes after the atexit handlers, so a daemon thread
of the program's (a heartbeat, a logger, a prefetcher) would go on acting
through it: printing, writing files, putting arrays on the device.

``park_program_threads`` stops them instead, where they are, running
nothing of theirs. Each thread with a frame of the program's on its stack
as the script ends (read through ``sys._current_frames()``; not the main
thread, nor jaxmemprof's own) is sent an asynchronous exception through
``PyThreadState_SetAsyncExc``, the C API that finds a thread by its ident
under the runtime's lock within one call: no thread state is held between
calls, no interpreter memory is read through an address. The interpreter
acts on it at the thread's next check of its eval breaker (a call, a
loop's jump back): there, before a frame is left, it calls into the object
sent, in the thread, and that call blocks for good (the thread is parked):

- 3.12 and later make the exception (``_Parked``'s construction) at once,
  where the thread is.
- 3.11 makes an exception sent as a class only at the first frame
  with a handler (``try``, ``with``), after leaving the frames without one:
  their value stacks emptied, a generator that a ``for`` of theirs was
  iterating closed, its ``finally`` run (measured: tests/test_parking.py).
  So it is sent an object that is not an exception class (``_Freeze``):
  the interpreter refuses it at once, where the thread is, with a
  SystemError whose message holds the object's repr, and the repr (ours)
  runs first.

Nothing of the program's runs: no ``finally``, no ``__exit__``, no
``__del__`` of a local, as under python (side by side in
tests/test_parking.py). Where the thread's stack may hold a lock the end
phase needs (a logging or an import frame on it, or a frame inside a
``with`` block, read from the code's exception table; a code whose table
cannot be read counts as one), the exception is let go on instead: the handlers give the lock
back (a lock's own ``__exit__``, logging's ``finally``) and the thread's own
profile function (set in it, by it) stops it at its first call or return
that is not a lock's release, a guarded frame's, or the library's way out
of a ``with``: before any code of the program's (a context manager of the
program's is stopped before its ``__exit__``, with what it holds). A lock
taken by ``acquire()`` is not seen: the end phase's re-traces have a
deadline (capture/jit/rerun.py).

What this does not do: a thread blocked in C (a sleep, a read) takes the
exception only when it returns to Python, as before; a thread with none
of the program's frames as the script ends (a library's, an idle pool
worker) runs on, as JAX's own do; a thread started by the program's
threads after the script's end (between the look and the sending) is not
sent one.

The interpreter raises the flag that makes threads look for an
asynchronous exception for all threads at once (3.11 and 3.12), and the
first thread to take its own lowers it: a thread that wakes, prints and
sleeps would see its own only when the GIL changed hands mid-bytecode. A
thread of jaxmemprof's (``jaxmemprof-parking``) keeps the flag up until
every thread sent one has taken it or ended; while one stays blocked in C,
every thread checks its eval breaker at each call (measured: 4% on a
call-bound loop on 3.11; 3.13's flags are per thread).

Why not a profile function set on every thread (what this did before):
3.11 offers that only by walking the thread states through their addresses
(``PyInterpreterState_ThreadHead``, ``PyThreadState_Next``) with a call
per thread, and a program's audit hook that lets the GIL go between the
calls lets a thread end and free the state the walk goes to next: SIGSEGV
in 7 of 40 runs of benchmarks/stress_parking.py. 3.12 and 3.13's
``sys._setprofileallthreads`` walks them the same way inside CPython,
running the audit hooks (``sys.setprofile``) between threads: SIGSEGV too
(CPython gh-137400, fixed in 3.14).
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
_SWITCH_S = 1e-5  # the switch interval while the exceptions are sent
_POLL_S = 0.05  # how often jaxmemprof-parking looks at the threads that have not taken theirs

_forever = threading.Lock()
_state: dict = {"parked": 0}


def parked() -> int:
    """How many of the program's threads have been stopped so far."""
    return _state["parked"]


def park_program_threads(is_program: Callable[[str], bool]) -> int:
    """Stop the program's threads where they are, from the main thread once
    the script is over: those with a frame of the program's code
    (``is_program(filename)``) on their stack, but the main thread and
    jaxmemprof's ``jaxmemprof-*``. The number sent the exception; 0 where
    this Python offers no way (no ctypes). Never raises."""
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
    """Which code is the program's (its verdicts on files), and where a
    thread that may hold a lock stops."""

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
    """Whether ``offset`` of ``code`` is inside a ``with`` block or calling
    its ``__exit__``; a code whose exception table cannot be read counts as
    inside (a thread is never stopped where it may hold a lock)."""
    got = _codes.get(code)
    if got is None:
        got = _codes[code] = _with_parts(code)
    if got is UNREAD:
        return True
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


UNREAD = ()  # _with_parts of a code whose exception table could not be read


def _with_parts(code) -> tuple:
    """``code``'s exception table, the offsets of its ``with`` handlers
    (WITH_EXCEPT_START among their first instructions) and of the calls of
    a ``with``'s ``__exit__`` (on the way out: three Nones, then the call;
    on an exception: WITH_EXCEPT_START); ``UNREAD`` where the table cannot
    be read (``dis._parse_exception_table``, 3.11 to 3.13, gone or failing)."""
    import dis

    parse = getattr(dis, "_parse_exception_table", None)
    if parse is None:
        return UNREAD
    try:
        instructions = list(dis.get_instructions(code))
        entries = tuple((e.start, e.end, e.target) for e in parse(code))
    except Exception:
        return UNREAD
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


def _stop() -> None:
    _state["parked"] += 1
    _forever.acquire()  # for good: the process ends with the thread here


class _Parked(SystemExit):
    """The exception a thread of the program's is sent on 3.12 and later
    (and jaxmemprof-parking sends itself on every Python). Its construction
    runs in that thread, where the thread is, as the interpreter makes it at
    once: there, unless its stack may hold a lock the end phase needs, it
    blocks for good, before anything of the program's runs. A SystemExit,
    so that where it is let go on and reaches the top of the thread, the
    thread ends without a word (threading's excepthook ignores SystemExit),
    and ``except Exception`` does not catch it."""

    def __init__(self, *args):
        _arriving()
        super().__init__(*args)


class _Freeze:
    """What a thread of the program's is sent on 3.11, where an
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
        _arriving()
        return "jaxmemprof's parking"


def _arriving() -> None:
    """``_arrived``, or, where it fails (an audit hook of the program's that
    raises at our ``sys._getframe``), the thread blocked all the same: no
    exception of ours goes on unwatched."""
    try:
        _arrived()
    except BaseException:
        if threading.get_ident() not in our_threads():
            _stop()


def _arrived() -> None:
    """In the thread the exception was sent to (its own frames, read in it)."""
    watch = _state.get("watch")
    ident = threading.get_ident()
    if watch is None or ident in our_threads():
        return  # the flag's holder (below), or a thread of ours that took the ident of one that ended
    _state.get("waiting", {}).pop(ident, None)
    frame = sys._getframe(3)  # where the thread is (_arrived, _arriving, the __repr__ or __init__, then it)
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
    """Each thread with a frame of the program's on its stack (read
    through ``sys._current_frames()``) is sent ``_SENT`` (``_Parked``;
    3.11: ``_Freeze``) through ``PyThreadState_SetAsyncExc``, which finds the thread by its
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
