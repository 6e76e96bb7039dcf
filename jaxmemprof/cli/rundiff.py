"""``diff BEFORE AFTER`` of two run directories: what a change to the
program did (analysis/rundiff.py), where ``diff`` of two snapshots or
profiles compares the arrays live at two moments (cli/profiles.py)."""

from __future__ import annotations

import os

import click

from jaxmemprof.cli.base import analysis_options, open_run
from jaxmemprof.cli.formats import Output, emit
from jaxmemprof.cli.jobs import run_path, whole_job


def is_run(spec: str) -> bool:
    """Whether ``spec`` is a whole run directory (no @SEL): one process's
    run, or a job's with ``--process N``. A job's directory alone keeps
    diff's meaning of snapshots (the job's peak, merged)."""
    from jaxmemprof.store.refs import split_selector

    path, sel = split_selector(spec)
    return sel is None and os.path.isdir(path) and not whole_job(path)


def diff_runs(base: str, new: str, *, top, csv_path, as_json, html_path, force, library, user,
              all_frames) -> None:
    """Both runs' reports, compared (analysis/rundiff.py), to the outputs asked for."""
    from jaxmemprof.analysis.attributed import attribute
    from jaxmemprof.analysis.documents import RunsDocument
    from jaxmemprof.analysis.report import build_report
    from jaxmemprof.analysis.rundiff import run_diff, top as keep_top
    from jaxmemprof.cli.base import warn

    if html_path is not None:
        raise click.UsageError("--html draws snapshots: diff of two runs writes text, --json and --csv; "
                               f"for a differential flame graph give {base}@peak {new}@peak")
    options = analysis_options(library, user, all_frames)
    sides = []
    for spec in (base, new):
        run_ = open_run(run_path(spec))
        warn(run_)
        ar = attribute(run_, options)
        sides.append((ar, build_report(ar)))
    result = run_diff(sides[0], sides[1], (base, new))
    machine = csv_path is not None or as_json
    result = keep_top(result, top if (top is not None or machine) else 20)
    doc = RunsDocument("diff", result)
    if csv_path is not None:
        emit("csv", doc, Output(csv_path, force))
    if as_json:
        emit("json", doc)
    if not machine:
        emit("text", doc)
