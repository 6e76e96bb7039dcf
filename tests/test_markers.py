"""A fast loop's marker costs the program's thread no write of its own:
markers wait in memory and are written with the next snapshot, before it, in
its transaction, or once the oldest is half a second old, or as the sampler
wakes once the loop pauses (store/writer.py). So every snapshot's step is
exact, every marker is in the journal at the end, and a reader of the run
while it runs (`top`) sees a loop's markers soon after the loop."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from conftest import cpu_env

SCRIPT = Path(__file__).parent / "scripts" / "fast_steps.py"


def _rows(journal: Path, sql: str) -> list:
    con = sqlite3.connect(f"file:{journal}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_markers_are_written_whole_in_order_and_soon(tmp_path):
    steps = 300
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "jaxmemprof", "run", "-q", "-o", str(run), str(SCRIPT),
                             str(steps)], env=cpu_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().startswith("looped"), proc.stderr.read()
        # The sampler wakes once the markers stop for a second (steps.QUIET_S) and writes them: read
        # while the script waits, until all are there (2 s idle; a loaded machine's sampler wakes later).
        t0 = time.monotonic()
        while True:
            time.sleep(0.5)
            seen = _rows(run / "journal.sqlite", "SELECT COUNT(*) FROM markers")[0][0]
            if seen >= steps - 1 or time.monotonic() - t0 > 30:
                break
        proc.stdin.write("\n")
        proc.stdin.flush()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    journal = run / "journal.sqlite"
    markers = _rows(journal, "SELECT t_mono, after_snapshot FROM markers ORDER BY marker")
    # Each call a step but the first (the step is known as the function called again: probe.stepped).
    assert len(markers) == steps - 1
    assert seen == len(markers), seen  # read while the script waited: every marker of the loop, none waiting
    assert [t for t, _ in markers] == sorted(t for t, _ in markers)
    snaps = _rows(journal, "SELECT snapshot, t_mono, trigger FROM snapshots ORDER BY snapshot")
    assert sum(trigger == "step" for _, _, trigger in snaps) >= 10, snaps
    for snapshot, t_mono, _ in snaps:
        # Each snapshot's step: the markers placed before it, by their time and by their own record.
        before_by_time = sum(t < t_mono for t, _ in markers)
        before_by_record = sum((a or 0) < snapshot for _, a in markers)
        assert before_by_time == before_by_record, (snapshot, before_by_time, before_by_record)
