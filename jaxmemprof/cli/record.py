"""`run`: the script, unchanged, under the recorder."""

from __future__ import annotations

import dataclasses
import os
import sys

import click

from jaxmemprof.api import INTERVAL_RANGE, MAX_OVERHEAD_RANGE, write_process_result
from jaxmemprof.cli.base import Number, Size, analysis_options, cli, say, stderr_stream
from jaxmemprof.errors import InputError, check_not_empty
from jaxmemprof.render.escape import safe


class _Scales(click.ParamType):
    """A comma-separated list of positive numbers: 0.5,2,4,8."""

    name = "LIST"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        out = []
        for part in str(value).split(","):
            try:
                x = float(part)
            except ValueError:
                self.fail(f"{part.strip()!r} is not a number (give scales as 0.5,2,4,8)", param, ctx)
            if not (0 < x <= 1e6):
                self.fail(f"{part.strip()!r}: a scale is a number above 0 and at most 1e6", param, ctx)
            out.append(x)
        return tuple(out)


@cli.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-o", "--output", metavar="DIR", default=None,
              help="Run directory (default: jaxmemprof-runs/<script>-<YYYYmmdd-HHMMSS>).")
@click.option("--force", is_flag=True, help="Reuse a non-empty --output directory, replacing its run.")
@click.option("--interval", type=Number(*INTERVAL_RANGE), default=0.5, show_default=True, metavar="SECONDS",
              help="Time between snapshots, stretched so sampling stays within --max-overhead.")
@click.option("--max-overhead", type=Number(*MAX_OVERHEAD_RANGE, zero=True), default=0.02, show_default=True,
              metavar="FRACTION", help="Most of the wall time jaxmemprof may take: snapshots keep to half of it, "
                   "the rest is for start-up, the jit probe and the end (0: never stretch --interval; else "
                   "0.0001 to 1).")
@click.option("-m", "module", metavar="MODULE", default=None, help="Run a module, as python -m MODULE.")
@click.option("-c", "command", metavar="CODE", default=None, help="Run CODE, as python -c CODE.")
@click.option("--no-jit-probe", is_flag=True,
              help="Do not observe jitted functions (no donation advice, no memory inside jit).")
@click.option("--plan", is_flag=True,
              help="At the end, compile the jitted step that holds the run's largest XLA call peak for other "
                   "batch sizes (from its arguments' shapes: no array allocated), donated and in bfloat16 too, "
                   "for `report --device-memory SIZE`'s largest batch that fits; the compiles' time is said.")
@click.option("--plan-scales", type=_Scales(), default=None, metavar="LIST",
              help="The recorded batch times these, for --plan (default 0.5,2,4,8; implies --plan).")
@click.option("--plan-device-memory", type=Size(min=1, memory=True), default=None, metavar="SIZE",
              help="For --plan: find by compiles the largest batch that fits a device of SIZE (80GB; the fit "
                   "rule of report --device-memory), and compile each fix at that batch (implies --plan).")
@click.option("--plan-axis", type=click.IntRange(0, 64), default=None, metavar="N",
              help="The batch's dimension in the step's per-step inputs, for --plan (default 0, 1 under "
                   "jax.pmap; implies --plan).")
@click.option("--verify-seconds", type=Number(0, 86400), default=None, metavar="SECONDS",
              help="At the end, compile each jitted function the donation advice names with its arguments "
                   "donated, for at most SECONDS (default: a tenth of the run's time, at least 10; 0: none), "
                   "so that what a donation saves is XLA's own figure; past it the advice says 'not verified'.")
@click.option("--addresses", type=click.Choice(["auto", "all", "none"]), default="auto", show_default=True,
              help="Which buffer addresses to read (for the reuse analysis). Reading one makes JAX keep a "
                   "per-shard view of device_put and sharded arrays, which jax.live_arrays() lists and "
                   "its profile walks: auto reads those that make no new view.")
@click.option("--no-holders", is_flag=True,
              help="Do not search for the Python references that keep arrays alive (by default: after each "
                   "snapshot at a new high, within 1% of the run's time, and at the end; docs/holders.md).")
@click.option("--target", "slices", multiple=True, metavar="SLICE",
              help="At the end, also compile the step (the --plan's functions) for this TPU slice, which need "
                   "not be there (v5e:2x2, v6e:2x2, v5p:2x2x1, v4:2x2x1; repeat for several): XLA:TPU's "
                   "per-device figures and whether they fit its chips; with --plan, the largest batch that "
                   "fits, found by compiling for it. Needs libtpu: pip install 'jaxmemprof[tpu]' "
                   "(docs/targets.md).")
@click.option("--xprof", is_flag=True,
              help="Also record a jax.profiler trace of the program into RUN/xprof (from when JAX's backend is "
                   "up to the end); `export RUN --format perfetto` then merges JAX's ops with the run's memory "
                   "(docs/trace-export.md).")
@click.option("-q", "--quiet", is_flag=True, help="No summary at the end.")
@click.argument("target", nargs=-1, type=click.UNPROCESSED, metavar="SCRIPT [ARGS]...")
def run(output, force, interval, max_overhead, module, command, no_jit_probe, plan, plan_scales,
        plan_device_memory, plan_axis, verify_seconds, addresses, no_holders, slices, xprof, quiet, target):
    """Run a Python script (or -m MODULE, or -c CODE) unchanged and record its device memory.

    The script runs in this process exactly as `python SCRIPT ARGS` runs it;
    jaxmemprof's options come before it (or before `--`). SCRIPT is what
    python takes: a file, a directory or zip file holding a __main__.py, or
    `-` for a script read from stdin. Snapshots of JAX's
    device-memory profile, every live array and the allocator statistics go
    to a crash-safe run directory; the exit status is the script's.

    \b
    Examples:
      jaxmemprof run train.py --epochs 3
      jaxmemprof run -o runs/baseline --interval 0.2 train.py
      jaxmemprof run -m mypackage.train -- --lr 0.1
      jaxmemprof run app/ --epochs 3          (app/__main__.py; a zip file too)
      jaxmemprof run - < train.py             (the script from stdin)
      jaxmemprof run --plan train.py --batch 32   (then: report RUN --device-memory 80GB)
      jaxmemprof run --target v5e:2x2 train.py    (the step compiled for a TPU slice, from a CPU machine)
      jaxmemprof run -c "import train; train.main()"
      jaxmemprof show jaxmemprof-runs/train-20260101-120000@peak
    """
    from pathlib import Path

    from jaxmemprof.capture.runner import Target, run_target
    from jaxmemprof.capture.session import Session, default_output, prepare_directory
    from jaxmemprof.capture.signals import EndPhaseSkipped

    args = list(target)
    planned, slices = plan_and_targets(no_jit_probe, plan, plan_scales, plan_device_memory, plan_axis, slices)
    if module is not None and command is not None:
        raise click.UsageError("give one of -m MODULE and -c CODE (the script's own options go after `--`)")
    if command is not None:
        tgt = Target(path=None, module=None, args=tuple(args), command=command)
    elif module is None:
        if not args:
            raise click.UsageError("give a SCRIPT to run (or -m MODULE, or -c CODE)")
        script = args.pop(0)
        if script != "-":  # "-": the script on stdin, as python reads it
            check_not_empty(script)
            if not os.path.exists(script):  # a directory or zip with __main__.py runs too, as under python
                raise InputError(script, "no such script")
        tgt = Target(path=script, module=None, args=tuple(args))
    else:
        tgt = Target(path=None, module=module, args=tuple(args))
    _index_or_python(tgt)
    _warn_own_options_after(tgt)
    from jaxmemprof.versions import run_line

    if (unsupported := run_line()) is not None:  # outside the supported range: what will be missing
        say(unsupported)
    # A process of a job started by hand (-o JOB, no launcher variable) may claim
    # JOB/process-N once jax.distributed.initialize says N: session.directory.
    directory = prepare_directory(Path(output) if output else default_output(tgt.stem), force,
                                  by_hand=bool(output))
    session = Session(directory, target_argv=tgt.argv, interval=interval, max_overhead=max_overhead,
                      jit_probe=not no_jit_probe, addresses=addresses, on_finish=write_process_result,
                      plan=planned, verify_s=verify_seconds, holders=not no_holders,
                      targets=slices, xprof=xprof)
    progress = None if quiet else _EndProgress.on_terminal()
    end = run_target(tgt, session, progress=progress)
    status, ended_by = end.status, end.how
    # The end phase (docs/recording.md): a SIGINT or SIGTERM skips the rest of
    # it; the run is finalised all the same and the exit status is the script's.
    try:
        end.run("XLA's figures and the compiles", lambda: session.end_work(
            ended_by, progress=None if progress is None else progress.compile))
        _finalise(end)
        if not quiet:
            _flush_script_stdout()
            duration = (session.script_end or {}).get("duration_s")
            end.run("the summary", lambda: closing_lines(tgt, session.directory, status, ended_by, duration,
                                                    before=progress))
            progress.closing()  # off a terminal, the end's compiles said last where they were long
    except EndPhaseSkipped:
        pass
    _finalise(end)
    if progress is not None:
        progress(None)
    if end.skipped_by is not None:
        from jaxmemprof.capture.exits import exit_without_teardown

        if not quiet:
            say(f"jaxmemprof: {_signal_name(end.skipped_by)}: the rest of jaxmemprof's end skipped; the script's "
                f"exit status kept ({status}); run: {session.directory}")
        exit_without_teardown(status)
    raise SystemExit(status)


def _finalise(end) -> None:
    """The run finalised (once), whatever signal comes meanwhile."""
    from jaxmemprof.capture.signals import EndPhaseSkipped

    for _ in range(3):
        try:
            end.finalise(end.session.finalise_end)
            return
        except EndPhaseSkipped:
            continue


def _signal_name(sig: int) -> str:
    import signal

    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


class _EndProgress:
    """The end phase's steps on one line of stderr, rewritten in place, only
    on a terminal (as report's progress for a large job), and cleared before
    the closing lines: off a terminal stderr holds the closing lines alone,
    one line for each step that takes over ``SAY_AFTER_S`` (said as it
    passes that: what a long or stuck end is doing, on a pipe too), and,
    where the end's compiles took over ``SAY_AFTER_S``, one line saying so
    (``closing``). Each compile of the end is told (``compile``): the
    line then says what is compiled, its number (of how many, where the step
    knows) and the seconds since the script ended, ticking once a second
    (a thread of ours, ``jaxmemprof-progress``, while a compile runs)."""

    SAY_AFTER_S = 2.0

    def __init__(self, fd: int | None):
        import threading
        import time

        self.fd = fd  # None: not a terminal (nothing drawn; the closing line only)
        self.shown = False
        self.t0 = time.monotonic()
        self.what = None
        self.detail = None
        self.compiles = 0
        self.compile_t0 = self.compile_t1 = None
        self.phase_t0 = self.t0  # when the step now running began (off a terminal: said once past SAY_AFTER_S)
        self.said = None
        self._lock = threading.Lock()
        self._ticker = None
        self._stop = threading.Event()

    @classmethod
    def on_terminal(cls):
        stream = stderr_stream()
        try:
            fd = stream.fileno() if stream is not None else -1
            return cls(fd if fd >= 0 and os.isatty(fd) else None)
        except (AttributeError, OSError, ValueError):
            return cls(None)

    def __call__(self, what: str | None) -> None:
        import time

        with self._lock:
            if self.compile_t0 is not None and self.compile_t1 is None:
                self.compile_t1 = time.monotonic()  # the compiles' step is over
            if what != self.what:
                self.phase_t0 = time.monotonic()
            self.what, self.detail = what, None
            if what is None:
                self._stop.set()
            self._draw()
            self._start_ticker()

    def compile(self, text: str) -> None:
        """One of the end's compiles begins: ``text`` says which (``"WHAT"``
        or ``"WHAT|n|N"``: its number within its step)."""
        import time

        with self._lock:
            self.compiles += 1
            if self.compile_t0 is None:
                self.compile_t0 = time.monotonic()
            self.detail = text
            self._draw()
            self._start_ticker()

    def _start_ticker(self) -> None:
        if self._ticker is None and self.what is not None:
            from jaxmemprof.capture.threads import start_thread

            self._ticker = start_thread(self._tick, "jaxmemprof-progress")  # no hook of the program's in it

    def _tick(self) -> None:
        import time

        from jaxmemprof.capture.sampler import block_signals_in_this_thread

        block_signals_in_this_thread()
        while not self._stop.wait(1.0 if self.fd is not None else 0.25):
            with self._lock:
                if self.what is None:
                    continue
                if self.fd is not None:
                    self._draw()
                elif self.said != self.what and time.monotonic() - self.phase_t0 > self.SAY_AFTER_S:
                    # Off a terminal: one line for a step past SAY_AFTER_S (what a stuck end is doing).
                    self.said = self.what
                    label = f": {self.detail.partition('|')[0]}" if self.detail else ""
                    say(f"jaxmemprof, after the script ended: {self.what}{label} ({time.monotonic() - self.t0:.0f} s "
                        f"since; Ctrl-C skips the rest)...")

    def _draw(self) -> None:
        import time

        if self.fd is None or (self.what is None and not self.shown):
            return
        if self.what is None:
            text = "\r\x1b[K"
        else:
            what = safe(self.what)  # a function's name is the program's: escaped on the line
            if self.detail is not None:
                label, _, count = self.detail.partition("|")
                label = safe(label)
                n, _, total = count.partition("|")
                number = f"{n} of {total}" if n and total else str(self.compiles)
                what += f": {label} (compile {number}; {time.monotonic() - self.t0:.0f} s)"
            text = f"\r\x1b[Kjaxmemprof: the script has ended; now: {what} (Ctrl-C skips the rest)..."
        self.shown = self.what is not None
        try:
            sys.stderr.flush()
        except Exception:
            pass
        try:
            os.write(self.fd, text.encode("utf-8", "replace"))
        except OSError:
            pass

    def closing(self) -> None:
        """Off a terminal: one line, where the end's compiles took over
        ``SAY_AFTER_S`` (the line on a terminal said it as it went)."""
        import time

        if self.fd is not None or self.compile_t0 is None:
            return
        took = (self.compile_t1 or time.monotonic()) - self.compile_t0
        if took > self.SAY_AFTER_S:
            say(f"jaxmemprof: the end of the run compiled {self.compiles} time{'s' if self.compiles != 1 else ''} "
                f"in {took:.1f} s after the script ended")


def plan_and_targets(no_jit_probe, plan, plan_scales, plan_device_memory, plan_axis, slices):
    """run's --plan* and --target options, checked, as the session takes them:
    (PlanOptions or None, the slices once each). For run and the notebook's
    magics (notebook/magics.py parses their line with run's own options);
    click.UsageError or InputError when they cannot be honoured."""
    planned = None
    if plan or plan_scales is not None or plan_axis is not None or plan_device_memory is not None:
        if no_jit_probe:
            raise click.UsageError("--plan compiles the jitted functions the jit probe observes: drop --no-jit-probe")
        from jaxmemprof.capture.jit.plan import DEFAULT_SCALES, PlanOptions

        fit_peak = None
        if plan_device_memory is not None:
            from jaxmemprof.analysis.advice.plan import largest_fitting_peak

            fit_peak = largest_fitting_peak(plan_device_memory)
        planned = PlanOptions(scales=plan_scales or DEFAULT_SCALES, axis=plan_axis, device_bytes=plan_device_memory,
                              fit_peak_bytes=fit_peak)
    if slices:
        from jaxmemprof.facts import tpus

        if no_jit_probe:
            raise click.UsageError("--target compiles the jitted functions the jit probe observes: drop --no-jit-probe")
        for name in slices:
            why = tpus.problem(name)
            if why is not None:
                raise InputError(f"--target {name}", why)
        if tpus.libtpu_missing():
            raise InputError("--target", f"compiling for a TPU slice needs libtpu, which is not installed: "
                                         f"{tpus.INSTALL}")
        slices = tuple(dict.fromkeys(slices))
    return planned, tuple(slices)


def _index_or_python(tgt) -> None:
    """A launcher variable that names no process index: nothing can be
    recorded where the job's other processes would look for it, so the
    script runs as python would (python itself, in this process), after one
    line saying why."""
    from jaxmemprof.capture.rundir import BadProcessIndex, launcher_process

    try:
        launcher_process()
    except BadProcessIndex as exc:
        say(f"jaxmemprof: error: {exc}; running the script unrecorded, as python would")
        flags = ["-c", tgt.command] if tgt.command is not None else ["-m", tgt.module] if tgt.module else [tgt.path]
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os.execv(sys.executable, [sys.executable, *flags, *tgt.args])


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


def _warn_own_options_after(tgt) -> None:
    """The script's arguments are its own, as python passes them: when the
    first is one of run's options (`run tiny.py -o out`) and no `--` set
    them apart, say so, and how to give it to jaxmemprof instead."""
    if not tgt.args or "--" in sys.argv[1:len(sys.argv) - len(tgt.args)]:  # `--`: the user said they are the script's
        return
    first = tgt.args[0]
    name = first.split("=", 1)[0] if first.startswith("--") else first
    ours = {opt for p in click.get_current_context().command.params for opt in p.opts if opt.startswith("-")}
    if name not in ours:
        return
    given = " ".join(tgt.args[:1 if "=" in first or _is_flag(name) else 2])
    where = tgt.path or (f"-m {tgt.module}" if tgt.module else "-c CODE")
    say(f"jaxmemprof: warning: {given} goes to {where}, as python passes it; jaxmemprof's own options go before "
        f"the script: jaxmemprof run {given} {where} ...")


def _is_flag(name: str) -> bool:
    return any(name in p.opts and getattr(p, "is_flag", False) for p in click.get_current_context().command.params)


def _previous(directory) -> tuple | None:
    """(directory, (true peak, live peak)) of the same command's run before this one beside it, or None."""
    from jaxmemprof.analysis.attributed import attribute
    from jaxmemprof.analysis.peaks import headline_peaks
    from jaxmemprof.store.reader import load_run, previous_run

    before = previous_run(directory)
    if before is None:
        return None
    try:
        old = load_run(before)
        if old.snapshots.empty:
            return None
        return before, headline_peaks(attribute(old, analysis_options(top=5)))
    except Exception:  # a damaged or foreign directory beside it: nothing to compare with
        return None


def closing_lines(tgt, directory, status=None, ended_by=None, duration_s=None, before=None):
    """Print the run's summary and findings on stderr; a failure here,
    writing to stderr included, never changes the target's exit status.
    How the script ended is what this process saw (a full disk may have
    kept the manifest from saying it)."""
    stream = stderr_stream()
    if stream is None:
        return
    try:
        from jaxmemprof.analysis.attributed import attribute
        from jaxmemprof.analysis.report import build_report
        from jaxmemprof.analysis.runs import overview
        from jaxmemprof.render import text
        from jaxmemprof.render.report import render_findings, whatif_note
        from jaxmemprof.store.reader import load_run

        run_ = load_run(directory)
        ar = attribute(run_, analysis_options(top=5))
        att = ar.attribution
        ov = overview(ar, top_sites=2)
        if ov.exit_status is None and status is not None:
            ov = dataclasses.replace(ov, exit_status=status, ended_by=ended_by, duration_s=duration_s)
        if before is not None:  # the end phase's progress line cleared
            before(None)
        con = text.console(stream)
        for line in _oom_lines(run_, att.display_path):  # XLA's reason and what fits lead (render/oom.py)
            con.print(line, markup=False, highlight=False)
        if ov.oom_sites is not None:
            text.render_oom(ov.oom_sites, con)
        problems = run_.events.loc[run_.events["kind"].isin(["sampler-error", "probe-error"]), "message"].tolist()
        shown = [tgt.shown(att.display_path), *tgt.args]  # as sites are shown
        report = build_report(ar) if ov.peak_snapshot is not None and len(run_.arrays) <= _SUMMARY_MAX_ARRAYS \
            else None
        text.render_closing(ov, con, target=" ".join(shown), run_dir=str(directory), warnings=problems,
                                answer=None if report is None else report.answer,
                                previous=_previous(directory) if report is not None else None)
        if ov.peak_snapshot is not None:
            if report is not None:
                findings = report.findings
                if findings:
                    con.print(f"findings ({len(findings)}{whatif_note(run_.jit.whatif)}):", markup=False,
                              highlight=False)
                    render_findings(findings, con, limit=2)
            else:
                con.print(f"jaxmemprof: {len(run_.arrays)} arrays recorded: run `jaxmemprof report` for the findings")
        plans = run_.jit.plans
        if plans is not None and not plans.empty or (run_.manifest.get("settings") or {}).get("plan"):
            from jaxmemprof.analysis.advice.plan import build_plan
            from jaxmemprof.render.report import render_plan_closing

            render_plan_closing(build_plan(ar), run_.events, con, str(directory))
        if (run_.manifest.get("settings") or {}).get("targets"):
            from jaxmemprof.analysis.advice.targets import build_targets
            from jaxmemprof.render.targets import render_targets_closing

            render_targets_closing(build_targets(ar), con)
    except Exception as exc:  # the run itself is safe on disk
        # A stderr that cannot be written fails here again, and is silenced.
        say(f"jaxmemprof: warning: could not summarise the run: {exc}")


def _oom_lines(run_, show) -> list:
    """The run's out-of-memory lines, and a --target slice's refusal (analysis/oom.py, render/oom.py)."""
    from jaxmemprof.analysis.oom import out_of_memory, target_refusals
    from jaxmemprof.render.oom import lines, target_lines

    answer = out_of_memory(run_)
    return [f"jaxmemprof: {x}" for x in (lines(answer, show) if answer is not None else [])] + \
        [f"jaxmemprof: target {x}" for x in target_lines(target_refusals(run_), show)]
