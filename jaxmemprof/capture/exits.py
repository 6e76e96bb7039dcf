"""The end of the program, as python ends it: an uncaught SystemExit gives
its status (an object that is not a number printed, as python prints it);
another exception goes to ``sys.excepthook`` (the script's, if it set one;
one that calls sys.exit sets the status); then the non-daemon threads are
joined and the atexit handlers run, while the run still records (JAX's
teardown held back until the process exits; an exception in one goes to
``sys.unraisablehook``). And the process's state: what the script may change
that jaxmemprof's own work after it needs, put back for that work, and the
script's put back at exit.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import types
from dataclasses import dataclass

from jaxmemprof.capture.signals import end_by_exit_signal, os_exit, remove_scratch
from jaxmemprof.capture.tracebacks import safe_str, trim_traceback, user_traceback

# Python's own display of an exception (PyErr_Display), as it was before the
# script could replace sys.__excepthook__.
_DISPLAY = sys.__excepthook__
_MISSING = object()
_CONTEXT = BaseException.__dict__["__context__"]  # the interpreter's own descriptor
# Python 3.12 and later leave the error of reading an exit's object (its str() failed, its int is beyond a C
# long) pending; the interpreter shows it at threading's shutdown (``wait_for_threads``) where no other thread
# is still to be joined: 3.12 as a traceback, 3.13 as an exception ignored there.
_PENDING: list = []


def system_exit_status(exc: SystemExit) -> int:
    """What python does with an uncaught SystemExit: its ``code`` (the
    exception itself when that cannot be read); None is 0, an int is the
    status (as the process's is: its low 8 bits), anything else is printed
    on stderr (str(), or nothing when that fails) and gives 1."""
    value: object
    try:
        value = exc.code
    except BaseException:
        value = exc
    if value is None:
        return 0
    if isinstance(value, int):
        number = int.__int__(value)
        if not -(1 << 63) <= number < (1 << 63):  # beyond a C long: python gets -1
            number = -1
            _pending(OverflowError("Python int too large to convert to C long"))
        return number & 0xFF
    _print_exit_value(value)
    return 1


def _print_exit_value(value) -> None:
    """``value`` on sys.stderr then a newline, as python's exit prints it:
    straight to the process's stderr when sys.stderr is None or missing."""
    stream = vars(sys).get("stderr")
    if stream is not None:
        try:
            write = stream.write
            write(str(value))
        except BaseException as exc:
            _pending(exc)
    else:
        try:
            os.write(2, str(value).encode("utf-8", "backslashreplace"))
        except BaseException:
            pass
    _write_stderr("\n")


def _pending(exc: BaseException) -> None:
    if sys.version_info >= (3, 12) and not _PENDING:
        try:  # python's has none: the exit's exception was cleared before its object was read
            _CONTEXT.__set__(exc, None)
        except Exception:
            pass
        _PENDING.append(exc)


def _show_pending() -> None:
    """The exit's pending error, as python shows it at threading's shutdown (``_PENDING``)."""
    exc = _PENDING.pop()
    if sys.version_info >= (3, 13):  # Python/pylifecycle.c: wait_for_thread_shutdown
        _write_unraisable(exc, threading, "Exception ignored on threading shutdown")
    else:
        _display(exc, trim_traceback(exc))


def _write_stderr(text: str) -> None:
    """What python writes on stderr itself: through sys.stderr, else
    straight to the process's stderr."""
    try:
        stream = vars(sys)["stderr"]  # None, or gone: the fallback below
        stream.write(text)
        return
    except BaseException:
        pass
    try:
        os.write(2, text.encode("utf-8", "backslashreplace"))
    except OSError:
        pass


def report_exception(box: list) -> int | None:
    """What python does with an uncaught exception (the one ``box`` holds:
    this function takes it, so that no frame of ours holds it while it is
    shown): ``sys.last_*`` set, ``sys.excepthook`` called (the script's own
    if it set one), and if that fails, both tracebacks; a hook missing is
    said so. A hook that raises SystemExit ends the program: its exit
    status is returned."""
    exc = box.pop()
    tb = trim_traceback(exc)
    kind = type(exc)
    for name, value in (("last_type", kind), ("last_value", exc), ("last_traceback", tb)):
        try:
            setattr(sys, name, value)
        except Exception:
            pass
    if sys.version_info >= (3, 12):
        try:
            sys.last_exc = exc
        except Exception:
            pass
    hook = vars(sys).get("excepthook", _MISSING)
    try:
        sys.audit("sys.excepthook", None if hook is _MISSING else hook, kind, exc, tb)
    except RuntimeError:
        return None  # an audit hook refused it: python prints nothing
    except BaseException:
        pass
    if hook is _MISSING:
        _write_stderr("sys.excepthook is missing\n")
        _display(exc, tb)
        return None
    if hook is _DISPLAY:
        # Python's own display, which never raises: the exception is held by
        # sys.last_value and this call alone, as under python (what python
        # prints when showing it fails counts its references).
        box.append(exc)
        del exc
        try:
            hook(kind, box.pop(), tb)
        except BaseException:
            pass
        return None
    try:
        hook(kind, exc, tb)
    except SystemExit as hook_exit:
        return system_exit_status(hook_exit)
    except BaseException as hook_exc:
        _write_stderr("Error in sys.excepthook:\n")
        _display(hook_exc, trim_traceback(hook_exc))
        _write_stderr("\nOriginal exception was:\n")
        _display(exc, tb)
    return None


def _display(exc: BaseException, tb) -> None:
    try:
        _DISPLAY(type(exc), exc, tb)
    except BaseException:
        pass


def wait_for_threads(hooks: tuple = (None, None)) -> bool:
    """What python does once the main module is done: its threading atexit
    calls, then every non-daemon thread joined (the sampler records them
    meanwhile). Whether any was still running. An interruption (Ctrl-C)
    is reported as python reports it, and the end goes on. ``hooks``: the
    program's (trace, profile) functions of the main thread, on for
    threading's shutdown as under python (an exception they raise reported
    as python reports it), off again after it."""
    main = threading.current_thread()
    alive = any(t is not main and not t.daemon and t.is_alive() for t in threading.enumerate())
    shutdown = getattr(threading, "_shutdown", None)
    if main is not threading.main_thread():
        return alive
    if _PENDING and not alive:
        _show_pending()
    _PENDING.clear()  # beside a thread to join: 3.12 shows nothing; 3.13 joins none (not followed: docs/recording.md)
    try:
        if shutdown is not None:
            if hooks[0] is not None:
                sys.settrace(hooks[0])
            if hooks[1] is not None:
                sys.setprofile(hooks[1])
            shutdown()
            for _ in range(3):  # the program's trace and profile functions off (C calls alone: no event of ours)
                try:
                    sys.setprofile(None)
                    sys.settrace(None)
                    break
                except BaseException:  # one that raises is taken off by python: again
                    continue
        else:
            for t in threading.enumerate():
                if t is not main and not t.daemon:
                    t.join()
    except BaseException as exc:
        for _ in range(3):  # the program's trace and profile functions off (C calls alone: no event of ours)
            try:
                sys.setprofile(None)
                sys.settrace(None)
                break
            except BaseException:  # one that raises is taken off by python: again
                continue
        # 3.13 says where, not what (Python/pylifecycle.c: wait_for_thread_shutdown)
        _write_unraisable(exc, threading, "Exception ignored on threading shutdown" if sys.version_info >= (3, 13)
                          else None)
    return alive



def _write_unraisable(exc: BaseException, obj, err_msg: str | None = None) -> None:
    """Python's "Exception ignored in: OBJ" report (or ``err_msg``, with no
    object), through the script's sys.unraisablehook if it set one."""
    tb = trim_traceback(exc)
    hook = getattr(sys, "unraisablehook", None)
    if hook is not None and hook is not sys.__unraisablehook__:
        try:
            hook(types.SimpleNamespace(exc_type=type(exc), exc_value=exc, exc_traceback=tb, err_msg=err_msg,
                                       object=None if err_msg else obj))
        except BaseException:
            pass
        return
    import traceback

    try:
        lines = [f"{err_msg}:\n" if err_msg else f"Exception ignored in: {obj!r}\n"]
        if tb is not None:
            frames = traceback.format_tb(tb)
            if sys.version_info >= (3, 13):  # its C printer of an unraisable exception draws no carets
                frames = ["".join(line for line in f.splitlines(True) if line.strip(" ^~\n")) for f in frames]
            lines += ["Traceback (most recent call last):\n", *frames]
        cls = type(exc)
        qualified = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
        lines.append(f"{qualified}: {safe_str(exc)}\n")
        _write_stderr("".join(lines))
    except BaseException:
        pass


# Functions JAX registers with atexit that tear its backends down: held
# back while the program's handlers run, so that the run's last snapshot and
# facts see the program's memory, and run at the process's exit as before.
_JAX_EXIT_HANDLERS = (("jaxlib.xla_client", ("_xla", "collect_garbage")),
                      ("jax._src.dispatch", ("wait_for_tokens",)),
                      ("jax._src.api", ("clean_up",)))


def _jax_exit_handlers() -> list:
    found: list = []
    for module, names in _JAX_EXIT_HANDLERS:
        obj = sys.modules.get(module)
        for name in names:
            obj = getattr(obj, name, None)
        if callable(obj):
            found.append(obj)
    return found


class _TrimUnraisable:
    """While the atexit handlers run from our frame: the report of an
    exception in one (sys.unraisablehook, the script's or python's) gets its
    traceback without our frames, as at exit, where C calls the handlers."""

    def __init__(self):
        self.hook = vars(sys).get("unraisablehook")
        if self.hook is not None:
            sys.unraisablehook = self

    def __call__(self, args):
        try:
            tb = trim_traceback(args.exc_value) if args.exc_value is not None else user_traceback(args.exc_traceback)
            args = type(args)((args.exc_type, args.exc_value, tb, args.err_msg, args.object))
        except Exception:
            pass
        if self.hook is not None:  # installed only then
            self.hook(args)

    def remove(self) -> None:
        if vars(sys).get("unraisablehook") is self:  # a handler's own hook stays
            sys.unraisablehook = self.hook


def run_atexit_handlers(hooks: tuple = (None, None)) -> None:
    """The program's atexit handlers, run now as python runs them at exit
    (the last registered first, an exception in one reported and passed
    over), while the run still records: their markers and memory are the
    run's. jaxmemprof's own handler and JAX's teardown run at exit."""
    run_all = getattr(atexit, "_run_exitfuncs", None)
    if run_all is None:
        return
    held = _jax_exit_handlers()
    for f in held:
        atexit.unregister(f)
    atexit.unregister(end_by_exit_signal)
    trim = _TrimUnraisable()
    try:
        if hooks[0] is not None:  # the program's trace and profile functions, on for its handlers as under python
            sys.settrace(hooks[0])
        if hooks[1] is not None:
            sys.setprofile(hooks[1])
        run_all()
    except BaseException:
        pass
    finally:
        for _ in range(3):  # the program's trace and profile functions off (C calls alone: no event of ours)
            try:
                sys.setprofile(None)
                sys.settrace(None)
                break
            except BaseException:  # one that raises is taken off by python: again
                continue
        trim.remove()
        atexit.register(end_by_exit_signal)  # the last at exit
        for f in held:
            atexit.register(f)


def exit_without_teardown(status: int) -> None:
    """End the process now with ``status``, once a signal skipped the rest
    of jaxmemprof's end (the run finalised): the atexit handlers still
    registered run (the script's streams put back for their flush, the end
    by SIGINT of a script that Ctrl-C ended), then the streams are flushed
    and the process ends, without JAX's teardown or the interpreter's
    finalisation: the work the signal cut short may have left XLA's objects
    half made, and tearing them down can crash (a double free, SIGSEGV, seen
    in 2 of 4 runs interrupted in a compile)."""
    for f in _jax_exit_handlers():
        atexit.unregister(f)
    run_all = getattr(atexit, "_run_exitfuncs", None)
    if run_all is not None:
        try:
            run_all()
        except BaseException:
            pass
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None and not stream.closed:
                stream.flush()
        except BaseException:
            pass
    remove_scratch()
    os_exit(status & 0xFF)


# -- the process's state: the script's, and jaxmemprof's own ---------------------


@dataclass
class ProcessState:
    """What a script may change that jaxmemprof's own work after it needs:
    the current directory, sys.argv, sys.path, sys.stdout and sys.stderr."""

    cwd: str | None
    argv: list
    path: list
    stdout: object
    stderr: object

    @classmethod
    def capture(cls) -> ProcessState:
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
        """Put this state back at exit, as it was, before python's last
        flush of stdout and stderr (and JAX's teardown): atexit runs the
        last registered first."""
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
