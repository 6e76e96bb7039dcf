"""Signatures that lower to one program are one compile (issue 64, the
donated ViT on the chip): a TrainState's first call takes its step as a
Python 0, the next ones as the int32 the step returned. Two signatures,
one program: the donation compiled for one is the other's (past the
compile budget too), and on a TPU the buffer assignment read for one gives
the other's temporaries. Real JAX on the CPU; the figures are XLA's."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxmemprof.capture.jit.plan import Abstract
from jaxmemprof.capture.jit.programs import program_digest, program_text
from jaxmemprof.capture.jit.compiles import NOT_SEEN, compile_figures, weak_twins


def _step(step, params, x):
    new = jax.tree_util.tree_map(lambda p: p - 0.1 * (p * x.sum()), params)
    return step + 1, new, (x @ params["w"]).sum()


PARAMS = {"w": jnp.ones((64, 32)), "b": jnp.zeros((32,))}
X = jnp.ones((8, 64))


def _abstract(*args) -> Abstract:
    flat, treedef = jax.tree_util.tree_flatten((args, {}))
    out = [jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding, weak_type=bool(getattr(x, "weak_type", False)))
           if isinstance(x, jax.Array) else x for x in flat]
    return Abstract(treedef, out, [None] * len(out), {}, {}, ["cpu:0"], "cpu", repr(args)[:40])


def test_a_python_step_and_an_int32_step_are_one_program_to_xla():
    f = jax.jit(_step, donate_argnums=(1,))
    committed = jax.device_put(jnp.int32(0), jax.devices()[0])  # as the step's own output comes back
    first, later = f.lower(0, PARAMS, X), f.lower(committed, PARAMS, X)
    # The texts JAX writes differ (the array's parameter carries a sharding over the empty mesh)...
    assert first.as_text() != later.as_text()
    # ... a program the same to XLA: the same compile, figures and buffer assignment
    assert program_text(first) == program_text(later)
    assert program_digest(first) == program_digest(later)
    a, b = first.compile().memory_analysis(), later.compile().memory_analysis()
    for field in ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes"):
        assert getattr(a, field) == getattr(b, field)
    # another program is another text: a float32 step, another batch
    assert program_text(f.lower(jnp.float32(0), PARAMS, X)) != program_text(first)
    assert program_text(f.lower(0, PARAMS, jnp.ones((16, 64)))) != program_text(first)


def test_weak_twins_are_the_signatures_that_differ_in_weak_types_alone():
    committed = jax.device_put(jnp.int32(0), jax.devices()[0])
    python, array = _abstract(0, PARAMS, X), _abstract(committed, PARAMS, X)
    assert weak_twins(python, array) and weak_twins(array, python)
    assert weak_twins(python, _abstract(5, PARAMS, X))  # a dynamic scalar's value is not the program's
    assert not weak_twins(python, _abstract(0, PARAMS, jnp.ones((16, 64))))  # another shape
    assert not weak_twins(python, _abstract(0.0, PARAMS, X))  # a float is traced as another type
    assert not weak_twins(python, _abstract(jnp.zeros((2,), jnp.int32), PARAMS, X))  # not a scalar
    assert not weak_twins(python, _abstract(0, {"w": PARAMS["w"]}, X))  # another structure


def test_past_the_budget_a_twin_is_lowered_and_takes_its_programs_compile():
    f = jax.jit(_step, donate_argnums=(1,))
    committed = jax.device_put(jnp.int32(0), jax.devices()[0])
    seen: dict = {}
    fig, _, error, _ = compile_figures(jax, f, _abstract(0, PARAMS, X), retraced=False, seen=seen)
    assert error is None and len(seen) == 1
    # no compile of its own: the lowering finds the program compiled, with its figures
    twin, _, error, _ = compile_figures(jax, f, _abstract(committed, PARAMS, X), retraced=False, seen=seen,
                                        lower_only=True)
    assert error is None and twin == fig
    ma = f.lower(committed, PARAMS, X).compile().memory_analysis()
    assert twin[:4] == (ma.argument_size_in_bytes, ma.output_size_in_bytes, ma.alias_size_in_bytes,
                        ma.temp_size_in_bytes)
    # a program not compiled is not guessed
    other, _, error, _ = compile_figures(jax, f, _abstract(0, PARAMS, jnp.ones((16, 64))), retraced=False,
                                         seen=seen, lower_only=True)
    assert other is None and error == NOT_SEEN


def test_the_linen_steps_two_signatures_are_verified_as_one(tmp_path):
    """The linen CNN (TrainState, a Python 0 step first): its donation's
    what-if figures are the same for both signatures, as XLA compiles
    each; and the signature of its later calls, run beside more, goes
    first."""
    import sqlite3

    from conftest import REPO, run_cli

    run_cli("run", "-q", "--verify-seconds", "300", "-o", tmp_path / "run", REPO / "tests" / "scripts" / "linen_cnn.py",
            "32", "4", check=0)
    with sqlite3.connect(tmp_path / "run" / "journal.sqlite") as con:
        rows = con.execute("SELECT signature, argument_bytes, output_bytes, alias_bytes, temp_bytes, error "
                           "FROM jit_whatif WHERE change LIKE '%donate%' ORDER BY rowid").fetchall()
    assert len(rows) == 2 and all(r[-1] is None for r in rows), rows
    assert rows[0][1:] == rows[1][1:]
    assert rows[0][0].startswith("int32[]") and rows[1][0].startswith("int,")
