"""The magics: ``%%jaxmemprof`` records one cell; ``%jaxmemprof start`` and
``%jaxmemprof stop`` the cells between; ``%jaxmemprof report`` shows the
last run's (or a named run's) whole report. docs/notebooks.md shows them."""

from __future__ import annotations

import argparse
import contextlib
import functools
import shlex
import sys

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.display import display

from jaxmemprof.api import ProfiledRun
from jaxmemprof.errors import InputError
from jaxmemprof.notebook.display import Shows

USAGE = """\
%%jaxmemprof [-o DIR] [--force] [--interval S] [--max-overhead F] [--no-page]
    record this cell: its summary and findings, then the report's page
%jaxmemprof start [-o DIR] [--force] [--interval S] [--max-overhead F]
    record from now on, over the cells that follow
%jaxmemprof stop [--no-page]
    stop recording: the summary and findings, then the report's page
%jaxmemprof report [RUN] [--explain] [--top N] [--html]
    the last run's whole report (or RUN's); --html: its page, inline"""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"{message}\n{USAGE}")

    def exit(self, status=0, message=None):  # --help
        raise UsageError(USAGE)


def _recording_parser(prog: str, page: bool = True) -> _Parser:
    p = _Parser(prog=prog, add_help=False)
    p.add_argument("-o", "--output", default=None)
    p.add_argument("--force", action="store_true")
    p.add_argument("--interval", type=float, default=0.5)
    p.add_argument("--max-overhead", type=float, default=0.02)
    p.add_argument("--no-jit-probe", action="store_true")
    p.add_argument("--addresses", choices=("auto", "all", "none"), default="auto")
    if page:
        p.add_argument("--no-page", action="store_true")
    return p


class CellFailed(Exception):
    """The recorded cell raised (IPython has shown its traceback): the cell
    fails, in one line, after the run's summary."""

    def __init__(self, error: BaseException, run: ProfiledRun):
        super().__init__(f"{type(error).__name__}: {error}")
        self.error, self.run = error, run

    def _render_traceback_(self):
        return [f"jaxmemprof: the cell raised {type(self.error).__name__} (above); its run: {self.run.path}"]


@magics_class
class JaxmemprofMagics(Magics):
    def __init__(self, shell):
        super().__init__(shell)
        self.recording: ProfiledRun | None = None  # %jaxmemprof start's, until stop
        self.last: ProfiledRun | None = None  # the last run recorded here

    @line_cell_magic
    def jaxmemprof(self, line: str, cell: str | None = None):
        """Record device memory: ``%%jaxmemprof`` a cell, ``%jaxmemprof
        start`` / ``stop`` the cells between; ``%jaxmemprof report`` the
        last run's report. ``%jaxmemprof --help`` for the options."""
        if cell is not None:
            return self._cell(line, cell)
        words = shlex.split(line)
        if not words:
            raise UsageError(USAGE)
        command, rest = words[0], words[1:]
        if command == "start":
            return self._start(rest)
        if command == "stop":
            return self._stop(rest)
        if command == "report":
            return self._report(rest)
        raise UsageError(f"unknown subcommand {command!r}\n{USAGE}")

    # -- recording -----------------------------------------------------------------------

    def _new_run(self, args, name: str, target: str) -> ProfiledRun:
        if self.recording is not None:
            raise UsageError(f"already recording into {self.recording.path} (since %jaxmemprof start): "
                             "%jaxmemprof stop first")
        try:
            run = ProfiledRun(args.output, interval=args.interval, max_overhead=args.max_overhead,
                              jit_probe=not args.no_jit_probe, addresses=args.addresses, force=args.force,
                              name=name, target=target)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        run.by_magic = True  # the summary points at %jaxmemprof report
        return run

    def _begin(self, run: ProfiledRun) -> None:
        try:
            run.start()
        except InputError as exc:
            raise UsageError(str(exc)) from None
        if run.deferred:
            raise UsageError(f"a run is already recording this kernel ({run.path}): its own records this")

    def _cell(self, line: str, cell: str):
        args = _recording_parser("%%jaxmemprof").parse_args(shlex.split(line))
        # The cell's own lines: the magic's line stays, as a comment, so that
        # line numbers (in sites and tracebacks) are the cell's.
        body = f"# %%jaxmemprof {line}\n{cell}"
        if self._awaits(body):
            raise UsageError("a %%jaxmemprof cell cannot await at its top level (IPython runs a cell magic "
                             "synchronously): put %jaxmemprof start in the cell before it and %jaxmemprof stop "
                             "in the cell after")
        number = cell_number(self.shell)
        run = self._new_run(args, "cell", f"In [{number}]")
        self._begin(run)
        self.last = run
        try:
            # A cell ending with ; shows no value (and keeps none in Out): IPython
            # tells it from the history's last input, which a cell run inside
            # this one does not enter. Its code is compiled under this cell's
            # number (its sites and its traceback read In [number]).
            with compiled_as(self.shell, number):
                result = self.shell.run_cell(body, store_history=False, silent=_ends_with_semicolon(cell))
        except BaseException as exc:  # run_cell itself failed (interrupted)
            _record_cells(run, run.target, exc)
            run.stop(exc)
            raise
        error = result.error_before_exec or result.error_in_exec
        _record_cells(run, run.target, error)
        run.stop(error)
        self._show(run, page=not args.no_page)
        if error is not None:
            raise CellFailed(error, run)

    def _start(self, words):
        args = _recording_parser("%jaxmemprof start", page=False).parse_args(words)
        run = self._new_run(args, "cells", f"{self._label()} on")
        self._begin(run)
        _record_cells(run, run.target.removesuffix(" on"))
        self.recording = self.last = run
        print(f"jaxmemprof: recording into {run.path} (%jaxmemprof stop to end)")

    def _stop(self, words):
        p = _Parser(prog="%jaxmemprof stop", add_help=False)
        p.add_argument("--no-page", action="store_true")
        args = p.parse_args(words)
        run = self.recording
        if run is None:
            raise UsageError("not recording: %jaxmemprof start first (or %%jaxmemprof a cell)")
        self.end_recording()
        self._show(run, page=not args.no_page)

    def end_recording(self) -> ProfiledRun | None:
        """Stop the run ``%jaxmemprof start`` began, at this cell (``%jaxmemprof
        stop``, or ``%unload_ext``): the cells it recorded, ``In [7] to In [9]``."""
        run, self.recording = self.recording, None
        if run is not None:
            run.target = f"{run.target.removesuffix(' on')} to {self._label()}"
            _record_cells(run, run.target)
            run.stop()
        return run

    def _show(self, run: ProfiledRun, page: bool) -> None:
        try:
            summary = run.summary()
            shown = Shows(summary, run.html()) if page else summary
        except Exception as exc:  # the run itself is safe on disk
            print(f"jaxmemprof: warning: could not summarise {run.path}: {type(exc).__name__}: {exc}",
                  file=sys.stderr)
            return
        display(shown)

    # -- reading -------------------------------------------------------------------------

    def _report(self, words):
        p = _Parser(prog="%jaxmemprof report", add_help=False)
        p.add_argument("run", nargs="?", default=None)
        p.add_argument("--explain", action="store_true")
        p.add_argument("--html", action="store_true")
        p.add_argument("--top", type=int, default=10)
        args = p.parse_args(words)
        if args.run is not None:
            run = ProfiledRun(target=args.run)
            run.path, run.ended_by = _existing(args.run), "read"
        elif self.last is not None:
            run = self.last
        else:
            raise UsageError("no run recorded in this kernel yet: %jaxmemprof report RUN names one")
        if run.recording:
            raise UsageError(f"{run.path} is still recording: %jaxmemprof stop first")
        try:
            display(run.html() if args.html else run.report(explain=args.explain, top=args.top))
        except InputError as exc:
            raise UsageError(str(exc)) from None

    def _label(self) -> str:
        return f"In [{cell_number(self.shell)}]"

    def _awaits(self, body: str) -> bool:
        try:
            return bool(self.shell.should_run_async(body, transformed_cell=self.shell.transform_cell(body)))
        except Exception:  # what the cell's own run will report (a syntax error)
            return False


def cell_number(shell) -> int:
    """The number of the cell running now, as the notebook shows it (``In
    [N]``, ``Out[N]``). Not ``shell.execution_count`` itself: IPython 8
    counts a cell once it has run (the count is the running cell's number),
    IPython 9 as it starts (the count is the next cell's). The running cell's
    ExecutionResult has its number in both, and the display hook (which
    files values under ``Out[N]``) knows it too."""
    hook = getattr(shell, "displayhook", None)
    running = getattr(hook, "exec_result", None)
    n = getattr(running, "execution_count", None)
    if isinstance(n, int) and not isinstance(n, bool):
        return n
    try:
        n = hook.prompt_count
    except Exception:
        n = None
    return n if isinstance(n, int) and not isinstance(n, bool) else shell.execution_count


@contextlib.contextmanager
def compiled_as(shell, number: int):
    """Within: the next cell IPython compiles is filed under ``number`` (its
    file name's label, ``In [number]``, in IPython's map that tracebacks and
    the runs' sites read). A cell run inside another (store_history=False)
    is compiled under ``shell.execution_count``, which in IPython 9 is already
    the next cell's number."""
    compiler = getattr(shell, "compile", None)
    cache = getattr(compiler, "cache", None)
    if cache is None:
        yield
        return
    own = "cache" in vars(compiler)  # patched by someone else: put theirs back after
    used = []

    @functools.wraps(cache)
    def cache_as(transformed_code, *args, **kwargs):
        if not used:  # this cell only (not what its code runs in turn)
            used.append(True)
            if args:
                args = (number, *args[1:])
            else:
                kwargs["number"] = number
        return cache(transformed_code, *args, **kwargs)

    compiler.cache = cache_as
    try:
        yield
    finally:
        if own:
            compiler.cache = cache
        elif vars(compiler).get("cache") is cache_as:
            del compiler.cache


def _record_cells(run: ProfiledRun, cells: str, error: BaseException | None = None) -> None:
    """What the run recorded, in its manifest: the cells (``In [5]``, ``In
    [7] to In [9]``) as its command, and the exception the cell raised,
    so that every reader of the run (``%jaxmemprof report``, ``jaxmemprof
    report`` in a terminal, the page) names them, not ``profile()``."""
    writer = getattr(run.session, "writer", None)
    if writer is None:  # deferred to a run already recording
        return
    raised = None
    if error is not None:
        try:
            message = _one_line(str(error))
        except Exception:  # an exception whose str() fails: its type says enough
            message = ""
        raised = f"{type(error).__name__}: {message}" if message else type(error).__name__
    with writer._lock:
        writer.manifest["argv"] = [cells] + (["raised", raised] if raised else [])
        nb = writer.manifest.setdefault("notebook", {})
        nb["cells"] = cells
        nb["raised"] = raised


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _ends_with_semicolon(cell: str) -> bool:
    from IPython.core.displayhook import DisplayHook

    try:
        return bool(DisplayHook.semicolon_at_end_of_expression(cell))
    except Exception:
        return False


def _existing(path: str):
    from pathlib import Path

    from jaxmemprof.store.reader import is_run_directory

    p = Path(path)
    if not p.is_dir() or not is_run_directory(p):
        raise UsageError(f"{path}: no jaxmemprof run there")
    return p
