"""The magics: ``%%jaxmemprof`` records one cell; ``%jaxmemprof start`` and
``%jaxmemprof stop`` the cells between; ``%jaxmemprof report`` shows the
last run's (or a named run's) whole report. docs/notebooks.md shows them."""

from __future__ import annotations

import argparse
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
        run = self._new_run(args, "cell", self._label())
        self._begin(run)
        self.last = run
        result = None
        try:
            # A cell ending with ; shows no value (and keeps none in Out): IPython
            # tells it from the history's last input, which a cell run inside
            # this one does not enter.
            result = self.shell.run_cell(body, store_history=False, silent=_ends_with_semicolon(cell))
        finally:
            error = None if result is None else (result.error_before_exec or result.error_in_exec)
            run.stop(error)
        self._show(run, page=not args.no_page)
        if error is not None:
            raise CellFailed(error, run)

    def _start(self, words):
        args = _recording_parser("%jaxmemprof start", page=False).parse_args(words)
        run = self._new_run(args, "cells", f"{self._label()} on")
        self._begin(run)
        self.recording = self.last = run
        print(f"jaxmemprof: recording into {run.path} (%jaxmemprof stop to end)")

    def _stop(self, words):
        p = _Parser(prog="%jaxmemprof stop", add_help=False)
        p.add_argument("--no-page", action="store_true")
        args = p.parse_args(words)
        run = self.recording
        if run is None:
            raise UsageError("not recording: %jaxmemprof start first (or %%jaxmemprof a cell)")
        self.recording = None
        run.target = f"{run.target.removesuffix(' on')} to {self._label()}"
        run.stop()
        self._show(run, page=not args.no_page)

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
        return f"In [{self.shell.execution_count}]"

    def _awaits(self, body: str) -> bool:
        try:
            return bool(self.shell.should_run_async(body, transformed_cell=self.shell.transform_cell(body)))
        except Exception:  # what the cell's own run will report (a syntax error)
            return False


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
