"""The pytest plugin: device-memory limits on tests, and ``--jaxmemprof``.

Registered by installing jaxmemprof (the ``pytest11`` entry point)::

    @pytest.mark.limit_device_memory("64 MiB")   # the test's peak device memory
    @pytest.mark.limit_device_leaks("1 MiB")     # live device bytes after it less before

    pytest --jaxmemprof                          # profile every test; top tests by peak at the end

A test with a marker (or every test, with ``--jaxmemprof-runs``) is recorded
as a run of its own (``capture.session``: snapshots when pytest's call of it
begins, when the test function itself begins (after fixtures and setUp:
the start every figure counts from), while it runs, when it returns, and
after it; the jit probe on the functions it jits), then measured by
``analysis.check.measure_test``. ``--jaxmemprof`` alone keeps an unmarked
test's totals in memory (``capture.totals.TotalsSession``), measured by
``analysis.check.measure_totals``. Loading this module imports neither jax,
pandas nor the capture code: a test suite that uses neither marker nor flag
pays two marker look-ups per test.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from jaxmemprof.capture.sampler import Sampler
    from jaxmemprof.capture.session import Session
    from jaxmemprof.capture.totals import TotalsSession

_MARKERS = {
    "limit_device_memory": "limit_device_memory(size): fail the test when its peak device memory (snapshots, "
                           "the arrays its locals hold when it returns, XLA's peak in its jitted calls) exceeds "
                           "size, e.g. '64 MiB' or an int of bytes (jaxmemprof)",
    "limit_device_leaks": "limit_device_leaks(size, warmups=0): fail the test when it leaves more than size of "
                          "device memory alive after it (after garbage collection) than at its start; warmups: "
                          "runs of the test before the measured one, for caches its first run fills (jaxmemprof)",
}
_PROPERTY = "jaxmemprof_peak_bytes"
_INTERVAL_S = 0.05  # between the snapshots taken while a test runs (the budget may stretch it)
_MAX_OVERHEAD = 0.05  # a recorded test's sampling keeps to half of it: 2.5 % of its time
_TOTALS_OVERHEAD = 0.01  # --jaxmemprof alone: 0.5 %
# Calls made between the wrapper and the test function's own code (a decorator's, a parameterized
# test's) that are looked through for its frame, at most.
_FRAME_SEARCH_CALLS = 20_000


def pytest_addoption(parser):
    group = parser.getgroup("jaxmemprof", "device memory of JAX tests (jaxmemprof)")
    group.addoption("--jaxmemprof", action="store_true", default=False,
                    help="Record the device memory of every test; print the tests with the highest peaks at the end.")
    group.addoption("--jaxmemprof-top", type=int, default=10, metavar="N",
                    help="Tests listed by --jaxmemprof (default 10).")
    group.addoption("--jaxmemprof-runs", default=None, metavar="DIR",
                    help="Keep each recorded test's run in DIR (one directory per test, for jaxmemprof report); "
                         "by default they are recorded in a temporary directory and removed.")


def pytest_configure(config):
    for _name, text in _MARKERS.items():
        config.addinivalue_line("markers", text)
    config.pluginmanager.register(_Peaks(config), "jaxmemprof-peaks")


def _size(marker, value) -> int:
    """``value`` in bytes; a bad one fails the test with a one-line message."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    from jaxmemprof.units import parse_size

    try:
        return parse_size(str(value).replace(" ", ""), memory=True)
    except ValueError as exc:
        problem = str(exc)
    except OverflowError:  # digits past a float's range
        problem = f"not a size: {value!r} (too large)"
    pytest.fail(f"{marker.name}: {problem}", pytrace=False)  # outside the except: one line, nothing chained


def _limit(marker) -> tuple[int, int]:
    """The marker's size in bytes and its warm-up runs (limit_device_leaks
    only); a bad one fails the test with a one-line message."""
    options = {"size", "warmups"} if marker.name == "limit_device_leaks" else {"size"}
    kwargs = dict(marker.kwargs)
    if len(marker.args) + ("size" in kwargs) != 1 or len(marker.args) > 1 or not set(kwargs) <= options:
        usage = (f"@pytest.mark.{marker.name}('1 MiB', warmups=1)" if "warmups" in options
                 else f"@pytest.mark.{marker.name}('64 MiB')")
        takes = "one size and warmups=N" if "warmups" in options else "one size"
        pytest.fail(f"{marker.name} takes {takes}, e.g. {usage}", pytrace=False)
    value = marker.args[0] if marker.args else kwargs["size"]
    warmups = kwargs.get("warmups", 0)
    if not isinstance(warmups, int) or isinstance(warmups, bool) or warmups < 0:
        pytest.fail(f"{marker.name}: warmups is a number of runs, 0 or more, not {warmups!r}", pytrace=False)
    return _size(marker, value), warmups


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    config = item.config
    memory = item.get_closest_marker("limit_device_memory")
    leaks = item.get_closest_marker("limit_device_leaks")
    profile_all = config.getoption("jaxmemprof", False)
    if memory is None and leaks is None and not profile_all:
        return (yield)
    limit = _limit(memory)[0] if memory is not None else None
    leak_limit, warmups = _limit(leaks) if leaks is not None else (None, 0)

    from jaxmemprof.capture import session as session_mod

    # A limit that cannot be measured fails its test (after the test has run,
    # so that the test's own failure comes first); without a limit
    # (--jaxmemprof alone) it is a warning.
    limits = [m.name for m in (memory, leaks) if m is not None]
    if session_mod.active() is not None:
        return _unmeasured(item, limits, (yield), "this test runs inside a jaxmemprof run already (run pytest "
                                                  "itself for its limits)")
    if warmups:
        _warm_up(item, warmups)
    # A limit (or runs to keep) records the test's run, for the lines a
    # failure names; --jaxmemprof alone keeps its totals in memory.
    recorded = bool(limits) or bool(config.getoption("jaxmemprof_runs", None))
    recorder, why = None, ""
    try:
        recorder = (_Recorder if recorded else _Totals)(item, dumps=limit is not None, leaks=leak_limit is not None)
        recorder.start()
    except Exception as exc:  # an unwritable run directory, say: the test runs, unmeasured
        why = _one_line(exc)
        if recorder is not None:
            recorder.unwrap()
            _quietly(recorder.stop, True)
    if why:  # outside the except: the test does not run inside its handling, nor the failure chain to it
        return _unmeasured(item, limits, (yield), why)
    assert recorder is not None  # started, or why says why not
    try:
        result = yield
    except BaseException as exc:
        # A test that failed is measured too (for --jaxmemprof's list), never judged.
        _out_of_memory_note(exc, limits)
        recorder.unwrap()
        try:
            measured = recorder.stop(failed=True)
            if measured is not None:
                item.user_properties.append((_PROPERTY, measured.peak_bytes))
        except Exception:
            pass
        raise
    recorder.unwrap()
    # A unittest.TestCase's failures, errors and skips (of its setUp, its
    # body, its tearDown) are recorded by pytest's unittest support, not raised here.
    failed = recorder.body_failed or bool(getattr(item, "_excinfo", None))
    try:
        measured = recorder.stop(failed=failed)
    except Exception as exc:
        measured, why = None, _one_line(exc)
    if why:  # outside the except, as above
        return result if failed else _unmeasured(item, limits, result, why)
    if measured is not None:
        item.user_properties.append((_PROPERTY, measured.peak_bytes))
    if failed:
        return result
    if measured is None:
        return _unmeasured(item, limits, result, recorder.problem or "its run was not recorded")
    if recorder.problem:  # sampling stopped, or snapshots lost: the figures are not all there
        return _unmeasured(item, limits, result, recorder.problem)
    if measured.snapshots == 0 and _jax_up():
        # No snapshot reads as "JAX never came up" (nothing on a device): true
        # only while no backend is up. One that came up during the test and
        # was never seen (its run ended before a snapshot) is not measured.
        return _unmeasured(item, limits, result, "no snapshot was taken while JAX was up")
    over = limit is not None and measured.peak_bytes > limit
    unended = leak_limit is not None and measured.leak_bytes is None
    leaked = leak_limit is not None and not unended and measured.leak_bytes > leak_limit
    n = 2 if over and leaked else 5  # 6 lines at most in all
    problems = []
    if over and limit is not None:
        problems.append(_peak_message(measured, limit, n))
    if leaked and leak_limit is not None:
        problems.append(_leak_message(measured, leak_limit, n))
    if unended:
        problems.append("jaxmemprof: limit_device_leaks not checked: device memory not measured: no snapshot was "
                        "taken after it")
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)
    return result


def _warm_up(item, n: int) -> None:
    """Run the test ``n`` times before the measured run, unrecorded: a
    unittest.TestCase whole (setUp, the test, tearDown and cleanups, on the
    same instance, its outcome kept from pytest's report), any other test
    as pytest runs it (a function with the same fixture values: fixtures
    are set up once). A warm-up that fails or skips fails or skips the test."""
    import unittest

    instance = getattr(item, "instance", None)
    for k in range(1, n + 1):
        if not isinstance(instance, unittest.TestCase):
            item.runtest()
            continue
        result = unittest.TestResult()
        instance(result)
        problems = result.errors + result.failures
        if problems:
            pytest.fail(f"jaxmemprof: warm-up run {k} of {n} failed:\n{problems[0][1].rstrip()}", pytrace=False)
        if result.skipped:
            pytest.skip(str(result.skipped[0][1]))


def _jax_up() -> bool:
    from jaxmemprof.capture.sampler import jax_ready

    return jax_ready() is not None


def _out_of_memory_note(exc: BaseException, limits) -> None:
    """A test that ran out of memory: XLA's reason, read (xla/oom.py: needed,
    available, the allocation), added to its error's notes, which pytest
    shows under the traceback; where the message is not one jaxmemprof reads,
    that is said."""
    from jaxmemprof.xla.oom import read

    names = " and ".join(limits) or "jaxmemprof"
    from jaxmemprof.capture.tracebacks import described, message

    try:
        # The test's exception is the program's: its text read without running its code (never its __str__).
        text = described(exc) if isinstance(exc, MemoryError) else message(exc) or ""
        if not isinstance(exc, MemoryError) and "RESOURCE_EXHAUSTED" not in text[:300]:
            return
        r = read(text)
        from jaxmemprof.units import format_bytes

        if r is None:
            note = f"jaxmemprof: {names}: the test ran out of memory; its message is not one jaxmemprof reads"
        else:
            said = [f"needs {format_bytes(r.needed_bytes)} of {r.what or 'memory'}" if r.needed_bytes else "",
                    f"could not allocate {format_bytes(r.request_bytes)}" if r.request_bytes else "",
                    f"the device has {format_bytes(r.available_bytes)}" if r.available_bytes else ""]
            note = (f"jaxmemprof: {names}: the test ran out of memory ({r.when}): "
                    f"{'; '.join(x for x in said if x) or 'XLA gave no figures'} (XLA: {r.reason})")
        exc.add_note(note)
    except Exception:
        pass


def _one_line(exc: BaseException) -> str:
    from jaxmemprof.capture.tracebacks import described
    from jaxmemprof.errors import InputError

    if type(exc) is InputError:
        return " ".join(str(exc).split())  # names the file and the problem already
    return " ".join(described(exc).split())


def _unmeasured(item, limits, result, why: str):
    """A test whose device memory could not be measured: it fails when it
    has a limit (the limit was not checked), else a warning says so."""
    if limits:
        names = " and ".join(limits)
        pytest.fail(f"jaxmemprof: {names} not checked: device memory not measured: {why}", pytrace=False)
    item.warn(pytest.PytestWarning(f"jaxmemprof: device memory not measured: {why}"))
    return result


def _quietly(fn, *args):
    try:
        fn(*args)
    except Exception:
        pass


def _codes(fn) -> list:
    """The code objects of ``fn`` and of the functions it wraps (``__wrapped__``:
    functools.wraps, absl's parameterized tests), outermost first."""
    import types

    codes = []
    for _ in range(32):
        code = getattr(fn, "__code__", None)
        if isinstance(code, types.CodeType) and code not in codes:
            codes.append(code)
        fn = getattr(fn, "__wrapped__", None)
        if fn is None:
            break
    return codes


def hold_frames(codes: list):
    """The frames of ``codes`` as their calls begin in this thread, held (a
    frame held outlives its return with its locals). A profile function
    watches the calls until the innermost of ``codes`` begins (or for
    _FRAME_SEARCH_CALLS calls), then removes itself: nothing is watched
    while the test runs. Returns (frames, stop), or None where a profiler
    has a profile function set already."""
    if not codes or sys.getprofile() is not None:
        return None
    wanted, innermost = set(codes), codes[-1]
    frames: list = []
    left = [_FRAME_SEARCH_CALLS]

    def on_event(frame, event, arg):
        if event == "call" and frame.f_code in wanted:
            frames.append(frame)
            if frame.f_code is innermost:
                sys.setprofile(None)
            return
        left[0] -= 1
        if left[0] <= 0:
            sys.setprofile(None)

    def stop():
        if sys.getprofile() is on_event:
            sys.setprofile(None)

    sys.setprofile(on_event)
    return frames, stop


class _Measure:
    """One test's recording, around pytest's call of it. The test function
    (``item.obj``, which pytest calls for a plain test and which a
    unittest.TestCase calls between setUp and tearDown) is wrapped for the
    time of the call: a snapshot labelled ``start`` when it begins (after a
    garbage collection: a full one for a leak limit, else of the young
    generations), its frames held while it runs, a snapshot labelled
    ``return`` when it returns (its locals still alive); the last snapshot
    after it, in ``stop``. What was made before it (fixtures, setUp,
    setUpClass) is then alive at its start: not the test's."""

    def __init__(self, item, dumps: bool, leaks: bool):
        self.item = item
        self.leaks = leaks  # a full garbage collection before the start snapshot and the last
        self.dumps = dumps  # read XLA's dump of the jitted functions (to name the lines inside a call)
        self.sampler: Sampler | None = None  # set by start
        self.problem = ""  # why the figures are not all there (set by stop)
        self.body_failed = False  # the test function raised
        self.entered = False  # the test function began
        self._original = None  # item.obj, while it is wrapped
        self._held = None

    def _wrap(self) -> bool:
        """Wrap the test function; False where it cannot be (no Python test
        function, or a coroutine that a plugin must see as one)."""
        import inspect

        item = self.item
        original = getattr(item, "obj", None) if isinstance(item, pytest.Function) else None
        if original is None or not callable(original):
            return False
        inner = inspect.unwrap(original)
        if any(f(inner) or f(original) for f in (inspect.iscoroutinefunction, inspect.isasyncgenfunction)):
            return False
        import functools

        codes, recorder = _codes(original), self

        @functools.wraps(original)
        def test_function(*args, **kwargs):
            __tracebackhide__ = True
            recorder._enter(codes)
            try:
                return original(*args, **kwargs)
            except BaseException:
                recorder.body_failed = True
                raise
            finally:
                recorder._leave()

        self._original = original
        item.obj = test_function
        return True

    def unwrap(self) -> None:
        if self._original is not None:
            self.item.obj, self._original = self._original, None

    def _start_snapshot(self) -> None:
        import gc

        # The garbage of earlier tests (and of the set-up) would otherwise be in
        # the start's bytes, and freed during the test, hide as much of it. A
        # full collection for a leak limit; else the young generations (a full
        # one is 50-100 ms in a process with JAX and pandas loaded, the young
        # ones a few).
        gc.collect() if self.leaks else gc.collect(1)
        assert self.sampler is not None, "started"
        self.sampler.snapshot("api", "start")

    def _enter(self, codes) -> None:
        self.entered = True
        self._start_snapshot()
        self._held = hold_frames(codes)

    def _leave(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held[1]()
        assert self.sampler is not None, "started"
        self.sampler.snapshot("api", "return")  # the held frames' locals still alive
        if held is not None:
            held[0].clear()


class _Recorder(_Measure):
    """A test with a limit (or every test, with --jaxmemprof-runs): a run
    directory of its own (``capture.session``: the sampler's snapshots, with
    every live array, and the jit probe), read back by
    ``analysis.check.measure_test``."""

    def __init__(self, item, dumps: bool, leaks: bool):
        super().__init__(item, dumps, leaks)
        keep = item.config.getoption("jaxmemprof_runs", None)
        if keep:
            name = re.sub(r"[^A-Za-z0-9._-]+", "_", item.nodeid).strip("_")[:150] or "test"
            if name != item.nodeid:  # two node ids that read alike get two directories
                import hashlib

                name += "-" + hashlib.sha1(item.nodeid.encode("utf-8", "surrogateescape")).hexdigest()[:8]
            self.directory, self.temporary = os.path.join(keep, name), False
        else:
            self.directory, self.temporary = tempfile.mkdtemp(prefix="jaxmemprof-test-"), True
        self.session: Session | None = None

    def start(self) -> None:
        from pathlib import Path

        from jaxmemprof.capture import session as session_mod

        path = session_mod.prepare_directory(Path(self.directory), force=True)
        # A temporary run is read for its figures alone and removed: no search for the Python
        # references holding its arrays (a walk of pytest's whole heap, up to 2.5 s a test).
        s = session_mod.Session(path, target_argv=[], interval=_INTERVAL_S, max_overhead=_MAX_OVERHEAD,
                                command=["pytest", self.item.nodeid], holders=not self.temporary)
        if s.probe is not None:
            s.probe.planner.verify_s = 0.0  # a test's limits read no finding: no verifying compiles
            if not self.dumps:
                s.probe.dump_min_s = s.probe.dump_share = 0.0
        self.session = s.start()
        self.sampler = s.sampler
        if self._wrap():
            # Where the test function is never called (a unittest skip, a
            # failing setUp), or is called some other way: the bytes alive
            # when pytest's call began are the start.
            s.sampler.snapshot("api", "call")
        else:
            self._start_snapshot()

    def stop(self, failed: bool):
        """End the run; the test's figures (``failed``: the test raised)."""
        import gc

        s = self.session
        try:
            if s is None:
                return None
            # The sampler stops first, then the jit probe: XLA's dumps are made
            # while the test's jitted functions are still known (a snapshot
            # after the test would find them dropped), and their lowerings
            # are freed before the last snapshot.
            s.sampler.stop()
            if s.probe is not None:
                probe, s.probe = s.probe, None
                probe.uninstall()
            if self.leaks:
                gc.collect()
            s.sampler.snapshot("exception" if failed else "exit")
            s.stop(None, "exception" if failed else "exit")
            from jaxmemprof.analysis.attributed import attribute
            from jaxmemprof.analysis.check import lost_snapshots, measure_test
            from jaxmemprof.analysis.options import Options
            from jaxmemprof.store.reader import load_run

            run = load_run(s.path)
            lost = lost_snapshots(run.warnings) or list(run.damaged.values())  # partial figures: not judged
            self.problem = (f"sampling stopped: {s.sampler.failed}" if s.sampler.failed else
                            lost[0].split(";")[0] if lost else "")
            return measure_test(attribute(run, Options(roots=(str(self.item.config.rootpath),))))
        finally:
            if self.temporary:
                shutil.rmtree(self.directory, ignore_errors=True)


class _Totals(_Measure):
    """--jaxmemprof alone, on a test without a limit: its peak, recorded in
    memory (``capture.totals.TotalsSession``: snapshots of the totals and
    the jit probe's memory_analysis() figures; no run directory, no array
    described, no line named), measured by ``analysis.check.measure_totals``."""

    def start(self) -> None:
        from jaxmemprof.capture.totals import TotalsSession

        self.session: TotalsSession | None = TotalsSession(interval=_INTERVAL_S, max_overhead=_TOTALS_OVERHEAD).start()
        self.sampler = self.session.sampler
        if not self._wrap():
            self._start_snapshot()
            self.entered = True

    def stop(self, failed: bool):
        s = self.session
        assert s is not None, "started"
        s.stop_sampling()  # no snapshot after the test: no leak is measured, and its peak has passed
        if not self.entered:  # no figure of a test function that never ran
            self.problem = "the test function was not called through pytest's item.obj"
            return None
        self.problem = f"sampling stopped: {s.sampler.failed}" if s.sampler.failed else ""
        from jaxmemprof.analysis.check import measure_totals

        w, self.session = s.writer, None
        return measure_totals(w.rows, w.compiles, w.calls, w.functions)


def _lines(pairs, n: int) -> list[str]:
    from jaxmemprof.render.escape import safe
    from jaxmemprof.units import format_bytes

    return [f"  {format_bytes(b):>10}  {safe(site)}" for site, b in pairs[:n]]


def _peak_message(m, limit: int, n: int = 5) -> str:
    """At most 6 lines: the figures, then the lines holding the memory."""
    from jaxmemprof.render.escape import safe
    from jaxmemprof.units import format_bytes

    head = f"device memory peak {format_bytes(m.peak_bytes)} exceeds limit_device_memory {format_bytes(limit)}"
    if m.jit_call_site or m.jit_lines:
        call = f" ({safe(m.jit_call_site)})" if m.jit_call_site else ""
        head += f", {safe(m.jit_where)}{call}"
        if m.jit_lines:
            return "\n".join([head + "; XLA's buffers at its peak:", *_lines(m.jit_lines, n)])
        head += "; held by"
    return "\n".join([head + ":", *_lines(m.peak_sites, n)])


def _leak_message(m, limit: int, n: int = 5) -> str:
    from jaxmemprof.units import format_bytes

    head = (f"device memory leak: {format_bytes(m.leak_bytes)} more alive after the test than before it "
            f"exceeds limit_device_leaks {format_bytes(limit)}; made at:")
    return "\n".join([head, *_lines(m.leak_sites, n)])


class _Peaks:
    """The tests' peaks, gathered where the reports arrive (under
    pytest-xdist, on the controller: a report's user_properties travel with
    it), and listed at the end with --jaxmemprof."""

    def __init__(self, config):
        self.config = config
        self.peaks: dict[str, int] = {}

    def pytest_runtest_logreport(self, report):
        if report.when != "call":
            return
        for name, value in getattr(report, "user_properties", ()):
            if name == _PROPERTY:
                self.peaks[report.nodeid] = int(value)

    def pytest_terminal_summary(self, terminalreporter):
        config = self.config
        if not config.getoption("jaxmemprof", False) or hasattr(config, "workerinput"):
            return
        from jaxmemprof.render.escape import safe
        from jaxmemprof.units import format_bytes

        peaks = sorted(self.peaks.items(), key=lambda kv: (-kv[1], kv[0]))
        n = max(config.getoption("jaxmemprof_top", 10), 0)
        terminalreporter.write_sep("=", f"jaxmemprof: device memory peak of the top {min(n, len(peaks))} of "
                                        f"{len(peaks)} tests")
        for nodeid, peak in peaks[:n]:
            terminalreporter.write_line(f"{format_bytes(peak):>12}  {safe(nodeid)}")
