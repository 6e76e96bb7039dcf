"""The command group and what every command shares: errors, streams, options, loading.

Heavy modules (pandas, rich, protobuf) are imported inside the commands, so
``jaxmemprof --help`` starts fast; nothing here imports jax.
"""

from __future__ import annotations

import errno
import io
import math
import os
import sys
from contextlib import contextmanager

import click

from jaxmemprof._version import __version__
from jaxmemprof.errors import InputError, check_not_empty
from jaxmemprof.render.escape import safe


# The largest size an option takes: 8 EiB, more than any device, and what a
# signed 64-bit integer (sqlite, numpy, JSON readers) holds.
MAX_SIZE = 2**63 - 1
# The longest time an option takes (about 31 years): threading's waits refuse
# much more (OverflowError), and a run or a refresh no longer means anything.
MAX_SECONDS = 1e9


class Size(click.ParamType):
    """SIZE in bytes (4096, 512MiB, 16GiB, 80GB), an integer from ``min``
    (0: none allowed, 1: a size that must be positive) to MAX_SIZE;
    ``memory``: a size of device memory (a bare number below 1 MiB is
    refused as a unit forgotten)."""

    name = "SIZE"

    def __init__(self, min: int = 0, memory: bool = False):
        self.min, self.memory = min, memory

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool) and self.min <= value <= MAX_SIZE:
            return value
        return size_value(value, self, param, ctx, minimum=self.min, memory=self.memory)


def size_value(value, kind: click.ParamType, param, ctx, *, minimum: int = 0, memory: bool = False) -> int:
    """``value`` parsed as a size (``memory``: of device memory, see
    units.parse_size), or a usage error from ``kind``."""
    from jaxmemprof.units import parse_size

    try:
        n = parse_size(value, memory=memory)
    except (ValueError, OverflowError) as exc:  # OverflowError: digits past a float's range
        message = str(exc) if isinstance(exc, ValueError) else f"not a size: {value!r} (too large)"
        kind.fail(message, param, ctx)
    if n > MAX_SIZE:
        kind.fail(f"{value!r} is too large (at most 8 EiB)", param, ctx)
    if n < minimum:
        kind.fail(f"{value!r} is less than {minimum} B: give a size of {minimum} B or more", param, ctx)
    return n


class Number(click.FloatRange):
    """A finite number in a range (click's FloatRange takes nan, which no
    comparison refuses, and inf where there is no maximum); ``zero``: 0 is
    taken too, below ``min``."""

    def __init__(self, min=None, max=None, *, min_open=False, max_open=False, zero=False):
        super().__init__(min=min, max=max, min_open=min_open, max_open=max_open)
        self.zero = zero

    def convert(self, value, param, ctx):
        # click.FLOAT's own parse (its message names the value), not the
        # base class's method called on self: click 8.5's stubs type that
        # method's self as the base's generic, which a subclass is not.
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if self.zero and number == 0:
            return 0.0
        return super().convert(number, param, ctx)

    def _describe_range(self) -> str:
        parts = []
        if self.min is not None:
            parts.append(f"{self.min:g}{'<' if self.min_open else '<='}")
        parts.append("x")
        if self.max is not None:
            parts.append(f"{'<' if self.max_open else '<='}{self.max:g}")
        text = "".join(parts)
        return f"x=0 or {text}" if self.zero else text


def seconds(min: float, *, min_open: bool = False) -> Number:
    """SECONDS: finite, from ``min`` to MAX_SECONDS."""
    return Number(min=min, max=MAX_SECONDS, min_open=min_open)


# The largest count an option takes (--top, --steps): past it, "all" anyway,
# and projections still fit a 64-bit integer.
MAX_COUNT = 10**9


def count(min: int) -> click.IntRange:
    """N: an integer from ``min`` to MAX_COUNT."""
    return click.IntRange(min=min, max=MAX_COUNT)


class _ClosedPipe(Exception):
    """The reader of stdout went away (`| head`). Not an OSError, so that
    click, which exits with status 1 on EPIPE, lets it through to main()."""


def is_closed_pipe(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.EPIPE, errno.ESHUTDOWN)


class _Group(click.Group):
    """The command group; a closed pipe anywhere (help included) reaches
    main() as _ClosedPipe."""

    def make_context(self, *args, **kwargs):
        try:
            return super().make_context(*args, **kwargs)
        except OSError as exc:
            if is_closed_pipe(exc):
                raise _ClosedPipe() from None
            raise

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except OSError as exc:
            if is_closed_pipe(exc):
                raise _ClosedPipe() from None
            raise


def stderr_stream():
    """Where jaxmemprof's own messages go: sys.stderr (as a caller of main()
    may have redirected it), else the process's own if a script set it to
    None or closed it; None when neither can be written."""
    for stream in (sys.stderr, sys.__stderr__):
        if stream is not None and hasattr(stream, "write") and not getattr(stream, "closed", False):
            return stream
    return None


def silence(stream) -> None:
    """Point ``stream``'s file descriptor at /dev/null: what is still
    buffered for it, and Python's own flush at exit, then cannot fail (a
    failed flush at exit turns any exit status into 120)."""
    try:
        fd = stream.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        pass


def stdout_stream():
    """sys.stdout, for the commands that write to it; Python sets it to None
    when the shell closed it (`>&-`), which is an error only if written to."""
    if sys.stdout is None:
        raise InputError("stdout", "cannot write: it is closed")
    return sys.stdout


def say(message: str, *, lines: bool = False) -> None:
    """One line on stderr, escaped for the terminal (names are data: a
    newline in one is shown as \\n); ``lines``: keep the message's own line
    breaks (click's usage errors). A stderr that cannot be written (a closed
    pipe, a full disk) never changes the exit status."""
    stream = stderr_stream()
    if stream is None:
        return
    try:
        parts = message.split("\n") if lines else [message]
        stream.write("\n".join(safe(part) for part in parts) + "\n")
        stream.flush()
    except (OSError, ValueError):
        silence(stream)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", prog_name="jaxmemprof")
def cli():
    """Where does your JAX program's device memory go, and what should you
    change? jaxmemprof records device memory over time and attributes every
    byte to your own lines of code, then says what to donate, what leaks, and
    which allocator settings to use.

    \b
    Examples:
      jaxmemprof run train.py --epochs 3     # record a run (your script, unchanged)
      jaxmemprof report RUN                  # peak, lifetimes, reuse, leaks, advice
      jaxmemprof show RUN@peak               # which of my lines hold the peak
      jaxmemprof diff RUN@first RUN@final    # which lines grew or shrank
      jaxmemprof export RUN --csv tables/    # every table for a spreadsheet
      jaxmemprof show a.prof                 # any profile from save_device_memory_profile()
    """


# Options that several commands take mean the same in each: one definition.

def top_option(default: int | None, *, zero_is_all: bool = False, default_text: str | None = None):
    """``--top N``: the N largest rows of each table (by bytes); the rest are
    summed as "other" or counted in a closing line."""
    shown = default_text or (f"default {default}" if default is not None else "")
    return click.option("--top", type=count(0 if zero_is_all else 1), default=default, metavar="N",
                        help="Keep the N largest rows of each table, by bytes (the rest are summed as 'other' or "
                             "counted)" + ("; 0: all" if zero_is_all else "") + (f". {shown}." if shown else "."))


def json_option(what: str):
    """``--json``: the same rows as the terminal, every one, as JSON on stdout."""
    return click.option("--json", "as_json", is_flag=True, help=f"Write {what} as JSON to stdout.")


def force_option(what: str):
    """``--force``: replace an output that exists, only ever one jaxmemprof may replace."""
    return click.option("--force", is_flag=True, help=f"Allow replacing {what} (only a regular file, or a link "
                                                      "to one; never a directory that is not one of ours).")


def steps_option():
    """``--steps N``: how far leaks are projected."""
    return click.option("--steps", type=count(1), default=1000, show_default=True, metavar="N",
                        help="Project leaks this many steps (markers) ahead.")


def attribution_options(f):
    """--lib, --user and --all-frames: what counts as the user's code (one
    definition for every command that attributes bytes to lines)."""
    for opt in reversed([
        click.option("--lib", "library", multiple=True, metavar="PATTERN",
                     help="Treat matching paths as library code too (repeatable). A pattern with "
                          "*?[ is a glob on the whole path; otherwise it matches any path containing it."),
        click.option("--user", "user", multiple=True, metavar="PATTERN",
                     help="Treat matching paths as your code even inside installed packages (repeatable)."),
        click.option("--all-frames", is_flag=True,
                     help="Count every frame as user code: the site is then the innermost frame, as in pprof."),
    ]):
        f = opt(f)
    return f


def analysis_options(library=(), user=(), all_frames=False, top=10, steps=1000, device_memory=None):
    """The one Options of a command (analysis/options.py), from its click
    options: built here, once, and passed down whole."""
    from jaxmemprof.analysis.options import Options

    return Options(library=tuple(library), user=tuple(user), all_frames=bool(all_frames), top_sites=int(top),
                   steps=int(steps), device_memory=device_memory)


def attribution(library, user, all_frames, *runs):
    """What counts as user code for a command on profiles (show, diff,
    export --format pprof): paths relative to each run's recorded directory,
    then the current one (Options.attribution, the one place that says so)."""
    return analysis_options(library, user, all_frames).attribution(*runs)


def load(spec, sample_index, max_decompressed, default="peak", **limits):
    """A profile file, RUN@SEL or a bare run directory; returns (name,
    Profile, the Run or None). ``limits``: load_profile's others (max_ratio)."""
    ref, prof = load_ref(spec, sample_index, max_decompressed, default, **limits)
    return ref.name, prof, ref.run


def load_ref(spec, sample_index, max_decompressed, default="peak", **limits):
    """(the ProfileRef, its Profile): ``load``, with the snapshot it is of."""
    from jaxmemprof.store.refs import resolve

    ctx = click.get_current_context(silent=True)  # --process N (cli/jobs.py), on a multi-process job
    ref = resolve(spec, default, process=None if ctx is None else ctx.meta.get("jaxmemprof.process"))
    prof = ref.load(sample_index=sample_index, max_decompressed=max_decompressed, **limits)
    if ref.run is not None:
        warn(ref.run)
    return ref, prof


def warn(run_) -> None:
    for w in run_.warnings:
        say(f"jaxmemprof: warning: {run_.path}: {w}")


@contextmanager
def output_to(path: str, force: bool):
    """stdout for '-', else a file written by the rules of outputs.py."""
    if path == "-":
        yield stdout_stream()
        return
    from jaxmemprof.cli.outputs import open_output

    with open_output(path, force) as f:
        yield f
    say(f"jaxmemprof: wrote {path}")


def open_run(spec):
    """A run directory, or an XProf profile (store/refs.py ``open_any``; --process N: its Nth host)."""
    from jaxmemprof.store.refs import open_any, split_selector

    check_not_empty(spec)
    path, sel = split_selector(spec)
    if sel is not None:
        raise InputError(spec, f"report and export --csv take a whole run, not one snapshot: give {path}")
    ctx = click.get_current_context(silent=True)
    run_ = open_any(path, None if ctx is None else ctx.meta.get("jaxmemprof.process"))
    for line in getattr(run_, "notes", []) + getattr(run_, "imbalance", []):
        say(f"jaxmemprof: {run_.path}: {line}")
    return run_


def build_report_for(run_, options):
    """The report of one run under the command's options."""
    from jaxmemprof.analysis.attributed import attribute
    from jaxmemprof.analysis.report import build_report

    return build_report(attribute(run_, options))


def isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


# Errors from writing that have no file name: they come from stdout.
_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS, errno.EBADF)


def main(argv=None, prog_name="jaxmemprof"):
    """Entry point: clean one-line errors (exit 2) for bad input, exit 1 for
    internal errors, exit 0 when the reader of stdout goes away."""
    try:
        cli.main(args=argv, prog_name=prog_name, standalone_mode=False)
        if sys.stdout is not None:
            sys.stdout.flush()  # a full disk behind stdout shows now, not at exit
    except InputError as exc:
        say(f"jaxmemprof: error: {exc}")
        sys.exit(2)
    except click.exceptions.Abort:
        say("Aborted.")
        sys.exit(130)
    except click.ClickException as exc:
        shown = io.StringIO()
        exc.show(file=shown)
        say(shown.getvalue().rstrip("\n"), lines=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except (_ClosedPipe, BrokenPipeError):
        # The reader went away (`| head`): not an error. What is still
        # buffered goes to /dev/null, so Python's flush at exit stays quiet.
        silence(sys.stdout)
        sys.exit(0)
    except KeyboardInterrupt:
        sys.exit(130)
    except OSError as exc:
        if exc.filename is None and exc.errno in _WRITE_ERRNOS:
            say(f"jaxmemprof: error: stdout: cannot write: {exc.strerror or exc}")
            silence(sys.stdout)
            sys.exit(2)
        _internal_error()
    except Exception:
        _internal_error()
    sys.exit(0)


def _internal_error():
    import traceback

    say("jaxmemprof: internal error (please report it with the traceback below):")
    try:
        traceback.print_exc()
    except (OSError, ValueError):
        pass
    sys.exit(1)
