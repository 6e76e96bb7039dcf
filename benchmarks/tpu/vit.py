"""A vision transformer in flax linen, its blocks under ``nn.scan``, trained
through a ``TrainState`` under ``jax.jit``: issue 64's donated ViT, where the
saving said and the chip's fall differed (307.53 MiB said, 638 MiB on the chip).

    python benchmarks/tpu/vit.py [--batch 64] [--depth 12] [--width 768] [--steps 6]
        [--donate] [--settle SECONDS] [--stats FILE] [--analysis FILE]

--stats FILE: the chip's memory_stats() after the last step (synced), as JSON.
--settle SECONDS: sleep that long after each synced step, so that the runtime
frees the step's inputs before the next step's outputs are allocated.
--analysis FILE: the step's compiled memory_analysis() (arguments, outputs,
aliased, temporaries, generated code), as JSON: what XLA:TPU says beside it.
"""

import argparse
import functools
import json
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.training import train_state

try:
    import jaxmemprof
except ImportError:  # pragma: no cover
    jaxmemprof = None

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=64)
p.add_argument("--depth", type=int, default=12)
p.add_argument("--width", type=int, default=768)
p.add_argument("--image", type=int, default=224)
p.add_argument("--patch", type=int, default=16)
p.add_argument("--steps", type=int, default=6)
p.add_argument("--donate", action="store_true")
p.add_argument("--settle", type=float, default=0.0)
p.add_argument("--stats")
p.add_argument("--analysis")
args = p.parse_args()


class Block(nn.Module):
    width: int

    @nn.compact
    def __call__(self, x, _):
        h = nn.LayerNorm()(x)
        h = nn.MultiHeadDotProductAttention(num_heads=self.width // 64)(h, h)
        x = x + h
        h = nn.LayerNorm()(x)
        h = nn.Dense(4 * self.width)(h)
        x = x + nn.Dense(self.width)(nn.gelu(h))
        return x, None


class ViT(nn.Module):
    depth: int
    width: int

    @nn.compact
    def __call__(self, images):
        x = nn.Conv(self.width, (args.patch, args.patch), strides=(args.patch, args.patch))(images)
        x = x.reshape(x.shape[0], -1, self.width)
        x = x + self.param("pos", nn.initializers.normal(0.02), (1, x.shape[1], self.width))
        blocks = nn.scan(Block, variable_axes={"params": 0}, split_rngs={"params": True}, length=self.depth)
        x, _ = blocks(self.width)(x, None)
        return nn.Dense(1000)(nn.LayerNorm()(x).mean(1))


model = ViT(args.depth, args.width)
images = jnp.ones((args.batch, args.image, args.image, 3), jnp.float32)
labels = jnp.zeros((args.batch,), jnp.int32)
params = model.init(jax.random.key(0), images[:1])["params"]
state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.adamw(1e-4))


@functools.partial(jax.jit, donate_argnums=(0,) if args.donate else ())
def train_step(state, images, labels):
    def loss_fn(p):
        logits = state.apply_fn({"params": p}, images)
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


if args.analysis:
    ma = train_step.lower(state, images, labels).compile().memory_analysis()
    with open(args.analysis, "w") as f:
        json.dump({k: getattr(ma, k) for k in ("argument_size_in_bytes", "output_size_in_bytes",
                                               "alias_size_in_bytes", "temp_size_in_bytes",
                                               "generated_code_size_in_bytes")}, f)
for _ in range(args.steps):
    state, loss = train_step(state, images, labels)
    loss.block_until_ready()
    if args.settle:
        time.sleep(args.settle)
    if jaxmemprof is not None:
        jaxmemprof.mark("step")
print("loss", round(float(loss), 4))
if args.stats:
    with open(args.stats, "w") as f:
        json.dump(jax.devices()[0].memory_stats(), f)
