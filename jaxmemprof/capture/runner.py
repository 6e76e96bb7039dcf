"""Run a script or module exactly as ``python`` would, under the sampler.

The target sees ``sys.argv``, ``sys.path[0]`` (the script's real directory,
symlinks resolved), ``__name__ == "__main__"``, ``__file__`` and the rest of
``__main__``'s globals as under ``python SCRIPT ARGS`` (or ``python -m
MODULE``). The exit status is the target's; an uncaught exception goes to
``sys.excepthook`` (the script's, if it set one) and gives 1. Ctrl-C ends
the process by SIGINT after the traceback and the atexit handlers, SIGTERM
ends it at once (its default action), as under python; the run is finalised
first, with a last snapshot. A forked child stops recording at once and
ends as python's would, with no summary.
"""

from __future__ import annotations

import atexit
import builtins
import os
import runpy
import signal
import sys
import threading
import types
from dataclasses import dataclass
from pathlib import Path

from jaxmemprof.capture.sampler import block_signals_in_this_thread
from jaxmemprof.capture.session import Session

_OWN_DIR = str(Path(__file__).resolve().parent.parent)
_RUNPY = os.path.abspath(runpy.__file__)

# How long a SIGTERM waits for the run to be finalised before the process
# ends anyway (the final snapshot and the manifest take milliseconds; a
# sampler stuck in JAX must not keep the process alive).
TERM_GRACE_S = 10.0


@dataclass(frozen=True)
class Target:
    """What python runs: ``path`` (a script, a directory or zip file with a
    ``__main__.py``, or ``-`` for the script on stdin), ``module`` (``-m``)
    or ``command`` (``-c``), with its arguments."""

    path: str | None  # a script, a directory or zip with __main__.py, or "-" (stdin)
    module: str | None  # a module run as -m
    args: tuple[str, ...]
    command: str | None = None  # code run as -c

    @property
    def argv(self) -> list[str]:
        if self.command is not None:
            return ["-c", *self.args]
        return [self.path or self.module, *self.args]

    @property
    def stem(self) -> str:
        if self.command is not None:
            return "command"
        if self.path == STDIN:
            return "stdin"
        if self.path:
            return Path(self.path).stem or "run"
        return self.module.rsplit(".", 1)[-1]

    def shown(self, display_path) -> str:
        """The target as the summary names it (a path through ``display_path``)."""
        if self.command is not None:
            return "-c " + " ".join(self.command.split())[:60]
        if self.path == STDIN:
            return "- (stdin)"
        return display_path(self.path) if self.path else self.module


STDIN = "-"


def is_out_of_memory(exc: BaseException) -> bool:
    """JAX's RESOURCE_EXHAUSTED error (raised as JaxRuntimeError/XlaRuntimeError)."""
    return "RESOURCE_EXHAUSTED" in str(exc)[:200] and "RuntimeError" in "".join(
        t.__name__ for t in type(exc).__mro__
    )


_PROBE_FILE = os.path.join(_OWN_DIR, "capture", "jitprobe.py")


def _user_traceback(tb):
    """A traceback as python would have it: without jaxmemprof's and runpy's
    frames above the script, nor the jit probe's between the script and a
    jitted function (which exist only under run)."""
    while tb is not None:
        f = os.path.abspath(tb.tb_frame.f_code.co_filename)
        if f.startswith(_OWN_DIR) or f == _RUNPY:
            tb = tb.tb_next
        else:
            break
    head = tb
    while tb is not None and tb.tb_next is not None:
        if os.path.abspath(tb.tb_next.tb_frame.f_code.co_filename) == _PROBE_FILE:
            tb.tb_next = tb.tb_next.tb_next
        else:
            tb = tb.tb_next
    return head


def _chain(exc: BaseException):
    """The exception and those python prints with it (its cause or context)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ if exc.__cause__ is not None else (
            None if exc.__suppress_context__ else exc.__context__)


def script_file(path: str) -> str:
    """``__file__`` as python sets it: the path joined to the current
    directory, not normalised (``python ./s.py`` gives ``/cwd/./s.py``)."""
    return path if os.path.isabs(path) else os.path.join(os.getcwd(), path)


def script_path0(path: str) -> str:
    """``sys.path[0]`` as python sets it: the directory of the script with
    every symlink resolved."""
    return os.path.dirname(os.path.realpath(path))


def _exec_script(path: str) -> None:
    """What ``python path`` does: a fresh ``__main__`` module running the
    file, with the globals python gives it."""
    from importlib.machinery import SourceFileLoader

    path = script_file(path)
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=path, __builtins__=builtins, __cached__=None, __spec__=None,
                         __loader__=SourceFileLoader("__main__", path), __annotations__={})
    with open(path, "rb") as f:
        source = f.read()
    code = compile(source, path, "exec", dont_inherit=True)
    # As under python, the module stays __main__ (and its globals alive) until
    # the process ends: the exit snapshot sees them.
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


def _exec_module(name: str) -> None:
    """What ``python -m name`` does: runpy's own entry for it, in a fresh
    ``__main__`` module (so tracebacks, sys.argv[0] and ``__main__`` are
    python's; a missing module ends with python's one-line message)."""
    main = types.ModuleType("__main__")
    main.__dict__.update(__builtins__=builtins, __annotations__={})
    sys.modules["__main__"] = main
    runpy._run_module_as_main(name, alter_argv=True)


def _exit_code(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    _write_stderr(f"{code}\n")
    return 1


def _write_stderr(text: str) -> None:
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except Exception:
        pass


def run_target(target: Target, session: Session) -> tuple[int, str]:
    """Run ``target`` under ``session``; return (exit status, how it ended).
    In a forked child the script ran in, raise SystemExit instead: the child
    ends there, as python's would (no summary, nothing recorded)."""
    _install_exit_by_signal()
    ours = _ProcessState.capture()
    sys.argv = target.argv
    sys.path[0:1] = [script_path0(target.path) if target.path else os.getcwd()]

    term = _SigTerm(session)
    term.install()
    session.child_hooks.append(term.forget_in_child)
    session.start()
    try:
        status, how = _run(target, session)
    finally:
        term.uninstall()
    if session.forked:
        from jaxmemprof.capture.session import finish_fork_child

        finish_fork_child(status, how)  # its own run, if it recorded one
        raise SystemExit(status)
    # The rest of jaxmemprof's work (the summary) runs with its own
    # directory, sys.path and streams; the script's are put back at exit,
    # before its atexit handlers run.
    _ProcessState.capture().restore_at_exit()
    ours.restore()
    return status, how


def _run(target: Target, session: Session) -> tuple[int, str]:
    def final_snapshot(trigger: str, label: str | None = None):
        # Stop the background thread first, so that this one is the last.
        session.sampler.stop()
        return session.sampler.snapshot(trigger, label)

    try:
        if target.path:
            _exec_script(target.path)
        else:
            _exec_module(target.module)
        final_snapshot("exit")
        return 0, "exit"
    except SystemExit as exc:
        final_snapshot("exit")
        return _exit_code(exc.code), "exit"
    except BaseException as exc:
        failure = exc
        if isinstance(exc, KeyboardInterrupt):
            final_snapshot("signal", "SIGINT")
            status, how = 128 + signal.SIGINT, "SIGINT"
        elif is_out_of_memory(exc):
            # The traceback still holds the frames, and so the arrays they
            # reference: the snapshot sees memory as it was at the failure.
            index = final_snapshot("oom", type(exc).__name__)
            session.writer.add_event("oom", str(exc)[:2000], index)
            status, how = 1, "oom"
        else:
            index = final_snapshot("exception", type(exc).__name__)
            session.writer.add_event("exception", f"{type(exc).__name__}: {exc}"[:2000], index)
            status, how = 1, "exception"
    # Outside the handler, as python calls sys.excepthook (an exception in
    # the hook has no context).
    _report_exception(failure)
    if how == "SIGINT":
        # Python ends by SIGINT itself after an uncaught KeyboardInterrupt,
        # once the atexit handlers have run.
        _exit_by_signal(signal.SIGINT)
    return status, how


def _report_exception(exc: BaseException) -> None:
    """What python does with an uncaught exception: ``sys.excepthook`` (the
    script's own if it set one), and if that fails, both tracebacks."""
    for e in _chain(exc):  # what python's hook prints is each exception's own
        e.with_traceback(_user_traceback(e.__traceback__))
    tb = exc.__traceback__
    hook = getattr(sys, "excepthook", None)
    try:
        if hook is None:
            raise RuntimeError("lost sys.excepthook")
        hook(type(exc), exc, tb)
    except BaseException as hook_exc:
        _write_stderr("Error in sys.excepthook:\n")
        hook_tb = _user_traceback(hook_exc.__traceback__)
        sys.__excepthook__(type(hook_exc), hook_exc.with_traceback(hook_tb), hook_tb)
        _write_stderr("\nOriginal exception was:\n")
        sys.__excepthook__(type(exc), exc, tb)


# -- the process's state: the script's, and jaxmemprof's own ---------------------


@dataclass
class _ProcessState:
    """What a script may change that jaxmemprof's own work after it needs:
    the current directory, sys.argv, sys.path, sys.stdout and sys.stderr."""

    cwd: str | None
    argv: list
    path: list
    stdout: object
    stderr: object

    @classmethod
    def capture(cls) -> "_ProcessState":
        try:
            cwd = os.getcwd()
        except OSError:  # the script removed its directory
            cwd = None
        return cls(cwd, sys.argv, list(sys.path), sys.stdout, sys.stderr)

    def _put_back(self, stdout, stderr) -> None:
        if self.cwd is not None:
            try:
                os.chdir(self.cwd)
            except OSError:
                pass
        sys.argv = self.argv
        sys.path[:] = self.path
        sys.stdout, sys.stderr = stdout, stderr

    def restore(self) -> None:
        """Put back this state; a stream the script closed or removed is
        replaced by a new one on the same descriptor."""
        self._put_back(_usable(self.stdout, 1), _usable(self.stderr, 2))

    def restore_at_exit(self) -> None:
        """Put this state back at exit, as it was, before the atexit
        handlers registered earlier (the script's) run: atexit runs the last
        registered first."""
        atexit.register(lambda: self._put_back(self.stdout, self.stderr))


def _usable(stream, fd: int):
    """``stream`` if it can still be written, else a new text stream on
    ``fd`` (or on os.devnull if ``fd`` is closed too)."""
    if stream is not None and not getattr(stream, "closed", False):
        return stream
    try:
        os.fstat(fd)
        return open(fd, "w", closefd=False, errors="backslashreplace")
    except OSError:
        return open(os.devnull, "w")


# -- ending by a signal, as python does ---------------------------------------------

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
