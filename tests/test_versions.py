"""The supported range (jaxmemprof/versions.py): the line `run` says outside
it, the range pyproject.toml and the README declare, and what the range's
oldest JAX is held to, checked on the JAX installed (CI runs this module on
the oldest JAX and the newest Python declared: ``-m compat``, .ci/run)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, cpu_env, run_cli

from jaxmemprof import versions

pytestmark = pytest.mark.compat


def _text(version) -> str:
    return ".".join(map(str, version))


def test_inside_the_range_nothing_is_said():
    assert versions.outside((3, 11), "0.10.2") is None
    assert versions.outside(versions.PYTHON_NEWEST, _text(versions.JAX_OLDEST)) is None
    assert versions.outside((3, 11), "0.6.2") is None
    assert versions.outside((3, 12), None) is None  # no JAX installed: said where it is imported


@pytest.mark.parametrize("python,jax,says", [
    ((3, 14), "0.12.1", ["Python 3.14 is newer than the newest supported (3.13)", "bytecode"]),
    ((3, 11), "0.6.0", ["JAX 0.6.0 is older than the oldest supported (0.6.1)",
                              "memory inside jitted calls will not be attributed to lines"]),
    ((3, 11), "0.5.3", ["JAX 0.5.3 is older"]),
    ((3, 11), "0.4.30", ["JAX 0.4.30 is older", "not be attributed to lines", "no fix will be verified"]),
])
def test_outside_the_range_one_line_says_what_and_what_is_missing(python, jax, says):
    line = versions.outside(python, jax)
    assert line is not None and "\n" not in line
    assert line.startswith("jaxmemprof: warning: ") and line.endswith("the run goes on")
    for words in says:
        assert words in line, line
    if "weak_type" not in line and jax.startswith("0.4.3"):
        pytest.fail(line)


def test_a_python_older_than_the_oldest_is_refused_in_one_line(tmp_path):
    """pip installs jaxmemprof on no Python older than the oldest
    (requires-python); a checkout refuses there: the command in one line and
    status 2, an import with an ImportError of that line."""
    assert versions.too_old(versions.PYTHON_OLDEST) is None and versions.too_old(sys.version_info[:2]) is None
    older = versions.PYTHON_OLDEST[0], versions.PYTHON_OLDEST[1] - 1
    line = versions.too_old(older)
    assert line == (f"jaxmemprof: Python {_text(older)} is older than the oldest supported "
                    f"({_text(versions.PYTHON_OLDEST)}): run jaxmemprof under Python "
                    f"{_text(versions.PYTHON_OLDEST)}-{_text(versions.PYTHON_NEWEST)}")
    # pyenv's interpreter of that version (its shim on PATH may refuse to pick one), else PATH's
    found = sorted(Path(os.environ.get("PYENV_ROOT", "/root/.pyenv")).glob(f"versions/{_text(older)}.*/bin/python"))
    python = str(found[-1]) if found else shutil.which(f"python{_text(older)}")
    if python is None or subprocess.run([python, "-c", ""], capture_output=True).returncode != 0:
        pytest.skip(f"no Python {_text(older)} on this machine to refuse")
    env = {**cpu_env(), "PYTHONPATH": str(REPO)}
    proc = subprocess.run([python, "-m", "jaxmemprof", "run", "-c", "print('ran')"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", line + "\n")
    proc = subprocess.run([python, "-c", "import jaxmemprof"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == f"ImportError: {line}", proc.stderr
    assert not list(tmp_path.iterdir())  # nothing recorded


def test_a_version_reads_as_its_release():
    assert versions.release("0.6.1") == (0, 6, 1)
    assert versions.release("0.12.0.1") == (0, 12, 0, 1)
    assert versions.release("0.7.0.dev20250601") == (0, 7, 0)
    assert versions.release("0.4.30rc1") == (0, 4, 30)
    assert versions.release("") is None and versions.release("x") is None
    assert (0, 6, 0) < versions.JAX_OLDEST <= (0, 6, 1) <= (0, 12, 0, 1)


def test_pyproject_and_the_readme_declare_the_range():
    """pyproject's requires-python, its jax and jaxlib floors and its
    classifiers, and the README's words, are versions.py's."""
    pyproject = (REPO / "pyproject.toml").read_text()
    assert re.search(r'^requires-python = ">=(\d+\.\d+)"$', pyproject, re.M).group(1) == _text(versions.PYTHON_OLDEST)
    for name in ("jax", "jaxlib"):
        floor = re.search(rf'^\s*"{name}>=([\d.]+)",?$', pyproject, re.M)
        assert floor is not None and floor.group(1) == _text(versions.JAX_OLDEST), name
    declared = re.findall(r'"Programming Language :: Python :: (3\.\d+)"', pyproject)
    oldest, newest = versions.PYTHON_OLDEST[1], versions.PYTHON_NEWEST[1]
    assert declared == [f"3.{m}" for m in range(oldest, newest + 1)]
    readme = (REPO / "README.md").read_text()
    assert versions.supported_range() in readme


def test_the_running_versions_are_inside_the_range_and_run_says_nothing(tmp_path):
    """The environments CI makes (the main one, the oldest JAX's, the newest
    Python's) are all inside the range: `run` says no line of it there."""
    got = versions.release(versions.installed_jax())
    assert got is not None and got >= versions.JAX_OLDEST
    assert versions.PYTHON_OLDEST <= sys.version_info[:2] <= versions.PYTHON_NEWEST
    proc = run_cli("run", "-q", "-o", "unused", "-c", "print('ok')", check=0, cwd=tmp_path)
    assert proc.stdout == "ok\n"
    assert "supported" not in proc.stderr, proc.stderr


def test_the_oldest_jax_carries_what_the_range_promises():
    """What the range's floor is set by, on the JAX installed: a compiled
    executable carries XLA's buffer assignment (below 0.6.1 it does not, and
    memory inside a jitted call is not attributed to lines), and
    jax.ShapeDtypeStruct takes weak_type (the what-if compiles make theirs
    with it)."""
    import jax
    import jax.numpy as jnp

    from jaxmemprof.xla.executable import executable_protos

    compiled = jax.jit(lambda x: jnp.tanh(x @ x.T).sum()).lower(jnp.ones((64, 32))).compile()
    module, assignment, name = executable_protos(compiled)
    assert len(module) > 0 and len(assignment) > 0 and name
    s = jax.ShapeDtypeStruct((2,), jnp.float32, weak_type=True)
    assert s.weak_type is True
