"""Multi-process jobs in `report`, `export`, `show` and `diff`: the --process
option, and the whole job's report and CSV export (the commands in runs.py
and profiles.py hand a job directory here)."""

from __future__ import annotations

import os
from contextlib import contextmanager

import click

from jaxmemprof.cli.base import say, stdout_stream

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


def _job_report(spec, options):
    from jaxmemprof.analysis.job import analyse_processes, build_job_report
    from jaxmemprof.store.job import job_timeline, load_job

    job = load_job(spec)
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


def report_job(spec, options, as_json, explain=False) -> None:
    rep = _job_report(spec, options)
    if as_json:
        from jaxmemprof.render.json import write_json
        from jaxmemprof.render.job import job_document

        write_json(job_document(rep), stdout_stream())
        return
    from jaxmemprof.render import text
    from jaxmemprof.render.job import render_job_report

    render_job_report(rep, text.console(stdout_stream()), top=options.top_sites, explain=explain)


def export_job_csv(spec, directory, force, options) -> None:
    """Every process's tables, one CSV per table with a ``process`` column,
    and the job's own (processes.csv, job_timeline.csv, job_peak_sites.csv,
    job_findings.csv)."""
    import pandas as pd

    from jaxmemprof.analysis.attributed import attribute
    from jaxmemprof.analysis.report import build_report
    from jaxmemprof.outputs import open_output, prepare_directory
    from jaxmemprof.render.csv import write_csv
    from jaxmemprof.render.job import JOB_FILES, job_tables, with_process
    from jaxmemprof.render.tables import EXPORT_FILES, export_tables
    from jaxmemprof.store.job import load_job
    from jaxmemprof.store.reader import load_run

    job = load_job(spec)
    for w in job.warnings:
        say(f"jaxmemprof: warning: {spec}: {w}")
    prepare_directory(directory, tuple(EXPORT_FILES) + JOB_FILES, force)
    rep = _job_report(spec, options)
    parts: dict[str, list] = {name: [] for name in EXPORT_FILES}
    for p in job.processes:
        if p.error is not None or p.snapshots.empty:
            continue
        from jaxmemprof.errors import InputError

        try:
            run = load_run(p.path)
        except InputError as exc:
            say(f"jaxmemprof: warning: process {p.process}: {exc}")
            continue
        tables = with_process(export_tables(build_report(attribute(run, options))), p.process)
        for name, rows in tables.items():
            parts[name].append(rows)
    tables = {name: (pd.concat([r for r in rows if not r.empty] or rows[:1], ignore_index=True) if rows
                     else pd.DataFrame({"process": pd.Series(dtype="int64")}))
              for name, rows in parts.items()}
    tables.update(job_tables(rep))
    for name, rows in tables.items():
        with open_output(os.path.join(directory, name), force, strict=True) as f:
            write_csv(rows, f)
    say(f"jaxmemprof: wrote {len(tables)} CSV files to {directory}: {', '.join(tables)}")
