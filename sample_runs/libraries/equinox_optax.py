"""An equinox MLP trained with optax through equinox.filter_jit, as
equinox's examples write a make_step."""
import equinox as eqx
import jax
import jax.numpy as jnp
import optax

model = eqx.nn.MLP(256, 10, 512, 1, key=jax.random.key(0))
opt = optax.adam(1e-3)
opt_state = opt.init(eqx.filter(model, eqx.is_array))


def loss_fn(model, x, y):
    return optax.softmax_cross_entropy_with_integer_labels(jax.vmap(model)(x), y).mean()


@eqx.filter_jit  # LINE-JIT
def make_step(model, opt_state, x, y):  # LINE-DEF
    loss, grads = eqx.filter_value_and_grad(loss_fn)(model, x, y)
    updates, opt_state = opt.update(grads, opt_state, model)
    model = eqx.apply_updates(model, updates)
    return model, opt_state, loss


x, y = jnp.ones((32, 256)), jnp.zeros((32,), jnp.int32)
for i in range(6):
    model, opt_state, loss = make_step(model, opt_state, x, y)  # LINE-CALL
print(round(float(loss), 4))
