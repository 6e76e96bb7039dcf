"""Shared helpers: run the CLI as a user would, and record real JAX profiles."""

from __future__ import annotations

import faulthandler
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

import _cli_server

pytest_plugins = ["pytester"]

# Property tests run the same fixed examples on every clone and every run (the
# README's test command must pass the same way each time); the open-ended
# random search is the "fuzz" profile, run on purpose:
#     python -m pytest tests/test_fuzz_readers.py --hypothesis-profile=fuzz
# Their inputs' generation is not timed: on a machine busy with other work
# (two workers, a JAX subprocess beside them) the too_slow health check
# failed a test whose examples were right.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("fuzz", derandomize=False, deadline=None)
settings.load_profile("ci")

REPO = Path(__file__).resolve().parent.parent

# The tests' own JAX (in-process, and every process they start: cpu_env) is the CPU backend's, as
# docs/development.md says: with libtpu installed (the test extra's jax[tpu]) and no JAX_PLATFORMS,
# jax 0.6.1 looked for a TPU first, and its libtpu queried Google Cloud's metadata server for good.
os.environ.setdefault("JAX_PLATFORMS", "cpu")


def pytest_configure(config):
    """jaxmemprof's modules compiled once, before the tests start their
    processes: where PYTHONDONTWRITEBYTECODE is set (as on this project's
    machines), every `jaxmemprof` command the tests run would otherwise
    compile the 70-odd modules it imports from source again (0.11 s of a
    0.7 s `report`). Python still reads bytecode it did not write; a stale
    file is recompiled (compileall compares each source's time and size)."""
    if not hasattr(config, "workerinput"):  # once, in the main process (not in each xdist worker)
        import compileall

        compileall.compile_dir(str(REPO / "jaxmemprof"), quiet=2)


_SHARED_SCOPES = ("module", "package", "session")

# The compatibility subset (``-m compat``), which .ci/run runs on the oldest
# JAX and on each Python the project declares besides the main lane's 3.11
# (jaxmemprof/versions.py):
# what each version could drop. Tests named here by module or node id (a
# parametrized test's id with its brackets), besides those marked in their
# own module; a name that no longer matches a test of its module fails the
# collection, so a renamed test cannot leave the subset unseen.
COMPAT = (
    # the README's first command, its findings and holders, and `check --fail-on donate`
    "tests/test_compat.py",
    # the bytecode the donation advice reads, on each Python
    "tests/test_liveness_opcodes.py",
    "tests/test_versions.py",
    # a donation's bytes to the byte XLA aliases once applied, and memory inside a jitted call by line
    "tests/test_donation.py::test_forgotten_donation_is_recommended_with_the_right_bytes",
    "tests/test_donation.py::test_applied_donation_gets_no_advice_and_lowers_the_peak_by_the_prediction",
    "tests/test_donation.py::test_report_shows_the_donation_and_memory_inside_jit",
    # flax.nnx's and equinox's donation, in their own terms, applied and aliased
    "tests/test_wrappers.py::test_wrapper_gets_donation_advice_in_its_own_terms[nnx_optimizer.py]",
    "tests/test_wrappers.py::test_wrapper_gets_donation_advice_in_its_own_terms[equinox_optax.py]",
    # run is python for the script: every way a program is run and ends (each Python's exit and traceback rules)
    "tests/test_run_as_python.py",
    # programs that a read of their frames would change (a trace function set), run as under python
    "tests/test_holders_observe.py::test_run_is_python_for_programs_a_read_would_change",
    # --target: the release's libtpu, against jax's own deviceless compile
    "tests/test_targets.py::test_a_single_chip_slice_compiles_with_the_figures_of_jaxs_own_compile_for_one_chip",
    # every call's live bytes counted, and an XProf profile's step and its calls (JAX 0.6's CPU events name no run)
    "tests/test_call_live.py::test_every_call_is_counted_and_the_calls_with_more_live_are_written",
    "tests/test_xprof.py::test_the_step_read_from_the_profile_is_the_compiled_step[plain]",
    # operations outside jit, named from JAX's compile events (their names as each JAX gives them)
    "tests/test_outside_jit.py::test_operations_between_jitted_calls_are_named_by_their_line",
)

# The short loop (``-m fast``, docs/development.md): the unit tests of the
# analyses, the goldens, the recorded fixtures, the readers' and the
# options' checks, the architecture and the tools; no test that records a
# program of its own but the few the goldens and the unit tests share.
FAST = (
    "tests/unit/",
    "tests/test_golden.py",
    "tests/test_tpu_fixtures.py",
    "tests/test_liveness_opcodes.py",
    "tests/test_versions.py",
    "tests/test_architecture.py",
    "tests/test_option_values.py",
    "tests/test_columns_doc.py",
    "tests/test_backends.py",
    "tests/test_source.py",
    "tests/test_generic_pprof.py",
    "tests/test_show_diff.py",
    "tests/test_device_names.py",
    "tests/test_tools.py",
    "tests/test_own_threads.py",
    "tests/test_xplane_lines.py",
    "tests/test_xprof_runs.py",
)


def _selects(name: str, nodeid: str) -> bool:
    """Whether the selector ``name`` (a directory ending in /, a module, a
    test's node id with or without its parameters) selects ``nodeid``."""
    if name.endswith("/") or "::" not in name:
        return nodeid == name or nodeid.startswith(name if name.endswith("/") else name + "::")
    return nodeid == name or nodeid.startswith(name + "[")


def _mark_subsets(config, items) -> None:
    """The ``compat`` and ``fast`` markers put on the tests COMPAT and FAST
    name; a name whose module was collected whole but which selects no test
    of it fails the collection."""
    whole = not any("::" in str(arg) for arg in config.args)
    modules = {item.nodeid.split("::", 1)[0] for item in items} if whole else set()
    unmatched = []
    for marker, names in (("compat", COMPAT), ("fast", FAST)):
        for name in names:
            hit = False
            for item in items:
                if _selects(name, item.nodeid):
                    item.add_marker(getattr(pytest.mark, marker))
                    hit = True
            if not hit and name.split("::", 1)[0] in modules:
                unmatched.append(name)
    if unmatched:
        raise pytest.UsageError("tests/conftest.py names tests that are not there (renamed?): "
                                + ", ".join(unmatched))


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the groups into the tests' ids
def pytest_collection_modifyitems(config, items):
    """The tests that share an expensive fixture run on one xdist worker.
    Under pytest-xdist a module- or session-scoped fixture is made once per
    worker that runs a test needing it; with ``--dist load`` a module's
    tests are cut into chunks that go to either worker, so a recording made
    for a module was often made twice. Each module whose tests use a
    module-, package- or session-scoped fixture of this suite (not pytest's
    own, as tmp_path_factory) is put in one ``xdist_group`` with every other
    module sharing such a fixture with it (tests/unit/'s session runs: the
    whole directory), for pyproject's ``--dist loadgroup``; the other tests
    are spread one by one. Without -n the groups change nothing."""
    _mark_subsets(config, items)
    tests_dir = str(REPO / "tests") + os.sep
    parent: dict = {}

    def find(key):
        while parent.setdefault(key, key) != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    by_module: dict = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        by_module.setdefault(module, []).append(item)
        info = getattr(item, "_fixtureinfo", None)
        for defs in (info.name2fixturedefs.values() if info is not None else ()):
            for fixturedef in defs:
                source = getattr(fixturedef.func, "__code__", None)
                if fixturedef.scope not in _SHARED_SCOPES or source is None \
                        or not source.co_filename.startswith(tests_dir):
                    continue
                # the fixture's own file (its module, or the conftest.py of its directory) joins the module
                parent[find(module)] = find(os.path.relpath(source.co_filename, REPO))
    for module, module_items in by_module.items():
        if module in parent:
            group = find(module)
            for item in module_items:
                item.add_marker(pytest.mark.xdist_group(name=group))


# Every phase of a test (setup, call, teardown) has a deadline: one that
# hangs (a child that never ends, a lock never released) fails with the
# stacks of its threads instead of holding its worker, and so .ci/run,
# until CI's own limit ends the run with nothing said. The slowest phase
# takes about 45 s on 2 idle cores (docs/performance.md).
TEST_DEADLINE_SECONDS = float(os.environ.get("JAXMEMPROF_TEST_DEADLINE", "300"))


def _phase_with_deadline(item):
    if TEST_DEADLINE_SECONDS <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(signum, frame):
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        pytest.fail(f"{item.nodeid}: still running after {TEST_DEADLINE_SECONDS:.0f} s "
                    "(tests/conftest.py's deadline; its threads' stacks are in its stderr)")

    before = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, TEST_DEADLINE_SECONDS)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    yield from _phase_with_deadline(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield from _phase_with_deadline(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    yield from _phase_with_deadline(item)


def cpu_env(**extra) -> dict:
    """The environment a command runs in: JAX on the CPU, and the width a
    pipe gets (pytest-xdist exports COLUMNS=80, which the CLI honours off a
    terminal; a test that wants a width passes it)."""
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu"
    for name in ("NO_COLOR", "COLUMNS", "LINES"):
        env.pop(name, None)
    env.update(extra)
    return env


def sigint_at(handler=signal.SIG_DFL):
    """A ``preexec_fn`` that starts the child with SIGINT at ``handler``:
    by default as from a terminal, whatever this process inherited (a job
    started with ``&`` from a script starts with SIGINT ignored, and so does
    every program it runs, python's and jaxmemprof's alike)."""
    return lambda: signal.signal(signal.SIGINT, handler)


def interrupted_as_a_lock_is_taken(frame, event, arg):
    """A profile function (``sys.setprofile``) that raises KeyboardInterrupt
    as the first lock ``acquire`` of this thread returns, then takes itself
    off: where a SIGINT's handler (or the parking's exception at a script's
    end) can come out of a take, before what follows it runs."""
    if event == "c_return" and getattr(arg, "__name__", "") == "acquire":
        sys.setprofile(None)
        raise KeyboardInterrupt


def run_cli(*args, cwd=None, env=None, check=None, input=None) -> subprocess.CompletedProcess:
    """Run ``python -m jaxmemprof ARGS`` and return the completed process
    (text stdout/stderr). ``check``: the exit status expected, if any. A
    reading command runs in a process forked from a server that imported
    the command line once (tests/_cli_server.py); the others, ``run``
    first, in a new Python."""
    args = [str(a) for a in args]
    if args and args[0] in _cli_server.READING:
        proc = _cli_server.run(args, cwd=cwd, env=env or cpu_env(), input=input, timeout=300,
                               server_env=cpu_env())
    else:
        proc = subprocess.run([sys.executable, "-m", "jaxmemprof", *args], cwd=cwd, env=env or cpu_env(),
                              capture_output=True, text=True, input=input, timeout=300)
    if check is not None:
        assert proc.returncode == check, (
            f"exit {proc.returncode}, expected {check}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        )
    return proc


def cli_batch(jobs: list[list], cwd: Path | None, *, workers: int = 2, env: dict | None = None
              ) -> list[subprocess.CompletedProcess]:
    """``jaxmemprof ARGV`` for each ARGV in ``jobs``, ``workers`` at a time
    (``workers=1``: one after the other, in order), each a process of its
    own (``run_cli``: a reading command is forked from a server that
    imported the command line once); their completed processes in the order
    of ``jobs``."""
    return in_parallel(*(lambda argv=argv: run_cli(*argv, cwd=cwd, env=env) for argv in jobs), workers=workers)


def in_parallel(*calls, workers: int = 2) -> list:
    """Call each of ``calls`` (callables without arguments), ``workers`` at a
    time, and return their results in their order; the first exception is
    raised. For the independent subprocesses of a test or a fixture (the
    reference under plain python and the recordings of several programs),
    which would otherwise each wait for the one before on a machine with a
    second core idle."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda call: call(), calls))


def run_script(path: Path, *args, cwd=None) -> subprocess.CompletedProcess:
    """Run a Python script with real JAX on the CPU backend."""
    proc = subprocess.run(
        [sys.executable, str(path), *map(str, args)],
        cwd=cwd or path.parent,
        env=cpu_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"{path} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def write_script(directory: Path, name: str, source: str) -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(source).lstrip("\n"))
    return path


def line_of(path: Path, marker: str) -> int:
    """The 1-based line number of the line containing ``marker``."""
    for i, text in enumerate(path.read_text().splitlines(), start=1):
        if marker in text:
            return i
    raise AssertionError(f"{marker!r} not in {path}")


def go_pprof() -> list[str] | None:
    """The reference reader, ``go tool pprof``, or None when Go is missing."""
    go = shutil.which("go")
    if go is None:
        return None
    return [go, "tool", "pprof"]


@pytest.fixture
def tmux():
    """``cmd(*args)``: tmux on a server of the test's own (a real terminal),
    killed at the end. CI installs tmux (.ci/run): missing there, the test fails."""
    if shutil.which("tmux") is None:
        if os.environ.get("CI"):
            pytest.fail("tmux is missing: .ci/run must install it")
        pytest.skip("tmux not installed")
    socket = f"jaxmemprof-test-{uuid.uuid4().hex[:8]}"

    def cmd(*args, check=True):
        return subprocess.run(["tmux", "-L", socket, *args], capture_output=True, text=True, timeout=30, check=check)

    yield cmd
    cmd("kill-server", check=False)


@pytest.fixture
def pprof_cmd():
    cmd = go_pprof()
    if cmd is None:
        if os.environ.get("CI"):
            pytest.fail("go tool pprof is missing: .ci/run must install golang-go")
        pytest.skip("go tool pprof not installed (apt-get install golang-go)")
    return cmd


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="tests/test_golden.py: rewrite tests/golden/ and the README's and docs' example "
                          "blocks from the real output (as pprof's -update)")


@pytest.fixture
def update_golden(request) -> bool:
    """Whether --update-golden was given: rewrite the golden files instead of comparing."""
    return request.config.getoption("--update-golden")


def read_only_dir(tmp_path: Path) -> Path:
    """A directory in which this process can make neither a file nor a
    directory: a chmod'ed one, or /sys for root (whom permission bits do not
    stop)."""
    if os.geteuid() != 0:
        d = tmp_path / "ro"
        d.mkdir()
        d.chmod(0o555)
        return d
    probe = Path("/sys") / "jaxmemprof-probe"
    for make in (lambda: probe.write_bytes(b""), probe.mkdir):
        try:
            make()
        except OSError:
            continue
        pytest.skip("no read-only place to write into")
    return Path("/sys")
