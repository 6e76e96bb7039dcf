"""`check`: gate a recorded run in CI (exit 0 when every limit holds, 1 when one does not)."""

from __future__ import annotations

import os
import re
import sys

import click

from jaxmemprof.cli.base import (Size, is_closed_pipe, analysis_options, attribution_options, build_report_for, cli,
                                 open_run, say, silence, size_value, stdout_stream, warn)
from jaxmemprof.errors import InputError


class Growth(click.ParamType):
    """SIZE/step (per marker) or SIZE/s; a bare SIZE is per step."""

    name = "SIZE/step"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        from jaxmemprof.units import parse_size

        m = re.fullmatch(r"\s*(.*?)\s*(?:/\s*(step|s))?\s*", str(value))
        if m is None:  # a line break in it
            self.fail(f"{value!r}: a growth is SIZE/step or SIZE/s (e.g. 1MiB/step)", param, ctx)
        try:
            parse_size(m.group(1), memory=True)
        except ValueError as exc:
            self.fail(f"{exc}; a growth is SIZE/step or SIZE/s (e.g. 1MiB/step)", param, ctx)
        except OverflowError:
            pass  # size_value says so
        return size_value(m.group(1), self, param, ctx, memory=True), m.group(2) or "step"


class Percent(click.ParamType):
    name = "PCT"

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            return value
        text = str(value).strip().removesuffix("%")
        try:
            pct = float(text)
        except ValueError:
            self.fail(f"not a percentage: {value!r} (examples: 5, 12.5%)", param, ctx)
        if not pct >= 0 or pct == float("inf"):
            self.fail(f"not a percentage of 0 or more: {value!r}", param, ctx)
        return pct


def _rules(ctx, param, values):
    from jaxmemprof.analysis.rules import RULES

    rules = [r.strip() for v in values for r in v.split(",") if r.strip()]
    known = tuple(RULES)
    unknown = [r for r in rules if r not in known]
    if unknown:
        raise click.BadParameter(f"unknown rule {unknown[0]!r}; rules: {', '.join(known)}", ctx, param)
    return tuple(dict.fromkeys(rules))


@cli.command()
@click.argument("run_dir", metavar="RUN")
@click.option("--max-peak", type=Size(memory=True), default=None, metavar="SIZE",
              help="Fail when the peak live device memory of the snapshots exceeds SIZE.")
@click.option("--max-true-peak", type=Size(memory=True), default=None, metavar="SIZE",
              help="Fail when the estimated true peak (the snapshot peak plus what XLA needs inside the "
                   "jitted calls, from the jit probe) exceeds SIZE.")
@click.option("--max-growth", type=Growth(), default=None, metavar="SIZE/step",
              help="Fail when the sites that keep growing (report's leaks) grow by more than this in all, "
                   "per step (jaxmemprof.mark() once a step) or per second (SIZE/s).")
@click.option("--fail-on", "fail_on", multiple=True, callback=_rules, metavar="RULE,...",
              help="Fail when the report has a finding of one of these rules (leak, recompile, donate, ...; "
                   "repeatable or comma-separated).")
@click.option("--baseline", "baseline_dir", default=None, metavar="RUN",
              help="A run to compare with (the last good one): with --max-increase.")
@click.option("--max-increase", type=Percent(), default=None, metavar="PCT",
              help="With --baseline: fail when the peak (and the estimated true peak) grew by more than PCT "
                   "percent over the baseline's.")
@click.option("--target-fits", "target_fits", multiple=True, metavar="SLICE",
              help="Fail unless the step compiled for this TPU slice (run --target SLICE) fits one of its chips: "
                   "XLA:TPU's per-device peak within what XLA may use of the chip's HBM (repeat for several).")
@click.option("--allow-unfinished", is_flag=True,
              help="Check a run that did not finish (still running, or killed) on what it recorded so far; "
                   "without it such a run cannot be checked (exit 2).")
@click.option("--json", "as_json", is_flag=True, help="Write every check, its limit and its value as JSON to stdout.")
@attribution_options
def check(run_dir, max_peak, max_true_peak, max_growth, fail_on, baseline_dir, max_increase, target_fits,
          allow_unfinished, as_json, library, user, all_frames):
    """Check a recorded run against limits, for CI: exit 0 when every limit
    holds, 1 when one does not (one FAIL line per violation, whatever becomes
    of stdout), 2 on bad input, and when a figure asked for cannot be
    computed (no readable snapshot, a journal table that a figure comes
    from damaged: its row named, no jit figures, a process missing, a run
    that did not finish unless --allow-unfinished, a --target slice whose
    compiles the run's end did not finish).

    The figures are report's: its peak, estimated true peak, leaks and
    findings (see `jaxmemprof report RUN`). On a multi-process job
    directory every process is checked (against the baseline job's process
    of the same number), each line naming its process.

    \b
    Examples:
      jaxmemprof check RUN --max-peak 12GiB --max-true-peak 15GiB
      jaxmemprof check RUN --max-growth 1MiB/step --fail-on leak,recompile
      jaxmemprof check RUN --baseline runs/main --max-increase 5
      jaxmemprof check RUN --max-peak 12GiB --json > check.json
      jaxmemprof check RUN --target-fits v5e:2x2   (RUN recorded with run --target v5e:2x2)
    """
    from jaxmemprof.analysis.check import (Limits, Unchecked, check_report, out_of_memory_gate, unchecked_report,
                                           unchecked_run)
    from jaxmemprof.render.check import document, lines

    if (baseline_dir is None) != (max_increase is None):
        raise click.UsageError("--baseline RUN and --max-increase PCT go together")
    growth, per = max_growth if max_growth is not None else (None, "step")
    limits = Limits(max_peak=max_peak, max_true_peak=max_true_peak, max_growth=growth, growth_per=per,
                    fail_on=fail_on, max_increase_pct=max_increase, target_fits=tuple(target_fits))
    if not limits.any():
        raise click.UsageError("nothing to check: give --max-peak, --max-true-peak, --max-growth, --fail-on "
                               "--target-fits, or --baseline with --max-increase")
    options = analysis_options(library, user, all_frames, top=3)
    pairs = _pairs(run_dir, baseline_dir)
    results = []  # (process or None, outcomes)
    counts = []  # of a job: how many processes each says the job had
    for n, path, base_path in pairs:
        run_ = open_run(path)
        warn(run_)
        base_run = open_run(base_path) if base_path is not None else None
        if base_run is not None:
            warn(base_run)
        if growth is not None and per == "step" and run_.markers.empty and "markers" not in run_.damaged:
            raise InputError(str(path), "has no step markers (jaxmemprof.mark() once a step): --max-growth "
                                        "SIZE/step cannot be checked; give SIZE/s")
        # A gate that cannot look fails (exit 2), never passes: before any analysis.
        # With some snapshots lost, a peak limit the rest already breaks has
        # failed (what was lost can only raise a peak): that is said (exit 1).
        pending = unchecked_run(run_, limits, allow_unfinished=allow_unfinished)
        if pending is None or pending.reason != "lost-snapshots":
            _must_look(path, pending)
        if base_run is not None:
            _must_look(base_path, unchecked_run(base_run, limits, baseline=True, allow_unfinished=allow_unfinished))
        oom = out_of_memory_gate(run_)  # a run that ran out of memory fails, with XLA's reason (2: unread)
        if isinstance(oom, Unchecked):
            _must_look(path, oom)
        report = build_report_for(run_, options)
        _must_look(path, unchecked_report(report, limits))
        if n is not None:
            counts.append(run_.manifest.get("process_count"))
        baseline = build_report_for(base_run, options) if base_run is not None else None
        outcomes = ([oom] if oom is not None else []) + check_report(report, limits, baseline)
        if pending is not None and all(o.held for o in outcomes if o.check in _MONOTONE):
            _must_look(path, pending)
        results.append((n, outcomes))
    _every_process(run_dir, [n for n, _, _ in pairs], counts)
    failed = not all(o.held for _, outcomes in results for o in outcomes)
    if as_json:
        from jaxmemprof.render.json import json_text

        text = json_text(document(str(run_dir), baseline_dir, results))
    else:
        from jaxmemprof.render.escape import terminal

        every = [line for n, outcomes in results for line in lines(outcomes, n)]
        text = terminal("".join(line + "\n" for line in [*(x for x in every if x.startswith("FAIL")),
                                                          *(x for x in every if not x.startswith("FAIL"))]))
    _write(text, failed)


# Checks whose failure on part of a run stands for the whole (more snapshots only raise a peak).
_MONOTONE = ("max-peak", "max-true-peak")


def _must_look(path, unchecked) -> None:
    if unchecked is not None:
        from jaxmemprof.render.check import unchecked_text

        raise InputError(str(path), unchecked_text(unchecked))


def _write(text: str, failed: bool) -> None:
    """Write the lines (or the JSON), then exit 1 when a limit failed,
    whatever became of stdout: closed (`>&-`), a reader that went away
    (`| true`), a full disk. When every limit held, what happens to stdout is
    reported as for every command (a closed pipe is no error; a closed or
    full stdout is, exit 2)."""
    # Not click's Exit: the group runs without standalone mode, where an
    # exit status would be returned, not used.
    try:
        out = stdout_stream()
        out.write(text)
        out.flush()
    except (InputError, OSError, ValueError) as exc:
        if not failed:
            raise
        if not (isinstance(exc, OSError) and is_closed_pipe(exc)):
            say(f"jaxmemprof: error: {exc}" if isinstance(exc, InputError) else
                f"jaxmemprof: error: stdout: cannot write: {getattr(exc, 'strerror', None) or exc}")
        if sys.stdout is not None:
            silence(sys.stdout)  # what is still buffered, and Python's flush at exit, go nowhere
        raise SystemExit(1) from None
    if failed:
        raise SystemExit(1)


def _pairs(run_dir, baseline_dir):
    """(process or None, run, baseline) to check: the run itself, or each
    process of a job directory, with the baseline job's process of the same
    number (or the one baseline run, for every process)."""
    from jaxmemprof.errors import check_not_empty
    from jaxmemprof.store.job import is_job_directory, process_directories

    check_not_empty(run_dir)
    if not is_job_directory(run_dir):
        if baseline_dir is not None and is_job_directory(baseline_dir):
            raise InputError(baseline_dir, "is a multi-process job and RUN is one run: give one process of it "
                                           "(BASELINE/process-N)")
        return [(None, run_dir, baseline_dir)]
    base = None
    if baseline_dir is not None and is_job_directory(baseline_dir):
        base = dict(process_directories(baseline_dir))
    _no_stray_processes(run_dir)
    out = []
    for n, path in process_directories(run_dir):
        if base is not None and n not in base:
            raise InputError(baseline_dir, f"has no process-{n}, which {run_dir} has")
        out.append((n, str(path), str(base[n]) if base is not None else baseline_dir))
    return out


def _no_stray_processes(job) -> None:
    """A ``process-N`` of a job that is not a directory of its own (a link,
    a file) is never read: refused, not left out of the gate."""
    from jaxmemprof.store.job import process_index_of

    try:
        entries = list(os.scandir(job))
    except OSError as exc:
        raise InputError(str(job), f"cannot be listed ({exc.strerror or exc})") from None
    for e in sorted(entries, key=lambda e: e.name):
        if process_index_of(e.name) is not None and not e.is_dir(follow_symlinks=False):
            what = "a symbolic link" if e.is_symlink() else "not a directory"
            raise InputError(os.path.join(str(job), e.name), f"is {what}, so that process cannot be checked")


def _every_process(job, found: list, counts: list) -> None:
    """Every process the job's processes say it had is there to check."""
    known = [c for c in counts if isinstance(c, int) and not isinstance(c, bool) and c > 0]
    if not known:
        return
    missing = sorted(set(range(max(known))) - set(found))
    if missing:
        shown = ", ".join(f"process-{i}" for i in missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise InputError(str(job), f"has no {shown}, and its processes say the job had {max(known)}: "
                                   f"{'that process' if len(missing) == 1 else 'those processes'} cannot be checked")
