"""The pytest plugin, run by pytest's own pytester on real JAX tests whose
arrays, sizes and lines are known: over the limit, under it, leaking, inside
a jitted call, under pytest-xdist, and --jaxmemprof's list of peaks."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from conftest import cpu_env, line_of, read_only_dir

KiB, MiB = 1024, 1024 * 1024

TESTS = '''
import jax
import jax.numpy as jnp
import pytest

kept = []


@pytest.mark.limit_device_memory("3 MiB")
def test_over():
    a = jnp.ones((512, 1024), jnp.float32)  # LINE-A: 2 MiB
    b = a + 1  # LINE-B: 2 MiB more, held by a local when the test returns
    assert b.shape == (512, 1024)


@pytest.mark.limit_device_memory("5 MiB")
def test_under():
    a = jnp.ones((512, 1024), jnp.float32)  # 2 MiB
    b = a + 1  # 2 MiB
    assert b.shape == (512, 1024)


@pytest.mark.limit_device_leaks("512 KiB")
def test_leaks():
    kept.append(jnp.ones((256, 1024), jnp.float32))  # LINE-LEAK: 1 MiB kept after the test


@pytest.mark.limit_device_leaks("2 MiB")
def test_leaks_within():
    kept.append(jnp.ones((256, 1024), jnp.float32))  # 1 MiB kept, under the limit
    tmp = jnp.zeros((1024, 1024), jnp.float32)  # 4 MiB, freed at return


def inner(x):
    big = jnp.tile(x, (32, 1))
    return jnp.sort(big, axis=1).sum()  # LINE-SORT: 8 MiB inside the call


@pytest.mark.limit_device_memory("4 MiB")
def test_inside_jit():
    x = jnp.ones((256, 256), jnp.float32)  # 256 KiB
    f = jax.jit(inner)
    f(x).block_until_ready()


def test_inside_jit_unmarked():  # the same, measured in memory by --jaxmemprof alone
    x = jnp.ones((256, 256), jnp.float32)
    f = jax.jit(inner)
    f(x).block_until_ready()


@pytest.mark.limit_device_memory("1 MiB")
@pytest.mark.limit_device_leaks("1 MiB")
def test_over_and_leaking():
    for i in range(4):
        kept.append(jnp.full((256, 1024), i, jnp.float32))  # LINE-BOTH: 4 x 1 MiB kept
    a = jnp.ones((512, 1024), jnp.float32)  # LINE-RET: 2 MiB more at the return


@pytest.fixture
def weights():
    return jnp.zeros((1024, 1024), jnp.float32)  # 4 MiB, made by the fixture before the test


class TestInAClass:
    @pytest.mark.limit_device_memory("1 MiB")
    def test_fixture_not_counted(self, weights):
        y = weights[:128] + 1  # 512 KiB, the test's own
        assert y.shape == (128, 1024)


@pytest.mark.limit_device_memory("4 MiB")
def test_temporary_jit():
    x = jnp.ones((256, 256), jnp.float32)
    jax.jit(inner)(x).block_until_ready()  # LINE-CALL: the jitted function dropped at once


def test_unmarked():
    a = jnp.ones((128, 1024), jnp.float32)  # 512 KiB
'''


@pytest.fixture
def suite(pytester, monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    path = pytester.makepyfile(test_memory=TESTS)
    return pytester, path


def outcomes(result) -> dict:
    """nodeid's test name -> PASSED/FAILED, from pytest -rA's short summary."""
    found = {}
    for line in result.outlines:
        m = re.match(r"^(PASSED|FAILED) \S+::(?:\w+::)?(\w+)", line)
        if m:
            found[m.group(2)] = m.group(1)
    return found


def failure_text(result, name: str) -> list[str]:
    """The lines of one test's failure section."""
    lines = result.outlines
    start = next(i for i, line in enumerate(lines) if re.match(rf"^_+ {name} _+$", line))
    end = next((i for i in range(start + 1, len(lines)) if re.match(r"^(_{3,} \w+ _{3,}|={3,})", lines[i])),
               len(lines))
    return lines[start + 1:end]


def test_limits_on_real_tests(suite):
    pytester, path = suite
    result = pytester.runpytest_subprocess("-rA", "-p", "no:cacheprovider", "--jaxmemprof",
                                           "--junitxml", str(pytester.path / "junit.xml"))
    got = outcomes(result)
    assert got == {"test_over": "FAILED", "test_under": "PASSED", "test_leaks": "FAILED",
                   "test_leaks_within": "PASSED", "test_inside_jit": "FAILED", "test_temporary_jit": "FAILED",
                   "test_fixture_not_counted": "PASSED", "test_over_and_leaking": "FAILED",
                   "test_unmarked": "PASSED", "test_inside_jit_unmarked": "PASSED"}, \
        result.stdout.str()

    # Over the limit: both 2 MiB arrays, by the lines that made them, the
    # second seen only because a local held it when the test returned.
    over = failure_text(result, "test_over")
    assert over[0] == "device memory peak 4.00 MiB exceeds limit_device_memory 3.00 MiB:", over
    a, b = line_of(path, "LINE-A"), line_of(path, "LINE-B")
    assert sorted(over[1:]) == sorted([f"    2.00 MiB  test_memory.py:{a} (test_over)",
                                       f"    2.00 MiB  test_memory.py:{b} (test_over)"]), over
    assert len(over) <= 6

    leak = failure_text(result, "test_leaks")
    assert leak[0].startswith("device memory leak: 1.00 MiB more alive after the test than before it "
                              "exceeds limit_device_leaks 512.00 KiB"), leak
    assert leak[1:] == [f"    1.00 MiB  test_memory.py:{line_of(path, 'LINE-LEAK')} (test_leaks)"], leak

    # The call's own peak, seen by the jit probe, by the line inside the call.
    jit = failure_text(result, "test_inside_jit")
    call = line_of(path, "f(x).block_until_ready()")
    assert re.match(rf"device memory peak 8\.\d\d MiB exceeds limit_device_memory 4\.00 MiB, during a call "
                    rf"of inner \(test_memory.py:{call} \(test_inside_jit\)\); XLA's buffers at its peak:$",
                    jit[0]), jit
    assert jit[1] == f"    8.00 MiB  test_memory.py:{line_of(path, 'LINE-SORT')} (inner)", jit
    assert len(jit) <= 6
    # A jitted function dropped at once: the line that called it is named,
    # and XLA's dump of it is kept for its lines inside (the probe keeps the
    # lowerings of the largest functions the program dropped).
    tmp = failure_text(result, "test_temporary_jit")
    assert re.match(rf"device memory peak 8\.\d\d MiB exceeds limit_device_memory 4\.00 MiB, during a call "
                    rf"of inner \(test_memory.py:{line_of(path, 'LINE-CALL')} \(test_temporary_jit\)\); "
                    rf"(held by|XLA's buffers at its peak):$", tmp[0]), tmp
    if "XLA's buffers" in tmp[0]:
        assert any(line.endswith(f"test_memory.py:{line_of(path, 'LINE-SORT')} (inner)") for line in tmp[1:]), tmp

    # --jaxmemprof: every test's peak, largest first.
    text = result.stdout.str()
    summary = text[text.index("jaxmemprof: device memory peak of the top 10 of 10 tests"):].splitlines()[1:11]
    names = [line.split("::")[-1] for line in summary]
    assert names[0] in ("test_inside_jit", "test_temporary_jit", "test_inside_jit_unmarked"), summary

    # Over both limits: the two messages share the 6 lines (2 sites each at most).
    both = failure_text(result, "test_over_and_leaking")
    kept_line, ret_line = line_of(path, "LINE-BOTH"), line_of(path, "LINE-RET")
    assert both[:3] == ["device memory peak 6.00 MiB exceeds limit_device_memory 1.00 MiB:",
                        f"    4.00 MiB  test_memory.py:{kept_line} (test_over_and_leaking)",
                        f"    2.00 MiB  test_memory.py:{ret_line} (test_over_and_leaking)"], both
    assert len(both) == 5, both
    assert both[3].startswith("device memory leak: 4.00 MiB more alive after the test"), both
    assert both[4] == f"    4.00 MiB  test_memory.py:{kept_line} (test_over_and_leaking)", both
    assert set(names) == {"test_over", "test_under", "test_leaks", "test_leaks_within", "test_inside_jit",
                          "test_temporary_jit", "test_fixture_not_counted", "test_over_and_leaking",
                          "test_unmarked", "test_inside_jit_unmarked"}
    assert any(line.split() == ["512.00", "KiB", "test_memory.py::test_unmarked"] for line in summary), summary
    # Each peak is a property of the test's report, which --junitxml writes.
    junit = (pytester.path / "junit.xml").read_text()
    assert re.search(r'<testcase [^>]*name="test_under"[^>]*>\s*<properties>\s*'
                     rf'<property name="jaxmemprof_peak_bytes" value="{4 * MiB}" />', junit), junit
    # The fixture's 4 MiB were alive before the test began: only its own 512 KiB count.
    assert any(line.split() == ["512.00", "KiB", "test_memory.py::TestInAClass::test_fixture_not_counted"]
               for line in summary), summary
    # The unmarked test's peak, kept in memory (no run directory, no pandas), is the recorded
    # one's: XLA's peak inside the call on the bytes live before it.
    peaks = dict(re.findall(r'<testcase [^>]*name="(\w+)"[^>]*>\s*<properties>\s*'
                            r'<property name="jaxmemprof_peak_bytes" value="(\d+)" />', junit))
    assert int(peaks["test_inside_jit"]) > 8 * MiB, peaks
    assert peaks["test_inside_jit_unmarked"] == peaks["test_inside_jit"], peaks


def test_under_xdist(suite):
    pytester, path = suite
    result = pytester.runpytest_subprocess("-rA", "-p", "no:cacheprovider", "-n", "2", "--jaxmemprof")
    got = outcomes(result)
    assert got == {"test_over": "FAILED", "test_under": "PASSED", "test_leaks": "FAILED",
                   "test_leaks_within": "PASSED", "test_inside_jit": "FAILED", "test_temporary_jit": "FAILED",
                   "test_fixture_not_counted": "PASSED", "test_over_and_leaking": "FAILED",
                   "test_unmarked": "PASSED", "test_inside_jit_unmarked": "PASSED"}, \
        result.stdout.str()
    text = result.stdout.str()
    assert "created: 2/2 workers" in text or "2 workers" in text, text
    assert f"test_memory.py:{line_of(path, 'LINE-LEAK')} (test_leaks)" in text
    # The workers' peaks reach the controller's summary.
    assert "jaxmemprof: device memory peak of the top 10 of 10 tests" in text, text


BAD_MARKERS = {
    "test_bad_size": ('limit_device_memory("lots")',
                      "limit_device_memory: not a size: 'lots' (examples: 4096, 512MiB, 16GiB, 80GB)"),
    "test_bad_warmups": ('limit_device_leaks("1 MiB", warmups="once")',
                         "limit_device_leaks: warmups is a number of runs, 0 or more, not 'once'"),
    "test_negative_warmups": ('limit_device_leaks("1 MiB", warmups=-1)',
                              "limit_device_leaks: warmups is a number of runs, 0 or more, not -1"),
    "test_true_warmups": ('limit_device_leaks("1 MiB", warmups=True)',
                          "limit_device_leaks: warmups is a number of runs, 0 or more, not True"),
    "test_warmups_positional": ('limit_device_leaks("1 MiB", 1)',
                                "limit_device_leaks takes one size and warmups=N, e.g. "
                                "@pytest.mark.limit_device_leaks('1 MiB', warmups=1)"),
    "test_misspelt_warmups": ('limit_device_leaks("1 MiB", warmup=1)',
                              "limit_device_leaks takes one size and warmups=N, e.g. "
                              "@pytest.mark.limit_device_leaks('1 MiB', warmups=1)"),
    "test_warmups_on_memory": ('limit_device_memory("1 MiB", warmups=1)',
                               "limit_device_memory takes one size, e.g. @pytest.mark.limit_device_memory('64 MiB')"),
    "test_two_sizes": ('limit_device_memory("1 MiB", size="2 MiB")',
                       "limit_device_memory takes one size, e.g. @pytest.mark.limit_device_memory('64 MiB')"),
}


def test_bad_marker_fails_that_test_only(pytester, monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    tests = "".join(f"@pytest.mark.{marker}\ndef {name}():\n    ran.append({name!r})\n\n\n"
                    for name, (marker, _) in BAD_MARKERS.items())
    pytester.makepyfile(test_bad="import pytest\n\nran = []\n\n\n" + tests +
                        "def test_fine():\n    assert ran == []  # no test with a bad marker ran\n")
    result = pytester.runpytest_subprocess("-rA", "-p", "no:cacheprovider")
    assert outcomes(result) == {**{name: "FAILED" for name in BAD_MARKERS}, "test_fine": "PASSED"}, \
        result.stdout.str()
    for name, (_, message) in BAD_MARKERS.items():
        section = failure_text(result, name)
        assert section == [message], (name, section)
    assert "Traceback" not in result.stdout.str()


UNMEASURABLE = '''
import jax.numpy as jnp
import pytest

from jaxmemprof.capture import session


@pytest.mark.limit_device_memory("64 MiB")
def test_limited():
    a = jnp.ones((256, 1024), jnp.float32)
    assert a.shape == (256, 1024)


@pytest.mark.limit_device_leaks("64 MiB", warmups=1)
def test_leak_limited():
    a = jnp.ones((256, 1024), jnp.float32)
    del a


def test_unlimited():
    a = jnp.ones((256, 1024), jnp.float32)
    assert a.shape == (256, 1024)
'''

ENDS_ITS_RUN = '''
import jax.numpy as jnp
import pytest

from jaxmemprof.capture import session


@pytest.mark.limit_device_leaks("64 MiB")
def test_ends_its_run():
    a = jnp.ones((256, 1024), jnp.float32)
    run = session.active()
    run.sampler.stop()  # its interval snapshots first (one racing the closed journal would fail sampling instead)
    run.sampler.snapshot("api", "seen")  # the array seen, whatever the interval snapshots did
    run.writer.finish(end_time=None)  # no snapshot can be taken after it
    assert a.shape == (256, 1024)
'''

# JAX comes up during the test (its own pytest process), and the run ends
# before any snapshot: no snapshot is not "nothing on the device".
ENDS_UNSEEN = '''
import jax.numpy as jnp
import pytest

from jaxmemprof.capture import session


@pytest.mark.limit_device_memory("64 MiB")
@pytest.mark.limit_device_leaks("64 MiB")
def test_ends_its_run_unseen():
    run = session.active()
    run.sampler.stop()
    a = jnp.ones((256, 1024), jnp.float32)
    run.writer.finish(end_time=None)
    assert a.shape == (256, 1024)
'''


def test_a_limit_it_cannot_measure_fails(pytester, monkeypatch, tmp_path):
    """The run directories cannot be made in a read-only place (a file in the
    way: tests/test_gates.py): each limit fails, saying why; the unmarked
    test passes with a warning. A leak limit without a snapshot after the
    test fails too, and so does every limit of a test whose JAX came up
    during it but whose run ended before any snapshot (the CI run that read
    that as no device memory at all, and passed)."""
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    pytester.makepyfile(test_unmeasurable=UNMEASURABLE, test_ends=ENDS_ITS_RUN, test_ends_unseen=ENDS_UNSEEN)
    ro = read_only_dir(tmp_path)
    result = pytester.runpytest_subprocess("-rA", "-p", "no:cacheprovider", "--jaxmemprof",
                                           "--jaxmemprof-runs", str(ro / "runs"), "test_unmeasurable.py")
    text = result.stdout.str()
    assert outcomes(result) == {"test_limited": "FAILED", "test_leak_limited": "FAILED",
                                "test_unlimited": "PASSED"}, text
    for name, limit in (("test_limited", "limit_device_memory"), ("test_leak_limited", "limit_device_leaks")):
        section = failure_text(result, name)
        assert len(section) == 1 and section[0].startswith(
            f"jaxmemprof: {limit} not checked: device memory not measured: {ro / 'runs'}"), section
        assert re.search(r"(Permission denied|Operation not permitted|Read-only file system)", section[0]), section
    assert "jaxmemprof: device memory not measured: " in text  # the unmarked test's warning
    assert not (ro / "runs").exists() and "INTERNALERROR" not in text

    result = pytester.runpytest_subprocess("-rA", "-p", "no:cacheprovider", "test_ends.py")
    assert outcomes(result) == {"test_ends_its_run": "FAILED"}, result.stdout.str()
    assert failure_text(result, "test_ends_its_run") == [
        "jaxmemprof: limit_device_leaks not checked: device memory not measured: no snapshot was taken after it"], \
        result.stdout.str()

    result = pytester.runpytest_subprocess("-rA", "-p", "no:cacheprovider", "test_ends_unseen.py")
    assert outcomes(result) == {"test_ends_its_run_unseen": "FAILED"}, result.stdout.str()
    assert failure_text(result, "test_ends_its_run_unseen") == [
        "jaxmemprof: limit_device_memory and limit_device_leaks not checked: device memory not measured: "
        "no snapshot was taken while JAX was up"], result.stdout.str()


def test_loading_the_plugin_imports_nothing_heavy():
    """A suite with no marker and no flag pays for no import: the plugin
    module alone brings in neither jax, pandas nor the capture code."""
    code = ("import sys, jaxmemprof.pytest_plugin; "
            "heavy = [m for m in ('jax', 'pandas', 'numpy', 'jaxmemprof.capture', 'jaxmemprof.capture.session') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], env=cpu_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_registered_by_installing(pytester):
    """The entry point: markers are known to pytest without any conftest."""
    result = pytester.runpytest_subprocess("--markers")
    text = result.stdout.str()
    assert "@pytest.mark.limit_device_memory(size)" in text
    assert "@pytest.mark.limit_device_leaks(size, warmups=0)" in text
    help_text = pytester.runpytest_subprocess("--help").stdout.str()
    assert "--jaxmemprof" in help_text


HELD = '''
import os

import jax.numpy as jnp
import pytest

from jaxmemprof.capture import session

kept = []


@pytest.mark.limit_device_memory("64 MiB")
def test_keeps_an_array():
    kept.append(jnp.ones((256, 1024), jnp.float32))
    searching = session.active().sampler.py_holders is not None
    assert searching == (os.environ["EXPECT_SEARCH"] == "1")
'''


def test_holders_are_searched_only_in_a_run_that_is_kept(pytester, monkeypatch):
    """A limited test's run in a temporary directory is read for its figures
    and removed: no search for the references holding its arrays (a walk of
    pytest's whole heap; an absltest suite of 24 limited tests: 17 -> 7 s).
    Kept (--jaxmemprof-runs), its report names what holds the array."""
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    pytester.makepyfile(test_held=HELD)
    monkeypatch.setenv("EXPECT_SEARCH", "0")
    result = pytester.runpytest_subprocess("-rA", "-p", "no:cacheprovider", "test_held.py")
    assert outcomes(result) == {"test_keeps_an_array": "PASSED"}, result.stdout.str()
    monkeypatch.setenv("EXPECT_SEARCH", "1")
    runs = pytester.path / "runs"
    result = pytester.runpytest_subprocess("-rA", "-p", "no:cacheprovider", "--jaxmemprof-runs", str(runs),
                                           "test_held.py")
    assert outcomes(result) == {"test_keeps_an_array": "PASSED"}, result.stdout.str()
    [run] = runs.iterdir()
    text = subprocess.run([sys.executable, "-m", "jaxmemprof", "report", str(run)], env=cpu_env(),
                          capture_output=True, text=True, timeout=120).stdout
    held = [line for line in text.splitlines() if "test_held.py:" in line and "(test_keeps_an_array)" in line]
    assert held and held[0].endswith("test_held.kept[…]"), text  # "What held the live peak": the module's list
