"""Forked children never write into the parent's run, and the parent keeps
recording; spawn and forkserver children work as under python. Each script
runs under plain python and under `jaxmemprof run`."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import cpu_env, write_script

from jaxmemprof.store.reader import load_run


def _both(tmp_path, source, *args):
    """(python's result, run's result, the run directory): the two at the same time."""
    script = write_script(tmp_path, "forks.py", source)
    commands = ([sys.executable, str(script), *args],
                [sys.executable, "-m", "jaxmemprof", "run", "-o", str(tmp_path / "run"),
                 "--interval", "0.05", "--max-overhead", "0", str(script), *args])
    with ThreadPoolExecutor(2) as pool:
        py, jm = pool.map(lambda cmd: subprocess.run(cmd, cwd=tmp_path, env=cpu_env(), capture_output=True,
                                                     text=True, timeout=120), commands)
    return py, jm, tmp_path / "run"


def _check_parent_only(jm, run_dir, after_fork_bytes):
    """One summary; the journal holds the parent's rows only; the parent
    sampled after the fork (an interval snapshot saw what it made then)."""
    assert jm.stderr.count("(next: jaxmemprof report") == 1, jm.stderr
    assert "IntegrityError" not in jm.stderr and "sampling stopped" not in jm.stderr, jm.stderr
    run = load_run(run_dir)
    assert run.finished and not run.warnings, run.warnings
    assert run.manifest["exit_status"] == 0
    assert list(run.snapshots["trigger"]).count("exit") == 1
    intervals = run.snapshots[run.snapshots["trigger"] == "interval"]
    assert (intervals["live_bytes"] >= after_fork_bytes).any(), run.snapshots[["trigger", "live_bytes"]]
    con = sqlite3.connect(run_dir / "journal.sqlite")
    kinds = [k for (k,) in con.execute("SELECT kind FROM events")]
    con.close()
    assert "sampler-error" not in kinds and "exception" not in kinds, kinds
    return run


# A child that runs on after fork uses no JAX: under python, a forked child
# that exits through the interpreter after JAX is up may crash as it frees
# JAX's objects ("before": JAX is imported after the fork); one that forks
# with JAX up leaves by os._exit, as multiprocessing's do ("after").
OS_FORK = """
import os, sys, time
import jaxmemprof
if sys.argv[2] == "after":
    import jax.numpy as jnp
    a = jnp.ones((1000,))
time.sleep(0.3)
pid = os.fork()
if pid == 0:
    # The child: the API stays callable (no-ops).
    print("child snapshot:", jaxmemprof.snapshot("child"), flush=True)
    jaxmemprof.mark("child")
    if sys.argv[1] == "exit":
        sys.exit(3)
    elif sys.argv[1] == "raise":
        raise ValueError("child fails")
    elif sys.argv[1] == "os._exit":
        os._exit(4)
    # else: it falls off the end of the script
else:
    _, status = os.waitpid(pid, 0)
    print("child status:", os.waitstatus_to_exitcode(status), flush=True)
    import jax.numpy as jnp
    b = jnp.ones((4000,))
    time.sleep(0.5)
    print("parent done", flush=True)
"""


@pytest.mark.parametrize("how,when", [("exit", "before"), ("raise", "before"), ("end", "before"),
                                      ("os._exit", "after")])
def test_os_fork_child_stops_recording_and_the_parent_goes_on(tmp_path, how, when):
    py, jm, run_dir = _both(tmp_path, OS_FORK, how, when)
    assert py.returncode == jm.returncode == 0, jm.stderr
    assert jm.stdout == py.stdout
    assert "parent done" in py.stdout
    if how == "raise":
        assert "ValueError: child fails" in jm.stderr and jm.stderr.count("Traceback") == 1
    run = _check_parent_only(jm, run_dir, 16000)
    assert "child" not in list(run.snapshots["label"].dropna())
    assert run.markers.empty
    assert not list(tmp_path.glob("run.fork-*"))  # a child that never brought JAX up records nothing


MULTIPROCESSING = """
import multiprocessing as mp, sys, time, warnings
import jax.numpy as jnp
import jaxmemprof

def square(x):
    # In a child: no-ops, and nothing reaches the parent's journal.
    jaxmemprof.mark(f"child {x}")
    warnings.warn(f"from child {x}")
    return x * x

if __name__ == "__main__":
    a = jnp.ones((1000,))
    time.sleep(0.3)
    ctx = mp.get_context(sys.argv[1])
    with ctx.Pool(2) as pool:
        print(pool.map(square, range(6)), flush=True)
    p = ctx.Process(target=square, args=(3,))
    p.start(); p.join()
    print("exitcode", p.exitcode)
    b = jnp.ones((3000,))
    time.sleep(0.5)
    print("parent done", flush=True)
"""


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_multiprocessing(tmp_path, method):
    py, jm, run_dir = _both(tmp_path, MULTIPROCESSING, method)
    assert py.returncode == 0, py.stderr
    assert jm.returncode == 0, jm.stderr
    assert jm.stdout == py.stdout == "[0, 1, 4, 9, 16, 25]\nexitcode 0\nparent done\n"
    run = _check_parent_only(jm, run_dir, 16000)
    assert run.markers.empty
    assert not run.events["message"].str.contains("from child").any()
    assert not list(tmp_path.glob("run.fork-*"))  # JAX was up at the fork: the children record nothing


def test_sigterm_to_a_forked_child_ends_only_the_child(tmp_path):
    py, jm, run_dir = _both(tmp_path, """
        import os, signal, time
        import jax.numpy as jnp
        a = jnp.ones((1000,))
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(w, b"x")
            time.sleep(30)
            os._exit(0)
        os.read(r, 1)
        os.kill(pid, signal.SIGTERM)
        _, status = os.waitpid(pid, 0)
        print("child status:", os.waitstatus_to_exitcode(status), flush=True)
        b = jnp.ones((3000,))
        time.sleep(0.5)
    """)
    assert py.returncode == jm.returncode == 0, jm.stderr
    assert jm.stdout == py.stdout == "child status: -15\n"
    run = _check_parent_only(jm, run_dir, 16000)
    assert run.manifest["ended_by"] == "exit"


# A child forked before JAX was up, that brings JAX up itself, is recorded
# into a run of its own, RUN.fork-PID; the parent's run holds the parent's
# arrays only.
FORK_THEN_JAX = """
import os, sys, time
import multiprocessing as mp

def child_work(n):
    import jax.numpy as jnp
    a = jnp.ones((n, 1024), jnp.float32)  # CHILD
    time.sleep(0.4)
    print("child", a.size, flush=True)

if __name__ == "__main__":
    if sys.argv[1] == "os.fork":
        pid = os.fork()
        if pid == 0:
            child_work(1024)  # 4 MiB
            sys.exit(5)
        _, status = os.waitpid(pid, 0)
        print("child status", os.waitstatus_to_exitcode(status), flush=True)
    else:
        p = mp.get_context("fork").Process(target=child_work, args=(512,))  # 2 MiB
        p.start(); p.join()
        print("exitcode", p.exitcode, flush=True)
    import jax.numpy as jnp
    b = jnp.ones((256, 1024), jnp.float32)  # PARENT
    time.sleep(0.3)
    print("parent done", flush=True)
"""


def _sites(run, script_name):
    """{line: bytes} of the arrays alive at the run's peak, by their line in the script."""
    peak = int(run.snapshots.loc[run.snapshots["live_bytes"].idxmax(), "snapshot"])
    a = run.arrays[(run.arrays["first_snapshot"] <= peak) & (run.arrays["last_snapshot"] >= peak)]
    out = {}
    for sid, nbytes in zip(a["stack_id"], a["nbytes"]):
        frames = [f for f in run.stacks.get(int(sid), []) if f[0].endswith(script_name)]
        if frames:
            out[frames[0][1]] = out.get(frames[0][1], 0) + int(nbytes)
    return out


@pytest.mark.parametrize("how,child_bytes,status", [("os.fork", 4 << 20, 5), ("multiprocessing", 2 << 20, None)])
def test_a_child_that_brings_jax_up_records_its_own_run(tmp_path, how, child_bytes, status):
    from conftest import line_of

    py, jm, run_dir = _both(tmp_path, FORK_THEN_JAX, how)
    assert py.returncode == jm.returncode == 0, jm.stderr
    assert jm.stdout == py.stdout and "parent done" in jm.stdout
    script = tmp_path / "forks.py"
    parent = _check_parent_only(jm, run_dir, 1 << 20)
    assert _sites(parent, "forks.py") == {line_of(script, "# PARENT"): 1 << 20}
    [child_dir] = [p for p in tmp_path.iterdir() if p.name.startswith("run.fork-")]
    child = load_run(child_dir)
    assert child.finished and not child.warnings, child.warnings
    assert child.manifest["forked_from"]["run"] == str(run_dir)
    assert child.manifest["exit_status"] == status
    assert _sites(child, "forks.py") == {line_of(script, "# CHILD"): child_bytes}
