"""`show` and `diff`: one profile, or two, grouped by the user's code."""

from __future__ import annotations

import os

import click

from jaxmemprof.cli.base import Size, analysis_options, attribution, attribution_options, cli, count, load, load_ref
from jaxmemprof.cli.formats import Output, emit
from jaxmemprof.cli.jobs import process_option
from jaxmemprof.errors import InputError


GROUPINGS = ("site", "function", "file", "stack", "device", "kind", "owner")
DEFAULT_TERMINAL_TOP = 20


def _profile_options(f):
    """Options shared by the commands that read and group profiles."""
    options = [
        click.option("--by", type=click.Choice(GROUPINGS), default="site", show_default=True,
                     help="Group bytes by the user's line (site), its function or file, the whole "
                          "user stack, the device or the kind (buffer/executable); show RUN@SEL also "
                          "by owner: each array's path in your tree and its role (docs/roles.md)."),
        click.option("--top", type=count(0), default=None, metavar="N",
                     help=f"Show the first N groups (0: all). Default: {DEFAULT_TERMINAL_TOP} in the "
                          "terminal, all in CSV and JSON."),
        click.option("--csv", "csv_path", metavar="PATH|-", default=None,
                     help="Write the rows as CSV to PATH, or to stdout with '-'. A FIFO or a device "
                          "(/dev/stdout) is written into."),
        click.option("--json", "as_json", is_flag=True,
                     help="Write the rows and totals as JSON to stdout."),
        click.option("--html", "html_path", metavar="FILE", default=None,
                     help="Write a self-contained HTML page (flame graphs over your stacks; opens offline) to FILE."),
        click.option("--force", is_flag=True,
                     help="Overwrite an existing --csv or --html file (only a regular file, or a link to one)."),
        click.option("--sample-index", default=None, metavar="NAME|N",
                     help="Which sample value to report as bytes (default: 'space', else the "
                          "profile's default bytes type)."),
        click.option("--max-decompressed", type=Size(min=1), default="128MiB", show_default=True,
                     help="Refuse profiles that decompress to more than this (gzip bombs)."),
        click.option("--max-ratio", type=click.IntRange(min=1), default=100, show_default=True, metavar="N",
                     help="Refuse gzip profiles that decompress to more than N times their size, past "
                          "their first 4 MiB (gzip bombs; real profiles: 2 to 15)."),
    ]
    for opt in reversed(options):
        f = opt(f)
    return process_option(attribution_options(f))


def _check_streams(csv_path, as_json, html_path, force):
    """Refuse two outputs on stdout, and an --html file that would be
    refused, before any work."""
    if sum(x for x in (csv_path == "-", as_json, html_path == "-")) > 1:
        raise click.UsageError("--csv -, --html - and --json all write to stdout; send all but one to files")
    if html_path not in (None, "-"):
        from jaxmemprof.cli.outputs import check_output

        check_output(html_path, force)


def _emit(command, profiles, names, result, title, csv_path, as_json, top, force, html_path, att):
    """Send ``result`` to the outputs asked for, each through its format
    (render/formats/): --csv, --json, the terminal's text when neither of
    those nor --html is asked for, and the page."""
    from dataclasses import replace

    from jaxmemprof.analysis.documents import ProfilesDocument
    from jaxmemprof.analysis.groups import top as keep_top

    if csv_path == "-" and as_json:
        raise click.UsageError("--csv - and --json both write to stdout; send the CSV to a file")
    machine = csv_path is not None or as_json or html_path is not None
    result = keep_top(result, top if (top is not None or machine) else DEFAULT_TERMINAL_TOP)
    doc = ProfilesDocument(command, names=names, profiles=profiles, value_type=profiles[-1].value_type, result=result,
                           title=title)
    if csv_path is not None:
        emit("csv", doc, Output(csv_path, force))
    if as_json:
        emit("json", doc)
    if not machine:
        emit("text", doc)
    if html_path is not None:
        from jaxmemprof.analysis.page import profiles_model

        emit("html", replace(doc, page=profiles_model(profiles, att)), Output(html_path, force))


@cli.command()
@click.argument("profile", metavar="PROFILE")
@_profile_options
def show(profile, by, top, csv_path, as_json, html_path, force, library, user, all_frames, sample_index,
         max_decompressed, max_ratio):
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
      jaxmemprof show RUN@peak --html peak.html   # a flame graph, one file
      jaxmemprof show RUN@peak --by owner          # params['w1'], opt_state[0].mu['w1'], ...
    """
    from jaxmemprof.analysis.groups import summarize

    _check_streams(csv_path, as_json, html_path, force)
    ref, prof = load_ref(profile, sample_index, max_decompressed, max_ratio=max_ratio)
    name, run_ = ref.name, ref.run
    att = attribution(library, user, all_frames, run_)
    if by == "owner":
        if ref.snapshot is None:
            raise InputError(profile, "--by owner names the arrays of a run's snapshot (RUN@SEL, one process's "
                                      "of a job); a profile file has no arrays to name")
        from jaxmemprof.analysis.attributed import attribute
        from jaxmemprof.analysis.roles import owners_at

        result = owners_at(attribute(run_, analysis_options(library, user, all_frames)), ref.snapshot, prof)
    else:
        result = summarize(prof, by, att)
    _emit("show", [prof], [name], result, f"{name}: {prof.value_type} by {by}", csv_path, as_json, top, force,
          html_path, att)


@cli.command()
@click.argument("base", metavar="BASE")
@click.argument("new", metavar="[NEW]", required=False)
@_profile_options
def diff(base, new, by, top, csv_path, as_json, html_path, force, library, user, all_frames, sample_index,
         max_decompressed, max_ratio):
    """Compare two runs, or two profiles: what a change did, which of your lines grew and which shrank.

    Two run directories (BEFORE AFTER, no @SEL): what the change to the
    program did to what it needs: the true peak on each device, by role and
    by XLA's buffers by line inside the call, then the findings resolved,
    new and kept (a line of BEFORE's script and the same line of AFTER's are
    one site, whatever the scripts are called).

    Two profiles: deltas are NEW minus BASE per group, as with `go tool
    pprof -diff_base`; they add up to the change in total bytes exactly.
    BASE and NEW are profile files or RUN@SEL (see `jaxmemprof show
    --help`); a run directory alone compares its first snapshot with its
    final one (the last taken while the program ran, before it exited).

    \b
    Examples:
      jaxmemprof diff before after           # two runs: what the fix did
      jaxmemprof diff before after --json    # the same rows as JSON (--csv -: as CSV)
      jaxmemprof diff before.prof after.prof
      jaxmemprof diff RUN                   # RUN@first -> RUN@final
      jaxmemprof diff RUN@first RUN@peak
      jaxmemprof diff before.prof after.prof --by file --csv changes.csv
      jaxmemprof diff RUN --html growth.html    # a differential flame graph, one file
    """
    from jaxmemprof.analysis.groups import diff as diff_profiles

    _check_streams(csv_path, as_json, html_path, force)
    if new is not None:
        from jaxmemprof.cli.rundiff import diff_runs, is_run

        if is_run(base) and is_run(new):  # two runs: what the change did, not two moments' arrays
            if click.get_current_context().get_parameter_source("by") is not click.core.ParameterSource.DEFAULT:
                raise click.UsageError("--by groups two snapshots' arrays: diff of two runs compares their true "
                                       f"peaks, roles, lines and findings; for snapshots give {base}@peak {new}@peak")
            diff_runs(base, new, top=top, csv_path=csv_path, as_json=as_json, html_path=html_path, force=force,
                      library=library, user=user, all_frames=all_frames)
            return
    if by == "owner":
        raise click.UsageError("--by owner is show's (jaxmemprof show RUN@SEL --by owner); diff groups by line, "
                               "function, file, stack, device or kind")
    if new is None:
        from jaxmemprof.store.refs import split_selector

        run_dir, sel = split_selector(base)
        if sel is not None or not os.path.isdir(run_dir):
            raise click.UsageError("diff needs BASE and NEW, or a run directory alone (first -> last)")
        base, new = f"{run_dir}@first", f"{run_dir}@final"
    base_name, base_prof, base_run = load(base, sample_index, max_decompressed, max_ratio=max_ratio)
    new_name, new_prof, new_run = load(new, sample_index, max_decompressed, max_ratio=max_ratio)
    if base_prof.value_type != new_prof.value_type:
        raise InputError(new, f"measures {new_prof.value_type}, but {base} measures {base_prof.value_type}")
    att = attribution(library, user, all_frames, base_run, new_run)
    same = None
    if isinstance(getattr(base_run, "manifest", None), dict) and isinstance(getattr(new_run, "manifest", None), dict):
        from jaxmemprof.analysis.rundiff import same_sites  # two runs' scripts: one line, whatever their names

        same = same_sites(base_run.manifest, new_run.manifest)
    result = diff_profiles(base_prof, new_prof, by, att, same)
    _emit("diff", [base_prof, new_prof], [base_name, new_name], result,
          f"{base_name} -> {new_name}: {new_prof.value_type} by {by}", csv_path, as_json, top, force, html_path, att)
