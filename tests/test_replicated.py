"""Replicated on purpose: data parallelism on 4 CPU devices, where each device
holds the whole model and its part of the batch. The ``replicated`` finding
is made only where XLA's compile of the step with the weights sharded lowers
the run's per-device true peak; applied as printed, its fix never raises that
peak (measured by recording the fixed program), and each array appears in one
finding. The equinox program re-shards its model inside the step (the
``filter_shard`` of equinox's own data-parallel example): the compile shows
the weights gathered back whole, and no fix is printed that the step would
undo."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli, write_script

from jaxmemprof.analysis.rules.sharding import replication_findings
from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.analysis.report import build_report
from jaxmemprof.render.findings import words
from jaxmemprof.store.reader import load_run
from jaxmemprof.units import format_bytes

# The fix, applied as printed: SHARD.json maps an array's path in the tree to the PartitionSpec the finding names.
PLAIN = """
import json, os
import jax
jax.config.update("jax_num_cpu_devices", 4)
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

mesh = Mesh(jax.devices(), ("data",))
fix = json.load(open("SHARD.json")) if os.path.exists("SHARD.json") else {}
rng = np.random.default_rng(0)
params = {"w1": rng.normal(size=(1024, 1024)).astype(np.float32) * 0.01,
          "b1": np.zeros((1024,), np.float32),
          "w2": rng.normal(size=(1024, 16)).astype(np.float32) * 0.01}
params = jax.tree_util.tree_map_with_path(
    lambda k, v: jax.device_put(v, NamedSharding(mesh, eval(fix.get(jax.tree_util.keystr(k), "P()")))), params)

def loss(params, x, y):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"] - y) ** 2)

@jax.jit
def train_step(params, x, y):
    l, g = jax.value_and_grad(loss)(params, x, y)
    return jax.tree_util.tree_map(lambda p, d: p - 0.01 * d, params, g), l

@jax.jit
def evaluate(params, x, y):
    return loss(params, x, y)

batch = NamedSharding(mesh, P("data"))
for i in range(4):
    x = jax.device_put(rng.normal(size=(256, 1024)).astype(np.float32), batch)
    y = jax.device_put(np.zeros((256, 16), np.float32), batch)
    params, l = train_step(params, x, y)
    e = evaluate(params, x, y)
print(float(l), float(e))
"""

EQUINOX = """
import json, os
import jax
jax.config.update("jax_num_cpu_devices", 4)
import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

mesh = Mesh(jax.devices(), ("batch",))
replicated = NamedSharding(mesh, P())
data = NamedSharding(mesh, P("batch"))
fix = json.load(open("SHARD.json")) if os.path.exists("SHARD.json") else {}
model = eqx.nn.MLP(1024, 16, 1024, 2, key=jax.random.PRNGKey(0))
model = eqx.filter_shard(model, replicated)
if fix:  # the fix as printed, on the arrays it names
    model = jax.tree_util.tree_map_with_path(
        lambda k, v: jax.device_put(v, NamedSharding(mesh, eval(fix[jax.tree_util.keystr(k)])))
        if jax.tree_util.keystr(k) in fix else v, model)

@eqx.filter_jit
def train_step(model, x, y):
    model = eqx.filter_shard(model, replicated)  # as equinox's data-parallel example does
    x, y = eqx.filter_shard((x, y), data)
    def loss(m):
        return jnp.mean((jax.vmap(m)(x) - y) ** 2)
    l, g = eqx.filter_value_and_grad(loss)(model)
    model = eqx.apply_updates(model, jax.tree_util.tree_map(lambda d: -0.01 * d, g))
    return eqx.filter_shard(model, replicated), l

rng = np.random.default_rng(0)
for i in range(4):
    x = jax.device_put(rng.normal(size=(256, 1024)).astype(np.float32), data)
    y = jax.device_put(np.zeros((256, 16), np.float32), data)
    model, l = train_step(model, x, y)
print(float(l))
"""


def _device_peak(run_dir) -> int:
    return int(build_report(attribute(load_run(run_dir))).headline.true_peak_bytes)


def _record(tmp_path, name: str, source: str, fix: dict | None = None, *options: str):
    d = tmp_path / name
    d.mkdir()
    script = write_script(d, "train.py", source)
    if fix is not None:
        (d / "SHARD.json").write_text(json.dumps(fix))
    proc = run_cli("run", "-q", *options, "-o", d / "run", script, cwd=d)
    assert proc.returncode == 0, proc.stderr
    return d / "run"


def _printed_fix(findings, root: str) -> dict:
    """{path in the tree: spec} of every array the findings name (each once)."""
    out = {}
    for f in findings:
        for a in f.fact("arrays"):
            assert a["owner"].startswith(root), a["owner"]
            assert a["owner"][len(root):] not in out, f"{a['owner']} is in two findings"
            out[a["owner"][len(root):]] = a["spec"]
    return out


@pytest.mark.parametrize("program,root", [(PLAIN, "params"), (EQUINOX, "model")], ids=["plain-jax", "equinox"])
def test_applying_the_printed_fix_never_raises_the_per_device_true_peak(tmp_path, program, root):
    before = _record(tmp_path, "before", program)
    findings = replication_findings(attribute(load_run(before)))
    fix = _printed_fix(findings, root)
    if program is EQUINOX:
        # the step gathers its model back whole: sharded outside, each call would replicate it again
        assert findings == []
        w = load_run(before).jit.whatif
        gathered = [json.loads(c) for c in w["change"] if "shard" in json.loads(c)]
        assert gathered and all(c["gathered"] for c in gathered)
        return
    assert len(findings) == 1 and all(f.fact("verified") for f in findings)
    f = findings[0]
    assert f.fact("function") == "train_step" and "params['w1']" in [a["owner"] for a in f.fact("arrays")]
    assert words(f).saves == f"saves {format_bytes(f.saving_bytes)} per device (compiled)"
    after = _record(tmp_path, "after", program, fix, "--verify-seconds", "0")  # read for its true peak alone
    fall = _device_peak(before) - _device_peak(after)
    assert fall >= 0 and abs(fall - f.saving_bytes) <= 0.01 * _device_peak(before), (fall, f.saving_bytes)


# An 8 MiB state made whole on each of 4 devices by a jitted init (random normal: its call holds its
# temporaries whole too) and updated elementwise (issue 53, item 4). Sharding it after it is made leaves init's
# call whole; the printed fix makes it sharded where it is created, and its saving is that program's fall.
MADE_WHOLE = """
import json, os
import jax
jax.config.update("jax_num_cpu_devices", 4)
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

mesh = Mesh(jax.devices(), ("d",))
fix = json.load(open("FIX.json")) if os.path.exists("FIX.json") else None

def init(key):
    return jax.random.normal(key, (1024, 2048))

out = NamedSharding(mesh, eval(fix["spec"])) if fix else NamedSharding(mesh, P())
m = jax.jit(init, out_shardings=out)(jax.random.PRNGKey(0))

@jax.jit
def update(m, t):
    return m * 0.99 + t

for i in range(6):
    m = update(m, float(i))
print(float(m.sum()))
"""


def test_an_array_made_whole_is_made_sharded_where_it_is_created_and_that_is_compiled(tmp_path):
    before = _record(tmp_path, "before", MADE_WHOLE)
    findings = replication_findings(attribute(load_run(before)))
    assert len(findings) == 1 and findings[0].fact("verified"), findings
    f = findings[0]
    made = f.fact("made_by")
    assert [m["function"] for m in made] == ["init"] and made[0]["site"].endswith("train.py:14"), made
    spec = made[0]["outputs"][0]["spec"]
    w = words(f)
    assert w.saves == f"saves {format_bytes(f.saving_bytes)} per device (compiled)"
    assert w.brief_fix.startswith(f"make it sharded where it is created: jax.jit(init, out_shardings="
                                  f"NamedSharding(mesh, {spec}))"), w.brief_fix
    d = tmp_path / "after"
    d.mkdir()
    (d / "FIX.json").write_text(json.dumps({"spec": spec}))
    script = write_script(d, "train.py", MADE_WHOLE)
    proc = run_cli("run", "-q", "--verify-seconds", "0", "-o", d / "run", script, cwd=d)  # read for its true peak
    assert proc.returncode == 0, proc.stderr
    fall = _device_peak(before) - _device_peak(d / "run")
    assert fall > 0 and abs(fall - f.saving_bytes) <= 0.10 * fall, (fall, f.saving_bytes)
