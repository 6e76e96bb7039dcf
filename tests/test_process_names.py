"""Names that mean a process but are not written as one: a launcher's rank
variable holding a number no launcher writes (``+1``, ``01``, `` 1``,
10**20, past the job's size) is refused at `run` with one line, and the
script runs as python would (compared with python itself); a job directory
holding ``process-00`` is refused by every reader and by merge, never read
as process 0 nor left out unsaid."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, cli_batch, cpu_env, run_cli, write_script

SCRIPT = """
import os, sys
print("args", sys.argv[1:], "rank", repr(os.environ.get("JAX_PROCESS_ID")))
print("to stderr", file=sys.stderr)
sys.exit(3)
"""


@pytest.mark.parametrize("index, size", [("+1", "2"), ("01", "2"), (" 1", "2"), ("1 ", "2"), ("-1", "2"),
                                         ("1" + "0" * 20, "2"), ("2", "2"), ("7", "4")])
def test_a_rank_no_launcher_writes_is_refused_and_the_script_runs_as_under_python(tmp_path, index, size):
    script = write_script(tmp_path, "s.py", SCRIPT)
    env = cpu_env(JAX_PROCESS_ID=index, JAX_NUM_PROCESSES=size)
    python = subprocess.run([sys.executable, str(script), "a", "b"], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=120)
    run = run_cli("run", "-o", "job", script, "a", "b", cwd=tmp_path, env=env)
    assert (run.returncode, run.stdout) == (python.returncode, python.stdout) == (3, python.stdout)
    ours, *rest = run.stderr.splitlines()
    assert ours.startswith(f"jaxmemprof: error: JAX_PROCESS_ID={index!r}: is not a process index") and \
        ours.endswith("running the script unrecorded, as python would"), run.stderr
    assert "\n".join(rest) == python.stderr.rstrip("\n")
    assert not (tmp_path / "job").exists()


def test_a_rank_as_launchers_write_it_is_recorded(tmp_path):
    script = write_script(tmp_path, "s.py", SCRIPT)
    run = run_cli("run", "-q", "-o", "job", script, cwd=tmp_path, env=cpu_env(JAX_PROCESS_ID="1",
                                                                              JAX_NUM_PROCESSES="2"))
    assert run.returncode == 3 and run.stderr == "to stderr\n", run.stderr
    assert sorted(p.name for p in (tmp_path / "job").iterdir()) == ["process-1"]


def test_a_process_directory_misnamed_is_refused(tmp_path):
    job = tmp_path / "job"
    for name, index in (("process-0", 0), ("process-00", 1)):
        shutil.copytree(REPO / "sample_runs" / "runs" / "mlp-leak", job / name)
        manifest = job / name / "manifest.json"
        m = json.loads(manifest.read_text())
        m.update(process_index=index, process_count=2)
        manifest.write_text(json.dumps(m))
    procs = cli_batch([["merge", "merged", "job"], ["report", "job"], ["check", "job", "--max-peak", "1TiB"],
                       ["show", "job@peak"]], tmp_path)
    for proc in procs:
        assert proc.returncode == 2, (proc.args, proc.stdout, proc.stderr)
        assert proc.stderr.strip() == ("jaxmemprof: error: job/process-00: is not a process directory's name: a "
                                       "process's is process-N (process-0, process-1, ...): rename it, or move it "
                                       "out of the job"), (proc.args, proc.stderr)
    assert not (tmp_path / "merged").exists()
    (job / "process-00").rename(job / "process-1")
    merged, = cli_batch([["merge", "merged", "job"]], tmp_path)
    assert merged.returncode == 0 and sorted(p.name for p in (tmp_path / "merged").iterdir()) == [
        "process-0", "process-1"], merged.stderr
