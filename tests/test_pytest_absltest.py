"""The pytest plugin on absltest-style suites (as jax, flax, optax and chex
write theirs): unittest.TestCase, absltest.TestCase and absl's
parameterized.TestCase, run by pytest in a subprocess of its own.

What ``setUp`` and ``setUpClass`` make and the instance keeps until teardown
is set-up, not the test (like a fixture's): it is alive at the test's start,
so it is neither its leak nor its peak; a test that leaks from its own body
still fails, with the line named; ``warmups=N`` runs the test N times before
the measured run."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import cpu_env, line_of

SUITE = '''
import unittest

import jax
import jax.numpy as jnp
import pytest
from absl.testing import absltest, parameterized

kept = []
_cache = {}
_runs = []


def cached_table(rows):
    """A cache its first call fills: 1 MiB for 256 rows, kept for good."""
    if rows not in _cache:
        _cache[rows] = jnp.arange(rows * 1024, dtype=jnp.float32)  # LINE-CACHE
    return _cache[rows]


def inner(x):
    big = jnp.tile(x, (32, 1))
    return jnp.sort(big, axis=1).sum()  # LINE-SORT: 8 MiB inside the call


class SetUpTest(absltest.TestCase):
    def setUp(self):
        super().setUp()
        self.weights = jnp.ones((1024, 1024), jnp.float32)  # 4 MiB, kept on self until teardown

    @pytest.mark.limit_device_memory("1 MiB")
    @pytest.mark.limit_device_leaks("512 KiB")
    def test_uses_what_setup_made(self):
        y = self.weights[:128] + 1  # 512 KiB of its own, held by a local at the return
        self.assertEqual(y.shape, (128, 1024))

    def test_unmarked(self):
        y = self.weights[:256] * 3  # 1 MiB: --jaxmemprof's figure, counted in memory
        self.assertEqual(y.shape, (256, 1024))

    @pytest.mark.limit_device_leaks("512 KiB")
    def test_leaks_from_its_body(self):
        kept.append(self.weights[:256] * 2)  # LINE-BODY-LEAK: 1 MiB kept after the test

    @pytest.mark.limit_device_memory("1 MiB")
    def test_over_by_its_own_local(self):
        y = jnp.zeros((512, 1024), jnp.float32)  # LINE-OWN: 2 MiB, held by a local at the return
        self.assertEqual(y.shape, (512, 1024))


class PlainUnitTest(unittest.TestCase):
    def setUp(self):
        self.state = [jnp.full((256, 1024), i, jnp.float32) for i in range(4)]  # 4 MiB

    def tearDown(self):
        del self.state

    @pytest.mark.limit_device_leaks("256 KiB")
    def test_state_from_setup(self):
        total = sum(float(a[0, 0]) for a in self.state)
        self.assertEqual(total, 6.0)


class SetUpClassTest(absltest.TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.table = jnp.ones((1024, 1024), jnp.float32)  # 4 MiB, kept on the class

    @pytest.mark.limit_device_memory("1 MiB")
    @pytest.mark.limit_device_leaks("256 KiB")
    def test_first(self):
        self.assertEqual(float(self.table[0, 0]), 1.0)

    @pytest.mark.limit_device_leaks("256 KiB")
    def test_second(self):
        self.assertEqual(self.table.shape, (1024, 1024))


class ParameterizedTest(parameterized.TestCase):
    pytestmark = [pytest.mark.limit_device_leaks("512 KiB")]

    def setUp(self):
        super().setUp()
        self.params = {"w": jnp.zeros((512, 1024), jnp.float32)}  # 2 MiB

    @parameterized.parameters(1, 2)
    def test_scaled(self, k):
        out = self.params["w"] * k
        self.assertEqual(out.shape, (512, 1024))

    @parameterized.named_parameters(("small", 64), ("large", 128))
    def test_named(self, rows):
        out = jnp.ones((rows, 1024), jnp.float32)
        self.assertEqual(out.shape[0], rows)

    @parameterized.parameters(1, 2)
    def test_leaks_param(self, k):
        kept.append(jnp.ones((256 * k, 1024), jnp.float32))  # LINE-PARAM-LEAK

    @parameterized.parameters(2, 3)
    @pytest.mark.limit_device_memory("1 MiB")
    def test_param_over(self, k):
        y = jnp.ones((256 * k, 1024), jnp.float32)  # LINE-PARAM-OWN: 2 and 3 MiB, a local of the inner function
        self.assertEqual(y.shape[0], 256 * k)


class UnmarkedParameterizedTest(parameterized.TestCase):
    def setUp(self):
        super().setUp()
        self.params = {"w": jnp.zeros((512, 1024), jnp.float32)}  # 2 MiB

    @parameterized.parameters(1, 2)
    def test_peak(self, k):
        y = jnp.ones((256 * k, 1024), jnp.float32)  # 1 and 2 MiB, a local of the inner function
        self.assertEqual(y.shape[0], 256 * k)


class JitTest(absltest.TestCase):
    def setUp(self):
        super().setUp()
        self.f = jax.jit(inner)  # jitted in setUp, compiled and called in the test
        self.total = jax.jit(lambda x: inner(x) * 2)(jnp.ones((256, 256), jnp.float32))  # 8 MiB inside, in setUp

    @pytest.mark.limit_device_memory("4 MiB")
    def test_calls_what_setup_jitted(self):
        x = jnp.ones((256, 256), jnp.float32)
        self.f(x).block_until_ready()  # LINE-JIT-CALL

    @pytest.mark.limit_device_memory("1 MiB")
    def test_light_after_heavy_setup(self):
        self.assertGreater(float(self.total), 0.0)


class WarmupTest(absltest.TestCase):
    @pytest.mark.limit_device_leaks("256 KiB", warmups=1)
    def test_fills_a_cache(self):
        self.assertEqual(cached_table(256).shape, (256 * 1024,))

    @pytest.mark.limit_device_leaks("256 KiB")
    def test_fills_a_cache_unwarmed(self):
        self.assertEqual(cached_table(512).shape, (512 * 1024,))

    @pytest.mark.limit_device_leaks("256 KiB", warmups=2)
    def test_leaks_every_run(self):
        kept.append(jnp.ones((256, 1024), jnp.float32))  # LINE-EVERY: 1 MiB a run

    @pytest.mark.limit_device_leaks("1 MiB", warmups=2)
    def test_first_run_fails(self):
        _runs.append(1)
        self.assertGreater(len(_runs), 1, "fails on its first run")


class OutcomesTest(absltest.TestCase):
    @pytest.mark.limit_device_leaks("1 KiB")
    def test_fails_by_itself(self):
        kept.append(jnp.ones((256, 1024), jnp.float32))
        self.assertEqual(1, 2, "its own failure")

    @pytest.mark.limit_device_memory("1 KiB")
    def test_skips(self):
        self.skipTest("skipped by itself")

    @unittest.expectedFailure
    @pytest.mark.limit_device_leaks("1 KiB")
    def test_expected_failure(self):
        kept.append(jnp.ones((256, 1024), jnp.float32))
        self.assertEqual(1, 2)


@pytest.mark.limit_device_leaks("256 KiB", warmups=1)
def test_function_fills_a_cache():
    assert cached_table(128).shape == (128 * 1024,)


@pytest.mark.limit_device_leaks("256 KiB", warmups=1)
def test_function_leaks_every_run():
    kept.append(jnp.ones((256, 1024), jnp.float32))  # LINE-FN-EVERY
'''

KiB, MiB = 1024, 1024 * 1024


class Ran:
    """One pytest run of SUITE: its output lines, the suite's path, its junit XML."""

    def __init__(self, directory: Path):
        self.path = directory / "test_absl_suite.py"
        self.path.write_text(SUITE)
        self.junit = directory / "junit.xml"
        proc = subprocess.run([sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "--jaxmemprof",
                               "--junitxml", str(self.junit), self.path.name], cwd=directory, env=cpu_env(),
                              capture_output=True, text=True, timeout=600)
        self.text = proc.stdout + proc.stderr
        self.lines = proc.stdout.splitlines()

    def outcomes(self) -> dict:
        """Test name (with its class) -> PASSED/FAILED/XFAIL, from -rA's short summary."""
        found = {}
        for line in self.lines:
            m = re.match(r"^(PASSED|FAILED|XFAIL|XPASS) \S+?::(?:(\w+)::)?(\w+)", line)
            if m:
                found[".".join(filter(None, m.group(2, 3)))] = m.group(1)
        return found

    def sections(self) -> dict:
        """The lines of each failure's section, by its headline (Class.test or test)."""
        failures = re.split(r"^={3,} ", self.text.split("= FAILURES =", 1)[1], maxsplit=1, flags=re.M)[0]
        parts = re.split(r"^_{3,} (\S+) _{3,}$", failures, flags=re.M)
        return {k: v.strip("\n").splitlines() for k, v in zip(parts[1::2], parts[2::2])}

    def peak(self, cls: str, name: str) -> int:
        """A test's jaxmemprof_peak_bytes, from the junit XML."""
        m = re.search(rf'<testcase classname="test_absl_suite.{cls}" name="{name}"[^>]*>\s*<properties>\s*'
                      r'<property name="jaxmemprof_peak_bytes" value="(\d+)" />', self.junit.read_text())
        assert m, (cls, name, self.junit.read_text())
        return int(m.group(1))

    def counts(self) -> dict:
        """The last line's counts: {'passed': N, 'failed': M, ...}."""
        last = next(line for line in reversed(self.lines) if re.search(r" in [\d.]+s", line))
        return {k: int(n) for n, k in re.findall(r"(\d+) (\w+)", last.split(" in ")[0])}


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> Ran:
    """The suite, run once (one pytest process: JAX imported once) and read by each test."""
    return Ran(tmp_path_factory.mktemp("absl"))


def test_set_up_is_not_the_test(ran):
    got, text = ran.outcomes(), ran.text
    for name in ("SetUpTest.test_uses_what_setup_made", "PlainUnitTest.test_state_from_setup",
                 "SetUpClassTest.test_first", "SetUpClassTest.test_second",
                 "ParameterizedTest.test_scaled0", "ParameterizedTest.test_scaled1",
                 "ParameterizedTest.test_named_small", "ParameterizedTest.test_named_large",
                 "JitTest.test_light_after_heavy_setup"):
        assert got.get(name) == "PASSED", (name, text)
    # What the test made itself is counted from the start: the 512 KiB its
    # local held at the return, not the 4 MiB setUp kept on self.
    # --jaxmemprof's figures, recorded (a limit) and in memory (none), alike.
    assert ran.peak("SetUpTest", "test_uses_what_setup_made") == 512 * KiB
    assert ran.peak("SetUpTest", "test_unmarked") == 1 * MiB
    assert ran.peak("UnmarkedParameterizedTest", "test_peak0") == 1 * MiB
    assert ran.peak("UnmarkedParameterizedTest", "test_peak1") == 2 * MiB
    assert got["UnmarkedParameterizedTest.test_peak0"] == got["SetUpTest.test_unmarked"] == "PASSED", text


def test_the_body_still_leaks_and_peaks(ran):
    path, got, text, failed = ran.path, ran.outcomes(), ran.text, ran.sections()
    assert got["SetUpTest.test_leaks_from_its_body"] == "FAILED", text
    assert failed["SetUpTest.test_leaks_from_its_body"] == [
        "device memory leak: 1.00 MiB more alive after the test than before it exceeds limit_device_leaks "
        "512.00 KiB; made at:",
        f"    1.00 MiB  test_absl_suite.py:{line_of(path, 'LINE-BODY-LEAK')} (test_leaks_from_its_body)"], text
    assert failed["SetUpTest.test_over_by_its_own_local"] == [
        "device memory peak 2.00 MiB exceeds limit_device_memory 1.00 MiB:",
        f"    2.00 MiB  test_absl_suite.py:{line_of(path, 'LINE-OWN')} (test_over_by_its_own_local)"], text
    # Parameterized: the user's own function and line, through absl's generated one.
    param = line_of(path, "LINE-PARAM-LEAK")
    for name, size in (("test_leaks_param0", "1.00 MiB"), ("test_leaks_param1", "2.00 MiB")):
        assert got[f"ParameterizedTest.{name}"] == "FAILED", text
        assert failed[f"ParameterizedTest.{name}"][1:] == [
            f"  {size:>10}  test_absl_suite.py:{param} (test_leaks_param)"], text
    for name, size in (("test_param_over0", "2.00 MiB"), ("test_param_over1", "3.00 MiB")):
        assert failed[f"ParameterizedTest.{name}"] == [
            f"device memory peak {size} exceeds limit_device_memory 1.00 MiB:",
            f"    {size}  test_absl_suite.py:{line_of(path, 'LINE-PARAM-OWN')} (test_param_over)"], text
    # A function jitted in setUp is probed: XLA's peak inside its call in the test counts.
    jit = failed["JitTest.test_calls_what_setup_jitted"]
    assert re.match(rf"device memory peak 8\.\d\d MiB exceeds limit_device_memory 4\.00 MiB, during a call of "
                    rf"inner \(test_absl_suite.py:{line_of(path, 'LINE-JIT-CALL')} "
                    rf"\(test_calls_what_setup_jitted\)\)", jit[0]), jit


def test_warmups(ran):
    path, got, text, failed = ran.path, ran.outcomes(), ran.text, ran.sections()
    # The cache its first run fills is alive before the measured run: no leak.
    assert got["WarmupTest.test_fills_a_cache"] == "PASSED", text
    assert got["test_function_fills_a_cache"] == "PASSED", text
    # Without warm-ups the same cache is the test's leak.
    assert got["WarmupTest.test_fills_a_cache_unwarmed"] == "FAILED", text
    assert failed["WarmupTest.test_fills_a_cache_unwarmed"][1:] == [
        f"    2.00 MiB  test_absl_suite.py:{line_of(path, 'LINE-CACHE')} (cached_table)"], text
    # A leak of every run is still one after the warm-ups: one run's worth.
    for name, line in (("WarmupTest.test_leaks_every_run", "LINE-EVERY"),
                       ("test_function_leaks_every_run", "LINE-FN-EVERY")):
        assert got[name] == "FAILED", text
        assert failed[name][0].startswith("device memory leak: 1.00 MiB more alive after the test"), text
        assert failed[name][1:] == [
            f"    1.00 MiB  test_absl_suite.py:{line_of(path, line)} ({name.split('.')[-1]})"], text
    # A warm-up that fails fails the test, saying so, with its traceback.
    first = "\n".join(failed["WarmupTest.test_first_run_fails"])
    assert got["WarmupTest.test_first_run_fails"] == "FAILED", text
    assert first.startswith("jaxmemprof: warm-up run 1 of 2 failed:\nTraceback"), first
    assert "fails on its first run" in first, first


def test_outcomes_of_its_own(ran):
    got, text, failed = ran.outcomes(), ran.text, ran.sections()
    # The test's own failure is what is shown; its limits are not judged.
    own = "\n".join(failed["OutcomesTest.test_fails_by_itself"])
    assert got["OutcomesTest.test_fails_by_itself"] == "FAILED", text
    assert "its own failure" in own and "device memory" not in own and "not checked" not in own, own
    assert got["OutcomesTest.test_expected_failure"] == "XFAIL", text
    assert re.search(r"^SKIPPED \[1\] \S+: skipped by itself$", text, re.M), text
    assert "INTERNALERROR" not in text and "Traceback" not in text.split("= FAILURES =")[0], text
    # 28 tests: 14 pass, 12 fail, 1 skipped, 1 expected to fail.
    assert ran.counts() == {"passed": 14, "failed": 12, "skipped": 1, "xfailed": 1}, text
