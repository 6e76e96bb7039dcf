"""A gate that could not look fails: `jaxmemprof check` exits 2 (never 0)
when a figure it was asked for cannot be computed, and 1 when a limit failed
whatever became of its stdout (closed, a reader that went away, a full
disk); the pytest plugin fails a test whose limit it could not measure."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys

import pytest

from conftest import cli_batch, cpu_env, in_parallel, run_cli, write_script

MiB = 1024 * 1024

SCRIPT = """
import jax
import jax.numpy as jnp
import jaxmemprof

params = jnp.zeros((256, 1024), jnp.float32)  # 1 MiB
step = jax.jit(lambda p: p * 0.5)
for i in range(8):
    params = step(params)
    jaxmemprof.mark(f"step {i}")
    jaxmemprof.snapshot()
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``good``: a run with jit figures and 8 step snapshots; ``nojit``: the
    same without the jit probe; ``short``: two snapshots in all."""
    d = tmp_path_factory.mktemp("gates")
    script = write_script(d, "steps.py", SCRIPT)
    short = write_script(d, "short.py", """
        import jax.numpy as jnp
        a = jnp.ones((256, 1024))
    """)
    in_parallel(  # each recording waits on its own process: two at a time
        lambda: run_cli("run", "-q", "--interval", "1000", "-o", d / "good", script, cwd=d, check=0),
        lambda: run_cli("run", "-q", "--interval", "1000", "--no-jit-probe", "-o", d / "nojit", script, cwd=d,
                        check=0),
        lambda: run_cli("run", "-q", "--interval", "1000", "-o", d / "short", short, cwd=d, check=0))
    return d


def checks(d, *commands):
    """Each ``(exit status expected, argv of check)`` of ``commands`` run in
    turn in one process (through the CLI's entry point, tests/conftest.py
    cli_batch); their completed processes."""
    procs = cli_batch([["check", *argv] for _, argv in commands], d, workers=1)
    for (status, argv), proc in zip(commands, procs):
        assert proc.returncode == status, (
            f"check {argv}: exit {proc.returncode}, expected {status}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return procs


def damaged(d, name: str, how: str) -> str:
    """A copy of ``good`` damaged as ``how`` says; what the error says of it."""
    target = d / name
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(d / "good", target)
    snaps = sorted((target / "snapshots").iterdir())
    if how == "no-snapshots-dir":
        shutil.rmtree(target / "snapshots")
        con = sqlite3.connect(target / "journal.sqlite")
        rows = con.execute("SELECT count(*) FROM snapshots").fetchone()[0]  # snapshots may share a file
        con.close()
        return f"has no readable snapshot ({rows} snapshot file(s) missing (snapshots 1, 2, 3"
    if how == "one-file-gone":
        gone = snaps[len(snaps) // 2]
        gone.unlink()
        con = sqlite3.connect(target / "journal.sqlite")
        rows = [r for (r,) in con.execute("SELECT snapshot FROM snapshots WHERE file = ? ORDER BY snapshot",
                                          (f"snapshots/{gone.name}",))]  # the snapshots that shared it
        con.close()
        return (f"{len(rows)} snapshot file(s) missing (snapshots {', '.join(map(str, rows))}), so its figures are "
                f"not all there")
    if how == "journal-cut":
        # What a killed run's journal cut short (its WAL) holds: the first
        # commits; the later snapshots' files are there, their rows are not.
        con = sqlite3.connect(target / "journal.sqlite")
        con.execute("DELETE FROM snapshots WHERE snapshot > 4")
        con.commit()
        kept = {f for (f,) in con.execute("SELECT file FROM snapshots")}
        con.close()
        orphans = [p for p in snaps if f"snapshots/{p.name}" not in kept]
        assert orphans
        return (f"{len(orphans)} snapshot file(s) without a journal entry (the run was killed while writing them?), "
                f"so its figures are not all there")
    if how == "empty-journal":
        # What a killed run's journal holds when its WAL is lost: the tables, no rows.
        con = sqlite3.connect(target / "journal.sqlite")
        con.execute("DELETE FROM snapshots")
        con.commit()
        con.close()
        return f"has no readable snapshot ({len(snaps)} snapshot file(s) without a journal entry"
    raise AssertionError(how)


def error_line(proc) -> str:
    lines = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_the_sound_run_passes_and_fails_by_its_figures(runs):
    """The reference: the same checks on the undamaged run give 0 and 1."""
    d = runs
    checks(d, (0, ["good", "--max-peak", "1GiB", "--max-true-peak", "1GiB", "--max-growth", "1GiB/step"]),
           (1, ["good", "--max-peak", "1B"]))


@pytest.mark.parametrize("how", ["no-snapshots-dir", "empty-journal", "one-file-gone", "journal-cut"])
def test_a_run_whose_snapshots_are_lost_cannot_pass(runs, how):
    d = runs
    expected = damaged(d, how, how)
    # Under the limit (the sound run's figures) or not: the gate could not look, exit 2.
    more = [] if how != "no-snapshots-dir" else [
        (2, [how, "--fail-on", "leak", "--max-peak", "1B", "--json"]),
        (2, ["good", "--baseline", how, "--max-increase", "1000"])]
    proc, *others = checks(d, (2, [how, "--max-peak", "1TiB"]), *more)
    line = error_line(proc)
    assert line.startswith(f"jaxmemprof: error: {how}: {expected}"), line
    assert line.endswith(": --max-peak cannot be checked"), line
    assert proc.stdout == ""
    if how != "no-snapshots-dir":
        return
    # Every check asked for is named; --json writes nothing.
    proc, baseline = others
    assert error_line(proc).endswith(": --max-peak and --fail-on cannot be checked") and proc.stdout == ""
    # As a baseline: its peak is unknown, so is the increase.
    proc = baseline
    assert error_line(proc).startswith(f"jaxmemprof: error: {how}: "), proc.stderr
    assert error_line(proc).endswith(": --max-increase cannot be checked")


@pytest.mark.parametrize("how", ["one-file-gone", "journal-cut"])
def test_a_peak_limit_already_broken_by_what_was_read_fails(runs, how):
    """Snapshots lost can only raise a peak: a limit the rest already breaks
    has failed (exit 1, the lost ones warned about); one they keep is not
    known to hold (exit 2)."""
    d = runs
    damaged(d, how + "-1", how)
    # (the last: growth is not monotone in what was read: never failed nor passed on part of a run)
    proc, _, _ = checks(d, (1, [how + "-1", "--max-peak", "1B"]), (2, [how + "-1", "--max-peak", "1TiB"]),
                        (1, [how + "-1", "--max-peak", "1B", "--max-growth", "1TiB/step"]))
    assert proc.stdout.startswith("FAIL --max-peak 1 B: peak "), proc.stdout
    assert proc.stderr.startswith(f"jaxmemprof: warning: {how}-1: ") and "snapshot file(s)" in proc.stderr


def test_true_peak_needs_jit_figures(runs):
    d = runs
    proc, _, _ = checks(d, (2, ["nojit", "--max-true-peak", "1TiB"]),
                        (0, ["nojit", "--max-peak", "1TiB"]),  # the snapshots' peak is there
                        (0, ["good", "--max-true-peak", "1TiB"]))
    assert error_line(proc) == ("jaxmemprof: error: nojit: has no figures from inside jitted calls (recorded with "
                                "--no-jit-probe, or no jitted function was compiled): --max-true-peak cannot be "
                                "checked; give --max-peak")


def test_growth_needs_enough_snapshots(runs):
    d = runs
    proc, _ = checks(d, (2, ["short", "--max-growth", "1TiB/s"]), (0, ["good", "--max-growth", "1TiB/s"]))
    line = error_line(proc)
    assert re.fullmatch(r"jaxmemprof: error: short: has [0-5] snapshots? before its exit, and growth is measured "
                        r"over 6 at least: --max-growth cannot be checked", line), line


def test_a_job_with_a_process_it_cannot_read(runs):
    d = runs
    job = d / "job"
    shutil.rmtree(job, ignore_errors=True)
    for n in (0, 1):
        shutil.copytree(d / "good", job / f"process-{n}")
        manifest = job / f"process-{n}" / "manifest.json"
        m = json.loads(manifest.read_text())
        m.update(process_index=n, process_count=2)
        manifest.write_text(json.dumps(m))
    run_cli("check", "job", "--max-peak", "1TiB", cwd=d, check=0)
    # process-1 a link to a run: never read, so never passed.
    shutil.move(job / "process-1", d / "elsewhere")
    os.symlink(d / "elsewhere", job / "process-1")
    proc = run_cli("check", "job", "--max-peak", "1TiB", cwd=d, check=2)
    assert error_line(proc).startswith("jaxmemprof: error: job/process-1: is a sym"), proc.stderr  # symlink, symbolic link
    # Gone: process 0 says the job had two.
    os.unlink(job / "process-1")
    proc = run_cli("check", "job", "--max-peak", "1TiB", cwd=d, check=2)
    assert error_line(proc) == ("jaxmemprof: error: job: has no process-1, and its processes say the job had 2: "
                                "that process cannot be checked")
    # A process directory that is not a run.
    (job / "process-1").mkdir()
    proc = run_cli("check", "job", "--max-peak", "1TiB", cwd=d, check=2)
    assert error_line(proc).startswith("jaxmemprof: error: job/process-1: "), proc.stderr


def check_into(d, stdout, *args):
    """``check`` with its stdout given (a pipe's write end, a file); returns
    (exit status, stderr)."""
    proc = subprocess.run([sys.executable, "-m", "jaxmemprof", "check", *args], cwd=d, env=cpu_env(),
                          stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=300)
    return proc.returncode, proc.stderr


def test_exit_status_whatever_becomes_of_stdout(runs):
    """A limit that failed is exit 1, when the reader of stdout has gone
    (`| true`), stdout is closed (`>&-`) or the disk is full; when every
    limit held, a reader that went away is no error (0), and a closed or
    full stdout is (2)."""
    d = runs

    def into_closed_pipe(limit, extra):
        # A pipe whose reader has exited before the write.
        read, write = os.pipe()
        os.close(read)
        try:
            return check_into(d, write, "good", "--max-peak", limit, *extra)
        finally:
            os.close(write)

    def shell(command):
        return subprocess.run(["bash", "-c", command], cwd=d, env=cpu_env(), capture_output=True, text=True,
                              timeout=300)

    def into_full_disk(limit, extra):
        with open("/dev/full", "w") as full:
            return check_into(d, full, "good", "--max-peak", limit, *extra)

    # Every case its own process; two at a time.
    piped = [("1B", 1, []), ("1B", 1, ["--json"]), ("1TiB", 0, [])]
    closed = [("1B", 1), ("1TiB", 2)]
    full = [("1B", 1, ["--json"]), ("1TiB", 2, [])] if os.path.exists("/dev/full") else []
    calls = [lambda limit=limit, extra=extra: into_closed_pipe(limit, extra) for limit, _, extra in piped]
    # The shell's own pipe: `check | true`.
    calls.append(lambda: shell(f"{sys.executable} -m jaxmemprof check good --max-peak 1B | true; "
                               "echo ${PIPESTATUS[0]}"))
    # stdout closed: the error said on stderr, the exit status the gate's.
    calls += [lambda limit=limit: shell(f"{sys.executable} -m jaxmemprof check good --max-peak {limit} >&-")
              for limit, _ in closed]
    calls += [lambda limit=limit, extra=extra: into_full_disk(limit, extra) for limit, _, extra in full]
    done = in_parallel(*calls)
    for (_limit, status, _extra), (rc, err) in zip(piped, done):
        assert rc == status, err
        assert "Traceback" not in err and "Exception ignored" not in err, err
        assert "error" not in err, err  # a reader that went away is said nowhere
    proc = done[len(piped)]
    assert proc.stdout.strip() == "1", proc.stderr
    for (_limit, status), proc in zip(closed, done[len(piped) + 1:]):
        assert proc.returncode == status, proc.stderr
        assert error_line(proc) == "jaxmemprof: error: stdout: cannot write: it is closed"
    for (_limit, status, _extra), (rc, err) in zip(full, done[len(piped) + 1 + len(closed):]):
        assert rc == status, err
        assert "No space left on device" in err and "Traceback" not in err, err


# -- the pytest plugin ---------------------------------------------------------------

PLUGIN_TESTS = '''
import shutil

import jax.numpy as jnp
import pytest

from jaxmemprof.capture import session


@pytest.mark.limit_device_memory("64 MiB")
def test_limited():
    a = jnp.ones((256, 1024), jnp.float32)
    assert a.shape == (256, 1024)


@pytest.mark.limit_device_leaks("64 MiB")
def test_leak_limited():
    a = jnp.ones((256, 1024), jnp.float32)
    del a


@pytest.mark.limit_device_memory("64 MiB")
def test_limited_and_failing():
    assert 1 == 2, "the test's own failure"


def test_unlimited():
    a = jnp.ones((256, 1024), jnp.float32)
    assert a.shape == (256, 1024)


@pytest.mark.limit_device_memory("64 MiB")
def test_loses_its_run():
    a = jnp.ones((256, 1024), jnp.float32)
    shutil.rmtree(session.active().path / "snapshots")  # what it recorded is gone
    assert a.shape == (256, 1024)
'''


def outcomes(result) -> dict:
    found = {}
    for line in result.outlines:
        m = re.match(r"^(PASSED|FAILED) \S+::(\w+)", line)
        if m:
            found[m.group(2)] = m.group(1)
    return found


def failure_sections(text: str) -> dict:
    """The body of each test's section under FAILURES, by test name."""
    failures = text.split("= FAILURES =", 1)[1].split("short test summary info", 1)[0]
    parts = re.split(r"^_{3,} (\w+) _{3,}$", failures, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_plugin_limits_fail_closed(pytester, monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    pytester.makepyfile(test_gated=PLUGIN_TESTS)
    # Measured: the limits hold, and the test that lost its run fails, unmeasured.
    result = pytester.runpytest_subprocess("-rA", "-p", "no:cacheprovider", "--jaxmemprof")
    text = result.stdout.str()
    assert outcomes(result) == {"test_limited": "PASSED", "test_leak_limited": "PASSED",
                                "test_limited_and_failing": "FAILED", "test_unlimited": "PASSED",
                                "test_loses_its_run": "FAILED"}, text
    assert "jaxmemprof: limit_device_memory not checked: device memory not measured: " in text, text
    assert "the test's own failure" in text

    # The run directories cannot be made: a file is where they would go.
    blocker = pytester.path / "runs"
    blocker.write_text("not a directory\n")
    result = pytester.runpytest_subprocess("-rA", "-p", "no:cacheprovider", "--jaxmemprof-runs", str(blocker),
                                           "-k", "not loses")
    text = result.stdout.str()
    assert outcomes(result) == {"test_limited": "FAILED", "test_leak_limited": "FAILED",
                                "test_limited_and_failing": "FAILED", "test_unlimited": "PASSED"}, text
    # Each failure says what it is, in its own section (the short summary's lines are cut to the
    # terminal's width, so they are not counted).
    sections = failure_sections(text)
    assert "limit_device_memory not checked: device memory not measured: " in sections["test_limited"], text
    assert "limit_device_leaks not checked: device memory not measured: " in sections["test_leak_limited"], text
    own = sections["test_limited_and_failing"]
    assert "the test's own failure" in own and "not checked" not in own, text  # its own failure, alone
    assert "INTERNALERROR" not in text and blocker.read_text() == "not a directory\n"
