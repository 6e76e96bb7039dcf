"""The libraries' seam (jaxmemprof/libraries/): each library is one module
behind one protocol, read by the probe, the roles, the remat compile and the
advice. Checked here on the libraries' own objects (a real optax state, a
real haiku module compiled by XLA); the whole programs are in
tests/test_wrappers.py and tests/test_remat.py."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import optax
import pytest

from jaxmemprof import libraries
from jaxmemprof.capture.jit.remat import Place, place_of

hk = pytest.importorskip("haiku")  # the test extra installs it (dm-haiku)


class Block(hk.Module):
    def __call__(self, x):
        h = jnp.tanh(hk.Linear(512)(x))
        h = jnp.tanh(h * 1.5 + 0.1)
        return x + hk.Linear(128)(h)


def test_every_module_of_the_package_is_a_library_of_the_registry():
    here = Path(libraries.__file__).parent
    files = sorted(p.stem for p in here.glob("*.py") if p.name != "__init__.py")
    assert len(libraries.LIBRARIES) == len(files)
    assert {lib.package for lib in libraries.LIBRARIES} == {"jax", "flax", "equinox", "optax", "haiku"}
    # haiku and optax have no jit wrapper: a module with its PACKAGE and no NAME; the wrappers are the others'
    assert set(libraries.BY_NAME) == {"jax.jit", "jax.pmap", "flax.nnx.jit", "equinox.filter_jit"}
    assert libraries.WRAPPERS[:2] == ("jax.jit", "jax.pmap")
    assert libraries.PACKAGES == ("equinox", "flax", "haiku", "optax")
    # each library's words on a topic, JAX's own last
    assert libraries.phrases("remat") == ("equinox: eqx.filter_checkpoint", "flax linen: nn.remat",
                                          "flax nnx: nnx.remat", "haiku: hk.remat", "plain JAX: jax.checkpoint")
    assert libraries.remat_spelling("flax.nnx.jit") == "nnx.remat"
    assert libraries.remat_spelling("jax.pmap") == libraries.remat_spelling("mylib:jit") == "jax.checkpoint"


def test_an_optax_state_is_tagged_and_its_tag_says_optimizer_state():
    params = {"w": jnp.ones((4, 3)), "b": jnp.zeros((3,))}
    state = optax.adam(1e-3).init(params)
    tags = libraries.tags(jax.tree_util, (params, state))
    mu = state[0].mu
    assert tags[id(mu["w"])] == tags[id(state[0].count)] == "optax.ScaleByAdamState"
    assert id(params["w"]) not in tags  # the parameters are in no optax container
    assert libraries.role_of_tag("optax.ScaleByAdamState") == libraries.OPTIMIZER
    assert libraries.role_of_tag("nnx.Param") == libraries.PARAMETERS
    assert libraries.role_of_tag("nnx.OptState") == libraries.OPTIMIZER
    assert libraries.role_of_tag("nnx.BatchStat") == libraries.STATE
    assert libraries.role_of_tag("mylib.Thing") is None


def test_equinox_names_the_users_arguments_in_its_own_argument_buffers():
    eqx = libraries.BY_NAME["equinox.filter_jit"]
    assert eqx.argument_words("dynamic_donate['first']", ["model", "x", "y"]) == "argument model"
    assert eqx.argument_words("dynamic_nodonate['rest'][0]", ["model", "x", "y"]) == "argument x, y"
    assert eqx.argument_words("dynamic_donate['fun']", ["model"]) == "argument (the function's own arrays)"
    assert eqx.argument_words("params['w']", ["params"]) is None  # not equinox's own


def _temporaries(params, x) -> int:
    net = hk.without_apply_rng(hk.transform(lambda x: hk.layer_stack(4)(lambda x: Block()(x))(x)))

    def step(p, x):
        return jax.grad(lambda p: jnp.mean(net.apply(p, x) ** 2))(p)

    return jax.jit(step).lower(params, x).compile().memory_analysis().temp_size_in_bytes


def test_hk_remat_wraps_a_haiku_modules_method_inside_the_transform():
    """As the remat compile does at the end of a run: Block.__call__ swapped
    for its hk.remat (which works only inside the transform), the step
    compiled again with fewer temporaries and the same result, then put back."""
    x = jnp.ones((1024, 128))
    net = hk.without_apply_rng(hk.transform(lambda x: hk.layer_stack(4)(lambda x: Block()(x))(x)))
    params = net.init(jax.random.PRNGKey(0), x)
    original = Block.__dict__["__call__"]
    before = _temporaries(params, x)
    place = place_of(original.__wrapped__, libraries.LIBRARIES)
    assert isinstance(place, Place), place
    assert (place.spelling, place.how, place.what) == ("hk.remat", "class attribute", "Block.__call__")
    place.swap(None)
    try:
        after = _temporaries(params, x)
        same = jax.jit(net.apply)(params, x)
    finally:
        place.restore()
    assert Block.__dict__["__call__"] is original
    assert after < before / 2, (before, after)  # the forward pass's activations no longer kept
    assert jnp.allclose(same, jax.jit(net.apply)(params, x))
    assert libraries.remat_words("hk.remat", "Block.__call__", "", "train.py:9") == (
        "call Block through hk.remat inside the transform: hk.remat(Block(...))(x) for Block(...)(x)  "
        "(Block.__call__ at train.py:9)")
