"""The API for scripts and notebooks. Cheap no-ops outside a run; importing
it does not import jax."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from jaxmemprof.capture.session import Session
    from jaxmemprof.notebook.display import Shown


# What a run's settings may be (``jaxmemprof run`` checks the same with click):
# seconds between snapshots; the share of wall time jaxmemprof may take, 0
# (never stretch the interval) or at least a ten-thousandth, below which the
# stretched interval runs past what the clock can wait for.
INTERVAL_RANGE = (0.001, 1e9)
MAX_OVERHEAD_RANGE = (0.0001, 1.0)
# The most seconds the end's compiles of the fixes may take (run --verify-seconds).
VERIFY_SECONDS_MAX = 86400


def write_process_result(path) -> bool:
    """What a process of a job does with its run as it ends: analyses it and
    writes its summary (analysis/job.py), so that `report` on the job
    reads one small file per process. Imported here when called: the
    analysis (and pandas) never load before the program runs."""
    from jaxmemprof.analysis.job import write_process_result

    return write_process_result(path)


def check_settings(interval, max_overhead) -> None:
    """ValueError unless ``interval`` and ``max_overhead`` are finite
    numbers in their ranges (a NaN would be written into manifest.json)."""
    import math

    for name, value, (low, high), zero in (("interval", interval, INTERVAL_RANGE, False),
                                          ("max_overhead", max_overhead, MAX_OVERHEAD_RANGE, True)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{name} must be a number, not {value!r}")
        if not math.isfinite(value) or not ((zero and value == 0) or low <= value <= high):
            allowed = f"0 or {low:g} to {high:g}" if zero else f"{low:g} to {high:g}"
            raise ValueError(f"{name} must be {allowed}, not {value!r}")


def check_verify_seconds(value) -> None:
    """ValueError unless ``value`` is None or a number of seconds from 0 to
    86400 (run --verify-seconds)."""
    import math

    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 <= value <= VERIFY_SECONDS_MAX:
        raise ValueError(f"verify_seconds must be None or 0 to {VERIFY_SECONDS_MAX:g} seconds, not {value!r}")


def mark(label: str) -> None:
    """Record a marker (say, ``"step 12"``) on the run's timeline. Each
    marker counts as a step: at fixed step numbers the run takes a snapshot
    here, in the calling thread (capture/steps.py). A program that marks no
    steps has the calls of its jitted step counted instead."""
    from jaxmemprof.capture import session

    s = session.active()
    if s is not None:
        s.program_marks = True  # its steps from now on: no longer the calls of its jitted step
        s.place_marker(str(label))


def snapshot(label: str | None = None) -> int | None:
    """Take a snapshot now; returns its number, or None outside a run (or
    before the program has used JAX). From then on the program's markers take
    no snapshots of their own (capture/steps.py): it chose its snapshots."""
    from jaxmemprof.capture import session

    s = session.active()
    if s is None:
        return None
    s.sampler.steps.own = True  # the program takes its snapshots: none at fixed steps from now on
    import time

    w0, c0 = time.perf_counter(), time.thread_time()
    index = s.sampler.snapshot("api", None if label is None else str(label))
    s.sampler.in_program_thread(w0, c0)  # what it cost the program's thread, said at the run's end
    return index


# Whoever records the whole kernel (the notebook extension, jaxmemprof/notebook/)
# hears of each run this module records: ``started(session)`` once it
# records, ``ending(session, snapshot)`` after its last snapshot (while the
# run can still be written), ``ended(session)`` once it is finished.
observers: list = []


def _tell(event: str, *args) -> None:
    for o in list(observers):
        try:
            getattr(o, event)(*args)
        except Exception as exc:  # never break the program being profiled
            s = args[0]
            try:
                from jaxmemprof.capture.tracebacks import described

                s.writer.add_event("probe-error", f"{type(o).__name__}.{event}: {described(exc)}"[:2000])
            except Exception:
                pass


class _EndInterrupts:
    """While a run ends, in the main thread: a SIGINT does what the handler
    before does (Python's raises KeyboardInterrupt, which skips the rest of
    the end's work) until :meth:`hold` is called; from then on (the run
    being finalised) a SIGINT waits until the block is left, then is handed
    to that handler, unless an exception is already leaving the block.
    Elsewhere (another thread, SIGINT not handled in Python): nothing
    changes."""

    def __init__(self):
        self.previous: Callable[..., Any] | None = None
        self.armed = True
        self.heard = 0
        self.waiting = False

    def __enter__(self) -> _EndInterrupts:
        import signal
        import threading

        if threading.current_thread() is not threading.main_thread():
            return self
        try:
            previous = signal.getsignal(signal.SIGINT)
            if callable(previous):
                signal.signal(signal.SIGINT, self._heard)
                self.previous = previous
        except (ValueError, OSError, TypeError):
            pass
        return self

    def _heard(self, signum, frame) -> None:
        if self.armed:
            self.heard += 1
            if self.previous is not None:  # set before this handler is
                self.previous(signum, frame)
        else:
            self.waiting = True

    def check(self) -> None:
        """A KeyboardInterrupt raised where it was swallowed (Python runs a
        signal's handler wherever the main thread is: in a weak reference's
        callback or a finaliser, whose exceptions are only printed) still
        interrupts, here, between the end's steps."""
        import signal

        if self.heard and self.armed and self.previous is signal.default_int_handler:
            raise KeyboardInterrupt

    def hold(self) -> None:
        self.armed = False

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        import signal

        previous, self.previous = self.previous, None
        if previous is None:
            return False
        try:
            if signal.getsignal(signal.SIGINT) == self._heard:
                signal.signal(signal.SIGINT, previous)
        except (ValueError, OSError, TypeError):
            pass
        if self.waiting and exc_type is None:
            previous(signal.SIGINT, None)
        return False


class ProfiledRun:
    """A run that ``profile()`` records (and the notebook's ``%%jaxmemprof``),
    and what it says once it ended.

    A context manager (``with jaxmemprof.profile(...) as run:``) or started
    and stopped by hand (:meth:`start`, :meth:`stop`). It stands for the run
    directory where a path is wanted (``os.fspath(run)``, ``run / "manifest.json"``,
    ``load_run(run)``); in a notebook its display is the run's summary and
    findings. :meth:`report` is the whole report, :meth:`html` the report's
    self-contained HTML page, :meth:`load` the run's tables (``load_run``).
    """

    def __init__(self, output=None, *, interval: float = 0.5, max_overhead: float = 0.02, jit_probe: bool = True,
                 addresses: str = "auto", force: bool = False, name: str = "profile", target: str | None = None,
                 holders: bool = True, verify_seconds: float | None = None, plan=None, targets: tuple = ()):
        # plan (capture/jit/plan.py's PlanOptions) and targets (TPU slices):
        # run's --plan and --target, as the notebook's magics give them
        # (cli/record.py plan_and_targets checks them).
        check_settings(interval, max_overhead)
        check_verify_seconds(verify_seconds)
        self._settings = dict(interval=interval, max_overhead=max_overhead, jit_probe=jit_probe, addresses=addresses,
                              holders=bool(holders), verify_s=verify_seconds, plan=plan, targets=tuple(targets))
        self._output, self._force, self._name = output, force, name
        self.target = target or "profile()"  # what the summary says was recorded
        self.path: Path | None = None
        self.session: Session | None = None
        self.deferred = False  # inside a run already recording: that run's directory, nothing recorded here
        self.ended_by: str | None = None
        self.error: BaseException | None = None  # what the recorded code raised, if it did
        self._shown: Shown | None = None  # the display's analysis, once made
        self.by_magic = False  # recorded by the notebook's magics (the summary points at %jaxmemprof report)
        self.interrupted: BaseException | None = None  # what interrupted its end, if anything did

    # -- recording -------------------------------------------------------------------

    def start(self) -> ProfiledRun:
        """Start recording (once). Interrupted as it starts (a KeyboardInterrupt
        before the block's code runs), the run is finalised and the interrupt
        goes on: no sampler is left recording."""
        from jaxmemprof.capture import session as session_mod

        if self.path is not None:
            return self
        outer = session_mod.active()
        if outer is not None:
            self.path, self.deferred = Path(outer.directory), True
            return self
        output = Path(self._output) if self._output is not None else session_mod.default_output(self._name)
        directory = session_mod.prepare_directory(output, self._force)
        s = None
        try:
            s = session_mod.Session(directory, target_argv=[], on_finish=write_process_result, **self._settings)
            s.start()
            self.path, self.session = Path(directory), s
            _tell("started", s)
            s.sampler.snapshot("api", "start")
        except BaseException as exc:
            with _EndInterrupts() as interrupts:
                interrupts.hold()
                if s is None:  # the session never made: its claim let go
                    session_mod.release_directory(directory)
                else:
                    self.path, self.session = Path(directory), s
                    self._end(s, "exception", exc)
            raise
        return self

    def stop(self, error: BaseException | None = None) -> ProfiledRun:
        """Stop recording: the last snapshot (``exit``, or ``exception`` /
        ``oom`` for the ``error`` the recorded code raised), then the run is
        finished. Nothing for a run deferred to an outer one, or stopped.

        An interrupt (KeyboardInterrupt: a notebook's kernel interrupt, Ctrl-C)
        during that end skips the rest of its work (the holder search, XLA's
        figures, the compiles of the fixes, --plan, --target); the run is
        finalised all the same (its sampler stopped, its manifest finished,
        its lock released: another run can record), then the interrupt goes
        on. An interrupt while it is finalised waits until it is."""
        from jaxmemprof.capture.tracebacks import is_out_of_memory

        s = self.session
        if s is None or self.ended_by is not None:
            return self
        self.error = error
        if error is None:
            trigger, label = "exit", None
        else:
            trigger, label = ("oom" if is_out_of_memory(error) else "exception"), type(error).__name__
        interrupted, done = None, False
        with _EndInterrupts() as interrupts:
            try:
                # The recorded code's end (its time, how it ended), before the end's work.
                s.script_ended(None, trigger)
                index = s.sampler.snapshot(trigger, label)
                interrupts.check()
                _tell("ending", s, index)
                interrupts.check()
                s.sampler.stop()
                if s.probe is not None:
                    s.probe.uninstall(trigger)  # XLA's figures, the compiles of the fixes, --plan, --target
                done = True
            except BaseException as exc:
                interrupted = exc
            finally:
                interrupts.hold()  # from here on, an interrupt waits until the run is finalised
                cut = None if done else interrupted or KeyboardInterrupt()
                if cut is not None and interrupts.heard and not isinstance(cut, KeyboardInterrupt):
                    # A SIGINT's KeyboardInterrupt that came out of a library as another exception: still the
                    # interrupt that cut the end short.
                    cut = KeyboardInterrupt()
                self._end(s, trigger, cut)
        if interrupted is not None:
            raise interrupted
        return self

    def _end(self, s, ended_by: str, interrupted: BaseException | None) -> None:
        """The run finalised (its end's work done, or cut short by
        ``interrupted``: the rest skipped, and the run says so), then those
        who heard it start told it ended."""
        import signal

        self.interrupted = interrupted
        probe = s.probe
        try:
            s.script_ended(None, ended_by)  # (done already, unless interrupted before)
            if interrupted is None:
                s.finalise_end()
            else:
                s.sampler.stop()
                if isinstance(interrupted, KeyboardInterrupt):
                    s.finalise_end(skipped_by=signal.SIGINT)
                else:
                    if probe is not None:
                        probe.uninstall(None, end_work=False)
                    try:
                        s.writer.add_event("warning", f"the end of the run was interrupted "
                                                      f"({type(interrupted).__name__}): the rest of its work was "
                                                      "skipped")
                    except Exception:
                        pass
                    s.finalise_end()
        finally:
            s.probe = probe  # the notebook's kernel takes its functions back from it
            self.ended_by = ended_by
            _tell("ended", s)

    @property
    def recording(self) -> bool:
        return self.session is not None and self.ended_by is None

    def __enter__(self) -> ProfiledRun:
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        self.stop(exc)
        return False

    # -- what it says ----------------------------------------------------------------

    def load(self):
        """The run's tables (:func:`jaxmemprof.load_run`)."""
        from jaxmemprof.store.reader import load_run

        return load_run(self._where())

    def summary(self):
        """The run's summary and findings (what a notebook shows for it)."""
        return self._analysed().summary()

    def report(self, *, explain: bool = False, top: int = 10):
        """The whole report, as ``jaxmemprof report`` prints it (``str()``
        of it is the text)."""
        return self._analysed(top).report(explain=explain)

    def html(self):
        """The report's self-contained HTML page: shown inline in a notebook
        (in an iframe, offline), ``.page`` its text, ``.save(path)`` a file."""
        return self._analysed().page()

    def _analysed(self, top: int = 10):
        """The run read and analysed once (again once it has ended, or for
        another ``top``)."""
        from jaxmemprof.notebook.display import Shown

        if self._shown is None or self._shown.stale(self) or self._shown.top != top:
            self._shown = Shown(self, top=top)
        return self._shown

    def _where(self) -> Path:
        if self.path is None:
            raise RuntimeError("the run has not started: use it in a with block, or call start()")
        return self.path

    def _repr_mimebundle_(self, include=None, exclude=None):
        return self.summary()._repr_mimebundle_(include, exclude)

    def _repr_pretty_(self, p, cycle):
        p.text(str(self.summary()))

    # -- a path ------------------------------------------------------------------------

    def __fspath__(self) -> str:
        return os.fspath(self._where())

    def __truediv__(self, other) -> Path:
        return self._where() / other

    def __str__(self) -> str:
        return str(self.path) if self.path is not None else "(not started)"

    def __repr__(self) -> str:
        state = ("not started" if self.path is None else "deferred to the run recording" if self.deferred
                 else "recording" if self.recording else f"ended ({self.ended_by})")
        return f"<jaxmemprof run {self}: {state}>"

    def __eq__(self, other) -> bool:
        if isinstance(other, ProfiledRun):
            return self.path is not None and self.path == other.path
        if isinstance(other, (str, os.PathLike)):
            return self.path is not None and self.path == Path(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.path)


def profile(output=None, *, interval: float = 0.5, max_overhead: float = 0.02, jit_probe: bool = True,
            addresses: str = "auto", force: bool = False, holders: bool = True,
            verify_seconds: float | None = None) -> ProfiledRun:
    """Record device memory while the block runs, into the run directory
    ``output`` (default: ``jaxmemprof-runs/profile-<time>``)::

        with jaxmemprof.profile("runs/finetune") as run:
            train()
        run              # in a notebook: the summary and findings
        run.report()     # the whole report; run.html(): its page, inline
        jaxmemprof.load_run(run)   # the tables

    Gives a :class:`ProfiledRun`, which stands for the run directory where a
    path is wanted. Functions jitted inside the block (with ``jax.jit``
    called there) are observed by the jit probe; in a notebook with
    ``%load_ext jaxmemprof``, every function jitted in the kernel since.
    ``addresses``: which buffer addresses to read, as ``jaxmemprof run
    --addresses``; ``holders=False``: no search for the Python references
    holding arrays (``run --no-holders``); ``verify_seconds``: the budget of
    the compiles of the fixes at the end (``run --verify-seconds``; 0: none).

    Ctrl-C (KeyboardInterrupt) inside the block ends the run as any exception
    does; during the block's end it skips the rest of the end's work, and the
    run is finalised all the same (no sampler left recording) before the
    interrupt goes on.

    Inside a run already recording (``jaxmemprof run``, or an enclosing
    ``profile()``), it defers quietly to that run: it records nothing of its
    own and stands for that run's directory.
    """
    return ProfiledRun(output, interval=interval, max_overhead=max_overhead, jit_probe=jit_probe,
                       addresses=addresses, force=force, holders=holders, verify_seconds=verify_seconds)
