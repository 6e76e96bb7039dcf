"""The one place that runs the program's Python once the program is over.

The end phase's compiles (the donation and sharding what-ifs, remat,
``run --plan``, ``run --target``, what fits after an out-of-memory) replay
the jaxpr JAX traced during the run wherever the shapes are the run's
(retrace.py): no Python of the program's runs. Where another batch, a
bfloat16 argument, a remat policy or a function with no kept trace needs
the program's Python traced again, that re-trace runs here, through
``run_programs_python`` alone, which holds every rule for it:

- **A deadline.** The re-trace runs in a thread of ours
  (``jaxmemprof-retrace``, capture/threads.py: none of the program's hooks
  in it), and the end phase waits for it at most ``deadline_s()`` seconds
  (60; ``$JAXMEMPROF_RETRACE_SECONDS``). One that does not return in time
  (it loops, it waits on a lock a thread of the program holds, it blocks in
  a read) is abandoned: its figure is "not given: the program's Python did
  not return within N s", so is every figure that needs a re-trace after
  it (the program's code is still in that thread: it is not run a second
  time beside it), and the end phase goes on; the run ends with the
  program's exit status.
- **What is abandoned stops.** The re-trace thread runs with a profile
  function of ours (its own thread's alone): once abandoned, the thread
  stops for good at its next call or return, so nothing of the program's
  runs in it after the end; one that loops with no call is sent an
  exception (``PyThreadState_SetAsyncExc``, by its ident) and stops as its
  frames return; a thread blocked in C stays there and stops as it comes
  back. It is a daemon: it never keeps the process alive.
- **No lock of a stopped thread.** The program's threads are stopped once
  the script is over (parking.py), never inside a ``with`` block of theirs
  (where a lock is held) while they can still leave it; a lock held
  another way is met by the deadline.
- **Contained, with nothing installed for good.** While a re-trace runs,
  the program's code in the re-trace thread: has its output dropped
  (sys.stdout and sys.stderr, and ``os.write`` to descriptors 1 and 2;
  descriptors 1 and 2 point at the null device meanwhile, for output from
  C; another thread's writes through sys.stdout/sys.stderr pass on), is
  refused (``PermissionError``) writing through any other descriptor
  (``os.write`` and its kin; a file object's ``write``, seen by the thread's
  profile function), opening files for writing, removing, renaming or
  making files and directories, starting threads or processes, sending
  signals and opening or using sockets; ``os._exit``/``os.abort`` raise a
  contained error and ``atexit.register`` does nothing; whatever it raises
  (``SystemExit``, ``KeyboardInterrupt`` included) is contained, the figure
  not given, with the reason. These are the functions of ``os``,
  ``builtins``, ``io``, ``shutil``, ``subprocess``, ``socket``, ``signal``,
  ``threading``, ``_thread`` and ``sqlite3`` replaced for the re-trace's
  time, each acting for the re-trace thread alone and put back after it.
  No audit hook is installed (one cannot be removed, and would hand the
  program's own audit hooks nothing but would outlive the re-trace).
  Not contained: a function the program bound before under another name
  (``from os import write``), except a file object's write; changes to the
  program's objects in memory; anything done in C with no Python call.
- **Signals.** A SIGINT or SIGTERM during a re-trace (from the main thread)
  abandons it at once, and is raised again once the re-trace is put away.

Where the re-trace is not the program's (a jaxpr replayed), none of this is
needed: those lowerings run JAX's code alone.
"""

from __future__ import annotations

import _thread
import atexit
import builtins
import io
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

from jaxmemprof.capture.threads import OwnThread
from jaxmemprof.capture.tracebacks import described

DEADLINE_S = 60.0
DEADLINE_ENV = "JAXMEMPROF_RETRACE_SECONDS"
HELD = "not given: a signal arrived during the re-trace of the program's Python at the end of the run"
NOT_RETURNED = "not given: the program's Python did not return within {seconds:g} s"


def deadline_s() -> float:
    """How long a re-trace of the program's Python may take: ``DEADLINE_S``,
    or ``$JAXMEMPROF_RETRACE_SECONDS`` (0.1 to 86400)."""
    try:
        value = float(os.environ.get(DEADLINE_ENV, DEADLINE_S))
    except ValueError:
        return DEADLINE_S
    return min(max(value, 0.1), 86400.0) if value == value else DEADLINE_S


class _Held(BaseException):
    """A SIGINT or SIGTERM arrived during a re-trace."""


class _Exited(BaseException):
    """The re-trace called os._exit or os.abort."""


class _GivenUp(BaseException):
    """Raised in a re-trace given up on that runs on with no call in it."""


_state: dict = {"refusing": None}
_retracing: set[int] = set()  # the re-trace threads running the program's Python now
_abandoned: set[int] = set()  # re-trace threads given up on: they stop at their next call or return
_parked: set[int] = set()  # those stopped so
STOP_S = 1.0  # how long a re-trace given up on is helped to stop (_abandon)
_stopped = _thread.allocate_lock()  # never released: an abandoned thread waits on it for good
_stopped.acquire()
_one_at_a_time = threading.Lock()


def refusing() -> str | None:
    """Why no more re-traces are run (one did not return), or None."""
    return _state["refusing"]


def run_programs_python(call: Callable, *args, **kwargs):
    """``call(*args, **kwargs)``, the program's Python in it, under the
    rules of this module (its docstring): (its value, None), or (None, why
    it gave none: "not given: ...")."""
    why = _state["refusing"]
    if why is not None:
        return None, why
    with _one_at_a_time:
        try:
            return _run(call, args, kwargs)
        except _Held:  # a second signal while the first gave the re-trace up: raised again already
            return None, HELD


def unseen(jax, call: Callable) -> Callable:
    """``call`` as a compile of ours (programs.unseen_compile) in the thread
    it runs in: the thread of the re-trace, not the one that asks for it."""
    from jaxmemprof.capture.jit.programs import unseen_compile

    def in_thread(*args, **kwargs):
        with unseen_compile(jax):
            return call(*args, **kwargs)

    return in_thread


def _run(call, args, kwargs):
    seconds = deadline_s()
    box: dict = {}
    done = threading.Event()

    def body():
        me = _thread.get_ident()
        _retracing.add(me)
        sys.setprofile(_watch)
        try:
            box["value"] = call(*args, **kwargs)
        except _Exited:
            box["why"] = "not given: the program's Python, re-traced at the end of the run, called os._exit"
        except BaseException as exc:  # the program's code, whatever it raised: contained, never the run's end
            box["why"] = _raised(exc)
        finally:
            sys.setprofile(None)
            _retracing.discard(me)
            done.set()

    thread = OwnThread(body, "jaxmemprof-retrace")
    shield = _Shield()
    why = None
    try:
        shield.up()
        thread.start()
        why = _wait(thread, done, seconds)
    except RuntimeError as exc:  # no new thread (the interpreter's end): nothing of the program's ran
        why = f"not given: no thread for the re-trace ({exc})"
    except _Held:
        _abandon(thread)
        why = HELD
    finally:
        shield.down()
    if why is not None:
        return None, why
    return box.get("value"), box.get("why")


def _wait(thread: OwnThread, done: threading.Event, seconds: float) -> str | None:
    """Wait for the re-trace; None once it returned, else why it was given up."""
    t0 = time.monotonic()
    try:
        while not done.wait(min(1.0, max(0.0, t0 + seconds - time.monotonic()))):
            if time.monotonic() - t0 >= seconds:
                _abandon(thread)
                why = NOT_RETURNED.format(seconds=seconds)
                _state["refusing"] = why
                return why
    except _Held:
        _abandon(thread)
        return HELD
    return None


def _abandon(thread: OwnThread) -> None:
    """Give up on the re-trace ``thread``: it stops at its next call or
    return (``_watch``). One that runs on with no call in it (a loop of
    bytecode alone) is sent ``_GivenUp`` (PyThreadState_SetAsyncExc, again
    while it has not stopped, for ``STOP_S`` at most): the frames it
    unwinds return, and it stops there. A thread left spinning would
    otherwise run into the interpreter's finalisation, which ends a daemon
    thread inside C++ frames (JAX's) and can crash the process (3.12: a
    segmentation fault at exit)."""
    ident = thread.ident
    if ident is None:
        return
    _abandoned.add(ident)
    t0 = time.monotonic()
    while thread.is_alive() and ident not in _parked and time.monotonic() - t0 < STOP_S:
        time.sleep(0.05)
        if thread.is_alive() and ident not in _parked:
            _interrupt(ident)


def _interrupt(ident: int) -> None:
    try:
        import ctypes

        set_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
        set_exc.argtypes = [ctypes.c_ulong, ctypes.py_object]
        set_exc.restype = ctypes.c_int
        set_exc(ident, _GivenUp)
    except Exception:
        pass


def _watch(frame, event, arg):
    """The re-trace thread's profile function: stop it for good once
    abandoned; refuse a write through a file object (a C call of its
    ``write``) the program made."""
    me = _thread.get_ident()
    if me in _abandoned:
        _parked.add(me)
        _stopped.acquire()  # for good: the process ends with the thread here
    if event == "c_call" and type(getattr(arg, "__self__", None)) in _FILES and \
            getattr(arg, "__name__", None) in _FILE_WRITES:
        raise PermissionError(_REFUSED.format("a file's write"))


# file objects over a descriptor (not io.StringIO, io.BytesIO: memory), and what writes through them
_FILES = frozenset((io.FileIO, io.BufferedWriter, io.BufferedRandom, io.BufferedRWPair, io.TextIOWrapper))
_FILE_WRITES = frozenset(("write", "writelines", "truncate"))
_REFUSED = "jaxmemprof: a re-trace of the program's step at the end of the run may not do this ({})"


def _raised(exc: BaseException) -> str:
    """Why a figure is not given, the program's exception ``exc`` said (its
    text read only where that runs none of the program's code)."""
    if isinstance(exc, SystemExit):
        try:
            code = exc.code
            text = f"SystemExit({code!r})" if code is None or isinstance(code, (int, str)) else "SystemExit(...)"
        except BaseException:
            text = "SystemExit"
    else:
        text = described(exc)  # its text read only where that runs none of the program's code
    return f"not given: the program's Python, re-traced at the end of the run, raised {text}".splitlines()[0][:500]


# -- the shield: what the re-trace thread may not do, for its time alone ----------------------

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _in_retrace() -> bool:
    return _thread.get_ident() in _retracing


def _refuser(name: str, original):
    def refuse(*args, **kwargs):
        if _in_retrace():
            raise PermissionError(_REFUSED.format(name))
        return original(*args, **kwargs)

    refuse.__wrapped__ = original  # type: ignore[attr-defined]
    return refuse


def _opener(name: str, original, flags_at: int | None, mode_at: int | None):
    """open/io.open (mode, argument 1) or os.open (flags, argument 1): refused for writing."""
    def opening(*args, **kwargs):
        if _in_retrace():
            mode = kwargs.get("mode", args[mode_at] if mode_at is not None and len(args) > mode_at else "r")
            flags = kwargs.get("flags", args[flags_at] if flags_at is not None and len(args) > flags_at else 0)
            if (mode_at is not None and (not isinstance(mode, str) or any(c in mode for c in "wax+"))) or \
                    (flags_at is not None and (not isinstance(flags, int) or flags & _WRITE_FLAGS)):
                raise PermissionError(_REFUSED.format(name))
        return original(*args, **kwargs)

    opening.__wrapped__ = original  # type: ignore[attr-defined]
    return opening


def _writer(name: str, original):
    """os.write/os.writev: to descriptors 1 and 2, dropped (as printed); to any other, refused."""
    def writing(fd, data, *rest):
        if _in_retrace():
            if fd in (1, 2) and not rest:
                try:
                    return len(data) if name == "os.write" else sum(len(b) for b in data)
                except Exception:
                    return 0
            raise PermissionError(_REFUSED.format(name))
        return original(fd, data, *rest)

    writing.__wrapped__ = original  # type: ignore[attr-defined]
    return writing


def _exiter(original):
    def exiting(*args, **kwargs):
        if _in_retrace():
            raise _Exited()
        return original(*args, **kwargs)

    exiting.__wrapped__ = original  # type: ignore[attr-defined]
    return exiting


def _registrar(original):
    def register(func, /, *args, **kwargs):
        if _in_retrace():
            return func
        return original(func, *args, **kwargs)

    register.__wrapped__ = original  # type: ignore[attr-defined]
    return register


_REFUSED_NAMES = {
    "os": ("remove", "unlink", "rename", "renames", "replace", "rmdir", "removedirs", "mkdir", "makedirs",
           "truncate", "ftruncate", "symlink", "link", "chmod", "fchmod", "chown", "fchown", "utime", "mkfifo",
           "mknod", "removexattr", "setxattr", "pwrite", "pwritev", "sendfile", "copy_file_range", "splice",
           "system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp", "execv", "execve", "execvp",
           "execvpe", "execl", "execle", "execlp", "execlpe", "spawnv", "spawnve", "spawnl", "spawnle", "kill",
           "killpg", "putenv", "unsetenv", "dup2"),
    "shutil": ("rmtree", "move", "copy", "copy2", "copyfile", "copyfileobj", "copytree", "make_archive"),
    "signal": ("pthread_kill", "raise_signal", "signal", "alarm", "setitimer"),
    "_thread": ("start_new_thread", "start_joinable_thread", "start_new"),
    "sqlite3": ("connect",),
}
# methods of Python classes (set on the class itself, removed after where it had none of its own)
_REFUSED_METHODS = {
    ("threading", "Thread"): ("start",),
    ("subprocess", "Popen"): ("__init__",),
    ("socket", "socket"): ("connect", "connect_ex", "bind", "send", "sendall", "sendto", "sendmsg", "sendfile"),
}


class _Shield:
    """The module's containment, up for one re-trace's time."""

    def __init__(self):
        self._undo: list = []
        self._saved: dict = {}
        self._null: int | None = None
        self._handlers: dict = {}
        self._out = self._err = None

    def up(self) -> None:
        self._patch()
        self._streams()
        self._signals()

    def down(self) -> None:
        """Everything put back; a held signal (``_Held`` meanwhile: it is
        raised again last) does not stop it."""
        undos, self._undo = list(reversed(self._undo)), []
        for undo in undos:
            for _ in range(8):
                try:
                    undo()
                    break
                except _Held:
                    continue
                except Exception:
                    break

    def _set(self, owner, name: str, value) -> None:
        own = name in vars(owner) if isinstance(owner, type) else True
        previous = getattr(owner, name)
        setattr(owner, name, value)

        def undo():
            if getattr(owner, name, None) is not value:
                return  # replaced since (by the program's code in an abandoned thread): left
            if own:
                setattr(owner, name, previous)
            else:
                delattr(owner, name)

        self._undo.append(undo)

    def _patch(self) -> None:
        self._set(builtins, "open", _opener("open", builtins.open, None, 1))
        self._set(io, "open", _opener("open", io.open, None, 1))
        self._set(os, "open", _opener("os.open", os.open, 1, None))
        for name in ("write", "writev"):
            if hasattr(os, name):
                self._set(os, name, _writer(f"os.{name}", getattr(os, name)))
        self._set(os, "_exit", _exiter(os._exit))
        self._set(os, "abort", _exiter(os.abort))
        self._set(atexit, "register", _registrar(atexit.register))
        for module, names in _REFUSED_NAMES.items():
            mod = sys.modules.get(module)
            if mod is None:
                continue
            for name in names:
                if hasattr(mod, name):
                    self._set(mod, name, _refuser(f"{module}.{name}", getattr(mod, name)))
        for (module, cls), names in _REFUSED_METHODS.items():
            owner = getattr(sys.modules.get(module), cls, None)
            if not isinstance(owner, type):
                continue
            for name in names:
                if hasattr(owner, name):
                    self._set(owner, name, _refuser(f"{module}.{cls}.{name}", getattr(owner, name)))

    def _streams(self) -> None:
        """sys.stdout/sys.stderr: the re-trace's writes dropped; descriptors 1 and 2 to the null device."""
        out, err = sys.stdout, sys.stderr
        _flush(out, err, sys.__stdout__, sys.__stderr__)
        dup2 = getattr(os.dup2, "__wrapped__", os.dup2)
        try:
            null = os.open(os.devnull, os.O_WRONLY)
        except OSError:
            null = None
        saved: dict = {}
        for fd in (1, 2):
            if null is None:
                break
            try:
                saved[fd] = os.dup(fd)
                dup2(null, fd)
            except OSError:
                saved.pop(fd, None)
        sys.stdout, sys.stderr = _Sink(out, saved.get(1)), _Sink(err, saved.get(2))

        def undo():
            _flush(sys.__stdout__, sys.__stderr__, out, err)  # anything buffered by the re-trace: into the null device
            if isinstance(sys.stdout, _Sink):
                sys.stdout = out
            if isinstance(sys.stderr, _Sink):
                sys.stderr = err
            close = getattr(os.close, "__wrapped__", os.close)
            for fd, dup in saved.items():
                try:
                    dup2(dup, fd)
                    close(dup)
                except OSError:
                    pass
            if null is not None:
                close(null)

        self._undo.append(undo)

    def _signals(self) -> None:
        """SIGINT and SIGTERM, from the main thread: held (the re-trace
        abandoned), raised again once the shield is down."""
        if threading.current_thread() is not threading.main_thread():
            return
        held: list = []
        handlers: dict = {}
        set_handler = getattr(signal.signal, "__wrapped__", signal.signal)

        def hold(signum, frame):
            held.append(signum)
            raise _Held()

        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                previous = signal.getsignal(sig)
                if previous is None or previous is signal.SIG_IGN:
                    continue
                set_handler(sig, hold)
                handlers[sig] = previous
            except (ValueError, OSError):
                pass

        def undo():
            while handlers:  # a signal meanwhile raises _Held here: down() calls this again
                sig, previous = next(iter(handlers.items()))
                try:
                    set_handler(sig, previous)
                except (ValueError, OSError):
                    pass
                del handlers[sig]
            raise_signal = getattr(signal.raise_signal, "__wrapped__", signal.raise_signal)
            for sig in dict.fromkeys(held):
                raise_signal(sig)  # to the handler there was: a real Ctrl-C or termination is not lost

        self._undo.insert(0, undo)  # last: once everything else is put back


class _Sink:
    """sys.stdout or sys.stderr during a re-trace: the re-trace's writes
    dropped, another thread's written on to the real descriptor (``saved``)
    at once."""

    def __init__(self, original, saved: int | None):
        self._original, self._saved = original, saved
        self.encoding = getattr(original, "encoding", None) or "utf-8"
        self.errors = getattr(original, "errors", None) or "strict"

    def write(self, text) -> int:
        if not _in_retrace():
            try:
                data = text.encode(self.encoding, "backslashreplace") if isinstance(text, str) else bytes(text)
                if self._saved is not None:
                    getattr(os.write, "__wrapped__", os.write)(self._saved, data)
                elif self._original is not None:
                    self._original.write(text)
            except Exception:
                pass
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise OSError("no descriptor during jaxmemprof's re-trace of the program's Python")

    @property
    def closed(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False


def _flush(*streams) -> None:
    for s in streams:
        try:
            if s is not None and not s.closed:
                s.flush()
        except Exception:
            pass
