"""A GPT-style decoder trained with optax adamw: the TPU lane's large model
(about 160M parameters at the defaults), written as public training code
writes one: a jitted step over (params, opt_state, batch).

    python benchmarks/tpu/gpt.py --batch 8 --steps 10 [--donate] [--sync]
        [--host-delay S] [--stats FILE]

--stats FILE writes the chip's own counters (memory_stats() of device 0)
read by the program after its last step, as JSON: what jaxmemprof's
figures are compared with (benchmarks/tpu/lane.sh, docs/tpu.md).
"""

import argparse
import json
import time

import jax
import jax.numpy as jnp
import optax

try:
    import jaxmemprof
except ImportError:  # pragma: no cover
    jaxmemprof = None

parser = argparse.ArgumentParser()
parser.add_argument("--batch", type=int, default=8)
parser.add_argument("--seq", type=int, default=1024)
parser.add_argument("--layers", type=int, default=12)
parser.add_argument("--width", type=int, default=768)
parser.add_argument("--vocab", type=int, default=50304)
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--donate", action="store_true")
parser.add_argument("--sync", action="store_true", help="block on each step's loss")
parser.add_argument("--stats", help="write the chip's memory_stats() here, as JSON")
parser.add_argument("--host-delay", type=float, default=0.0, metavar="S",
                    help="the host busy S seconds after each step's dispatch (as a data loader is)")
args = parser.parse_args()

D, H = args.width, args.width // 64


def init(key):
    def dense(k, n_in, n_out):
        return jax.random.normal(k, (n_in, n_out), jnp.float32) * (1 / n_in) ** 0.5

    keys = iter(jax.random.split(key, 4 + 4 * args.layers))
    params = {"embed": dense(next(keys), args.vocab, D) * 0.02, "pos": dense(next(keys), args.seq, D) * 0.02,
              "head": dense(next(keys), D, args.vocab), "blocks": []}
    for _ in range(args.layers):
        params["blocks"].append({"qkv": dense(next(keys), D, 3 * D), "proj": dense(next(keys), D, D),
                                 "up": dense(next(keys), D, 4 * D), "down": dense(next(keys), 4 * D, D),
                                 "ln1": jnp.ones((D,)), "ln2": jnp.ones((D,))})
    return params


def norm(x, g):
    return g * (x - x.mean(-1, keepdims=True)) * jax.lax.rsqrt(x.var(-1, keepdims=True) + 1e-5)


def block(p, x):
    b, t, _ = x.shape
    q, k, v = jnp.split(norm(x, p["ln1"]) @ p["qkv"], 3, axis=-1)
    q, k, v = (a.reshape(b, t, H, D // H).transpose(0, 2, 1, 3) for a in (q, k, v))
    att = (q @ k.transpose(0, 1, 3, 2)) / (D // H) ** 0.5
    att = jnp.where(jnp.tril(jnp.ones((t, t), bool)), att, -1e9)
    y = jax.nn.softmax(att, -1) @ v
    x = x + y.transpose(0, 2, 1, 3).reshape(b, t, D) @ p["proj"]
    return x + jax.nn.gelu(norm(x, p["ln2"]) @ p["up"]) @ p["down"]


def loss_fn(params, tokens):
    x = params["embed"][tokens[:, :-1]] + params["pos"][: tokens.shape[1] - 1]
    for p in params["blocks"]:
        x = block(p, x)
    logits = x @ params["head"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()


opt = optax.adamw(3e-4)


def train_step(params, opt_state, tokens):
    loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


step = jax.jit(train_step, donate_argnums=(0, 1) if args.donate else ())
params = init(jax.random.PRNGKey(0))
opt_state = opt.init(params)
tokens = jax.random.randint(jax.random.PRNGKey(1), (args.batch, args.seq + 1), 0, args.vocab)
n_params = sum(a.size for a in jax.tree_util.tree_leaves(params))
for _i in range(args.steps):
    params, opt_state, loss = step(params, opt_state, tokens)
    if args.sync:
        loss.block_until_ready()
    if args.host_delay:
        t_busy = time.perf_counter() + args.host_delay
        while time.perf_counter() < t_busy:
            pass
    if jaxmemprof is not None:
        jaxmemprof.mark("step")
print(f"params {n_params} loss {float(loss):.4f}")
if args.stats:
    with open(args.stats, "w") as f:
        json.dump(jax.devices()[0].memory_stats(), f)
