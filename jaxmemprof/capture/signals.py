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
from typing import TYPE_CHECKING

from jaxmemprof.capture.sampler import block_signals_in_this_thread

if TYPE_CHECKING:
    from jaxmemprof.capture.session import Session

# How long a SIGTERM waits for the run to be finalised before the process
# ends anyway (the final snapshot and the manifest take milliseconds; a
# sampler stuck in JAX must not keep the process alive).
TERM_GRACE_S = 10.0

_exit_signal: int | None = None
_exit_hook_installed = False


def _install_exit_by_signal() -> None:
    """Registered before the script runs, so that it runs after every atexit
    handler the script registers."""
    global _exit_hook_installed
    if not _exit_hook_installed:
        atexit.register(_end_by_exit_signal)
        _exit_hook_installed = True


def _exit_by_signal(sig: int) -> None:
    global _exit_signal
    _exit_signal = sig


def _end_by_exit_signal() -> None:
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


def die_by(sig: int) -> None:
    """End the process by ``sig``'s default action, from any thread."""
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
    os._exit(128 + sig)  # not reached: the default action ended the process


def _c_default_action(sig: int) -> None:
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.signal.restype = ctypes.c_void_p
        libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
        libc.signal(sig, None)  # SIG_DFL
    except Exception:
        os._exit(128 + sig)


class _SigTerm:
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
        self._thread: threading.Thread | None = None

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
        self._thread = threading.Thread(target=self._listen, name="jaxmemprof-signals", daemon=True)
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
        watchdog = threading.Timer(TERM_GRACE_S, die_by, (signal.SIGTERM,))
        watchdog.daemon = True
        watchdog.start()
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
