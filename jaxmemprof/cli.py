"""The command line: parse options, call analysis, hand the result to a renderer.

Heavy modules (pandas, rich, protobuf) are imported inside the commands, so
``jaxmemprof --help`` starts fast; nothing here imports jax.
"""

from __future__ import annotations

import errno
import io
import os
import sys
from contextlib import contextmanager

import click

from jaxmemprof import __version__
from jaxmemprof.errors import InputError, check_not_empty
from jaxmemprof.render.escape import safe

GROUPINGS = ("site", "function", "file", "stack", "device", "kind")
DEFAULT_TERMINAL_TOP = 20


class _Size(click.ParamType):
    name = "SIZE"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        from jaxmemprof.units import parse_size

        try:
            return parse_size(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def _profile_options(f):
    """Options shared by the commands that read and group profiles."""
    options = [
        click.option("--by", type=click.Choice(GROUPINGS), default="site", show_default=True,
                     help="Group bytes by the user's line (site), its function or file, the whole "
                          "user stack, the device or the kind (buffer/executable)."),
        click.option("--top", type=click.IntRange(min=0), default=None, metavar="N",
                     help=f"Show the first N groups (0: all). Default: {DEFAULT_TERMINAL_TOP} in the "
                          "terminal, all in CSV and JSON."),
        click.option("--csv", "csv_path", metavar="PATH|-", default=None,
                     help="Write the rows as CSV to PATH, or to stdout with '-'. A FIFO or a device "
                          "(/dev/stdout) is written into."),
        click.option("--json", "as_json", is_flag=True,
                     help="Write the rows and totals as JSON to stdout."),
        click.option("--force", is_flag=True,
                     help="Overwrite an existing --csv file (only a regular file, or a link to one)."),
        click.option("--lib", "library", multiple=True, metavar="PATTERN",
                     help="Treat matching paths as library code too (repeatable). A pattern with "
                          "*?[ is a glob on the whole path; otherwise it matches any path containing it."),
        click.option("--user", "user", multiple=True, metavar="PATTERN",
                     help="Treat matching paths as your code even inside installed packages (repeatable)."),
        click.option("--all-frames", is_flag=True,
                     help="Count every frame as user code: the site is then the innermost frame, as in pprof."),
        click.option("--sample-index", default=None, metavar="NAME|N",
                     help="Which sample value to report as bytes (default: 'space', else the "
                          "profile's default bytes type)."),
        click.option("--max-decompressed", type=_Size(), default="4GiB", show_default=True,
                     help="Refuse profiles that decompress to more than this (gzip bombs)."),
    ]
    for opt in reversed(options):
        f = opt(f)
    return f


class _ClosedPipe(Exception):
    """The reader of stdout went away (`| head`). Not an OSError, so that
    click, which exits with status 1 on EPIPE, lets it through to main()."""


def _is_closed_pipe(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.EPIPE, errno.ESHUTDOWN)


class _Group(click.Group):
    """The command group; a closed pipe anywhere (help included) reaches
    main() as _ClosedPipe."""

    def make_context(self, *args, **kwargs):
        try:
            return super().make_context(*args, **kwargs)
        except OSError as exc:
            if _is_closed_pipe(exc):
                raise _ClosedPipe() from None
            raise

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except OSError as exc:
            if _is_closed_pipe(exc):
                raise _ClosedPipe() from None
            raise


def _stderr():
    """Where jaxmemprof's own messages go: sys.stderr (as a caller of main()
    may have redirected it), else the process's own if a script set it to
    None or closed it; None when neither can be written."""
    for stream in (sys.stderr, sys.__stderr__):
        if stream is not None and hasattr(stream, "write") and not getattr(stream, "closed", False):
            return stream
    return None


def _silence(stream) -> None:
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


def _stdout():
    """sys.stdout, for the commands that write to it; Python sets it to None
    when the shell closed it (`>&-`), which is an error only if written to."""
    if sys.stdout is None:
        raise InputError("stdout", "cannot write: it is closed")
    return sys.stdout


def _say(message: str, *, lines: bool = False) -> None:
    """One line on stderr, escaped for the terminal (names are data: a
    newline in one is shown as \\n); ``lines``: keep the message's own line
    breaks (click's usage errors). A stderr that cannot be written (a closed
    pipe, a full disk) never changes the exit status."""
    stream = _stderr()
    if stream is None:
        return
    try:
        parts = message.split("\n") if lines else [message]
        stream.write("\n".join(safe(part) for part in parts) + "\n")
        stream.flush()
    except (OSError, ValueError):
        _silence(stream)


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


def _attribution(library, user, all_frames, *runs):
    """What counts as user code; paths are shown relative to the current
    directory, or to the directory a run was recorded in."""
    from jaxmemprof.analysis.sites import Attribution

    roots = [os.getcwd()] + [r.manifest["cwd"] for r in runs if r is not None and r.manifest.get("cwd")]
    return Attribution(library=tuple(library), user=tuple(user), all_frames=all_frames,
                       roots=tuple(dict.fromkeys(roots)))


def _load(spec, sample_index, max_decompressed, default="peak"):
    """A profile file, RUN@SEL or a bare run directory; returns (name,
    Profile, the Run or None)."""
    from jaxmemprof.pprof.reader import load_profile
    from jaxmemprof.store.selectors import resolve

    ref = resolve(spec, default)
    if ref.run is not None:
        _warn(ref.run)
    prof = load_profile(ref.path, name=ref.name, sample_index=sample_index, max_decompressed=max_decompressed)
    return ref.name, prof, ref.run


def _warn(run_) -> None:
    for w in run_.warnings:
        _say(f"jaxmemprof: warning: {run_.path}: {w}")


@contextmanager
def _output(path: str, force: bool):
    """stdout for '-', else a file written by the rules of outputs.py."""
    if path == "-":
        yield _stdout()
        return
    from jaxmemprof.outputs import open_output

    with open_output(path, force) as f:
        yield f
    _say(f"jaxmemprof: wrote {path}")


def _emit(command, inputs, result, value_type, title, csv_path, as_json, top, force):
    """Send ``result`` to the outputs asked for."""
    from jaxmemprof.analysis.groups import top as keep_top

    if csv_path == "-" and as_json:
        raise click.UsageError("--csv - and --json both write to stdout; send the CSV to a file")
    machine = csv_path is not None or as_json
    result = keep_top(result, top if (top is not None or machine) else DEFAULT_TERMINAL_TOP)
    if csv_path is not None:
        from jaxmemprof.render.csv import write_csv
        from jaxmemprof.render.results import table

        with _output(csv_path, force) as out:
            write_csv(table(result), out)
    if as_json:
        from jaxmemprof.render.json import write_json
        from jaxmemprof.render.results import document

        write_json(document(command, inputs, result, value_type), _stdout())
    if not machine:
        from jaxmemprof.render import text

        render = text.render_summary if command == "show" else text.render_diff
        render(result, text.console(_stdout()), title=title, value_type=value_type)


@cli.command()
@click.argument("profile", metavar="PROFILE")
@_profile_options
def show(profile, by, top, csv_path, as_json, force, library, user, all_frames, sample_index, max_decompressed):
    """Show where the bytes of one profile are, by your lines of code.

    PROFILE is a pprof file from jax.profiler.save_device_memory_profile()
    (gzip or raw; any pprof works, e.g. a Go heap profile), or one snapshot
    of a run: RUN@SEL, where SEL is a snapshot number (-1: the last), first,
    last, final (the last before the program exited), peak, a label or a
    trigger (oom, exit, ...). A bare RUN means RUN@peak.

    \b
    Examples:
      jaxmemprof show a.prof
      jaxmemprof show jaxmemprof-runs/train-20260101-120000@peak
      jaxmemprof show a.prof --by function --top 5
      jaxmemprof show a.prof --lib myframework/ --csv sites.csv
      jaxmemprof show a.prof --json | jq '.rows[0]'
    """
    from jaxmemprof.analysis.groups import summarize

    name, prof, run_ = _load(profile, sample_index, max_decompressed)
    result = summarize(prof, by, _attribution(library, user, all_frames, run_))
    _emit("show", [name], result, prof.value_type, f"{name}: {prof.value_type} by {by}",
          csv_path, as_json, top, force)


@cli.command()
@click.argument("base", metavar="BASE")
@click.argument("new", metavar="[NEW]", required=False)
@_profile_options
def diff(base, new, by, top, csv_path, as_json, force, library, user, all_frames, sample_index, max_decompressed):
    """Compare two profiles: which of your lines grew and which shrank.

    Deltas are NEW minus BASE per group, as with `go tool pprof -diff_base`;
    they add up to the change in total bytes exactly. BASE and NEW are
    profile files or RUN@SEL (see `jaxmemprof show --help`); a run directory
    alone compares its first snapshot with its final one (the last taken
    while the program ran, before it exited).

    \b
    Examples:
      jaxmemprof diff before.prof after.prof
      jaxmemprof diff RUN                   # RUN@first -> RUN@final
      jaxmemprof diff RUN@first RUN@peak
      jaxmemprof diff before.prof after.prof --by file --csv changes.csv
    """
    from jaxmemprof.analysis.groups import diff as diff_profiles

    if new is None:
        from jaxmemprof.store.selectors import split_selector

        run_dir, sel = split_selector(base)
        if sel is not None or not os.path.isdir(run_dir):
            raise click.UsageError("diff needs BASE and NEW, or a run directory alone (first -> last)")
        base, new = f"{run_dir}@first", f"{run_dir}@final"
    base_name, base_prof, base_run = _load(base, sample_index, max_decompressed)
    new_name, new_prof, new_run = _load(new, sample_index, max_decompressed)
    if base_prof.value_type != new_prof.value_type:
        raise InputError(new, f"measures {new_prof.value_type}, but {base} measures {base_prof.value_type}")
    result = diff_profiles(base_prof, new_prof, by, _attribution(library, user, all_frames, base_run, new_run))
    _emit("diff", [base_name, new_name], result, new_prof.value_type,
          f"{base_name} -> {new_name}: {new_prof.value_type} by {by}", csv_path, as_json, top, force)


@cli.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-o", "--output", metavar="DIR", default=None,
              help="Run directory (default: jaxmemprof-runs/<script>-<YYYYmmdd-HHMMSS>).")
@click.option("--force", is_flag=True, help="Reuse a non-empty --output directory, replacing its run.")
@click.option("--interval", type=click.FloatRange(min=0.001), default=0.5, show_default=True, metavar="SECONDS",
              help="Time between snapshots, stretched so sampling stays within --max-overhead.")
@click.option("--max-overhead", type=click.FloatRange(min=0.0, max=1.0), default=0.02, show_default=True,
              metavar="FRACTION", help="Most of the wall time jaxmemprof may take: snapshots keep to half of it, "
                   "the rest is for start-up, the jit probe and the end (0: never stretch --interval).")
@click.option("-m", "module", metavar="MODULE", default=None, help="Run a module, as python -m MODULE.")
@click.option("--no-jit-probe", is_flag=True,
              help="Do not observe jitted functions (no donation advice, no memory inside jit).")
@click.option("--addresses", type=click.Choice(["auto", "all", "none"]), default="auto", show_default=True,
              help="Which buffer addresses to read (for the reuse analysis). Reading one makes JAX keep a "
                   "per-shard view of device_put and sharded arrays, which jax.live_arrays() lists and "
                   "its profile walks: auto reads those that make no new view.")
@click.option("-q", "--quiet", is_flag=True, help="No summary at the end.")
@click.argument("target", nargs=-1, type=click.UNPROCESSED, metavar="SCRIPT [ARGS]...")
def run(output, force, interval, max_overhead, module, no_jit_probe, addresses, quiet, target):
    """Run a Python script (or -m MODULE) unchanged and record its device memory.

    The script runs in this process exactly as `python SCRIPT ARGS` runs it;
    jaxmemprof's options come before it (or before `--`). Snapshots of JAX's
    device-memory profile, every live array and the allocator statistics go
    to a crash-safe run directory; the exit status is the script's.

    \b
    Examples:
      jaxmemprof run train.py --epochs 3
      jaxmemprof run -o runs/baseline --interval 0.2 train.py
      jaxmemprof run -m mypackage.train -- --lr 0.1
      jaxmemprof show jaxmemprof-runs/train-20260101-120000@peak
    """
    from pathlib import Path

    from jaxmemprof.capture.runner import Target, run_target
    from jaxmemprof.capture.session import Session, default_output, prepare_directory

    args = list(target)
    if module is None:
        if not args:
            raise click.UsageError("give a SCRIPT to run (or -m MODULE)")
        script = args.pop(0)
        check_not_empty(script)
        if not os.path.isfile(script):
            raise InputError(script, "no such script" if not os.path.exists(script) else "is not a file")
        tgt = Target(path=script, module=None, args=tuple(args))
    else:
        tgt = Target(path=None, module=module, args=tuple(args))
    directory = prepare_directory(Path(output) if output else default_output(tgt.stem), force)
    session = Session(directory, target_argv=tgt.argv, interval=interval, max_overhead=max_overhead,
                      jit_probe=not no_jit_probe, addresses=addresses)
    status, ended_by = run_target(tgt, session)
    session.stop(status, ended_by)
    if not quiet:
        _flush_script_stdout()
        _run_summary(tgt, directory)
    raise SystemExit(status)


def _flush_script_stdout() -> None:
    """Let what the script printed come before the summary. A stdout that
    fails (closed, a closed pipe, replaced by the script) is left as it is:
    Python's own flush at exit then does exactly what it does under python."""
    try:
        sys.stdout.flush()
    except Exception:
        pass


# Past this many array records, analysing the whole run at exit takes seconds:
# `run` then leaves the findings to `report`.
_SUMMARY_MAX_ARRAYS = 200_000


def _run_summary(tgt, directory):
    """Print the run's summary and findings on stderr; a failure here,
    writing to stderr included, never changes the target's exit status."""
    stream = _stderr()
    if stream is None:
        return
    try:
        from jaxmemprof.analysis.report import build_report
        from jaxmemprof.analysis.runs import overview
        from jaxmemprof.render import text
        from jaxmemprof.store.reader import load_run

        run_ = load_run(directory)
        att = _attribution((), (), False, run_)
        ov = overview(run_, att)
        con = text.console(stream)
        if ov.oom_sites is not None:
            text.render_oom(ov.oom_sites, con)
        problems = run_.events.loc[run_.events["kind"].isin(["sampler-error", "probe-error"]), "message"].tolist()
        text.render_run_summary(ov, con, target=" ".join(tgt.argv), run_dir=str(directory), warnings=problems)
        if ov.peak_snapshot is not None:
            if len(run_.arrays) <= _SUMMARY_MAX_ARRAYS:
                text.render_findings_brief(build_report(run_, att, top_sites=5).findings, con)
            else:
                con.print(f"jaxmemprof: {len(run_.arrays)} arrays recorded: run `jaxmemprof report` for the findings")
    except Exception as exc:  # the run itself is safe on disk
        # A stderr that cannot be written fails here again, and is silenced.
        _say(f"jaxmemprof: warning: could not summarise the run: {exc}")


def _open_run(spec):
    from jaxmemprof.store.reader import load_run
    from jaxmemprof.store.selectors import split_selector

    check_not_empty(spec)
    path, sel = split_selector(spec)
    if sel is not None:
        raise InputError(spec, f"report and export --csv take a whole run, not one snapshot: give {path}")
    return load_run(path)


def _build_report(run_, top, library, user, all_frames, steps, device_memory=None):
    from jaxmemprof.analysis.report import build_report

    return build_report(run_, _attribution(library, user, all_frames, run_), top_sites=top, steps=steps,
                        device_memory=device_memory)


def _attribution_options(f):
    for opt in reversed([
        click.option("--lib", "library", multiple=True, metavar="PATTERN",
                     help="Treat matching paths as library code too (repeatable)."),
        click.option("--user", "user", multiple=True, metavar="PATTERN",
                     help="Treat matching paths as your code even inside installed packages (repeatable)."),
        click.option("--all-frames", is_flag=True, help="Count every frame as user code."),
    ]):
        f = opt(f)
    return f


@cli.command()
@click.argument("run_dir", metavar="RUN")
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, metavar="N",
              help="Rows per section (sites, lifetimes, reuse, leaks).")
@click.option("--steps", type=click.IntRange(min=1), default=1000, show_default=True, metavar="N",
              help="Project leaks this many steps (markers) ahead.")
@click.option("--device-memory", type=_Size(), default=None, metavar="SIZE",
              help="Check whether the run's estimated true peak fits a device of this size (16GiB, 80GB) "
                   "under JAX's default preallocation, and with which settings it would.")
@click.option("--json", "as_json", is_flag=True, help="Write every section's rows as JSON to stdout.")
@_attribution_options
def report(run_dir, top, steps, device_memory, as_json, library, user, all_frames):
    """Report on a run: the peak and what held it, the timeline, lifetimes,
    buffer reuse, leaks, recompiles, and findings.

    RUN is a run directory from `jaxmemprof run` (or a directory of .prof
    files, with less detail).

    \b
    Examples:
      jaxmemprof report jaxmemprof-runs/train-20260101-120000
      jaxmemprof report RUN --top 20 --steps 10000
      jaxmemprof report RUN --device-memory 16GiB   # plan a GPU job from a CPU run
      jaxmemprof report RUN --json > report.json
    """
    run_ = _open_run(run_dir)
    rep = _build_report(run_, top, library, user, all_frames, steps, device_memory)
    if as_json:
        from jaxmemprof.render.json import write_json
        from jaxmemprof.render.tables import report_document

        write_json(report_document(rep), _stdout())
        return
    from jaxmemprof.render import text
    from jaxmemprof.render.report import render_report

    render_report(rep, text.console(_stdout()), top=top)


@cli.command()
@click.argument("inputs", nargs=-1, required=True, metavar="RUN | PROFILE [NEW]")
@click.option("--csv", "csv_dir", metavar="DIR", default=None,
              help="Write the run's tables as CSV files into DIR (created if needed).")
@click.option("--format", "fmt", type=click.Choice(["csv", "pprof"]), default=None,
              help="csv: the run's tables (into -o DIR); pprof: one snapshot, or the diff of two, "
                   "with your code's stacks (into -o FILE).")
@click.option("-o", "--output", metavar="PATH", default=None,
              help="Where --format writes ('-': pprof to stdout).")
@click.option("--force", is_flag=True, help="Overwrite existing files (only regular files).")
@click.option("--top", type=click.IntRange(min=1), default=20, show_default=True, metavar="N",
              help="Sites with their own series in sites.csv (the rest are 'other').")
@click.option("--steps", type=click.IntRange(min=1), default=1000, show_default=True, metavar="N",
              help="Project leaks this many steps ahead (findings.csv).")
@_attribution_options
def export(inputs, csv_dir, fmt, output, force, top, steps, library, user, all_frames):
    """Export a run's tables as CSV, or a snapshot (or a diff) as pprof.

    \b
    CSV files written (columns documented in the README):
      timeline.csv   one row per snapshot     sites.csv      per snapshot x top site
      devices.csv    per snapshot x device    arrays.csv     one row per array
      lifetimes.csv  one row per site         reuse.csv      per device and per site
      leaks.csv      growing sites            recompiles.csv functions compiled again
      jit.csv        memory inside jit        findings.csv   what to fix

    \b
    Examples:
      jaxmemprof export RUN --csv tables/
      jaxmemprof export RUN@peak --format pprof -o peak.pb.gz && go tool pprof -top peak.pb.gz
      jaxmemprof export RUN@first RUN@final --format pprof -o growth.pb.gz
    """
    if csv_dir is not None and fmt == "pprof":
        raise click.UsageError("--csv DIR writes CSV; use -o FILE with --format pprof")
    fmt = fmt or ("csv" if csv_dir is not None else None)
    if fmt is None:
        raise click.UsageError("say what to write: --csv DIR, or --format pprof -o FILE")
    if fmt == "csv":
        target = csv_dir if csv_dir is not None else output
        if target is None or len(inputs) != 1:
            raise click.UsageError("CSV export takes one RUN and --csv DIR")
        if target == "-":
            raise click.UsageError("CSV export writes a directory of files, not one stream: give --csv DIR "
                                   "(show and diff write one table with --csv -)")
        _export_csv(inputs[0], target, force, top, steps, library, user, all_frames)
        return
    if output is None or len(inputs) not in (1, 2):
        raise click.UsageError("pprof export takes PROFILE or RUN@SEL (or two, for a diff) and -o FILE")
    _export_pprof(inputs, output, force, library, user, all_frames)


def _export_csv(spec, directory, force, top, steps, library, user, all_frames):
    """Every table of the report as a CSV file in ``directory``. The
    directory is checked before the run is analysed, so a refusal is quick."""
    from jaxmemprof.outputs import open_output, prepare_directory
    from jaxmemprof.render.csv import write_csv
    from jaxmemprof.render.tables import EXPORT_FILES, export_tables

    run_ = _open_run(spec)
    _warn(run_)
    prepare_directory(directory, EXPORT_FILES, force)
    tables = export_tables(_build_report(run_, top, library, user, all_frames, steps))
    for name, rows in tables.items():
        with open_output(os.path.join(directory, name), force, strict=True) as f:
            write_csv(rows, f)
    _say(f"jaxmemprof: wrote {len(tables)} CSV files to {directory}: {', '.join(tables)}")


def _export_pprof(inputs, output, force, library, user, all_frames):
    from jaxmemprof.analysis.sites import user_stacks
    from jaxmemprof.outputs import check_output, write_output
    from jaxmemprof.render.pprof import diff_pprof, snapshot_pprof

    if output == "-":
        if _isatty(_stdout()):
            raise click.UsageError("-o - would write binary pprof data to the terminal; redirect it or name a file")
    else:
        check_output(output, force)  # refuse before the work, not after
    loaded = [_load(spec, None, 4 * 1024**3) for spec in inputs]
    att = _attribution(library, user, all_frames, *(run_ for _, _, run_ in loaded))
    if len(loaded) == 1:
        name, prof, _ = loaded[0]
        data = snapshot_pprof(prof, user_stacks(prof, att), f"jaxmemprof: {name}, user stacks")
    else:
        (bname, base, _), (nname, new, _) = loaded
        data = diff_pprof(base, user_stacks(base, att), new, user_stacks(new, att),
                          f"jaxmemprof: {nname} - {bname}, user stacks")
    if output == "-":
        out = _stdout()
        out.flush()
        out.buffer.write(data)
        out.buffer.flush()
        return
    write_output(output, data, force)
    _say(f"jaxmemprof: wrote {output} (open it with: go tool pprof -top {output})")


def _isatty(stream) -> bool:
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
        _say(f"jaxmemprof: error: {exc}")
        sys.exit(2)
    except click.exceptions.Abort:
        _say("Aborted.")
        sys.exit(130)
    except click.ClickException as exc:
        shown = io.StringIO()
        exc.show(file=shown)
        _say(shown.getvalue().rstrip("\n"), lines=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except (_ClosedPipe, BrokenPipeError):
        # The reader went away (`| head`): not an error. What is still
        # buffered goes to /dev/null, so Python's flush at exit stays quiet.
        _silence(sys.stdout)
        sys.exit(0)
    except KeyboardInterrupt:
        sys.exit(130)
    except OSError as exc:
        if exc.filename is None and exc.errno in _WRITE_ERRNOS:
            _say(f"jaxmemprof: error: stdout: cannot write: {exc.strerror or exc}")
            _silence(sys.stdout)
            sys.exit(2)
        _internal_error()
    except Exception:
        _internal_error()
    sys.exit(0)


def _internal_error():
    import traceback

    _say("jaxmemprof: internal error (please report it with the traceback below):")
    try:
        traceback.print_exc()
    except (OSError, ValueError):
        pass
    sys.exit(1)
