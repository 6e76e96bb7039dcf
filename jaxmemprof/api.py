"""The API for scripts and notebooks. Cheap no-ops outside a run; importing
it does not import jax."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path


# What a run's settings may be (``jaxmemprof run`` checks the same with click):
# seconds between snapshots; the share of wall time jaxmemprof may take, 0
# (never stretch the interval) or at least a ten-thousandth, below which the
# stretched interval runs past what the clock can wait for.
INTERVAL_RANGE = (0.001, 1e9)
MAX_OVERHEAD_RANGE = (0.0001, 1.0)


def write_process_summary(path) -> bool:
    """What a process of a job does with its run as it ends: analyses it and
    writes its summary (analysis/job.py), so that `report` on the job
    reads one small file per process. Imported here when called: the
    analysis (and pandas) never load before the program runs."""
    from jaxmemprof.analysis.job import write_summary

    return write_summary(path)


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


@contextmanager
def profile(output=None, *, interval: float = 0.5, max_overhead: float = 0.02, jit_probe: bool = True,
            addresses: str = "auto", force: bool = False):
    """Record device memory while the block runs, into the run directory
    ``output`` (default: ``jaxmemprof-runs/profile-<time>``)::

        with jaxmemprof.profile("runs/finetune"):
            train()

    Yields the run directory's path. Functions jitted inside the block (with
    ``jax.jit`` called there) are observed by the jit probe. ``addresses``:
    which buffer addresses to read, as ``jaxmemprof run --addresses``.

    Inside a run already recording (``jaxmemprof run``, or an enclosing
    ``profile()``), it defers quietly to that run: it records nothing of its
    own and yields that run's directory.
    """
    from jaxmemprof.capture import session as session_mod
    from jaxmemprof.capture.runner import is_out_of_memory

    check_settings(interval, max_overhead)
    outer = session_mod.active()
    if outer is not None:
        yield outer.directory
        return
    directory = session_mod.prepare_directory(
        Path(output) if output is not None else session_mod.default_output("profile"), force
    )
    s = session_mod.Session(directory, target_argv=[], interval=interval, max_overhead=max_overhead,
                            jit_probe=jit_probe, addresses=addresses, on_finish=write_process_summary)
    s.start()
    s.sampler.snapshot("api", "start")
    try:
        yield directory
    except BaseException as exc:
        trigger = "oom" if is_out_of_memory(exc) else "exception"
        s.sampler.snapshot(trigger, type(exc).__name__)
        s.stop(None, trigger)
        raise
    else:
        s.sampler.snapshot("exit")
        s.stop(None, "exit")
