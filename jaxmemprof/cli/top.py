"""`top`: follow a run while it is written, from another terminal (read-only)."""

from __future__ import annotations

import time

import click

from jaxmemprof.cli.base import analysis_options, attribution_options, cli, isatty, seconds, stdout_stream


@cli.command()
@click.argument("run_dir", metavar="RUN")
@click.option("--once", is_flag=True, help="Print one frame and exit.")
@click.option("--interval", type=seconds(0.1), default=1.0, show_default=True, metavar="SECONDS",
              help="Seconds between refreshes.")
@click.option("--top", "top_n", type=click.IntRange(min=1), default=15, show_default=True, metavar="N",
              help="Sites shown per process.")
@attribution_options
def top(run_dir, once, interval, top_n, library, user, all_frames):
    """Watch a run's device memory while it runs: live bytes per site (your
    line) and per device at the newest snapshot, what grew since the frame
    before (red) and since the run's first snapshot, the sites that keep
    growing, and the run's newest events.

    RUN is a run directory being written by `jaxmemprof run` (or
    jaxmemprof.profile()), one process-N directory of a multi-process run, or
    the job directory holding them (every process is shown). The journal is
    only read, never written. On a terminal the frame redraws in place until
    Ctrl-C; elsewhere a frame is printed at every new snapshot until the run
    ends.

    \b
    Examples:
      jaxmemprof top jaxmemprof-runs/train-20260101-120000
      jaxmemprof top RUN --once                 # one frame, then exit
      jaxmemprof top JOB/process-3 --interval 5
      jaxmemprof top JOB --top 5                # every process of a job
    """
    from jaxmemprof.analysis.live import Tracker
    from jaxmemprof.render import text
    from jaxmemprof.render.top import frame_view
    from jaxmemprof.store.follow import poll, run_directories

    options = analysis_options(library, user, all_frames)

    directories = run_directories(run_dir)
    trackers: dict = {}

    def frames():
        nonlocal directories
        if directories[0][0] is not None:  # a job: processes may start later
            directories = run_directories(run_dir)
        out = []
        for n, path in directories:
            p = poll(path)
            tracker = trackers.get(path)
            if tracker is None:
                tracker = trackers[path] = Tracker(n, options.attribution(p), top_n)
            out.append(tracker.update(p))
        return out

    out = stdout_stream()
    if once:
        text.console(out).print(frame_view(frames()))
        return
    if not isatty(out):
        _follow_plain(out, frames, frame_view, interval)
        return
    from rich.live import Live

    console = text.console(out)
    with Live(frame_view(frames(), interval=interval), console=console, auto_refresh=False,
              vertical_overflow="crop") as live:
        while True:
            time.sleep(interval)
            live.update(frame_view(frames(), interval=interval), refresh=True)


def _follow_plain(out, frames, frame_view, interval):
    """Off a terminal: a frame at each new snapshot, until every process has finished."""
    from jaxmemprof.render import text

    console = text.console(out)
    seen = None
    while True:
        fs = frames()
        key = tuple((f.snapshot, f.finished, f.gone) for f in fs)
        if key != seen:
            if seen is not None:
                console.print()
            console.print(frame_view(fs))
            out.flush()
            seen = key
        if fs and all(f.finished or f.gone for f in fs):
            return
        time.sleep(interval)
