"""The API for scripts and notebooks. Cheap no-ops outside a run; importing
it does not import jax."""

from __future__ import annotations

import os
from pathlib import Path


# What a run's settings may be (``jaxmemprof run`` checks the same with click):
# seconds between snapshots; the share of wall time jaxmemprof may take, 0
# (never stretch the interval) or at least a ten-thousandth, below which the
# stretched interval runs past what the clock can wait for.
INTERVAL_RANGE = (0.001, 1e9)
MAX_OVERHEAD_RANGE = (0.0001, 1.0)


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


def mark(label: str) -> None:
    """Record a marker (say, ``"step 12"``) on the run's timeline."""
    from jaxmemprof.capture import session

    s = session.active()
    if s is not None and not s.sampler.failed:
        try:
            s.writer.add_marker(str(label))
        except Exception as exc:  # never break the program being profiled
            s.sampler.fail(exc)


def snapshot(label: str | None = None) -> int | None:
    """Take a snapshot now; returns its number, or None outside a run (or
    before the program has used JAX)."""
    from jaxmemprof.capture import session

    s = session.active()
    if s is None:
        return None
    return s.sampler.snapshot("api", None if label is None else str(label))


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
                s.writer.add_event("probe-error", f"{type(o).__name__}.{event}: {type(exc).__name__}: {exc}"[:2000])
            except Exception:
                pass


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
                 addresses: str = "auto", force: bool = False, name: str = "profile", target: str | None = None):
        check_settings(interval, max_overhead)
        self._settings = dict(interval=interval, max_overhead=max_overhead, jit_probe=jit_probe, addresses=addresses)
        self._output, self._force, self._name = output, force, name
        self.target = target or "profile()"  # what the summary says was recorded
        self.path: Path | None = None
        self.session = None
        self.deferred = False  # inside a run already recording: that run's directory, nothing recorded here
        self.ended_by: str | None = None
        self.error: BaseException | None = None  # what the recorded code raised, if it did
        self._shown = None  # the display's analysis, once made
        self.by_magic = False  # recorded by the notebook's magics (the summary points at %jaxmemprof report)

    # -- recording -------------------------------------------------------------------

    def start(self) -> "ProfiledRun":
        """Start recording (once)."""
        from jaxmemprof.capture import session as session_mod

        if self.path is not None:
            return self
        outer = session_mod.active()
        if outer is not None:
            self.path, self.deferred = Path(outer.directory), True
            return self
        output = Path(self._output) if self._output is not None else session_mod.default_output(self._name)
        directory = session_mod.prepare_directory(output, self._force)
        s = session_mod.Session(directory, target_argv=[], on_finish=write_process_result, **self._settings)
        s.start()
        self.path, self.session = Path(directory), s
        _tell("started", s)
        s.sampler.snapshot("api", "start")
        return self

    def stop(self, error: BaseException | None = None) -> "ProfiledRun":
        """Stop recording: the last snapshot (``exit``, or ``exception`` /
        ``oom`` for the ``error`` the recorded code raised), then the run is
        finished. Nothing for a run deferred to an outer one, or stopped."""
        from jaxmemprof.capture.tracebacks import is_out_of_memory

        s = self.session
        if s is None or self.ended_by is not None:
            return self
        self.error = error
        if error is None:
            trigger, label = "exit", None
        else:
            trigger, label = ("oom" if is_out_of_memory(error) else "exception"), type(error).__name__
        index = s.sampler.snapshot(trigger, label)
        _tell("ending", s, index)
        s.stop(None, trigger)
        self.ended_by = trigger
        _tell("ended", s)
        return self

    @property
    def recording(self) -> bool:
        return self.session is not None and self.ended_by is None

    def __enter__(self) -> "ProfiledRun":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> bool:
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
            addresses: str = "auto", force: bool = False) -> ProfiledRun:
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
    --addresses``.

    Inside a run already recording (``jaxmemprof run``, or an enclosing
    ``profile()``), it defers quietly to that run: it records nothing of its
    own and stands for that run's directory.
    """
    return ProfiledRun(output, interval=interval, max_overhead=max_overhead, jit_probe=jit_probe,
                       addresses=addresses, force=force)
