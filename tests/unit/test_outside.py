"""analysis/outside.py: the operations the tiny program ran outside jit
between its jitted calls, by its own lines (JAX's compile of each, as the
probe saw it): `kept.append(jnp.full(...))`, after the first call of
train_step, is named; `x = jnp.full(...)`, whose only compile came before
the first call (later steps hit JAX's cache), and `init`'s random normal
are not."""

from __future__ import annotations

from jaxmemprof.analysis.outside import outside_jit


def test_the_operations_between_jitted_calls_are_named_by_their_line(tiny_ar, site):
    said = outside_jit(tiny_ar)
    assert f"at {site('kept', 'main')}" in said, said
    assert site("x", "main") not in said and site("w", "init") not in said
    assert said.count(" at ") == 1  # one line: nothing else ran outside jit between the calls
