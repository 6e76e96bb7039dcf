"""Run a script or module exactly as ``python`` would, under the sampler.

The target sees ``sys.argv``, ``sys.path[0]``, ``__name__ == "__main__"``
and ``__file__`` as under ``python SCRIPT ARGS`` (or ``python -m MODULE``).
The exit status is the target's; after an uncaught exception it is 1 and the
traceback is printed as Python prints it. Ctrl-C (130) and SIGTERM (143) end
the target as usual, and the run is still finalised with a last snapshot.
"""

from __future__ import annotations

import builtins
import os
import runpy
import signal
import sys
import traceback
import types
from dataclasses import dataclass
from pathlib import Path

from jaxmemprof.capture.session import Session

_OWN_DIR = str(Path(__file__).resolve().parent.parent)
_RUNPY = os.path.abspath(runpy.__file__)


class Terminated(BaseException):
    """Raised in the main thread when SIGTERM arrives."""


@dataclass(frozen=True)
class Target:
    path: str | None  # a script, or
    module: str | None  # a module run as -m
    args: tuple[str, ...]

    @property
    def argv(self) -> list[str]:
        return [self.path or self.module, *self.args]

    @property
    def stem(self) -> str:
        if self.path:
            return Path(self.path).stem or "run"
        return self.module.rsplit(".", 1)[-1]


def is_out_of_memory(exc: BaseException) -> bool:
    """JAX's RESOURCE_EXHAUSTED error (raised as JaxRuntimeError/XlaRuntimeError)."""
    return "RESOURCE_EXHAUSTED" in str(exc)[:200] and "RuntimeError" in "".join(
        t.__name__ for t in type(exc).__mro__
    )


def _user_traceback(tb):
    """Drop jaxmemprof's and runpy's frames from the top of a traceback."""
    while tb is not None:
        f = os.path.abspath(tb.tb_frame.f_code.co_filename)
        if f.startswith(_OWN_DIR) or f == _RUNPY:
            tb = tb.tb_next
        else:
            break
    return tb


def _exec_script(path: str) -> None:
    """What ``python path`` does: a fresh ``__main__`` module running the file
    (whose ``__file__``, as in Python 3.9+, is absolute)."""
    path = os.path.abspath(path)
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=path, __builtins__=builtins, __cached__=None, __spec__=None, __loader__=None)
    with open(path, "rb") as f:
        source = f.read()
    code = compile(source, path, "exec", dont_inherit=True)
    # As under python, the module stays __main__ (and its globals alive) until
    # the process ends: the exit snapshot sees them.
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


def _exit_code(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    sys.stderr.write(f"{code}\n")
    return 1


def run_target(target: Target, session: Session) -> tuple[int, str]:
    """Run ``target`` under ``session``; return (exit status, how it ended)."""

    def final_snapshot(trigger: str, label: str | None = None):
        # Stop the background thread first, so that this one is the last.
        session.sampler.stop()
        return session.sampler.snapshot(trigger, label)

    saved_argv, saved_path0 = sys.argv, sys.path[0] if sys.path else None
    sys.argv = target.argv
    if target.path:
        sys.path[0:1] = [os.path.dirname(os.path.abspath(target.path))]
    else:
        sys.path[0:1] = [os.getcwd()]

    previous_term = None
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        def on_term(signum, frame):
            raise Terminated()

        previous_term = signal.signal(signal.SIGTERM, on_term)

    session.start()
    try:
        if target.path:
            _exec_script(target.path)
        else:
            runpy.run_module(target.module, run_name="__main__", alter_sys=True)
        final_snapshot("exit")
        return 0, "exit"
    except SystemExit as exc:
        final_snapshot("exit")
        return _exit_code(exc.code), "exit"
    except KeyboardInterrupt as exc:
        final_snapshot("signal", "SIGINT")
        _print_exception(exc)
        return 130, "SIGINT"
    except Terminated:
        final_snapshot("signal", "SIGTERM")
        return 128 + signal.SIGTERM, "SIGTERM"
    except BaseException as exc:
        # The traceback still holds the frames, and so the arrays they
        # reference: the snapshot sees memory as it was at the failure.
        if is_out_of_memory(exc):
            index = final_snapshot("oom", type(exc).__name__)
            session.writer.add_event("oom", str(exc)[:2000], index)
            how = "oom"
        else:
            index = final_snapshot("exception", type(exc).__name__)
            session.writer.add_event("exception", f"{type(exc).__name__}: {exc}"[:2000], index)
            how = "exception"
        _print_exception(exc)
        return 1, how
    finally:
        if previous_term is not None:
            signal.signal(signal.SIGTERM, previous_term)
        sys.argv = saved_argv
        if saved_path0 is not None:
            sys.path[0:1] = [saved_path0]


def _print_exception(exc: BaseException) -> None:
    traceback.print_exception(type(exc), exc, _user_traceback(exc.__traceback__))
