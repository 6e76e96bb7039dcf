"""Multi-process jobs in `report`, `export`, `show` and `diff`: the --process
option, and the whole job's report as a document that every format writes
(the commands in runs.py and profiles.py hand a job directory here)."""

from __future__ import annotations

from contextlib import contextmanager

import click

from jaxmemprof.cli.base import say

_META = "jaxmemprof.process"
PROGRESS_FROM = 16  # processes in a job from which report shows a progress bar (on a terminal)


def _remember(ctx, param, value):
    if value is not None:
        ctx.meta[_META] = value
    return value


def process_option(f):
    """--process N: one process of a multi-process job (RUN/process-N)."""
    return click.option("--process", "process", type=click.IntRange(min=0), default=None, metavar="N",
                        expose_value=False, callback=_remember, is_eager=True,
                        help="On a multi-process job (RUN/process-N/...), read process N only "
                             "(as RUN/process-N); without it, the whole job.")(f)


def chosen_process() -> int | None:
    ctx = click.get_current_context(silent=True)
    return None if ctx is None else ctx.meta.get(_META)


def whole_job(path) -> bool:
    """Whether ``path`` is a job directory to be read as a whole (no --process)."""
    from jaxmemprof.store.job import is_job_directory

    return chosen_process() is None and is_job_directory(path)


def run_path(spec: str) -> str:
    """``spec``, or its process-N with --process."""
    n = chosen_process()
    if n is None:
        return spec
    from jaxmemprof.errors import InputError
    from jaxmemprof.store.job import is_job_directory
    from jaxmemprof.store.refs import process_directory, split_selector

    path, sel = split_selector(spec)
    if not is_job_directory(path):
        raise InputError(path, "is not a multi-process job (no process-N directories): --process picks a process of one")
    return str(process_directory(path, n)) + ("" if sel is None else f"@{sel}")


def _job_report(job, spec, options):
    from jaxmemprof.analysis.job import analyse_processes, build_job_report
    from jaxmemprof.store.job import job_timeline

    if all(p.error is not None for p in job.processes):
        from jaxmemprof.errors import InputError

        p = job.processes[0]
        raise InputError(str(p.path), f"{p.error}; no process of the job {spec} is readable "
                                      f"({len(job.processes)} process director{'ies' if len(job.processes) > 1 else 'y'})")
    tl = job_timeline(job)
    with _progress(len(job.processes)) as step:
        results = analyse_processes(job, options, progress=step)
    return build_job_report(job, results, tl)


@contextmanager
def _progress(total: int):
    """A progress bar on stderr for a job of many processes (only on a
    terminal: never in what a program reads)."""
    from jaxmemprof.cli.base import isatty, stderr_stream

    stream = stderr_stream()
    if total < PROGRESS_FROM or stream is None or not isatty(stream):
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(file=stream), transient=True) as bar:
        task = bar.add_task("analysing processes", total=total)
        yield lambda: bar.advance(task)


def job_report_document(spec, options, *, explain: bool = False, page: bool = False, reports: bool = False,
                        before=None):
    """The job's report, ready for any format (analysis/page.py
    ``job_document``); ``page``: with its largest processes' own pages;
    ``reports``: with every process's report (CSV); ``before``: called
    before the analysis (a directory checked first). Where the page or the
    CSV files are written, what the job's layout warns of is said first."""
    from jaxmemprof.analysis.page import job_document
    from jaxmemprof.store.job import load_job

    job = load_job(spec)
    if page or reports:
        for w in job.warnings:
            say(f"jaxmemprof: warning: {spec}: {w}")
    if before is not None:
        before()
    rep = _job_report(job, spec, options)
    return job_document(job, rep, options, top=options.top_sites, explain=explain, page=page, reports=reports,
                        warn=say)
