"""Operations run outside jit between a program's jitted calls (issue 64,
the mnist case): JAX runs them through its C++ dispatch, call by call out
of any Python hook's sight, so what they hold is seen only where a snapshot
falls. The report names them, by the user's line, as JAX compiled them
(capture/jit/outside.py); those before the first jitted call or after the
last are not said."""

from __future__ import annotations

import json

from conftest import line_of, run_cli, write_script

PROGRAM = """
import sys
import jax, jax.numpy as jnp
import numpy as np

@jax.jit
def step(w, x):
    return w - 0.01 * jnp.tanh(x @ w)

def evaluate(w, rows):
    return jnp.argmax(rows @ w, axis=1)  # outside jit: evaluate is not jitted

w = jnp.ones((256, 256)) * 0.01  # before the first call
x = jnp.ones((256, 256))
rows = np.ones((20_000, 256), np.float32)
for epoch in range(2):
    for _ in range(5):
        w = step(w, x)
    if "--evaluate" in sys.argv:
        print(int(evaluate(w, rows).sum()))
print(float(w.sum()))  # after the last call
"""


def _report(tmp_path, *args) -> str:
    script = write_script(tmp_path, "prog.py", PROGRAM)
    out = tmp_path / ("run" + "".join(args))
    proc = run_cli("run", "-q", "-o", out, script, *args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(run_cli("report", out, "--json", cwd=tmp_path).stdout)
    return run_cli("report", out, cwd=tmp_path).stdout, script, doc


def test_operations_between_jitted_calls_are_named_by_their_line(tmp_path):
    text, script, doc = _report(tmp_path, "--evaluate")
    [said] = [line for line in text.splitlines() if line.startswith("outside jit, between jitted calls:")]
    at = line_of(script, "outside jit: evaluate")
    # the matmul and the argmax of evaluate's line, compiled once in the first epoch, between step's calls
    assert f"at prog.py:{at} (evaluate)" in said, said
    ops = said.split(": ", 1)[1].split(" at ")[0].split(", ")
    assert "argmax" in ops and any(op in ("matmul", "dot") for op in ops), ops
    assert "not counted in the true peak" in said
    assert doc["outside_jit"] and doc["outside_jit"] in said  # the JSON's key, the same words
    # the initialisation's ones and the final sum are not said: before the first call and after the last
    assert f"prog.py:{line_of(script, 'before the first call')}" not in said
    assert f"prog.py:{line_of(script, 'after the last call')}" not in said


def test_a_program_whose_operations_outside_jit_are_outside_its_loop_says_nothing(tmp_path):
    text, _, doc = _report(tmp_path)
    assert "outside jit" not in text and doc["outside_jit"] == ""
