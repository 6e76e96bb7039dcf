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
%%jaxmemprof [RUN'S OPTIONS] [--no-page] [-q]
    record this cell: its summary and findings, then the report's page
%jaxmemprof start [RUN'S OPTIONS]
    record from now on, over the cells that follow
%jaxmemprof stop [--no-page] [-q]
    stop recording: the summary and findings, then the report's page
%jaxmemprof report [RUN] [--explain] [--top N] [--html]
    the last run's whole report (or RUN's); --html: its page, inline
run's options: -o DIR, --force, --interval S, --max-overhead F, --no-jit-probe,
    --addresses auto|all|none, --no-holders, --verify-seconds S, --plan,
    --plan-scales LIST, --plan-device-memory SIZE, --plan-axis N,
    --target SLICE (repeated) (jaxmemprof run --help says each)"""

# jaxmemprof run's options that a recording magic takes, parsed and checked by
# run's own definitions (cli/record.py), not the script's: -m, -c, -q.
RUN_OPTIONS = ("output", "force", "interval", "max_overhead", "no_jit_probe", "plan", "plan_scales",
               "plan_device_memory", "plan_axis", "verify_seconds", "addresses", "no_holders", "slices")


def _usage_error(message: str) -> UsageError:
    """A bad line: one line in the cell (IPython shows a UsageError without
    a traceback), pointing at the options."""
    return UsageError(f"{' '.join(str(message).split())} (%jaxmemprof --help: the options)")


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _usage_error(message)

    def exit(self, status=0, message=None):  # --help
        raise UsageError(USAGE)


def _recording_options(prog: str, words: list[str], shown: bool = True):
    """The line's options, parsed as ``jaxmemprof run`` parses them (its own
    click options: the same names, types, ranges and messages), and its
    --plan and --target made into the session's settings by run's own
    code; ``shown``: --no-page and -q too (a magic that shows the run).
    UsageError (one line) for anything run would refuse."""
    if any(w in ("-h", "--help") for w in words):
        raise UsageError(USAGE)
    import click

    from jaxmemprof.cli.record import plan_and_targets, run

    params = [p for p in run.params if p.name in RUN_OPTIONS]
    if shown:
        params += [click.Option(["--no-page"], is_flag=True), click.Option(["-q", "--quiet"], is_flag=True)]
    command = click.Command(prog, params=params, add_help_option=False)
    try:
        ctx = command.make_context(prog, list(words))
        o = argparse.Namespace(**ctx.params)
        o.plan, o.targets = plan_and_targets(o.no_jit_probe, o.plan, o.plan_scales, o.plan_device_memory,
                                             o.plan_axis, o.slices)
    except click.ClickException as exc:
        raise _usage_error(exc.format_message()) from None
    except InputError as exc:
        raise _usage_error(str(exc)) from None
    if not shown:
        o.no_page = o.quiet = False
    return o


class CellFailed(Exception):
    """The recorded cell raised (IPython has shown its traceback): the cell
    fails, in one line, after the run's summary."""

    def __init__(self, error: BaseException, run: ProfiledRun):
        from jaxmemprof.capture.tracebacks import described, type_name

        super().__init__(described(error))  # the cell's exception: never its own __str__
        self.name = type_name(error)
        self.error, self.run = error, run

    def _render_traceback_(self):
        return [f"jaxmemprof: the cell raised {self.name} (above); its run: {self.run.path}"]


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
        if command in ("-h", "--help", "help"):
            raise UsageError(USAGE)
        if command == "start":
            return self._start(rest)
        if command == "stop":
            return self._stop(rest)
        if command == "report":
            return self._report(rest)
        raise _usage_error(f"unknown subcommand {command!r}: start, stop or report (or %%jaxmemprof on a cell)")

    # -- recording -----------------------------------------------------------------------

    def _new_run(self, args, name: str, target: str) -> ProfiledRun:
        if self.recording is not None:
            raise UsageError(f"already recording into {self.recording.path} (since %jaxmemprof start): "
                             "%jaxmemprof stop first")
        try:
            run = ProfiledRun(args.output, interval=args.interval, max_overhead=args.max_overhead,
                              jit_probe=not args.no_jit_probe, addresses=args.addresses, force=args.force,
                              name=name, target=target, holders=not args.no_holders,
                              verify_seconds=args.verify_seconds, plan=args.plan, targets=args.targets)
        except ValueError as exc:
            raise _usage_error(str(exc)) from None
        run.by_magic = True  # the summary points at %jaxmemprof report
        return run

    def _begin(self, run: ProfiledRun) -> None:
        try:
            run.start()
        except InputError as exc:
            raise _usage_error(str(exc)) from None
        if run.deferred:
            raise UsageError(f"a run is already recording this kernel ({run.path}): its own records this")

    def _cell(self, line: str, cell: str):
        args = _recording_options("%%jaxmemprof", shlex.split(line))
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
        error = None
        try:
            # A cell ending with ; shows no value (and keeps none in Out): IPython
            # tells it from the history's last input, which a cell run inside
            # this one does not enter. Its code is compiled under this cell's
            # number (its sites and its traceback read In [number]).
            with compiled_as(self.shell, number):
                result = self.shell.run_cell(body, store_history=False, silent=_ends_with_semicolon(cell))
            error = result.error_before_exec or result.error_in_exec
        except BaseException as exc:  # run_cell itself failed (interrupted)
            error = exc
            raise
        finally:
            # Whatever happens here, the run ends with the cell: an interrupt
            # during its end skips the rest of that work, and the run is
            # finalised all the same (ProfiledRun.stop), then goes on.
            try:
                _record_cells(run, run.target, error)
            finally:
                self._stop_run(run, error)
        self._show(run, page=not args.no_page, quiet=args.quiet)
        if error is not None:
            raise CellFailed(error, run)

    def _stop_run(self, run: ProfiledRun, error: BaseException | None = None) -> None:
        """The run stopped; interrupted as it ends, it says so in one line
        (the run is finished, without the rest of the end's work) before
        the interrupt goes on."""
        try:
            run.stop(error)
        except BaseException:
            if run.interrupted is not None:
                print(f"jaxmemprof: interrupted as the run ended: the rest of its end was skipped; {run.path} is "
                      "finished (%jaxmemprof report: what it has)", file=sys.stderr)
            raise

    def _start(self, words):
        args = _recording_options("%jaxmemprof start", words, shown=False)
        run = self._new_run(args, "cells", f"{self._label()} on")
        self._begin(run)
        _record_cells(run, run.target.removesuffix(" on"))
        self.recording = self.last = run
        print(f"jaxmemprof: recording into {run.path} (%jaxmemprof stop to end)")

    def _stop(self, words):
        p = _Parser(prog="%jaxmemprof stop", add_help=False)
        p.add_argument("--no-page", action="store_true")
        p.add_argument("-q", "--quiet", action="store_true")
        args = p.parse_args(words)
        run = self.recording
        if run is None:
            raise UsageError("not recording: %jaxmemprof start first (or %%jaxmemprof a cell)")
        self.end_recording()
        self._show(run, page=not args.no_page, quiet=args.quiet)

    def end_recording(self) -> ProfiledRun | None:
        """Stop the run ``%jaxmemprof start`` began, at this cell (``%jaxmemprof
        stop``, or ``%unload_ext``): the cells it recorded, ``In [7] to In [9]``.
        It is no longer this kernel's recording from the start of this, even
        if interrupted (the run is finalised all the same)."""
        run, self.recording = self.recording, None
        if run is not None:
            try:
                run.target = f"{run.target.removesuffix(' on')} to {self._label()}"
                _record_cells(run, run.target)
            finally:
                self._stop_run(run)
        return run

    def _show(self, run: ProfiledRun, page: bool, quiet: bool = False) -> None:
        if quiet:
            return
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
        from jaxmemprof.capture.tracebacks import described

        raised = _one_line(described(error))  # the cell's exception: never its own __str__
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
