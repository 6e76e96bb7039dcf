"""Run a program exactly as ``python`` would, under the sampler.

Every way python runs one: a script (source or compiled), a directory or
zip file holding a ``__main__.py``, ``-`` (the script on stdin), ``-m
MODULE`` and ``-c CODE``. The target sees ``sys.argv``, ``sys.path[0]``,
``__name__ == "__main__"``, ``__file__`` and the rest of ``__main__``'s
globals as under python. It ends as python ends it: an uncaught SystemExit
gives its status (an object that is not a number printed, as python prints
it); another exception goes to ``sys.excepthook`` (the script's, if it set
one; one that calls sys.exit sets the status) and gives 1; then the
non-daemon threads are joined and the atexit handlers run, while the run
still records, before the run is finalised. Ctrl-C ends the process by
SIGINT after the traceback and the atexit handlers, SIGTERM ends it at once
(its default action), as under python; the run is finalised first, with a
last snapshot. A forked child stops recording at once and ends as python's
would, with no summary.
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


# What python's own printing reads of an exception: the fields themselves,
# never a property a subclass puts over them (its __str__ alone is called,
# by the hook, as under python).
_TRACEBACK = BaseException.__dict__["__traceback__"]
_CAUSE = BaseException.__dict__["__cause__"]
_CONTEXT = BaseException.__dict__["__context__"]
_SUPPRESS = BaseException.__dict__["__suppress_context__"]
_TYPE_NAME = type.__dict__["__name__"]
_TYPE_MRO = type.__dict__["__mro__"]
# Python's own display of an exception (PyErr_Display), as it was before the
# script could replace sys.__excepthook__.
_DISPLAY = sys.__excepthook__
_MISSING = object()


def type_name(exc: BaseException) -> str:
    """The exception's class name, as tracebacks show it (never failing)."""
    try:
        return _TYPE_NAME.__get__(type(exc))
    except Exception:
        return "BaseException"


def safe_str(exc: BaseException) -> str:
    """``str(exc)``, or what python prints when that fails."""
    try:
        text = str(exc)
        return text if isinstance(text, str) else "<exception str() failed>"
    except BaseException:
        return "<exception str() failed>"


def is_out_of_memory(exc: BaseException) -> bool:
    """JAX's RESOURCE_EXHAUSTED error (raised as JaxRuntimeError/XlaRuntimeError)."""
    try:
        names = "".join(_TYPE_NAME.__get__(t) for t in _TYPE_MRO.__get__(type(exc)))
    except Exception:
        return False
    return "RuntimeError" in names and "RESOURCE_EXHAUSTED" in safe_str(exc)[:200]


_PROBE_DIR = os.path.join(_OWN_DIR, "capture", "jit", "")  # the jit probe's files


def _ours(tb) -> bool:
    try:
        f = os.path.abspath(tb.tb_frame.f_code.co_filename)
    except Exception:
        return False
    return f.startswith(_OWN_DIR) or f == _RUNPY


def _user_traceback(tb):
    """A traceback as python would have it: without jaxmemprof's and runpy's
    frames above the script, nor the jit probe's between the script and a
    jitted function (which exist only under run)."""
    while tb is not None and _ours(tb):
        tb = tb.tb_next
    head = tb
    while tb is not None and tb.tb_next is not None:
        try:
            probe = os.path.abspath(tb.tb_next.tb_frame.f_code.co_filename).startswith(_PROBE_DIR)
        except Exception:
            probe = False
        if probe:
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
        try:
            cause = _CAUSE.__get__(exc)
            exc = cause if cause is not None else (None if _SUPPRESS.__get__(exc) else _CONTEXT.__get__(exc))
        except Exception:
            return


def _trim(exc: BaseException):
    """Each exception python prints with ``exc`` gets its user traceback;
    returns ``exc``'s."""
    for e in _chain(exc):
        try:
            _TRACEBACK.__set__(e, _user_traceback(_TRACEBACK.__get__(e)))
        except Exception:
            pass
    return _TRACEBACK.__get__(exc)


def script_file(path: str) -> str:
    """``__file__`` as python sets it: the path joined to the current
    directory, not normalised (``python ./s.py`` gives ``/cwd/./s.py``)."""
    return path if os.path.isabs(path) else os.path.join(os.getcwd(), path)


def script_path0(path: str) -> str:
    """``sys.path[0]`` as python sets it: the directory of the script with
    every symlink resolved."""
    return os.path.dirname(os.path.realpath(path))


def _has_importer(path: str) -> bool:
    """Whether python runs ``path`` as a directory or zip file holding a
    ``__main__.py`` (an import hook takes it), not as a script; looked up
    and cached in sys.path_importer_cache as python does."""
    cache = sys.path_importer_cache
    try:
        if path in cache:
            return cache[path] is not None
    except TypeError:
        return False
    cache[path] = None
    for hook in list(sys.path_hooks):
        try:
            importer = hook(path)
        except ImportError:
            continue
        except Exception:
            return False
        cache[path] = importer
        return True
    return False


# How the target runs: its kind, decided once as python decides it.
_FILE, _MAIN_DIR, _STDIN, _COMMAND, _MODULE = "file", "main-dir", "stdin", "command", "module"


def _kind(target: Target) -> str:
    if target.command is not None:
        return _COMMAND
    if target.module is not None and not target.path:
        return _MODULE
    if target.path == STDIN:
        return _STDIN
    return _MAIN_DIR if _has_importer(script_file(target.path)) else _FILE


def _path0(target: Target, kind: str) -> str:
    """What python puts first in sys.path."""
    if kind in (_COMMAND, _STDIN):
        return ""
    if kind == _MODULE:
        return os.getcwd()
    if kind == _MAIN_DIR:
        return script_file(target.path)
    return script_path0(target.path)


def _replace_path0(path0: str, keep: bool) -> None:
    """sys.path[0] as python sets it for the target, in place of
    jaxmemprof's own, whose import cache entry goes with it, as the
    target's does unless ``keep`` (python has none for a directory nothing
    was imported from yet; a directory or zip run has its importer)."""
    old = sys.path[0] if sys.path else None
    sys.path[0:1] = [path0]
    for entry in (old, path0 if not keep else None):  # a cache only: remade when next needed
        if isinstance(entry, str):
            sys.path_importer_cache.pop(entry, None)


def _fresh_main(**names) -> types.ModuleType:
    """A new ``__main__`` module with the globals python gives it, made
    sys.modules' (as under python, it stays __main__, its globals alive,
    until the process ends: the exit snapshot sees them)."""
    from importlib.machinery import BuiltinImporter

    main = types.ModuleType("__main__")
    main.__dict__.update(__builtins__=builtins, __loader__=BuiltinImporter, __annotations__={})
    main.__dict__.update(names)
    sys.modules["__main__"] = main
    return main


def _is_pyc(path: str, head: bytes) -> bool:
    """Python's test for a compiled file: the name, or the magic's first half."""
    from importlib.util import MAGIC_NUMBER

    return path.endswith(".pyc") or head[:2] == MAGIC_NUMBER[:2]


def _load_pyc(data: bytes):
    import marshal
    from importlib.util import MAGIC_NUMBER

    if data[:4] != MAGIC_NUMBER:
        raise RuntimeError("Bad magic number in .pyc file")
    try:
        code = marshal.loads(data[16:])
    except (EOFError, ValueError, TypeError):
        code = None
    if not isinstance(code, types.CodeType):
        raise RuntimeError("Bad code object in .pyc file")
    return code


def _exec_script(path: str, main_box: list) -> None:
    """What ``python path`` does: a fresh ``__main__`` module running the
    file (source or compiled), with the globals python gives it."""
    from importlib.machinery import SourceFileLoader, SourcelessFileLoader

    path = script_file(path)
    with open(path, "rb") as f:
        source = f.read()
    pyc = _is_pyc(path, source)
    loader = (SourcelessFileLoader if pyc else SourceFileLoader)("__main__", path)
    main = _fresh_main(__file__=path, __cached__=None, __spec__=None, __loader__=loader)
    main_box.append(main)
    code = _load_pyc(source) if pyc else compile(source, path, "exec", dont_inherit=True)
    exec(code, main.__dict__)


def _exec_stdin(main_box: list) -> None:
    """What ``python -`` does: the script read from stdin, as ``<stdin>``."""
    main = _fresh_main(__file__="<stdin>", __cached__=None)
    main_box.append(main)
    stream = getattr(sys.stdin, "buffer", None)
    if stream is not None:
        source = stream.read()
    else:
        chunks = []
        while chunk := os.read(0, 1 << 16):
            chunks.append(chunk)
        source = b"".join(chunks)
    exec(compile(source, "<stdin>", "exec", dont_inherit=True), main.__dict__)


def _exec_command(code: str) -> None:
    """What ``python -c code`` does."""
    main = _fresh_main()
    exec(compile(code, "<string>", "exec", dont_inherit=True), main.__dict__)


def _exec_module(name: str, alter_argv: bool = True) -> None:
    """What ``python -m name`` does (and, with ``__main__`` and no argv
    change, ``python DIR`` for a directory or zip): runpy's own entry for
    it, in a fresh ``__main__`` module (so tracebacks, sys.argv[0] and
    ``__main__`` are python's; a missing module ends with python's one-line
    message)."""
    main = types.ModuleType("__main__")
    main.__dict__.update(__builtins__=builtins, __annotations__={})
    sys.modules["__main__"] = main
    runpy._run_module_as_main(name, alter_argv=alter_argv)


# -- the end of the program, as python ends it ----------------------------------------


def _system_exit_status(exc: BaseException) -> int:
    """What python does with an uncaught SystemExit: its ``code`` (the
    exception itself when that cannot be read); None is 0, an int is the
    status (as the process's is: its low 8 bits), anything else is printed
    on stderr (str(), or nothing when that fails) and gives 1."""
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
        except BaseException:
            pass
    else:
        try:
            os.write(2, str(value).encode("utf-8", "backslashreplace"))
        except BaseException:
            pass
    _write_stderr("\n")


def _write_stderr(text: str) -> None:
    """What python writes on stderr itself: through sys.stderr, else
    straight to the process's stderr."""
    try:
        stream = vars(sys).get("stderr")
        stream.write(text)
        return
    except BaseException:
        pass
    try:
        os.write(2, text.encode("utf-8", "backslashreplace"))
    except OSError:
        pass


def run_target(target: Target, session: Session) -> tuple[int, str]:
    """Run ``target`` under ``session`` until the program ends as python
    ends it (its non-daemon threads joined, its atexit handlers run); return
    (exit status, how it ended). In a forked child the script ran in, raise
    SystemExit instead: the child ends there, as python's would (no summary,
    nothing recorded)."""
    _install_exit_by_signal()
    ours = _ProcessState.capture()
    kind = _kind(target)
    sys.argv = target.argv
    _replace_path0(_path0(target, kind), keep=kind == _MAIN_DIR)

    term = _SigTerm(session)
    term.install()
    session.child_hooks.append(term.forget_in_child)
    session.start()
    try:
        status, how = _run(target, kind, session)
    finally:
        term.uninstall()
    if session.forked:
        from jaxmemprof.capture.session import finish_fork_child

        finish_fork_child(status, how)  # its own run, if it recorded one
        raise SystemExit(status)
    # The rest of jaxmemprof's work (the summary) runs with its own
    # directory, sys.path and streams; the script's are put back at exit,
    # for python's last flush.
    _ProcessState.capture().restore_at_exit()
    ours.restore()
    return status, how


def _run(target: Target, kind: str, session: Session) -> tuple[int, str]:
    main_box: list = []  # the __main__ module python deletes __file__ from at the end
    try:
        if kind == _FILE:
            _exec_script(target.path, main_box)
        elif kind == _STDIN:
            _exec_stdin(main_box)
        elif kind == _COMMAND:
            _exec_command(target.command)
        elif kind == _MAIN_DIR:
            _exec_module("__main__", alter_argv=False)
        else:
            _exec_module(target.module)
    except BaseException as exc:
        failure = exc
    else:
        failure = None
    # Outside the handler, as python calls sys.excepthook (an exception in
    # the hook has no context).
    sampler = session.sampler
    exited = isinstance(failure, SystemExit)  # python's exit then skips its end of the script
    if failure is None:
        status, how = 0, "exit"
    elif exited:
        status, how = _system_exit_status(failure), "exit"
    else:
        # The traceback still holds the frames, and so the arrays they
        # reference: the snapshot sees memory as it was at the failure. The
        # sampler goes on: the program's threads may still run.
        name = type_name(failure)
        if type(failure) is KeyboardInterrupt:  # exactly: a subclass is an exception like any other
            sampler.snapshot("signal", "SIGINT")
            status, how = 128 + signal.SIGINT, "SIGINT"
        elif is_out_of_memory(failure):
            index = sampler.snapshot("oom", name)
            _add_event(session, "oom", safe_str(failure)[:2000], index)
            status, how = 1, "oom"
        else:
            index = sampler.snapshot("exception", name)
            _add_event(session, "exception", f"{name}: {safe_str(failure)}"[:2000], index)
            status, how = 1, "exception"
        box, failure = [failure], None
        hook_status = _report_exception(box)
        if hook_status is not None:  # the hook called sys.exit: python exits with its status
            status, exited = hook_status, True
        elif how == "SIGINT":
            # Python ends by SIGINT itself after an uncaught KeyboardInterrupt,
            # once the atexit handlers have run.
            _exit_by_signal(signal.SIGINT)
    failure = None
    if not exited and main_box:
        # Python removes these once the script is done (not when it exits by SystemExit).
        for name in ("__file__", "__cached__"):
            main_box[0].__dict__.pop(name, None)
    del main_box
    if session.forked:
        return status, how
    threads = _wait_for_threads()
    _run_atexit_handlers()
    if getattr(threading, "_SHUTTING_DOWN", False):
        # The program is over; jaxmemprof's own work goes on (its imports
        # may register threading atexit calls, refused after shutdown).
        threading._SHUTTING_DOWN = False
    # Stop the background thread first, so that this snapshot is the last.
    sampler.stop()
    if how == "exit" or threads:
        sampler.snapshot("exit")
    return status, how


def _add_event(session: Session, kind: str, message: str, index) -> None:
    try:
        session.writer.add_event(kind, message, index)
    except Exception:
        pass


def _report_exception(box: list) -> int | None:
    """What python does with an uncaught exception (the one ``box`` holds:
    this function takes it, so that no frame of ours holds it while it is
    shown): ``sys.last_*`` set, ``sys.excepthook`` called (the script's own
    if it set one), and if that fails, both tracebacks; a hook missing is
    said so. A hook that raises SystemExit ends the program: its exit
    status is returned."""
    exc = box.pop()
    tb = _trim(exc)
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
        return _system_exit_status(hook_exit)
    except BaseException as hook_exc:
        _write_stderr("Error in sys.excepthook:\n")
        _display(hook_exc, _trim(hook_exc))
        _write_stderr("\nOriginal exception was:\n")
        _display(exc, tb)
    return None


def _display(exc: BaseException, tb) -> None:
    try:
        _DISPLAY(type(exc), exc, tb)
    except BaseException:
        pass


def _wait_for_threads() -> bool:
    """What python does once the main module is done: its threading atexit
    calls, then every non-daemon thread joined (the sampler records them
    meanwhile). Whether any was still running. An interruption (Ctrl-C)
    is reported as python reports it, and the end goes on."""
    main = threading.current_thread()
    alive = any(t is not main and not t.daemon and t.is_alive() for t in threading.enumerate())
    shutdown = getattr(threading, "_shutdown", None)
    if main is not threading.main_thread():
        return alive
    try:
        if shutdown is not None:
            shutdown()
        else:
            for t in threading.enumerate():
                if t is not main and not t.daemon:
                    t.join()
    except BaseException as exc:
        _write_unraisable(exc, threading)
    return alive


def _write_unraisable(exc: BaseException, obj) -> None:
    """Python's "Exception ignored in: OBJ" report, through the script's
    sys.unraisablehook if it set one."""
    tb = _trim(exc)
    hook = getattr(sys, "unraisablehook", None)
    if hook is not None and hook is not sys.__unraisablehook__:
        try:
            hook(types.SimpleNamespace(exc_type=type(exc), exc_value=exc, exc_traceback=tb, err_msg=None,
                                       object=obj))
        except BaseException:
            pass
        return
    import traceback

    try:
        lines = [f"Exception ignored in: {obj!r}\n"]
        if tb is not None:
            lines += ["Traceback (most recent call last):\n", *traceback.format_tb(tb)]
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
    found = []
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
            tb = _trim(args.exc_value) if args.exc_value is not None else _user_traceback(args.exc_traceback)
            args = type(args)((args.exc_type, args.exc_value, tb, args.err_msg, args.object))
        except Exception:
            pass
        self.hook(args)

    def remove(self) -> None:
        if vars(sys).get("unraisablehook") is self:  # a handler's own hook stays
            sys.unraisablehook = self.hook


def _run_atexit_handlers() -> None:
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
    atexit.unregister(_end_by_exit_signal)
    trim = _TrimUnraisable()
    try:
        run_all()
    except BaseException:
        pass
    finally:
        trim.remove()
        atexit.register(_end_by_exit_signal)  # the last at exit
        for f in held:
            atexit.register(f)


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
