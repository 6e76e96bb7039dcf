"""capture/jit/unsampled.py: a signature no sampled call ran, its arguments
made from a kept signature's with its shapes, only where the two texts
differ in the leaves' shapes and dtypes alone (the end-to-end case, the
leftover batch, is tests/test_numpy_fed.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxmemprof.capture.jit import unsampled
from jaxmemprof.capture.jit.plan import Abstract


def test_a_signatures_leaves_and_what_is_left_of_it():
    skeleton, leaves = unsampled.leaves("float32[2048,1024], np:float32[40,1024], static:(1, 2), float, "
                                        "bfloat16[]@[8,4]x2")
    assert skeleton == "\0, np:\0, static:(1, 2), float, \0"
    assert leaves == [(False, "float32", (2048, 1024), None, 1), (True, "float32", (40, 1024), None, 1),
                      (False, "bfloat16", (), (8, 4), 2)]
    # a static value's text that looks like a leaf is not one
    assert unsampled.leaves("static:'float32[2]', int32[3]")[1] == [(False, "int32", (3,), None, 1)]
    # a signature stored cut short (programs._bounded) has leaves not known
    assert unsampled.leaves("float32[8], float32[8] ... (4000 characters, sha256 0123456789abcdef)") is None


def _abstract(w, x, static=None, signature=""):
    flat, treedef = jax.tree_util.tree_flatten(((w, x), {}))
    out = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=getattr(a, "sharding", None)) if hasattr(a, "shape")
           else a for a in flat]
    return Abstract(treedef, out, [None] * len(out), static or {}, {}, ["cpu:0"], "cpu", signature)


def test_the_leaves_shapes_and_dtypes_are_the_signatures_and_the_rest_the_kept_ones():
    w = jnp.zeros((16, 8), jnp.float32)
    x = np.zeros((128, 8), np.float32)
    ab = _abstract(w, x, static={2: 3})
    made = unsampled.derive(jax, ab, "float32[16,8], np:float32[128,8], static:3",
                            "float32[16,8], np:float16[40,8], static:3")
    assert not isinstance(made, str)
    assert [(tuple(a.shape), str(a.dtype)) for a in made.flat] == [((16, 8), "float32"), ((40, 8), "float16")]
    assert made.flat[0].sharding == w.sharding and made.flat[1].sharding is None
    assert made.treedef == ab.treedef and made.static == {2: 3} and made.signature.endswith("static:3")


def test_arguments_that_differ_in_more_than_shapes_are_not_guessed():
    w = jnp.zeros((16, 8), jnp.float32)
    x = np.zeros((128, 8), np.float32)
    ab = _abstract(w, x, static={2: 3})
    kept = "float32[16,8], np:float32[128,8], static:3"
    for other in ("float32[16,8], np:float32[40,8], np:float32[40], static:3",  # another leaf
                  "float32[16,8], np:float32[40,8], static:4",  # another static value
                  "float32[16,8], float32[40,8], static:3"):  # a device array where numpy's was
        assert unsampled.derive(jax, ab, kept, other) == unsampled.DIFFERS, other
    # a layout on devices that the kept leaf's sharding does not give at that shape
    assert unsampled.derive(jax, ab, kept, "float32[16,8], np:float32[40,8]@[20,8]x2, static:3") == unsampled.SHARDED
    assert unsampled.derive(jax, ab, kept, "float32[16,8]@[8,8]x2, np:float32[40,8], static:3") == unsampled.SHARDED
    cut = "float32[16,8], np:float32[40,8] ... (4000 characters, sha256 0123456789abcdef)"
    assert unsampled.derive(jax, ab, kept, cut) == unsampled.CUT_SHORT


def test_the_runs_trace_of_the_signature_must_take_its_leaves():
    def f(w, x):
        return w + x.sum()

    w, x = jnp.zeros((16, 8)), np.zeros((40, 8), np.float32)
    ab = _abstract(w, np.zeros((128, 8), np.float32))
    kept, mine = "float32[16,8], np:float32[128,8]", "float32[16,8], np:float32[40,8]"
    own = jax.jit(f).trace(w, x).jaxpr
    other = jax.jit(f).trace(w, np.zeros((41, 8), np.float32)).jaxpr

    class Trace:
        def __init__(self, jaxpr):
            self.jaxpr = jaxpr

    assert not isinstance(unsampled.derive(jax, ab, kept, mine, Trace(own)), str)
    assert unsampled.derive(jax, ab, kept, mine, Trace(other)) == unsampled.TRACE_DIFFERS
