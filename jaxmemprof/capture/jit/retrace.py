"""The end-of-run compiles (the donation and sharding what-ifs, run --plan,
run --target) without a second run of the program's Python where that can be
helped, and shielded where it cannot.

- **Replayed, not re-traced.** When the probe analyses a signature during the
  run it traces it through ``jit(...).trace()`` (the trace the program's own
  call then takes from JAX's cache, or took it from), and keeps that trace's
  jaxpr (``Trace``) beside the signature's abstract arguments (plan.Slot).
  A compile at the end at the same shapes and dtypes (a donation, a
  sharding, the step moved onto a TPU slice) jits ``replay``: a function of
  the same arguments that evaluates that jaxpr, under the program's own jit
  options. JAX then traces the jaxpr's equations, not the program's Python,
  and the program as it was during the run is what is compiled.
- **Re-traced, shielded.** Another batch size, bfloat16 arguments, or a
  function whose trace was not kept (jax.pmap has no ``trace()``) needs the
  program's Python traced again. ``shielded`` runs that with: the program's
  output discarded (sys.stdout and sys.stderr of the tracing thread, and file
  descriptors 1 and 2, whose bytes in that window are dropped; another
  thread's writes through sys.stdout/sys.stderr pass on to the real
  descriptors), every ``BaseException`` contained (SystemExit,
  KeyboardInterrupt, GeneratorExit raised by the program's code: the figure
  is not given, with the reason), SIGINT and SIGTERM that arrive meanwhile
  held and raised again once the window closes (so a real Ctrl-C or
  termination is not swallowed), ``os._exit``/``os.abort`` turned into a
  contained error, ``atexit.register`` a no-op, and, through an audit hook
  (installed at the first shielded re-trace, for the rest of the process),
  the tracing thread refused opening files for writing, removing, renaming
  or making files and directories, starting processes, sending signals and
  opening sockets (the program's code sees a PermissionError).
  What is not shielded: a write to a file or socket the program opened
  before (its handle's ``write``), changes to the program's own objects in
  memory (a counter incremented, a list appended to), threads it starts,
  ``os.write`` on a descriptor other than 1 and 2, anything done through C
  code that raises no audit event.
- **Changed programs.** A re-trace reads the program's globals as they are
  at the end (a ``TRAINING`` flag the program cleared): ``Retraces.changed``
  traces the step once more, shielded, at the run's own signature, through a
  new function object (so JAX's trace cache does not answer for it) and
  compares the jaxpr's fingerprint with the run's own trace's; where they
  differ, figures that would come from re-traces are not given, and the
  run says why.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import ParamSpec, TypeVar
from jaxmemprof.capture.tracebacks import described

_P = ParamSpec("_P")
_T = TypeVar("_T")

RETRACED = ("compiled from a re-trace of the program's Python at the end of the run (its output discarded; "
            "docs/plan.md, re-traces)")
CHANGED = ("not given: the program's Python, re-traced at the end of the run at the run's own shapes, traced "
           "a different program than during the run (a global it reads changed: its figures would be of "
           "another program)")


class Refused(str):
    """Why a figure that needs a re-trace is not given: its text ("not
    given: WHY"), and ``reason`` (WHY)."""

    @property
    def reason(self) -> str:
        return self[len("not given: "):] if self.startswith("not given: ") else str(self)


class Trace:
    """The jaxpr JAX traced for one signature during the run, and its
    output tree: what ``replay`` evaluates."""

    __slots__ = ("jaxpr", "out_tree", "const_bytes", "peak", "_fingerprint")

    def __init__(self, jaxpr, out_tree):
        self.jaxpr, self.out_tree = jaxpr, out_tree
        self.peak = None  # XLA's call peak of its signature, once compiled (which traces a function keeps)
        # the bytes of its constants (arrays a closure captured): kept alive with it
        self.const_bytes = sum(int(getattr(c, "nbytes", 0) or 0) for c in getattr(jaxpr, "consts", ()) or ())
        self._fingerprint = None

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = fingerprint(self.jaxpr)
        return self._fingerprint


def traced(real, args, kwargs):
    """``real`` traced on the call's arguments: (its lowering, Trace or None).
    With ``trace()`` (jax.jit's), the lowering of that trace (what
    ``lower()`` does), and the jaxpr kept; otherwise ``lower()`` alone."""
    trace = getattr(real, "trace", None)
    if trace is None:
        return real.lower(*args, **kwargs), None
    t = trace(*args, **kwargs)
    kept = None
    try:
        kept = Trace(t.jaxpr, t.out_tree)
    except Exception:
        kept = None
    return t.lower(), kept


def fingerprint(closed) -> str:
    """A digest of a closed jaxpr: its text (equations, shapes, literals)
    and its constants' shapes and dtypes, with the bytes of those up to
    64 KiB."""
    h = hashlib.sha256(str(closed).encode())
    for c in getattr(closed, "consts", ()) or ():
        shape, dtype = getattr(c, "shape", None), getattr(c, "dtype", None)
        h.update(repr((shape, str(dtype))).encode())
        try:
            nbytes = int(getattr(c, "nbytes", 1 << 30))
            if nbytes <= 65536:
                import numpy as np

                h.update(np.asarray(c).tobytes())
        except Exception:
            pass
    return h.hexdigest()


def _jaxpr_as_fun(jax):
    ext = getattr(getattr(jax, "extend", None), "core", None)
    fun = getattr(ext, "jaxpr_as_fun", None)
    if fun is None:
        from jax._src.core import jaxpr_as_fun  # an older JAX
        fun = jaxpr_as_fun
    return fun


def replay(jax, real_fun, trace: Trace, dynamic):
    """A function with ``real_fun``'s name and parameters that evaluates the
    run's jaxpr on its dynamic arguments (``dynamic(args, kwargs)``: the
    call's arguments without the static ones, as jit traced them)."""
    as_fun = _jaxpr_as_fun(jax)(trace.jaxpr)
    out_tree = trace.out_tree
    tu = jax.tree_util

    def replayed(*args, **kwargs):
        return tu.tree_unflatten(out_tree, as_fun(*tu.tree_leaves(dynamic(args, kwargs))))

    functools.update_wrapper(replayed, real_fun)
    return replayed


def fresh(real_fun):
    """A new function object calling ``real_fun`` (its name and parameters):
    JAX's trace cache, keyed by the function, does not answer for it, so
    tracing it runs the program's Python."""

    def again(*args, **kwargs):
        return real_fun(*args, **kwargs)

    functools.update_wrapper(again, real_fun)
    return again


# -- the shield ------------------------------------------------------------------------------

class _Held(BaseException):
    """A SIGINT or SIGTERM arrived during a shielded re-trace: the re-trace
    is abandoned, and the signal raised again once the shield is down."""


class _Exited(BaseException):
    """The re-trace called os._exit or os.abort."""


_shielded_thread: int | None = None  # the thread whose re-trace is shielded now
_hook_installed = False
_FORBIDDEN = frozenset((
    "os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.truncate", "os.symlink", "os.link", "os.chmod",
    "os.chown", "os.utime", "os.removexattr", "os.setxattr", "shutil.rmtree", "shutil.move", "shutil.copyfile",
    "shutil.copytree", "shutil.make_archive", "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn",
    "os.spawn", "os.fork", "os.forkpty", "os.kill", "os.killpg", "signal.pthread_kill", "socket.connect",
    "socket.bind", "socket.sendto", "socket.sendmsg", "urllib.Request", "os.startfile", "pty.spawn",
    "os.putenv", "os.unsetenv", "sqlite3.connect",
))
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _audit(event: str, args) -> None:
    if _shielded_thread is None or threading.get_ident() != _shielded_thread:
        return
    if event == "open":
        mode, flags = (args[1], args[2]) if len(args) >= 3 else (None, 0)
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & _WRITE_FLAGS)
        if not writes:
            return
    elif event not in _FORBIDDEN:
        return
    raise PermissionError(f"jaxmemprof: a re-trace of the program's step at the end of the run may not do this "
                          f"({event})")


def _install_audit() -> None:
    global _hook_installed
    if not _hook_installed:
        sys.addaudithook(_audit)  # for good: an audit hook cannot be removed (it returns at once when idle)
        _hook_installed = True


class _Sink:
    """sys.stdout or sys.stderr during a shielded re-trace: the tracing
    thread's writes dropped, another thread's written on to the real
    descriptor (``saved``) at once."""

    def __init__(self, original, saved: int | None, thread: int):
        self._original, self._saved, self._thread = original, saved, thread
        self.encoding = getattr(original, "encoding", None) or "utf-8"
        self.errors = getattr(original, "errors", None) or "strict"

    def write(self, text) -> int:
        if threading.get_ident() != self._thread:
            try:
                data = text.encode(self.encoding, "backslashreplace") if isinstance(text, str) else bytes(text)
                if self._saved is not None:
                    os.write(self._saved, data)
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
        raise OSError("no descriptor during jaxmemprof's shielded re-trace")

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


def shielded(call, *args, **kwargs):
    """``call(*args, **kwargs)`` with the program's Python shielded (the
    module's docstring): (its value, None), or (None, why it gave none) where
    it raised anything at all. A SIGINT or SIGTERM that arrived meanwhile is
    raised again afterwards, to whatever handles it."""
    global _shielded_thread
    _install_audit()
    me = threading.get_ident()
    out, err = sys.stdout, sys.stderr
    _flush(out, err, sys.__stdout__, sys.__stderr__)
    saved: dict = {}
    try:
        null = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        null = None
    for fd in (1, 2):
        if null is None:
            break
        try:
            saved[fd] = os.dup(fd)
            os.dup2(null, fd)
        except OSError:
            saved.pop(fd, None)
    held: list = []
    handlers: dict = {}
    if threading.current_thread() is threading.main_thread():
        def hold(signum, frame):
            held.append(signum)
            raise _Held()

        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                previous = signal.getsignal(sig)
                if previous is None or previous is signal.SIG_IGN:
                    continue
                signal.signal(sig, hold)
                handlers[sig] = previous
            except (ValueError, OSError):
                pass
    os_exit, os_abort, register = os._exit, os.abort, atexit.register

    def no_exit(*a, **k):
        raise _Exited()

    def no_register(func: Callable[_P, _T], /, *a: _P.args, **k: _P.kwargs) -> Callable[_P, _T]:
        return func

    value, why = None, None
    sys.stdout, sys.stderr = _Sink(out, saved.get(1), me), _Sink(err, saved.get(2), me)
    os._exit, os.abort, atexit.register = no_exit, no_exit, no_register
    _shielded_thread = me
    try:
        value = call(*args, **kwargs)
    except _Held:
        why = "not given: a signal arrived during the re-trace of the program's Python at the end of the run"
    except _Exited:
        why = "not given: the program's Python, re-traced at the end of the run, called os._exit"
    except BaseException as exc:  # the program's code, whatever it raised: contained, never the run's end
        text = described(exc)
        if isinstance(exc, SystemExit):
            text = f"SystemExit({exc.code!r})"
        why = f"not given: the program's Python, re-traced at the end of the run, raised {text}".splitlines()[0][:500]
    finally:
        _shielded_thread = None
        os._exit, os.abort, atexit.register = os_exit, os_abort, register
        _flush(sys.__stdout__, sys.__stderr__, out, err)  # anything buffered by the re-trace: into the null device
        sys.stdout, sys.stderr = out, err
        for fd, dup in saved.items():
            try:
                os.dup2(dup, fd)
                os.close(dup)
            except OSError:
                pass
        if null is not None:
            os.close(null)
        for sig, previous in handlers.items():
            try:
                signal.signal(sig, previous)
            except (ValueError, OSError):
                pass
    for sig in dict.fromkeys(held):
        signal.raise_signal(sig)  # to the handler there was: a real Ctrl-C or termination is not lost
    return value, why
