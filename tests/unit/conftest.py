"""The runs the unit tests read, recorded for real once per session.

- ``tiny``: a small training loop on two CPU devices (``programs.TINY``),
  recorded with ``jaxmemprof run --interval 1000 --plan-scales 2`` (its
  snapshots: the first, the ones it asks for, the exit's). Every array it
  makes has a size the program knows, and the program writes its own
  figures to ``oracle.json``: the bytes jax.live_arrays() holds on each device after
  each snapshot it takes and before each call of its step, the device
  addresses of the arrays it holds, and XLA's memory_analysis() of its step
  at the recorded batch and at twice it. It also saves a device memory
  profile after each step (``profiles/``: a plain directory of .prof files).
- ``history``: an IPython shell that leaves an array in its output history,
  then records a cell with ``%%jaxmemprof``, then frees the history's entry
  (``%xdel``) and writes what that freed by jax.live_arrays().
- the bundled ``sample_runs/runs/mlp-leak`` (read only): the MLP of
  sample_runs/train_mlp.py, whose leak is one (batch,) float32 array a step.

Both recordings start at once, in their own processes; the tests read
them through the analyses' own functions, never the CLI.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO, cpu_env, line_of, write_script

from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.analysis.options import Options
from jaxmemprof.store.reader import load_run

from .programs import HISTORY, TINY

@dataclass(frozen=True)
class Recorded:
    tiny: Path  # the run directory
    script: Path  # the program it ran
    oracle: dict  # what the program measured (TINY's docstring)
    profiles: Path  # a plain directory of .prof files, one a step
    history: Path  # the IPython run
    history_oracle: dict


def _record(argv, cwd) -> subprocess.Popen:
    # IPython's own directory (its history database, the user's config) is this fixture's, not shared
    # with another worker or another clone's suite.
    return subprocess.Popen([sys.executable, *map(str, argv)], cwd=cwd, env=cpu_env(IPYTHONDIR=str(cwd / "ipython")),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait(proc: subprocess.Popen) -> None:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, f"{proc.args}: exit {proc.returncode}\n{out}\n{err}"


@pytest.fixture(scope="session")
def recorded(tmp_path_factory) -> Recorded:
    d = tmp_path_factory.mktemp("unit-runs")
    script = write_script(d, "tiny.py", TINY)
    notebook = write_script(d, "history.py", HISTORY)
    (d / "profiles").mkdir()
    tiny = _record(["-m", "jaxmemprof", "run", "-q", "--interval", "1000", "--plan-scales", "2", "-o", d / "tiny",
                    script, d / "oracle.json", d / "profiles"], d)
    history = _record([notebook, d / "history", d / "history.json"], d)
    _wait(tiny)
    _wait(history)
    oracle = json.loads((d / "oracle.json").read_text())
    oracle["devices"] = {int(k): v for k, v in oracle["devices"].items()}
    oracle["live"] = {label: {oracle["devices"][int(k)]: b for k, b in per.items()}
                      for label, per in oracle["live"].items()}
    oracle["before_call"] = [{oracle["devices"][int(k)]: b for k, b in per.items()} for per in oracle["before_call"]]
    return Recorded(d / "tiny", script, oracle, d / "profiles", d / "history",
                    json.loads((d / "history.json").read_text()))


@pytest.fixture(scope="session")
def oracle(recorded) -> dict:
    return recorded.oracle


@pytest.fixture(scope="session")
def tiny(recorded):
    """The tiny run, read once (analyses only read it)."""
    run = load_run(recorded.tiny)
    assert run.finished and not run.warnings, run.warnings
    return run


@pytest.fixture(scope="session")
def tiny_ar(tiny):
    """The tiny run attributed once: the stage every analysis reads."""
    return attribute(tiny, Options())


@pytest.fixture(scope="session")
def tiny_report(tiny_ar):
    from jaxmemprof.analysis.report import build_report

    return build_report(tiny_ar)


@pytest.fixture(scope="session")
def line(recorded):
    """The line of TINY that holds ``# LINE <marker>``."""
    return lambda marker: line_of(recorded.script, f"# LINE {marker}")


@pytest.fixture(scope="session")
def site(line):
    """The site text of a line of TINY, as the analyses name it."""
    return lambda marker, function: f"tiny.py:{line(marker)} ({function})"


@pytest.fixture(scope="session")
def labelled(tiny):
    """label -> snapshot number, for the snapshots the program took."""
    s = tiny.snapshots
    api = s[s["trigger"] == "api"]
    return dict(zip(api["label"], api["snapshot"].astype(int)))


@pytest.fixture(scope="session")
def mlp_leak():
    """The bundled run of sample_runs/train_mlp.py --leak (read only)."""
    return load_run(REPO / "sample_runs" / "runs" / "mlp-leak")


@pytest.fixture(scope="session")
def job(recorded, tmp_path_factory) -> Path:
    """A job of two processes, each a copy of the tiny run (so both hold
    the same bytes at the same times)."""
    d = tmp_path_factory.mktemp("job") / "job"
    for n in (0, 1):
        shutil.copytree(recorded.tiny, d / f"process-{n}")
    return d
