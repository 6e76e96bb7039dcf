"""Ending by a signal, as python does: by SIGINT after an uncaught
KeyboardInterrupt, once the traceback is shown and the atexit handlers have
run (the last thing at exit); by SIGTERM at once (its default action), even
while the script swallows every exception or waits in a long XLA call, the
run finalised first with a last snapshot (``_SigTerm``). ``die_by`` ends the
process by a signal's default action from any thread.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING

from jaxmemprof.capture.sampler import block_signals_in_this_thread
from jaxmemprof.capture.threads import OwnThread, OwnTimer

if TYPE_CHECKING:
    from jaxmemprof.capture.session import Session

# How long a SIGTERM waits for the run to be finalised before the process
# ends anyway (the final snapshot and the manifest take milliseconds; a
# sampler stuck in JAX must not keep the process alive).
TERM_GRACE_S = 10.0

_exit_signal: int | None = None
# os._exit as it is now: a re-trace of the program's Python at the end
# (capture/jit/rerun.py) replaces it for a while (acting for its thread alone).
os_exit = os._exit
_exit_hook_installed = False


def install_exit_by_signal() -> None:
    """Registered before the script runs, so that it runs after every atexit
    handler the script registers."""
    global _exit_hook_installed
    if not _exit_hook_installed:
        atexit.register(end_by_exit_signal)
        _exit_hook_installed = True


def exit_by_signal(sig: int) -> None:
    global _exit_signal
    _exit_signal = sig


def end_by_exit_signal() -> None:
    """The last thing at exit: end by the signal that ended the script, as
    python does after an uncaught KeyboardInterrupt (stdout and stderr
    flushed first)."""
    sig = _exit_signal
    if sig is None:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None and not stream.closed:
                stream.flush()
        except Exception:
            pass
    die_by(sig)


def remove_scratch() -> None:
    """jaxmemprof's XLA dump directories still open removed (inside the run):
    for the ends that run no ``finally``. Only where a compile of ours made
    one (the module is imported then)."""
    scratch = sys.modules.get("jaxmemprof.xla.scratch")
    if scratch is not None:
        try:
            scratch.remove_open()
        except BaseException:
            pass


def die_by(sig: int) -> None:
    """End the process by ``sig``'s default action, from any thread."""
    remove_scratch()
    if threading.current_thread() is threading.main_thread():
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (ValueError, OSError):
            _c_default_action(sig)
    else:  # signal.signal works only in the main thread
        _c_default_action(sig)
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
    except (AttributeError, OSError, ValueError):
        pass
    os.kill(os.getpid(), sig)
    os_exit(128 + sig)  # not reached: the default action ended the process


def _c_default_action(sig: int) -> None:
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.signal.restype = ctypes.c_void_p
        libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
        libc.signal(sig, None)  # SIG_DFL
    except Exception:
        os_exit(128 + sig)


class SigTerm:
    """SIGTERM ends the process at once, as its default action does under
    python, even while the script swallows every exception or waits in a
    long XLA call; first the run gets its last snapshot and is finalised.

    A Python handler is needed to hear the signal at all; its C half writes
    the signal's number to a wakeup file descriptor at once, which a thread
    of ours reads: it does the work while the main thread is still busy, then
    restores the default action and raises the signal again. The handler
    itself, run later by the main thread, only waits for that thread. A
    handler the script installs replaces ours and runs as under python."""

    def __init__(self, session: Session):
        self.session = session
        self.installed = False
        self._r = self._w = -1
        self._own_fd = False
        self._closing = False
        self._started = False
        self._once = threading.Lock()
        self._done = threading.Event()
        self._thread: OwnThread | None = None

    def install(self) -> None:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return  # ignored (nohup-like), or handled by whoever ran us
        self._r, self._w = os.pipe()
        os.set_blocking(self._w, False)
        try:
            previous = signal.set_wakeup_fd(self._w, warn_on_full_buffer=False)
            self._own_fd = previous == -1
            if not self._own_fd:  # someone's own: theirs stays, our handler still works
                signal.set_wakeup_fd(previous)
        except (ValueError, OSError):
            self._own_fd = False
        signal.signal(signal.SIGTERM, self._handler)
        self.installed = True
        self._thread = OwnThread(self._listen, "jaxmemprof-signals")  # no hook of the program's in it
        self._thread.start()

    def _ours(self) -> bool:
        return signal.getsignal(signal.SIGTERM) == self._handler

    def uninstall(self) -> None:
        """At the script's end (main thread): the default action again, and
        the listening thread told to stop."""
        if not self.installed:
            return
        self.installed = False
        if self._ours():
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if self._own_fd:
            current = signal.set_wakeup_fd(-1)
            if current not in (-1, self._w):  # the script set its own since: keep it
                signal.set_wakeup_fd(current)
        self._closing = True
        try:
            os.write(self._w, b"\0")
        except OSError:
            pass
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._thread is None or not self._thread.is_alive():
            os.close(self._r)
            os.close(self._w)

    def forget_in_child(self) -> None:
        """In a forked child (no listening thread there): SIGTERM's default
        action, as the child would have under python."""
        if not self.installed:
            return
        self.installed = False
        self._closing = True
        try:
            if self._ours():
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
            if self._own_fd:
                current = signal.set_wakeup_fd(-1)
                if current not in (-1, self._w):  # the script's own: kept
                    signal.set_wakeup_fd(current)
        except (ValueError, OSError):
            pass
        for fd in (self._r, self._w):
            try:
                os.close(fd)
            except OSError:
                pass

    def _listen(self) -> None:
        block_signals_in_this_thread()  # the C handler runs in the program's threads
        while True:
            try:
                data = os.read(self._r, 512)
            except OSError:
                return
            if sys.gettrace() is not None:  # the program's settrace_all_threads (3.12): not in ours
                sys.settrace(None)
            if sys.getprofile() is not None:
                sys.setprofile(None)
            if not data or self._closing:
                return
            if signal.SIGTERM in data and self._ours():
                self._terminate()
                return

    def _handler(self, signum, frame) -> None:
        """Run by the main thread: wake the listening thread (if the wakeup
        descriptor did not already), then wait while it finalises. Ended at
        once if this thread holds what finalising needs (it was taking a
        snapshot itself)."""
        s = self.session
        if s.forked or self._thread is None or not self._thread.is_alive() or \
                s.sampler.owned_by_this_thread() or s.writer.owned_by_this_thread():
            die_by(signal.SIGTERM)
        try:
            os.write(self._w, bytes([signal.SIGTERM]))
        except OSError:
            pass
        self._done.wait(TERM_GRACE_S)
        die_by(signal.SIGTERM)

    def _terminate(self) -> None:
        with self._once:
            if self._started:
                return
            self._started = True
        s = self.session
        OwnTimer(TERM_GRACE_S, die_by, (signal.SIGTERM,), name="jaxmemprof-watchdog").start()
        try:
            if not s.forked:
                s.sampler.stop()
                s.sampler.snapshot("signal", "SIGTERM", wait=False)
                s.stop(128 + signal.SIGTERM, "SIGTERM")
        except BaseException:
            pass
        finally:
            self._done.set()
            die_by(signal.SIGTERM)


# -- the end phase: from the script's end to the process's ----------------------------

# How long a SIGINT or SIGTERM in the end phase waits for the main thread to
# come back from what it is doing (an XLA compile is not interrupted) before
# a thread of ours finalises the run and ends the process itself.
END_GRACE_S = 2.0
# A signal this long after the first is a second one (the user insisting);
# sooner, it is the same one raised again (a re-trace of the
# program's Python holds a signal and raises it once the shield is down).
SECOND_SIGNAL_S = 0.5

_DEFAULTS = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
# Signals sent from outside whose default action ends the process (a
# terminal's, a scheduler's warning): where the script handled one, the end
# phase handles it as SIGTERM, so that the process still ends with the
# script's status, its run finalised.
_ENDING = frozenset(getattr(signal, name) for name in ("SIGHUP", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGPROF",
                                                        "SIGVTALRM", "SIGXCPU", "SIGPWR") if hasattr(signal, name))
_TIMERS = {signal.SIGALRM: signal.ITIMER_REAL, signal.SIGVTALRM: signal.ITIMER_VIRTUAL,
           signal.SIGPROF: signal.ITIMER_PROF}


def dispositions() -> dict:
    """Each signal's Python-level disposition now (taken before the script
    runs, to put back once it is over); signals Python does not know the
    handler of (set from C) are left out."""
    found = {}
    for sig in signal.valid_signals():
        try:
            handler = signal.getsignal(sig)
        except (ValueError, OSError):
            continue
        if handler is not None:
            found[sig] = handler
    return found


class EndPhaseSkipped(BaseException):
    """Raised in the main thread by a SIGINT or SIGTERM during the end phase:
    the rest of it is skipped (a BaseException, so that jaxmemprof's own
    ``except Exception`` lets it through)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class EndPhase:
    """jaxmemprof's end of a run, once the script is over (its threads
    joined, its atexit handlers run, its exit status and end recorded): the
    last snapshot and its holder search, the jit probe's dumps and compiles
    (verify, --plan, --target), the run finalised, the closing summary.

    The program's signal handlers are put back to what they were before it
    ran (``begin``): a handler the script set (a preemption handler that
    saves a checkpoint) never runs after the script. SIGINT and SIGTERM, where
    they started at their default, get ours: the first skips the rest of the
    end phase (``EndPhaseSkipped`` in the main thread, and ``skipped_by``
    checked between steps), the run is finalised and the process exits with
    the script's status (or dies by the signal that ended the script, as
    python would have). The main thread may be inside a compile that Python
    cannot interrupt: a thread of ours, woken by the signal at once through
    the wakeup descriptor, finalises the run and ends the process itself if
    the main thread has not done it within ``END_GRACE_S``, or at a second
    signal (``SECOND_SIGNAL_S`` or more after the first). After the run is
    finalised a signal ends the process at once, with the script's status.
    A signal the script handled whose default action ends the process
    (``_ENDING``) is handled as SIGTERM; the script's interval timers are
    stopped."""

    def __init__(self, session: Session, initial: dict):
        """Made before the script runs (``initial``: the signals' handlers
        then): its thread too, which the script's sys.excepthook = None
        would refuse afterwards."""
        self.session = session
        self.status = 0
        self.how = "exit"
        self.initial = initial
        self.script_streams: tuple = ()  # flushed before a hard exit
        self.skipped_by: int | None = None
        self.finalised = threading.Event()
        self._finalise_lock = threading.Lock()
        self._finaliser: int | None = None  # the thread finalising
        self._handled: list[int] = []
        self._r = self._w = -1
        self._own_fd = False
        # Threads of ours (capture/threads.py): no hook of the program's runs in them.
        self._thread = OwnThread(self._listen, "jaxmemprof-end")
        # Watchdogs: the run's finalising, then the streams' flush, must not
        # keep the process alive.
        self._finalise_watchdog = OwnTimer(TERM_GRACE_S, self.exit_now, name="jaxmemprof-watchdog")
        self._flush_watchdog = OwnTimer(1.0, self._exit_with_status, name="jaxmemprof-watchdog")
        self._on_progress = None

    # -- set up, in the main thread -------------------------------------------------

    def begin(self, status: int, how: str, script_streams=()) -> None:
        """The script ended with ``status``, ``how``: the program's handlers
        put back (each signal as before the script), its interval timers
        stopped, ours set for SIGINT and SIGTERM (and for a signal the script
        handled whose default action would end the process), and the
        listening thread started."""
        self.status, self.how, self.script_streams = status, how, script_streams
        for sig, before in self.initial.items():
            try:
                now = signal.getsignal(sig)
            except (ValueError, OSError):
                continue
            scripts = callable(now) and now != before  # a handler of the script's
            if sig in _DEFAULTS:
                # Unless it started ignored (nohup, a job started with &): left so, as python leaves it.
                ours = before == _DEFAULTS[sig]
            else:
                ours = scripts and before == signal.SIG_DFL and sig in _ENDING
            try:
                if scripts and sig in _TIMERS:
                    # The script's timer (an alarm, a sampling profiler's):
                    # it ended with the script under python.
                    signal.setitimer(_TIMERS[sig], 0)
                if ours:
                    signal.signal(sig, self._handler)
                    self._handled.append(sig)
                elif now is not None and now != before:
                    signal.signal(sig, before)
            except (ValueError, OSError, TypeError):
                pass
        if not self._handled:
            return
        try:  # a signal the script blocked in this thread is heard again
            signal.pthread_sigmask(signal.SIG_UNBLOCK, self._handled)
        except (AttributeError, OSError, ValueError):
            pass
        self._r, self._w = os.pipe()
        os.set_blocking(self._w, False)
        try:
            # The script is over: the wakeup descriptor is ours (asyncio's, say, is not read any more).
            signal.set_wakeup_fd(self._w, warn_on_full_buffer=False)
            self._own_fd = True
        except (ValueError, OSError):
            self._own_fd = False
        self._thread.start()

    # -- the steps ------------------------------------------------------------------

    def progress(self, show) -> None:
        """``show(text or None)``: told what each step is (None: done)."""
        self._on_progress = show

    def run(self, what: str, step) -> bool:
        """Run one step of the end phase unless a signal skipped the rest;
        whether it ran to its end."""
        if self.skipped_by is not None:
            return False
        try:
            if self._on_progress is not None:
                self._on_progress(what)
            step()
            return self.skipped_by is None
        except EndPhaseSkipped:
            return False

    def finalise(self, finish) -> None:
        """``finish(skipped_by)``: the run finalised (once, by whichever
        thread comes first; a signal meanwhile does not interrupt it)."""
        with self._finalise_lock:
            if self.finalised.is_set():
                return
            self._finaliser = threading.get_ident()
            try:
                finish(self.skipped_by)
            except Exception:
                pass
            finally:
                self.finalised.set()
                self._finaliser = None

    # -- signals --------------------------------------------------------------------

    def _handler(self, signum, frame) -> None:
        """Run by the main thread when it reaches Python code."""
        if not self._own_fd and self._w >= 0:
            try:
                os.write(self._w, bytes([signum]))
            except OSError:
                pass
        if self.finalised.is_set():
            self.exit_now()
        if self._finaliser is not None:
            return  # finalising: the listening thread ends the process if it takes too long
        if self.skipped_by is None:
            self.skipped_by = signum
        s = self.session
        if s.sampler.owned_by_this_thread() or s.writer.owned_by_this_thread():
            return  # mid-write: the next step is skipped instead
        raise EndPhaseSkipped(signum)

    def _listen(self) -> None:
        import select

        block_signals_in_this_thread()
        first = None  # when the first signal was heard
        while True:
            waiting = first is not None and not self.finalised.is_set()
            timeout = max(0.0, first + END_GRACE_S - time.monotonic()) if waiting and first is not None else None
            try:
                ready, _, _ = select.select([self._r], [], [], timeout)
                data = os.read(self._r, 512) if ready else b""
            except OSError:
                return
            if ready and not data:
                return
            if sys.gettrace() is not None:  # the program's settrace_all_threads (3.12): not in ours
                sys.settrace(None)
            if sys.getprofile() is not None:
                sys.setprofile(None)
            heard = [b for b in data if b in self._handled]
            if heard and self.skipped_by is None:
                self.skipped_by = heard[0]
            now = time.monotonic()
            if first is None:
                if heard:
                    # The main thread's handler runs as soon as it reaches Python
                    # code (after the run is finalised, it ends the process).
                    first = now
                continue
            second = bool(heard) and now - first >= SECOND_SIGNAL_S
            if self.finalised.is_set():
                if second:  # the main thread is ending the process, and is told again: at once
                    self.exit_now()
                continue
            if second or now >= first + END_GRACE_S:
                self.take_over()  # a second signal, or the grace is over

    def take_over(self) -> None:
        """From the listening thread: finalise the run and end the process."""
        _start(self._finalise_watchdog)
        finish = getattr(self.session, "finalise_end", None)
        if finish is not None:
            self.finalise(finish)
        self.exit_now()

    def exit_now(self) -> None:
        """End the process with the script's status (or by the signal that
        ended the script), its streams flushed; from any thread."""
        _start(self._flush_watchdog)  # a flush that blocks ends too
        for stream in (*self.script_streams, sys.stdout, sys.stderr):
            try:
                if stream is not None and not stream.closed:
                    stream.flush()
            except BaseException:
                pass
        if _exit_signal is not None:
            die_by(_exit_signal)
        self._exit_with_status()

    def _exit_with_status(self) -> None:
        remove_scratch()
        os_exit(self.status & 0xFF)


def _start(thread: OwnThread) -> None:
    """Start ``thread`` (made before the script ran) unless it already was."""
    try:
        thread.start()
    except RuntimeError:
        pass
