"""The tests' fork server (tests/_cli_server.py) against ``python -m
jaxmemprof``: a reading command run in a child of the server gives the
same exit status, stdout and stderr as the same command in a new Python,
whether it succeeds, refuses its input (exit 2), writes files, reads its
environment or its stdin, or runs past its time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import _cli_server
from conftest import REPO, cpu_env

RUN = REPO / "sample_runs" / "runs" / "mlp-leak"


def _python(argv, cwd, env, input=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jaxmemprof", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, input=input, timeout=300)


def _forked(argv, cwd, env, input=None) -> subprocess.CompletedProcess:
    return _cli_server.run(argv, cwd=cwd, env=env, input=input, timeout=300, server_env=cpu_env())


def test_a_forked_command_is_the_command_in_a_new_python(tmp_path):
    profile = sorted(RUN.glob("snapshots/*"))[-1]
    cases = [
        (["report", RUN], cpu_env(), None),
        (["report", RUN], cpu_env(COLUMNS="60", NO_COLOR="1"), None),  # the environment is the command's
        (["show", "bad.prof"], cpu_env(), None),  # a one-line error, exit 2, the file named relative to cwd
        (["show", profile, "--json"], cpu_env(), None),
        (["diff", profile, profile, "--csv", "-"], cpu_env(), None),
        (["export", RUN, "--csv", "csv"], cpu_env(), None),  # files written where the command runs
        (["check", RUN, "--max-peak", "1KiB"], cpu_env(), None),  # a gate that fails: exit 1
        (["show", "-"], cpu_env(), "not a profile either"),  # stdin is the command's
        (["report"], cpu_env(), None),  # a usage error
        (["--version"], cpu_env(), None),
    ]
    for i, (argv, env, input) in enumerate(cases):
        argv = [str(a) for a in argv]
        a, b = tmp_path / f"python-{i}", tmp_path / f"forked-{i}"
        for d in (a, b):
            d.mkdir()
            (d / "bad.prof").write_bytes(b"not a profile")
        want, got = _python(argv, a, env, input), _forked(argv, b, env, input)
        assert (got.returncode, got.stdout, got.stderr) == (want.returncode, want.stdout, want.stderr), argv
        assert _tree(a) == _tree(b), argv


def _tree(d: Path) -> dict:
    return {p.relative_to(d): p.read_bytes() for p in d.rglob("*") if p.is_file()}


def test_a_command_past_its_time_is_killed_as_subprocess_kills_it(tmp_path):
    fifo = tmp_path / "never-read"
    os.mkfifo(fifo)  # `show --csv` waits for a reader of it for ever
    profile = sorted(RUN.glob("snapshots/*"))[-1]
    with pytest.raises(subprocess.TimeoutExpired):
        _cli_server.run(["show", str(profile), "--csv", str(fifo)], cwd=tmp_path, env=cpu_env(), input=None,
                        timeout=2, server_env=cpu_env())
    # and the server goes on serving
    assert _forked(["--version"], tmp_path, cpu_env()).returncode == 0
