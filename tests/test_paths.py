"""The library-path rule (jaxmemprof/facts/paths.py) on a run started the way users
start one: with the `jaxmemprof` console script pip installs."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from conftest import cpu_env, line_of, write_script

from jaxmemprof.analysis.sites import Attribution, user_stacks
from jaxmemprof.facts.paths import is_builtin_library
from jaxmemprof.store.reader import load_run

SCRIPT = """
import jax.numpy as jnp
import jaxmemprof

x = jnp.ones((256, 1024), jnp.float32)  # LINE-X
jaxmemprof.snapshot("held")
"""


def test_the_console_script_is_not_user_code(tmp_path):
    for launcher in ("/usr/local/bin/jaxmemprof", "/home/u/.venv/bin/jaxmemprof", r"C:\venv\Scripts\jaxmemprof.exe"):
        assert is_builtin_library(launcher), launcher
    for user in ("/home/u/bin/train.py", "/home/u/jaxmemprof/train.py", "/home/u/bin/jaxmemprof_tools.py",
                 "/home/u/jaxmemprof/examples/train.py", "/home/u/jaxmemprof/capture.py"):
        assert not is_builtin_library(user), user
    # jaxmemprof's own files in another copy of it (a run recorded by another checkout than the reporting one).
    for own in ("/home/u/old/jaxmemprof/capture/jitprobe.py", r"C:\src\jaxmemprof\store\writer.py"):
        assert is_builtin_library(own), own
    exe = shutil.which("jaxmemprof")
    if exe is None:
        pytest.skip("the jaxmemprof console script is not on PATH")
    script = write_script(tmp_path, "held.py", SCRIPT)
    subprocess.run([exe, "run", "-q", "-o", str(tmp_path / "run"), str(script)], cwd=tmp_path, env=cpu_env(),
                   check=True, capture_output=True, timeout=300)
    run = load_run(tmp_path / "run")
    held = int(run.snapshots.loc[run.snapshots["label"] == "held", "snapshot"].iloc[0])
    prof = run.profile(held)
    stacks = user_stacks(prof, Attribution(roots=(str(tmp_path),)))
    line = line_of(script, "LINE-X")
    # The array's user stack is the script's line alone: the launcher that ran it is not the user's frame.
    [mine] = [s for s, b in zip(stacks, prof.samples.groupby("stack_id")["bytes"].sum().reindex(
        range(len(stacks))).fillna(0)) if b == 256 * 1024 * 4]
    assert mine == (("<module>", "held.py", line),), mine
