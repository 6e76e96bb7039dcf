"""`jaxmemprof top` in a real terminal (tmux) on a run being written: a script
that grows an array list at a known line, 256 KiB a step, sleeping between
steps; and `--once` on it, on a finished run and on a job's processes."""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
import sys
import time

import pytest

from conftest import cpu_env, line_of, run_cli, write_script

STEPS = 150  # 30 s: the test ends it sooner (killed at teardown); margin for a slow machine

GROW = """
import time

import jax.numpy as jnp
import jaxmemprof

kept = []
base = jnp.zeros((256, 1024), jnp.float32)  # LINE-BASE: 1 MiB
for i in range(STEPS):
    kept.append(jnp.ones((64, 1024), jnp.float32))  # LINE-GROW: 256 KiB a step
    jaxmemprof.mark(f"step {i}")
    jaxmemprof.snapshot()
    time.sleep(0.2)
""".replace("STEPS", str(STEPS))

UNITS = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}


def to_bytes(number: str, unit: str) -> float:
    return float(number) * UNITS[unit]


def site_bytes(text: str, site: str) -> list[float]:
    """The bytes column of every row naming ``site``."""
    return [to_bytes(m[0], m[1]) for m in re.findall(r"^\s*([\d.]+) (B|KiB|MiB|GiB)\s.*" + re.escape(site), text, re.M)]


def wait_for(predicate, timeout: float = 60.0, step: float = 0.2):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()


def committed(run) -> int:
    """How many snapshots the run's journal holds, read-only (0 before it can be read): a
    cheap wait before `top --once` is asked (each a process of its own)."""
    try:
        con = sqlite3.connect(f"file:{run / 'journal.sqlite'}?mode=ro", uri=True)
        try:
            return con.execute("SELECT count(*) FROM snapshots").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0


@pytest.fixture
def live_run(tmp_path):
    """A run being written: (directory, script, process)."""
    script = write_script(tmp_path, "grow.py", GROW)
    proc = subprocess.Popen([sys.executable, "-m", "jaxmemprof", "run", "-q", "-o", "live", str(script)],
                            cwd=tmp_path, env=cpu_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # Until the run has a few snapshots (its own steps), read with top --once.
    def started():
        if not (tmp_path / "live" / "journal.sqlite").exists() or committed(tmp_path / "live") < 3:
            return None
        out = run_cli("top", "live", "--once", cwd=tmp_path)
        m = re.search(r"snapshot (\d+) at", out.stdout)
        return out if out.returncode == 0 and m and int(m[1]) >= 3 else None

    try:
        assert wait_for(started), proc.stderr.read().decode() if proc.poll() is not None else "no snapshots"
        yield tmp_path, script, proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)


def test_once_on_a_live_run(live_run):
    d, script, _ = live_run
    grow = f"grow.py:{line_of(script, 'LINE-GROW')} (<module>)"
    base = f"grow.py:{line_of(script, 'LINE-BASE')} (<module>)"
    out = run_cli("top", "live", "--once", cwd=d, check=0).stdout
    lines = out.splitlines()
    assert lines[0].startswith("live  running  ") and lines[0].endswith("grow.py"), out
    # The growing line, marked, with 256 KiB since the snapshot before.
    [row] = [line for line in lines if grow in line]
    assert "+256.00 KiB" in row and row.rstrip().endswith("▲"), out
    [held] = site_bytes(out, grow)
    assert held >= 3 * 256 * 1024 and held % (256 * 1024) == 0, out  # whole steps, three at least
    assert site_bytes(out, base) == [1024**2], out
    assert re.search(r"^devices: cpu:0 [\d.]+ MiB \+256\.00 KiB$", out, re.M), out


def test_top_in_a_terminal(live_run, tmux):
    d, script, proc = live_run
    grow = f"grow.py:{line_of(script, 'LINE-GROW')} (<module>)"
    # The shell catches Ctrl-C (a handler, which top does not inherit) to say how top ended.
    command = (f"trap 'true' INT; cd {d} && {sys.executable} -m jaxmemprof top live --interval 0.3; "
               f"echo TOP-EXIT=$?; sleep 60")
    tmux("new-session", "-d", "-s", "top", "-x", "150", "-y", "40", "env", "-u", "NO_COLOR", "sh", "-c", command)

    def pane():
        return tmux("capture-pane", "-p", "-t", "top", check=False).stdout

    def showing():
        text = pane()
        return text if site_bytes(text, grow) else None

    first = wait_for(showing)
    assert first, pane()
    [before] = site_bytes(first, grow)
    # The same pane, redrawn in place: the line's bytes grow.
    later = wait_for(lambda: (t := pane()) and site_bytes(t, grow) and site_bytes(t, grow)[0] > before and t)
    assert later, pane()
    [after] = site_bytes(later, grow)
    assert after > before and (after - before) % (256 * 1024) == 0
    assert later.count("bytes   since last") == 1, later  # one frame on the screen, not one per refresh
    assert re.search(re.escape(grow) + r"\s+(▲|growing \(\d+ in a row\))", later), later
    assert "running" in later and "Ctrl-C to quit" in later
    tmux("send-keys", "-t", "top", "C-c")
    ended = wait_for(lambda: (t := pane()) and "TOP-EXIT=" in t and t)
    assert ended and re.search(r"TOP-EXIT=(0|130)\b", ended), pane()
    assert "Traceback" not in ended
    assert proc.poll() is None  # the run went on, unaffected


def test_once_on_a_finished_run_and_a_job(tmp_path):
    script = write_script(tmp_path, "grow.py", GROW.replace(f"range({STEPS})", "range(4)").replace(
        "time.sleep(0.2)", "pass"))
    run_cli("run", "-q", "-o", "done", script, cwd=tmp_path, check=0)

    def contents():
        return {p.relative_to(tmp_path / "done"): p.read_bytes() for p in (tmp_path / "done").rglob("*") if p.is_file()}

    before = contents()
    out = run_cli("top", "done", "--once", cwd=tmp_path, check=0).stdout
    assert contents() == before  # read only: no byte written, no file made (no -wal, no -shm)
    assert out.startswith("done  finished (exit status 0)  ") and out.splitlines()[0].endswith("grow.py"), out
    for n in (0, 1):
        shutil.copytree(tmp_path / "done", tmp_path / "job" / f"process-{n}")
    out = run_cli("top", "job", "--once", cwd=tmp_path, check=0).stdout
    assert re.search(r"^job/process-0 \(process 0\)  finished", out, re.M), out
    assert re.search(r"^job/process-1 \(process 1\)  finished", out, re.M), out
    assert "2 processes" in out


def test_bad_input(tmp_path):
    proc = run_cli("top", "missing", "--once", cwd=tmp_path, check=2)
    assert proc.stderr.strip() == "jaxmemprof: error: missing: no such run directory"
    (tmp_path / "empty").mkdir()
    proc = run_cli("top", "empty", "--once", cwd=tmp_path, check=2)
    assert proc.stderr.startswith("jaxmemprof: error: empty: is not a jaxmemprof run")


def test_names_are_escaped(tmp_path):
    """A script whose name holds a terminal escape: shown escaped by top and check."""
    name = "evil\x1b[2Jname.py"
    write_script(tmp_path, name, """
        import jax.numpy as jnp
        import jaxmemprof
        a = jnp.ones((256, 1024))
        jaxmemprof.snapshot("held")
    """)
    run_cli("run", "-q", "-o", "r", name, cwd=tmp_path, check=0)
    for args, status in ((["top", "r", "--once"], 0), (["check", "r", "--max-peak", "1KiB"], 1)):
        out = run_cli(*args, cwd=tmp_path, check=status).stdout
        assert "\x1b" not in out and "evil\\x1b[2Jname.py:3 (<module>)" in out, out


SLOW = """
import time
import jax.numpy as jnp
import jaxmemprof

keep = []
for i in range(600):
    keep.append(jnp.ones((256, 256)) * i)
    jaxmemprof.snapshot()
    time.sleep(0.05)
"""


def test_a_killed_recording_ends_top_and_is_said(tmp_path):
    """The recording process SIGKILLed: `top` off a terminal stops following
    (it would otherwise wait forever for a run that never finishes) and says
    the run stopped without finishing; `report` reads what was committed."""
    script = write_script(tmp_path, "slow.py", SLOW)
    rec = subprocess.Popen([sys.executable, "-m", "jaxmemprof", "run", "-q", "-o", str(tmp_path / "run"), str(script)],
                           cwd=tmp_path, env=cpu_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        once = None
        while time.time() < deadline:  # until a few snapshots are committed
            if committed(tmp_path / "run") >= 3:
                once = run_cli("top", tmp_path / "run", "--once", cwd=tmp_path)
                seen = re.search(r"\b(\d+) snapshots", once.stdout)
                if once.returncode == 0 and seen and int(seen.group(1)) >= 3:
                    break
            time.sleep(0.3)
        assert once is not None, "no snapshot committed"
        assert once.stdout.split("\n")[0].split()[1] == "running", once.stdout
    finally:
        rec.kill()
        rec.wait(timeout=60)
    follow = subprocess.run([sys.executable, "-m", "jaxmemprof", "top", str(tmp_path / "run")], cwd=tmp_path,
                            env=cpu_env(), capture_output=True, text=True, timeout=60)
    assert follow.returncode == 0, follow.stderr
    assert "stopped without finishing" in follow.stdout, follow.stdout
    assert "stopped without finishing" in run_cli("top", tmp_path / "run", "--once", cwd=tmp_path, check=0).stdout


def test_a_site_wider_than_the_terminal_is_cut_not_the_numbers(tmp_path, tmux):
    """On an 80-column terminal a site of 190 characters keeps its row's
    numbers (the same as `--once` prints, uncut, off a terminal) and is cut
    at its start, so that its file, line and function stay on screen."""
    deep = tmp_path / ("a_very_long_directory_name_" * 6).rstrip("_")
    deep.mkdir()
    script = write_script(deep, "grow.py", """
        import jax.numpy as jnp
        import jaxmemprof

        kept = []
        for i in range(3):
            kept.append(jnp.ones((64, 1024), jnp.float32))  # LINE-GROW: 256 KiB a step
            jaxmemprof.snapshot()
    """)
    run_cli("run", "-q", "--interval", "1000", "-o", "r", script, cwd=tmp_path, check=0)
    end = f"grow.py:{line_of(script, 'LINE-GROW')} (<module>)"
    site = f"{deep.name}/{end}"
    once = run_cli("top", "r", "--once", cwd=tmp_path, check=0).stdout
    [wide] = [line for line in once.splitlines() if site in line]
    row = re.compile(r"^\s*([\d.]+ (?:B|KiB|MiB|GiB))\s+.*?\s(\d+)\s\s(\S.*)$")
    held, arrays, shown = row.match(wide).groups()
    assert (held, shown) == (f"{3 * 64 * 1024 * 4 // 1024}.00 KiB", site), wide  # three arrays of 256 KiB

    command = f"cd {tmp_path} && {sys.executable} -m jaxmemprof top r --interval 0.3; sleep 60"
    tmux("new-session", "-d", "-s", "top", "-x", "80", "-y", "30", "env", "-u", "NO_COLOR", "sh", "-c", command)

    def pane():
        return tmux("capture-pane", "-p", "-t", "top", check=False).stdout

    text = wait_for(lambda: (t := pane()) and end in t and t)
    assert text, pane()
    [cut] = [line for line in text.splitlines() if end in line]
    assert len(cut.rstrip()) <= 80, text
    m = row.match(cut)
    assert m and m.group(1) == held and m.group(2) == arrays, text  # the numbers, all there
    assert m.group(3).startswith("…") and site.endswith(m.group(3)[1:].split("  ")[0]), text
    assert re.search(r"^\s*bytes\s+since last\s+since start\s+arrays\s+site$", text, re.M), text
