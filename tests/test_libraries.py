"""The libraries' seam (jaxmemprof/facts/libraries/): each library is one module
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

from jaxmemprof.facts import libraries
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


def _figures(compiled):
    ma = compiled.memory_analysis()
    return (ma.argument_size_in_bytes, ma.output_size_in_bytes, ma.alias_size_in_bytes, ma.temp_size_in_bytes)


def _equinox_call(jitted, args):
    """The call equinox.filter_jit makes of its jitted function for ``args``:
    (donated, not donated, static), as jax.jit gets it."""
    from equinox._jit import _preprocess

    info = (jitted._signature, jitted._dynamic_fun, jitted._static_fun, jitted.donate_first, jitted.donate_rest)
    return _preprocess(info, args, {}, return_static=True)


@pytest.mark.parametrize("option, pass_first", [('donate="all-except-first"', ["x", "y"]),
                                                ('donate="all-except-first"', []), ('donate="all"', [])])
def test_equinox_compiles_its_donation_fix_as_filter_jit_makes_it(option, pass_first):
    """donated_call, from the run's call with its arrays abstract, compiles
    what filter_jit with the fix's donate option compiles for the user's
    function with the arguments the fix passes first moved to the front
    (one tuple), to the byte; and run on the arrays, computes what the
    program's step computes."""
    eqx = pytest.importorskip("equinox")
    model = eqx.nn.MLP(64, 10, 256, 1, key=jax.random.key(0))
    opt = optax.adam(1e-3)
    opt_state = opt.init(eqx.filter(model, eqx.is_array))
    x, y = jnp.ones((16, 64)), jnp.arange(16) % 10

    def make_step(model, opt_state, x, y):
        def loss_fn(model):
            return optax.softmax_cross_entropy_with_integer_labels(jax.vmap(model)(x), y).mean()

        loss, grads = eqx.filter_value_and_grad(loss_fn)(model)
        updates, opt_state = opt.update(grads, opt_state, model)
        return eqx.apply_updates(model, updates), opt_state, loss

    if pass_first:  # the program as written, and as the fix has it written
        program, args = eqx.filter_jit(make_step), (model, opt_state, x, y)
        fixed = eqx.filter_jit(lambda batch, model, opt_state: make_step(model, opt_state, *batch),
                               donate="all-except-first")
        fixed_args, params = ((x, y), model, opt_state), ["model", "opt_state", "x", "y"]
    else:  # the kept arguments already first (or none kept): only the option changes
        def step(batch, model, opt_state):
            return make_step(model, opt_state, *batch)

        program, args = eqx.filter_jit(step), ((x, y), model, opt_state)
        fixed, fixed_args, params = eqx.filter_jit(step, donate=option.split('"')[1]), args, ["batch", "model",
                                                                                           "opt_state"]
    donated, kept, static = _equinox_call(program, args)
    abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), (donated, kept))
    facts = {"option": option, "pass_first": pass_first}
    lib = libraries.BY_NAME["equinox.filter_jit"]
    fun, call, kwargs = lib.donated_call(program._cached.__wrapped__, (*abstract, static), {}, params, facts)
    ours = jax.jit(fun, donate_argnums=0, static_argnums=2)
    lowered, theirs = ours.lower(*call, **kwargs), fixed.lower(*fixed_args).lowered
    assert _figures(lowered.compile()) == _figures(theirs.compile())
    assert _figures(theirs.compile())[2] > 0  # the fix aliases the model and the optimizer state
    # the same leaves, in the same order, donated alike (x and y: only under donate="all")
    assert [(a.shape, a.dtype, a.donated) for a in jax.tree.leaves(lowered.args_info)] == \
        [(a.shape, a.dtype, a.donated) for a in jax.tree.leaves(theirs.args_info)]
    assert sum(a.donated for a in jax.tree.leaves(lowered.args_info)) == \
        len(jax.tree.leaves(eqx.filter((model, opt_state), eqx.is_array))) + 2 * (option == 'donate="all"')

    fun, call, kwargs = lib.donated_call(program._cached.__wrapped__, (donated, kept, static), {}, params, facts)
    _, got, _ = jax.jit(fun, static_argnums=2)(*call, **kwargs)
    _, want, _ = program._cached(donated, kept, static)
    assert jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.array_equal(a, b)), got, want))


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
