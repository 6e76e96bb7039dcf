"""Nothing written outside the run (issue 56): a ``run --target`` writes no
libtpu log file (``/tmp/tpu_logs``), leaves nothing in ``$TMPDIR``, ``$HOME``
or the working directory beyond what plain ``python`` leaves there, and a
program's own ``--xla_dump_to`` directory receives the program's compiles
only; a run killed (SIGKILL) while the end of the run compiles leaves its
XLA dump inside its own directory, nowhere else.

Real runs, no mocks: each program runs under plain python and under
``python -m jaxmemprof run`` with the same environment (``TMPDIR``, ``HOME``
and the working directory fresh and the test's own), and what each left is
compared (and JAX's own ``jax_dump_ir_to`` directory likewise). libtpu names its log files by the process's id
(``tpu_driver.<host>.<user>.log.INFO.<date>-<time>.<pid>``), so the files of
one run are told apart from other processes' in the shared ``/tmp/tpu_logs``.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import cpu_env, write_script

from jaxmemprof.facts import tpus

pytestmark = pytest.mark.skipif(tpus.libtpu_missing(), reason="libtpu is not installed (pip install 'jaxmemprof[tpu]')")

TPU_LOGS = Path("/tmp/tpu_logs")

# A step that does not donate its state (so the end of the run compiles the donated step too, on the
# run's backend and for the slice), called a few times.
STEP = """
import jax
import jax.numpy as jnp

DEPTH = {depth}


@jax.jit
def step(ws, x):
    h = x
    for w in ws:
        h = jnp.tanh(h @ w)
    loss = jnp.mean(h * h)
    return [w - 0.01 * jnp.mean(h) for w in ws], loss


ws = [jnp.full((128, 128), 0.01 * (i + 1)) for i in range(DEPTH)]
x = jnp.ones((64, 128))
for i in range(3):
    ws, loss = step(ws, x)
print("loss", float(loss))
"""


def _places(tmp_path: Path, name: str) -> dict:
    """Fresh TMPDIR, HOME and working directory for one process."""
    places = {k: tmp_path / name / k for k in ("tmp", "home", "work")}
    for p in places.values():
        p.mkdir(parents=True)
    return places


def _env(places: dict, **extra) -> dict:
    env = cpu_env(TMPDIR=str(places["tmp"]), HOME=str(places["home"]), **extra)
    env.pop("TPU_MIN_LOG_LEVEL", None)  # libtpu's own default: it writes its log files
    env.pop("TPU_LOG_DIR", None)
    return env


def _tree(root: Path, leave_out: Path | None = None) -> set:
    """Every path under ``root``, relative, ``leave_out`` (the run directory) and what it holds left out."""
    found = set()
    for dirpath, dirnames, filenames in os.walk(root):
        d = Path(dirpath)
        if leave_out is not None and d == leave_out.parent:
            dirnames[:] = [n for n in dirnames if d / n != leave_out]
        for n in dirnames + filenames:
            found.add(str((d / n).relative_to(root)))
    return found


def _tpu_logs_of(pid: int, since: float) -> list:
    """libtpu's log files of the process ``pid`` written since ``since``
    (time.time(): the directory keeps every process's, and a pid comes round
    again on a machine that has run many)."""
    try:
        names = os.listdir(TPU_LOGS)
    except FileNotFoundError:
        return []
    out = []
    for n in names:
        try:
            if n.endswith(f".{pid}") and os.lstat(TPU_LOGS / n).st_mtime >= since - 1.0:
                out.append(n)
        except FileNotFoundError:
            continue
    return sorted(out)


def _python(places: dict, script: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(script)], cwd=places["work"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _run(places: dict, script: Path, env: dict, *options) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "jaxmemprof", "run", "-q", *options, "-o", "run", str(script)],
                            cwd=places["work"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen, what: str) -> tuple:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, f"{what}: exit {proc.returncode}\n{out}\n{err}"
    return out, err


def _rows(run: Path, table: str) -> int:
    with sqlite3.connect(f"file:{run / 'journal.sqlite'}?mode=ro", uri=True) as db:
        return db.execute(f"select count(*) from {table}").fetchone()[0]


def _slice_buffers_by_line(run: Path, script: Path) -> int:
    """The slice's buffers (read from a dump of ours) made by a line of the program: its dump kept
    XLA's metadata and stack frames, whatever the program's dump flags say."""
    with sqlite3.connect(f"file:{run / 'journal.sqlite'}?mode=ro", uri=True) as db:
        frames = [f for (f,) in db.execute("select frames from jit_target_buffers")]
    return sum(script.name in f for f in frames)


@pytest.fixture(scope="module")
def step_script(tmp_path_factory) -> Path:
    return write_script(tmp_path_factory.mktemp("program"), "step.py", STEP.format(depth=4))


def test_a_target_run_leaves_nothing_outside_its_directory(tmp_path, step_script):
    py, ours = _places(tmp_path, "python"), _places(tmp_path, "run")
    started = time.time()
    p = _python(py, step_script, _env(py))
    r = _run(ours, step_script, _env(ours), "--target", "v5e:2x2")
    py_out, _ = _finish(p, "python")
    run_out, run_err = _finish(r, "run")
    assert run_out == py_out
    run = ours["work"] / "run"
    # The slice was compiled, its buffers by line read from a dump of ours: the end of the run did its work.
    assert _rows(run, "jit_targets") >= 3, run_err
    assert _slice_buffers_by_line(run, step_script) > 0, run_err
    assert _tpu_logs_of(p.pid, started) == []  # JAX on the CPU: python never loads libtpu
    assert _tpu_logs_of(r.pid, started) == [], "libtpu wrote its log files outside the run"
    for place in ("tmp", "home"):
        assert _tree(ours[place]) == _tree(py[place]), place
    assert _tree(ours["work"], leave_out=run) == _tree(py["work"])
    assert not [n for n in os.listdir(run) if n.startswith(".xla-dump-")], "a dump directory was left in the run"


def test_the_programs_dump_directory_receives_only_the_programs_compiles(tmp_path, step_script):
    py, ours = _places(tmp_path, "python"), _places(tmp_path, "run")
    py_dump, run_dump = tmp_path / "python-dump", tmp_path / "run-dump"
    # The program's own flags also ask for XLA's short text: a dump of ours is still read by line.
    flags = "--xla_dump_hlo_as_long_text=false"
    # And JAX's own dump of each module it compiles (jax_dump_ir_to), into a directory of its own.
    p = _python(py, step_script, _env(py, XLA_FLAGS=f"--xla_dump_to={py_dump} {flags}",
                                      JAX_DUMP_IR_TO=str(py_dump) + "-ir"))
    r = _run(ours, step_script, _env(ours, XLA_FLAGS=f"--xla_dump_to={run_dump} {flags}",
                                     JAX_DUMP_IR_TO=str(run_dump) + "-ir"), "--target", "v5e:2x2")
    _finish(p, "python")
    _, run_err = _finish(r, "run")
    run = ours["work"] / "run"
    assert _rows(run, "jit_targets") >= 3, run_err  # the donated step and the slice's compiles were made
    assert _slice_buffers_by_line(run, step_script) > 0, run_err  # a dump of ours still read by line
    py_files, run_files = set(os.listdir(py_dump)), set(os.listdir(run_dump))
    assert py_files and run_files == py_files, (
        f"{len(run_files)} files under run, {len(py_files)} under python; only under run: "
        f"{sorted(run_files - py_files)[:10]}")
    py_ir, run_ir = set(os.listdir(f"{py_dump}-ir")), set(os.listdir(f"{run_dump}-ir"))
    assert py_ir and run_ir == py_ir, sorted(run_ir - py_ir)[:10]
    assert _tree(ours["tmp"]) == _tree(py["tmp"]) == set()


def test_a_run_killed_while_it_compiles_at_the_end_leaves_its_dump_in_its_own_directory(tmp_path):
    # A deeper step: XLA:TPU's compile (and its dump) of it takes long enough to be caught under way.
    script = write_script(tmp_path, "deep.py", STEP.format(depth=48))
    ours = _places(tmp_path, "run")
    run = ours["work"] / "run"
    started = time.time()
    r = _run(ours, script, _env(ours), "--target", "v5e:2x2")
    seen = None
    deadline = time.monotonic() + 600
    try:
        while seen is None and r.poll() is None and time.monotonic() < deadline:
            for where in (ours["tmp"], run):
                try:
                    names = os.listdir(where)
                except FileNotFoundError:
                    continue
                dumps = [n for n in names if n.startswith(("jaxmemprof-xla-", ".xla-dump-"))]
                if dumps:
                    seen = where / dumps[0]
                    break
            else:
                time.sleep(0.002)
        if seen is not None:
            r.send_signal(signal.SIGKILL)
    finally:
        if r.poll() is None and seen is None:
            r.kill()
        r.communicate(timeout=60)
    assert seen is not None, f"no XLA dump seen under way (exit {r.returncode})"
    assert r.returncode == -signal.SIGKILL
    assert _tree(ours["tmp"]) == set(), f"left in TMPDIR: {sorted(_tree(ours['tmp']))[:5]}"
    assert _tree(ours["home"]) == set()
    assert _tree(ours["work"], leave_out=run) == set()
    assert _tpu_logs_of(r.pid, started) == [], "libtpu wrote its log files outside the run"
    assert seen.parent == run
