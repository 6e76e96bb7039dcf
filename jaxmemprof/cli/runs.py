"""`report` and `export`: a whole run analysed, for the terminal, JSON, CSV or pprof."""

from __future__ import annotations

import contextlib

import click

from jaxmemprof.cli.base import (Size, analysis_options, attribution, attribution_options, cli, force_option, isatty,
                                 json_option, load, open_run, say, stdout_stream, steps_option, top_option, warn)
from jaxmemprof.cli.formats import Output, emit, needs_page
from jaxmemprof.cli.jobs import job_report_document, process_option, run_path, whole_job
from jaxmemprof.cli.progress import Phases


@cli.command()
@click.argument("run_dir", metavar="RUN")
@top_option(5, default_text="Default 5 in the terminal; JSON has every row, and N sites in the timeline")
@steps_option()
@click.option("--device-memory", type=Size(min=1, memory=True), default=None, metavar="SIZE",
              help="Check whether the run's estimated true peak fits a device of this size (16GiB, 80GB) "
                   "under JAX's default preallocation, and with which settings it would.")
@json_option("every section's rows")
@process_option
@click.option("--explain", is_flag=True,
              help="Say every finding in full, with its evidence and trade-offs, and how each section is measured.")
@click.option("--html", "html_path", metavar="FILE", default=None,
              help="Write the report as one self-contained HTML page (timeline, flame graphs, lifetimes, "
                   "memory inside jit, findings; opens offline) to FILE.")
@force_option("an existing --html file")
@attribution_options
def report(run_dir, top, steps, device_memory, as_json, explain, html_path, force, library, user, all_frames):
    """Report on a run: the peak and what held it, the timeline, lifetimes,
    buffer reuse, leaks, recompiles, and findings.

    RUN is a run directory from `jaxmemprof run` (or a directory of .prof
    files, with less detail), or an XProf profile: the directory
    jax.profiler.trace wrote (one .xplane.pb per host), or one .xplane.pb
    (docs/xprof.md).

    \b
    Examples:
      jaxmemprof report jaxmemprof-runs/train-20260101-120000
      jaxmemprof report RUN --explain            # every finding's evidence, every method
      jaxmemprof report RUN --top 20 --steps 10000
      jaxmemprof report RUN --device-memory 16GiB   # plan a GPU job from a CPU run
      jaxmemprof report RUN --json > report.json
      jaxmemprof report RUN --html report.html      # one page: timeline, flame graphs, findings
      jaxmemprof report /tmp/trace                  # a jax.profiler.trace directory (XProf)
    """
    if html_path == "-" and as_json:
        raise click.UsageError("--html - and --json both write to stdout; send one of them to a file")
    if html_path not in (None, "-"):
        from jaxmemprof.cli.outputs import check_output

        check_output(html_path, force)  # refused before the work, not after
    options = analysis_options(library, user, all_frames, top, steps, device_memory)
    # each format asked for, in turn: the page (to --html's file or stdout), the JSON document, and the
    # terminal's text when neither of the others is asked for (render/formats/)
    asked = [name for name, on in (("html", html_path is not None), ("json", as_json)) if on] or ["text"]
    job = whole_job(run_dir)  # a multi-process job: each process's peak, the job's, findings merged
    with contextlib.nullcontext() if job else Phases("report", PHASES) as phase:  # a large run's work said
        if job:
            doc = job_report_document(run_dir, options, explain=explain, page=needs_page(asked))
        else:
            doc = _run_document(_one_run(run_dir), options, phase, top=top, explain=explain,
                                page=needs_page(asked))
        for name in asked:
            emit(name, doc, Output(html_path, force) if name == "html" else None)


def _one_run(spec: str) -> str:
    """``spec`` (an XProf profile: open_run reads its --process host), or its process-N with --process."""
    from jaxmemprof.store.refs import split_selector
    from jaxmemprof.store.xprof import is_profile

    return spec if is_profile(split_selector(spec)[0]) else run_path(spec)


# A run's report and export, phase by phase (cli/progress.py: said past 2 s).
PHASES = ["reading the run", "attributing its arrays", "the analyses", "writing"]


def _run_document(spec, options, phase=None, **how):
    """The run's report, ready for any format (analysis/page.py ``run_document``);
    ``phase``: told as each phase ends (cli/progress.py)."""
    from jaxmemprof.analysis.attributed import attribute
    from jaxmemprof.analysis.page import run_document
    from jaxmemprof.analysis.report import build_report

    run_ = open_run(spec)
    if phase is not None:
        phase.step()
    ar = attribute(run_, options)
    if phase is not None:
        phase.step()
    rep = build_report(ar)
    if phase is not None:
        phase.step()
    return run_document(rep, ar, **how)


@cli.command()
@click.argument("inputs", nargs=-1, required=True, metavar="RUN | PROFILE [NEW]")
@click.option("--csv", "csv_dir", metavar="DIR", default=None,
              help="Write the run's tables as CSV files into DIR (created if needed).")
@click.option("--format", "fmt", type=click.Choice(["csv", "pprof", "perfetto"]), default=None,
              help="csv: the run's tables (into -o DIR); pprof: one snapshot, or the diff of two, "
                   "with your code's stacks (into -o FILE); perfetto: the run as a trace (Chrome trace event "
                   "JSON, gzipped if FILE ends in .gz) for ui.perfetto.dev and XProf's trace viewer.")
@click.option("-o", "--output", metavar="PATH", default=None,
              help="Where --format writes ('-': pprof or a trace to stdout).")
@click.option("--with", "with_trace", metavar="JAX_TRACE", default=None,
              help="perfetto: merge into this trace from jax.profiler.trace (its .trace.json.gz, or its log "
                   "directory), on one clock (default: the trace run --xprof recorded, if any).")
@force_option("files that exist")
@top_option(20, default_text="Default 20: the sites with their own series in sites.csv")
@steps_option()
@attribution_options
@process_option
def export(inputs, csv_dir, fmt, output, with_trace, force, top, steps, library, user, all_frames):
    """Export a run's tables as CSV, a snapshot (or a diff) as pprof, or the run as a trace.

    \b
    CSV files written (every column: docs/columns.md):
      timeline.csv   one row per snapshot     sites.csv         per snapshot x top site
      devices.csv    per snapshot x device    arrays.csv        one row per array
      lifetimes.csv  one row per site         reuse.csv         reuse per site
      leaks.csv      growing sites            reuse_devices.csv reuse per device
      recompiles.csv functions compiled again jit.csv           memory inside jit
      jit_peak.csv   XLA's buffers by line    jit_buffers.csv   XLA's largest buffers
      jit_curve.csv  XLA's bytes in program order, by line
      holders.csv    the Python references keeping arrays alive, by site
      findings.csv   what to fix, as words and facts

    \b
    Examples:
      jaxmemprof export RUN --csv tables/
      jaxmemprof export RUN@peak --format pprof -o peak.pb.gz && go tool pprof -top peak.pb.gz
      jaxmemprof export RUN@first RUN@final --format pprof -o growth.pb.gz
      jaxmemprof export RUN --format perfetto -o run.trace.json.gz   (open it in ui.perfetto.dev)
      jaxmemprof export RUN --format perfetto --with LOGDIR -o merged.json.gz   (JAX's ops beside it)
    """
    if csv_dir is not None and fmt in ("pprof", "perfetto"):
        raise click.UsageError(f"--csv DIR writes CSV; use -o FILE with --format {fmt}")
    if with_trace is not None and fmt != "perfetto":
        raise click.UsageError("--with merges a JAX trace into --format perfetto's trace")
    if fmt == "perfetto":
        if output is None or len(inputs) != 1:
            raise click.UsageError("perfetto export takes one RUN and -o FILE")
        from jaxmemprof.cli.trace import export_trace

        export_trace(inputs[0], output, force, with_trace, analysis_options(library, user, all_frames, top, steps))
        return
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
    options = analysis_options(library, user, all_frames, top, steps)
    to = Output(force=force, directory=directory)
    if whole_job(spec):
        doc = job_report_document(spec, options, reports=True, before=lambda: to.prepare("csv", "job"))
        emit("csv", doc, to)
    else:
        from jaxmemprof.analysis.attributed import attribute
        from jaxmemprof.analysis.page import run_document
        from jaxmemprof.analysis.report import build_report

        with Phases("export", PHASES) as phase:  # a large run's work said as it goes
            run_ = open_run(_one_run(spec))
            warn(run_)
            to.prepare("csv", "run")
            phase.step()
            ar = attribute(run_, options)
            phase.step()
            rep = build_report(ar)
            phase.step()
            emit("csv", run_document(rep, ar, oom=False), to)
    say(f"jaxmemprof: wrote {len(to.written)} CSV files to {directory}: {', '.join(to.written)}")


def _export_pprof(inputs, output, force, library, user, all_frames):
    from jaxmemprof.analysis.documents import ProfilesDocument
    from jaxmemprof.analysis.sites import user_stacks
    from jaxmemprof.cli.outputs import check_output

    if output == "-":
        if isatty(stdout_stream()):
            raise click.UsageError("-o - would write binary pprof data to the terminal; redirect it or name a file")
    else:
        check_output(output, force)  # refuse before the work, not after
    from jaxmemprof.pprof.reader import DEFAULT_MAX_DECOMPRESSED

    loaded = [load(spec, None, DEFAULT_MAX_DECOMPRESSED) for spec in inputs]
    att = attribution(library, user, all_frames, *(run_ for _, _, run_ in loaded))
    profiles = [prof for _, prof, _ in loaded]
    doc = ProfilesDocument("export", names=[name for name, _, _ in loaded], profiles=profiles,
                           stacks=[user_stacks(prof, att) for prof in profiles])
    emit("pprof", doc, Output(output, force))
    if output != "-":
        say(f"jaxmemprof: wrote {output} (open it with: go tool pprof -top {output})")
