"""jaxmemprof's own threads, started so that no hook of the program's runs in
them (issue 62, item 4).

``threading.Thread`` gives every new thread the program's
``threading.settrace``/``setprofile`` functions before its ``run`` begins,
and calls more of its own Python after ``run`` (a tracer that reads
``__file__`` once killed the end phase's signal thread with a NameError).
jaxmemprof's threads (the sampler, the compile thread, the end phase's
threads, the re-traces of capture/jit/rerun.py) are started through
``_thread.start_new_thread`` instead, which installs nothing: ``OwnThread``
has the few parts of ``threading.Thread`` they use (``start``, ``join``,
``is_alive``, ``ident``, ``name``), is always a daemon (never joined at
exit), and is listed by ``threading.enumerate()`` under its name (a
``threading._DummyThread``, named without drawing on the counter the
program's ``Thread-N`` names come from), so that the parking of the
program's threads and the holder search know it as ours.

What Python offers no way out of: a ``sys.monitoring`` tool (3.12 and
later) sees every thread, and ``threading.settrace_all_threads`` /
``setprofile_all_threads`` (3.12 and later) reach a thread of ours that was
running when the program called them (the sampler; the loops of the
signal, end and compile threads take them out of themselves as they wake,
with no call of a Python function before: a trace function sees none, a
profile function sees the C call that reads it). ``foreign_hooks`` says which of those the program left
set, for the run's warnings.
"""

from __future__ import annotations

import _thread
import sys
import threading
from collections.abc import Callable

_ours: set[int] = set()  # idents of jaxmemprof's threads alive now
_naming = _thread.allocate_lock()  # one registration at a time (threading._newname is swapped meanwhile)


def ours() -> frozenset:
    """The idents of jaxmemprof's own threads running now."""
    return frozenset(_ours)


def is_ours(ident: int | None = None) -> bool:
    return (_thread.get_ident() if ident is None else ident) in _ours


class OwnThread:
    """A daemon thread of jaxmemprof's running ``target(*args)``: no trace
    or profile function of the program's is installed in it; what ``target``
    raises is dropped (it never reaches the program's excepthook)."""

    daemon = True

    def __init__(self, target: Callable, name: str, args: tuple = ()):
        self.name = name
        self._target, self._args = target, args
        self._running = _thread.allocate_lock()  # held from start to the target's end
        self._started = False
        self._finished = False  # set by the thread as its last act, before it lets _running go
        self._up = _thread.allocate_lock()
        self.ident: int | None = None

    def start(self) -> None:
        if self._started:
            raise RuntimeError("threads can only be started once")
        self._started = True
        self._running.acquire()
        self._up.acquire()
        try:
            _thread.start_new_thread(self._bootstrap, ())
        except BaseException:
            self._running.release()
            self._up.release()
            raise
        self._up.acquire()  # its ident set, it is listed as ours
        self._up.release()

    def _bootstrap(self) -> None:
        ident = _thread.get_ident()
        dummy = None
        try:
            self.ident = ident
            _ours.add(ident)
            dummy = _register(self.name, ident)
        except BaseException:
            pass
        finally:
            self._up.release()
        try:
            self._target(*self._args)
        except BaseException:
            pass
        finally:
            # inline, not a helper of ours: calling a Python function here would hand the program's tracer a
            # 'call' event in our thread (test_rerun's settrace-all case, 3.12)
            for _ in range(3):  # a hook the program set on every thread (3.12) off, with C calls alone
                try:
                    sys.setprofile(None)
                    sys.settrace(None)
                    break
                except BaseException:  # one that raises is taken off by python: again
                    continue
            _ours.discard(ident)
            try:
                _unregister(ident, dummy)
            except BaseException:
                pass
            self._finished = True
            self._running.release()

    def is_alive(self) -> bool:
        return self._started and not self._finished

    def join(self, timeout: float | None = None) -> None:
        if not self._started:
            raise RuntimeError("cannot join thread before it is started")
        # Its end is the flag, not the lock: a join interrupted (a SIGINT's KeyboardInterrupt) once it took
        # the lock, before it let it go, leaves the lock held, and the next join (the end phase stops the
        # sampler again) would wait for ever (issue 62: a kernel interrupt in a cell's end hung the cell).
        # Asked first: a thread that ended may have its ident taken by the one joining it now.
        if self._finished:
            return
        if self.ident == _thread.get_ident():
            raise RuntimeError("cannot join current thread")
        got = self._running.acquire() if timeout is None else self._running.acquire(timeout=max(0.0, timeout))
        if got:
            self._running.release()


def start_thread(target: Callable, name: str, args: tuple = ()) -> OwnThread:
    """``OwnThread(target, name, args)``, started."""
    t = OwnThread(target, name, args)
    t.start()
    return t


class OwnTimer(OwnThread):
    """``function(*args)`` after ``seconds`` unless cancelled, in a thread of
    ours (threading.Timer's, without the program's hooks)."""

    def __init__(self, seconds: float, function: Callable, args: tuple = (), name: str = "jaxmemprof-timer"):
        self._cancelled = threading.Event()
        self._seconds, self._function, self._fargs = seconds, function, args
        super().__init__(self._wait, name)

    def _wait(self) -> None:
        if not self._cancelled.wait(self._seconds):
            self._function(*self._fargs)

    def cancel(self) -> None:
        self._cancelled.set()


def _register(name: str, ident: int):
    """A ``threading._DummyThread`` for this thread, named ``name``, so that
    ``threading.enumerate()`` lists it (as it listed jaxmemprof's threads
    before). Its name is given through ``threading._newname`` for this
    thread alone: the program's next ``Thread-N`` is the number it would
    have been. None where this Python's threading has not those parts."""
    dummy_type = getattr(threading, "_DummyThread", None)
    original = getattr(threading, "_newname", None)
    if dummy_type is None or original is None:
        return None

    def named(template="Thread-%d", *rest):
        return name if _thread.get_ident() == ident else original(template, *rest)

    with _naming:
        threading._newname = named  # type: ignore[attr-defined]  # CPython's own; not in the stubs
        try:
            return dummy_type()
        except Exception:
            return None
        finally:
            if threading._newname is named:  # type: ignore[attr-defined]
                threading._newname = original  # type: ignore[attr-defined]


def _unregister(ident: int, dummy) -> None:
    if dummy is None:
        return
    try:
        with threading._active_limbo_lock:  # type: ignore[attr-defined]  # CPython's own; not in the stubs
            if threading._active.get(ident) is dummy:  # type: ignore[attr-defined]
                del threading._active[ident]  # type: ignore[attr-defined]
    except Exception:
        pass


def foreign_hooks(main_hooks: tuple = (None, None)) -> list[str]:
    """What the program left set that runs in jaxmemprof's threads too,
    where Python offers no way out: its ``sys.monitoring`` tools, and (from
    the threads of ours that were running then) its
    ``threading.settrace_all_threads``/``setprofile_all_threads``
    functions (``main_hooks``: the main thread's (trace, profile) as the
    script left them). For the run's warnings; [] on 3.11 and where none."""
    found = []
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is not None:
        for tool in range(6):
            try:
                name = monitoring.get_tool(tool)
            except Exception:
                name = None
            if name is not None:
                found.append(f"sys.monitoring tool {tool} ({str(name)[:80]!r})")
    if sys.version_info >= (3, 12):  # the main thread's (``main_hooks``) and threading's alike: set on all
        for kind, main in zip(("trace", "profile"), main_hooks):
            hook = getattr(threading, f"get{kind}", lambda: None)()
            if hook is not None and main is hook:
                found.append(f"threading.set{kind}_all_threads")
    return found
