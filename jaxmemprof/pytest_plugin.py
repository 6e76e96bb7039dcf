"""The pytest plugin: device-memory limits on tests, and ``--jaxmemprof``.

Registered by installing jaxmemprof (the ``pytest11`` entry point)::

    @pytest.mark.limit_device_memory("64 MiB")   # the test's peak device memory
    @pytest.mark.limit_device_leaks("1 MiB")     # live device bytes after it less before

    pytest --jaxmemprof                          # profile every test; top tests by peak at the end

A test with a marker (or every test, with ``--jaxmemprof``) is recorded as a
run of its own (``capture.session``: snapshots at its start, while it runs,
when its function returns, and after it; the jit probe on the functions it
jits), then measured by ``analysis.check.measure_test``. Loading this module
imports neither jax, pandas nor the capture code: a test suite that uses
neither marker nor flag pays one marker look-up per test.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile

import pytest

_MARKERS = {
    "limit_device_memory": "limit_device_memory(size): fail the test when its peak device memory (snapshots, "
                           "the arrays its locals hold when it returns, XLA's peak in its jitted calls) exceeds "
                           "size, e.g. '64 MiB' or an int of bytes (jaxmemprof)",
    "limit_device_leaks": "limit_device_leaks(size): fail the test when it leaves more than size of device memory "
                          "alive after it (after garbage collection) than before it (jaxmemprof)",
}
_PROPERTY = "jaxmemprof_peak_bytes"
_INTERVAL_S = 0.05  # between the snapshots taken while a test runs (the budget may stretch it)
_MAX_OVERHEAD = 0.05


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
    for name, text in _MARKERS.items():
        config.addinivalue_line("markers", text)
    config.pluginmanager.register(_Peaks(config), "jaxmemprof-peaks")


def _size(marker, item) -> int:
    """The marker's size in bytes; a bad one fails the test with a one-line message."""
    if marker.args and len(marker.args) == 1 and not marker.kwargs:
        value = marker.args[0]
    elif not marker.args and set(marker.kwargs) == {"size"}:
        value = marker.kwargs["size"]
    else:
        pytest.fail(f"{marker.name} takes one size, e.g. @pytest.mark.{marker.name}('64 MiB')", pytrace=False)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    from jaxmemprof.units import parse_size

    try:
        return parse_size(str(value).replace(" ", ""))
    except ValueError as exc:
        problem = str(exc)
    except OverflowError:  # digits past a float's range
        problem = f"not a size: {value!r} (too large)"
    pytest.fail(f"{marker.name}: {problem}", pytrace=False)  # outside the except: one line, nothing chained


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    config = item.config
    memory = item.get_closest_marker("limit_device_memory")
    leaks = item.get_closest_marker("limit_device_leaks")
    profile_all = config.getoption("jaxmemprof", False)
    if memory is None and leaks is None and not profile_all:
        return (yield)
    limit = _size(memory, item) if memory is not None else None
    leak_limit = _size(leaks, item) if leaks is not None else None

    from jaxmemprof.capture import session as session_mod

    # A limit that cannot be measured fails its test (after the test has run,
    # so that the test's own failure comes first); without a limit
    # (--jaxmemprof alone) it is a warning.
    limits = [m.name for m in (memory, leaks) if m is not None]
    if session_mod.active() is not None:
        return _unmeasured(item, limits, (yield), "this test runs inside a jaxmemprof run already (run pytest "
                                                  "itself for its limits)")
    recorder = None
    try:
        recorder = _Recorder(item, dumps=limit is not None, leaks=leak_limit is not None)
        recorder.start()
    except Exception as exc:  # an unwritable run directory, say: the test runs, unmeasured
        if recorder is not None:
            _quietly(recorder.stop, True)
        return _unmeasured(item, limits, (yield), _one_line(exc))
    try:
        result = yield
    except BaseException:
        # A test that failed is measured too (for --jaxmemprof's list), never judged.
        try:
            measured = recorder.stop(failed=True)
            if measured is not None:
                item.user_properties.append((_PROPERTY, measured.peak_bytes))
        except Exception:
            pass
        raise
    try:
        measured = recorder.stop(failed=False)
    except Exception as exc:
        return _unmeasured(item, limits, result, _one_line(exc))
    if measured is None:
        return _unmeasured(item, limits, result, "its run was not recorded")
    item.user_properties.append((_PROPERTY, measured.peak_bytes))
    if recorder.problem:  # sampling stopped, or snapshots lost: the figures are not all there
        return _unmeasured(item, limits, result, recorder.problem)
    over = limit is not None and measured.peak_bytes > limit
    leaked = leak_limit is not None and measured.leak_bytes > leak_limit
    n = 2 if over and leaked else 5  # 6 lines at most in all
    problems = []
    if over:
        problems.append(_peak_message(measured, limit, n))
    if leaked:
        problems.append(_leak_message(measured, leak_limit, n))
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)
    return result


def _one_line(exc: BaseException) -> str:
    from jaxmemprof.errors import InputError

    text = " ".join(str(exc).split())
    if isinstance(exc, InputError):
        return text  # names the file and the problem already
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _unmeasured(item, limits, result, why: str):
    """A test whose device memory could not be measured: it fails when it
    has a limit (the limit was not checked), else a warning says so."""
    if limits:
        names = " and ".join(limits)
        pytest.fail(f"jaxmemprof: {names} not checked: device memory not measured: {why}", pytrace=False)
    item.warn(pytest.PytestWarning(f"jaxmemprof: device memory not measured: {why}"))
    return result


def on_return(code, callback):
    """Call ``callback()`` whenever a frame of ``code`` returns, in this
    thread; returns the function that undoes it, or None when it cannot be
    done. Python 3.12 and later: sys.monitoring's PY_RETURN for that code
    object alone (no cost elsewhere); before: a profile function on this
    thread, unless a profiler has set one already."""
    mon = getattr(sys, "monitoring", None)
    if mon is not None:
        tool = next((t for t in (4, 3) if mon.get_tool(t) is None), None)
        if tool is None:
            return None
        mon.use_tool_id(tool, "jaxmemprof")
        mon.register_callback(tool, mon.events.PY_RETURN, lambda code_, offset, value: callback())
        mon.set_local_events(tool, code, mon.events.PY_RETURN)

        def undo():
            mon.set_local_events(tool, code, 0)
            mon.register_callback(tool, mon.events.PY_RETURN, None)
            mon.free_tool_id(tool)

        return undo
    if sys.getprofile() is not None:
        return None

    def on_event(frame, event, arg):
        if event == "return" and frame.f_code is code:
            callback()

    sys.setprofile(on_event)
    return lambda: sys.setprofile(None)


def _quietly(fn, *args):
    try:
        fn(*args)
    except Exception:
        pass


class _Recorder:
    """One test's run: a capture session around its call, snapshots at its
    start (after garbage collection: a full one for a leak limit, else of
    the young generations), when its function returns (its locals still
    held) and after it (after a full garbage collection, for a leak limit)."""

    def __init__(self, item, dumps: bool, leaks: bool):
        self.item = item
        self.leaks = leaks  # a full garbage collection before the first snapshot and the last
        self.dumps = dumps  # read XLA's dump of the jitted functions (to name the lines inside a call)
        keep = item.config.getoption("jaxmemprof_runs", None)
        if keep:
            name = re.sub(r"[^A-Za-z0-9._-]+", "_", item.nodeid).strip("_")[:150] or "test"
            if name != item.nodeid:  # two node ids that read alike get two directories
                import hashlib

                name += "-" + hashlib.sha1(item.nodeid.encode("utf-8", "surrogateescape")).hexdigest()[:8]
            self.directory, self.temporary = os.path.join(keep, name), False
        else:
            self.directory, self.temporary = tempfile.mkdtemp(prefix="jaxmemprof-test-"), True
        self.session = None
        self.unhook = None  # undoes the hook on the test function's return
        self.problem = ""  # why the figures are not all there (set by stop)

    def start(self) -> None:
        import gc
        from pathlib import Path

        from jaxmemprof.capture import session as session_mod

        # The garbage of earlier tests would otherwise be in the start's bytes, and
        # freed during the test, hide as much of it. A full collection for a leak
        # limit; else the young generations (a full one is 50-100 ms in a
        # process with JAX and pandas loaded, the young ones a few).
        gc.collect() if self.leaks else gc.collect(1)
        path = session_mod.prepare_directory(Path(self.directory), force=True)
        s = session_mod.Session(path, target_argv=[], interval=_INTERVAL_S, max_overhead=_MAX_OVERHEAD,
                                command=["pytest", self.item.nodeid])
        if s.probe is not None and not self.dumps:
            s.probe.dump_min_s = s.probe.dump_share = 0.0
        self.session = s.start()
        s.sampler.snapshot("api", "start")
        self._hook_return()

    def _hook_return(self) -> None:
        """A snapshot when the test function returns, while its frame still
        holds its locals."""
        code = getattr(getattr(self.item, "obj", None), "__code__", None)
        if code is not None:
            sampler = self.session.sampler
            self.unhook = on_return(code, lambda: sampler.snapshot("api", "return"))

    def stop(self, failed: bool):
        """End the run; the test's figures (``failed``: the test raised)."""
        import gc

        if self.unhook is not None:
            self.unhook()
            self.unhook = None
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
            from jaxmemprof.analysis.check import measure_test
            from jaxmemprof.analysis.options import Options
            from jaxmemprof.store.reader import load_run

            run = load_run(s.path)
            from jaxmemprof.analysis.check import lost_snapshots

            lost = lost_snapshots(run.warnings)
            self.problem = (f"sampling stopped: {s.sampler.failed}" if s.sampler.failed else
                            lost[0].split(";")[0] if lost else "")
            return measure_test(attribute(run, Options(roots=(str(self.item.config.rootpath),))))
        finally:
            if self.temporary:
                shutil.rmtree(self.directory, ignore_errors=True)


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
