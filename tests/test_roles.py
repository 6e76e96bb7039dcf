"""What the memory is: roles and owners at the largest sampled jitted call,
and the finding for arrays a mesh could shard.

The programs' sizes are known: the roles must be those bytes, their sum the
call's peak as XLA's own memory_analysis() of the step gives it (under plain
python), and the sharding fix, applied as printed, must lower the per-device
peak by the bytes predicted."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import cpu_env, run_cli, write_script

from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.analysis.rules.sharding import replication_findings
from jaxmemprof.analysis.report import build_report
from jaxmemprof.analysis.roles import role_of, roles
from jaxmemprof.facts.flow import PER_STEP
from jaxmemprof.render.findings import words
from jaxmemprof.store.reader import load_run
from jaxmemprof.units import format_bytes

OPTAX_STEP = """
import sys
import jax, jax.numpy as jnp, optax
params = {"w1": jnp.zeros((256, 512)), "b1": jnp.zeros((512,)), "w2": jnp.zeros((512, 10))}
opt = optax.adam(1e-3)
opt_state = opt.init(params)

def loss_fn(params, x, y):
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    return optax.softmax_cross_entropy_with_integer_labels(h @ params["w2"], y).mean()

def step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

step = jax.jit(step, donate_argnums=(0, 1) if "--donate" in sys.argv else ())
x, y = jnp.ones((64, 256)), jnp.zeros((64,), jnp.int32)
if "--analyse" in sys.argv:  # XLA's own figures for the step, under plain python
    ma = step.lower(params, opt_state, x, y).compile().memory_analysis()
    print(ma.argument_size_in_bytes, ma.output_size_in_bytes, ma.alias_size_in_bytes, ma.temp_size_in_bytes)
    raise SystemExit
for i in range(6):
    x = jnp.ones((64, 256)) * i  # a new batch every step
    params, opt_state, loss = step(params, opt_state, x, y)
print(float(loss))
"""
P = (256 * 512 + 512 + 512 * 10) * 4  # the parameters
ADAM = 2 * P + 4  # mu, nu and the step count
X = 64 * 256 * 4  # the per-step batch


def test_a_numpy_batch_has_its_role_and_the_roles_add_up_to_the_call(tmp_path):
    """A batch fed as numpy arrays is on no device before the call; XLA's
    arguments count its copy: the batch role holds it, and the roles (and
    owners) still add up to the call's peak. It is never advised for donation."""
    source = OPTAX_STEP.replace("import sys\n", "import sys\nimport numpy as np\n").replace(
        "x = jnp.ones((64, 256)) * i  # a new batch every step", "x = np.ones((64, 256), np.float32) * i")
    assert "np.ones" in source
    script = write_script(tmp_path, "numpy_batch.py", source)
    proc = run_cli("run", "-q", "-o", tmp_path / "run", script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    ar = attribute(load_run(tmp_path / "run"))
    what = roles(ar)
    by_role = dict(zip(what.by_role["role"], what.by_role["bytes"]))
    assert by_role["batch"] == X and ("x", "batch") in set(zip(what.owners["owner"], what.owners["role"]))
    assert sum(by_role.values()) == what.peak_bytes == int(what.owners["bytes"].sum())
    [donate] = [f for f in build_report(ar).findings if f.rule == "donate"]
    assert donate.fact("arguments") == ["params", "opt_state"]  # not the numpy batch


NUMPY_ON_A_MESH = """
import jax
jax.config.update("jax_num_cpu_devices", 2)
import jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
mesh = Mesh(jax.devices(), ("data",))
w = jax.device_put(jnp.ones((512, 1024)), NamedSharding(mesh, P(None, "data")))  # 1 MiB a device
step = jax.jit(lambda w, x: w - 0.01 * jnp.mean(jnp.tanh(x @ w)))
for i in range(5):
    x = np.ones((64, 512), np.float32) * i  # 128 KiB from the host, placed on both devices by the call
    w = step(w, x)
print(float(jnp.sum(w)))
"""


def test_a_numpy_argument_of_a_call_on_two_devices_has_its_role_on_each(tmp_path):
    """A numpy argument of a call on a mesh is copied to each of its devices
    as the call places it: the batch role holds what XLA's arguments count
    there beyond the device arrays, and each device's roles add up to the
    call's peak (was: the batch in no role)."""
    script = write_script(tmp_path, "mesh_numpy.py", NUMPY_ON_A_MESH)
    proc = run_cli("run", "-q", "-o", tmp_path / "run", script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    what = roles(attribute(load_run(tmp_path / "run")))
    for device, part in what.by_role.groupby("device"):
        by_role = dict(zip(part["role"], part["bytes"]))
        assert by_role["batch"] == 64 * 512 * 4, (device, by_role)
        owners = what.owners[what.owners["device"] == device]
        assert sum(by_role.values()) == what.peak_bytes == int(owners["bytes"].sum())


def test_parameters_named_like_nothing_are_parameters_by_the_optimizer_state_that_mirrors_them(tmp_path):
    """A plain-JAX step's parameters named ``theta``, and an evaluation step
    given them anew at every call: parameters, not 'other state' or 'batch'."""
    script = write_script(tmp_path, "theta.py", OPTAX_STEP.replace("params", "theta").replace(
        'step = jax.jit(step, donate_argnums=(0, 1) if "--donate" in sys.argv else ())', "step = jax.jit(step)"))
    proc = run_cli("run", "-q", "-o", tmp_path / "run", script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    what = roles(attribute(load_run(tmp_path / "run")))
    by_role = dict(zip(what.by_role["role"], what.by_role["bytes"]))
    assert by_role["parameters"] == P and by_role["optimizer state"] == ADAM and by_role["batch"] == X
    assert {o for o, r in zip(what.owners["owner"], what.owners["role"]) if r == "parameters"} == {
        "theta['w1']", "theta['b1']", "theta['w2']"}
    # An argument named for parameters is parameters even where it is new at every call (evaluation).
    assert role_of({"name": "params", "path": "['w']"}, PER_STEP) == "parameters"
    assert role_of({"name": "x", "path": ""}, PER_STEP) == "batch"


@pytest.mark.parametrize("donate", [False, True], ids=["plain", "donated"])
def test_roles_of_an_optax_step_are_its_known_bytes(tmp_path, donate):
    script = write_script(tmp_path, "train.py", OPTAX_STEP)
    flags = ["--donate"] if donate else []
    xla = subprocess.run([sys.executable, str(script), "--analyse", *flags], cwd=tmp_path, env=cpu_env(),
                         capture_output=True, text=True, timeout=300)
    args, out, alias, temp = map(int, xla.stdout.split())
    proc = run_cli("run", "-q", "-o", tmp_path / "run", script, *flags, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    what = roles(attribute(load_run(tmp_path / "run")))
    by_role = dict(zip(what.by_role["role"], what.by_role["bytes"]))
    assert what.where == "during a call of step"
    # The state carried from step to step, split by optax's own types; y is the same array every call.
    assert by_role["parameters"] == P
    assert by_role["optimizer state"] == ADAM
    assert by_role["batch"] == X
    assert by_role["held inputs"] == 64 * 4
    assert by_role["parameters"] + by_role["optimizer state"] + by_role["batch"] + by_role["held inputs"] == args
    # XLA writes the new state into fresh buffers unless the step donates (then into the old ones); the
    # rest of its outputs are the loss and the output tuple's table of pointers.
    assert by_role.get("new state", 0) == (0 if donate else P + ADAM)
    assert alias == (P + ADAM if donate else 0)
    assert by_role["results"] == out - alias - by_role.get("new state", 0) >= 4
    assert by_role.get("inside the call", 0) == temp
    # Everything live before the call that is not its input (the script holds nothing else on device
    # but the first batch's zeros and y's own constant): the roles add up to the call's peak.
    assert sum(by_role.values()) == what.peak_bytes
    # owners.csv adds up to roles.csv, role by role: the bytes no array names have a row of their own.
    owned = what.owners.groupby("role")["bytes"].sum().to_dict()
    assert owned == by_role, (owned, by_role)
    assert int(what.owners["bytes"].sum()) == what.peak_bytes
    owners = set(zip(what.owners["owner"], what.owners["role"]))
    for key in ("w1", "b1", "w2"):
        assert (f"params['{key}']", "parameters") in owners
        assert {(f"opt_state[0].{m}['{key}']", "optimizer state") for m in ("mu", "nu")} <= owners
        # its output, the new state, is named by the input it becomes (when XLA writes it anew)
        assert ((f"params['{key}']", "new state") in owners) == (not donate)
    assert ("x", "batch") in owners
    # Between calls (the run's last snapshot), show --by owner names the same arrays: the parameters the
    # step returned are the parameters; the totals are the profile's, as by line.
    doc = json.loads(run_cli("show", f"{tmp_path / 'run'}@last", "--by", "owner", "--json", cwd=tmp_path).stdout)
    by_site = json.loads(run_cli("show", f"{tmp_path / 'run'}@last", "--json", cwd=tmp_path).stdout)
    assert doc["totals"] == by_site["totals"]
    rows = {(r["owner"], r["role"]): r["bytes"] for r in doc["rows"]}
    assert rows[("params['w1']", "parameters")] == 256 * 512 * 4
    assert rows[("opt_state[0].mu['w1']", "optimizer state")] == rows[("opt_state[0].nu['w1']", "optimizer state")] \
        == 256 * 512 * 4
    assert sum(b for (o, r), b in rows.items() if r in ("parameters", "optimizer state")) == P + ADAM


MESH = """
import jax
jax.config.update("jax_num_cpu_devices", 4)
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

# put from the host: no whole copy on one device on the way
mesh = Mesh(jax.devices(), ("data",))
params = {"w": jax.device_put(np.ones((1024, 2048), np.float32), NamedSharding(mesh, P()))}  # 8 MiB, on each device
x = jax.device_put(np.ones((64, 2048), np.float32), NamedSharding(mesh, P("data")))

def step(params, x):
    return {"w": params["w"] * 0.99 + x.mean()}

step = jax.jit(step, donate_argnums=(0,))
for i in range(4):
    params = step(params, x)
print(float(params["w"][0, 0]))
"""


def _device_peak(run_dir) -> int:
    rep = build_report(attribute(load_run(run_dir)))
    return int(rep.headline.true_peak_bytes)


TWO_FUNCTIONS = """
import jax
jax.config.update("jax_num_cpu_devices", 2)
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

mesh = jax.make_mesh((2,), ("data",))
w = jax.device_put(jnp.ones((1024, 512)), NamedSharding(mesh, P()))  # 2 MiB whole on each device
x = jax.device_put(jnp.ones((64, 1024)), NamedSharding(mesh, P("data", None)))
train = jax.jit(lambda w, x: w * 0.99 + jnp.mean(x))  # elementwise: a sharded w stays sharded
evaluate = jax.jit(lambda w, x: jnp.sum(w) + jnp.sum(x))
for i in range(4):
    w = train(w, x)
    loss = evaluate(w, x)
print(float(loss))
"""


def test_an_array_two_functions_take_is_in_one_replicated_finding(tmp_path):
    script = write_script(tmp_path, "two.py", TWO_FUNCTIONS)
    proc = run_cli("run", "-q", "-o", tmp_path / "run", script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (f,) = replication_findings(attribute(load_run(tmp_path / "run")))
    assert [a["owner"] for a in f.fact("arrays")] == ["w"] and f.fact("function") == "<lambda>"
    # compiled with w sharded (train's and evaluate's calls both): each device then holds half of it
    assert f.fact("verified") and words(f).saves == f"saves {format_bytes(f.saving_bytes)} per device (compiled)"
    assert "FSDP" in words(f).fix
    # the fix applied as printed: the per-device true peak falls by what the finding says
    [a] = f.fact("arrays")
    fixed = write_script(tmp_path, "fixed.py", TWO_FUNCTIONS.replace("NamedSharding(mesh, P()))",
                                                                     f"NamedSharding(mesh, {a['spec']}))"))
    assert run_cli("run", "-q", "-o", tmp_path / "fixed", fixed, cwd=tmp_path).returncode == 0
    assert replication_findings(attribute(load_run(tmp_path / "fixed"))) == []
    drop = _device_peak(tmp_path / "run") - _device_peak(tmp_path / "fixed")
    assert abs(drop - f.saving_bytes) <= 0.01 * f.saving_bytes, (drop, f.saving_bytes)


def test_an_array_replicated_under_a_mesh_gets_the_finding_and_its_fix_saves_what_it_says(tmp_path):
    script = write_script(tmp_path, "mesh.py", MESH)
    assert run_cli("run", "-q", "-o", tmp_path / "before", script, cwd=tmp_path).returncode == 0
    run = load_run(tmp_path / "before")
    [f] = replication_findings(attribute(run))
    assert f.saving_bytes == 8 * 2**20 * 3 // 4  # 6 MiB per device
    [a] = f.fact("arrays")
    assert (a["owner"], a["devices"], a["axis"], a["axis_size"]) == ("params['w']", 4, "data", 4)
    fix = words(f).brief_fix
    # made sharded where its values are made (issue 53: not a device_put after it is made whole)
    put = "jax.device_put(<params['w']'s values where they are made>, NamedSharding(mesh, "
    assert fix.startswith(put + "P(")
    # Apply the fix as printed: the array is put with the spec it names.
    spec = fix[len(put):-2]
    fixed = write_script(tmp_path, "fixed.py", MESH.replace("NamedSharding(mesh, P()))}", f"NamedSharding(mesh, {spec}))}}"))
    assert run_cli("run", "-q", "-o", tmp_path / "after", fixed, cwd=tmp_path).returncode == 0
    after = load_run(tmp_path / "after")
    assert replication_findings(attribute(after)) == []
    drop = _device_peak(tmp_path / "before") - _device_peak(tmp_path / "after")
    assert abs(drop - f.saving_bytes) <= 0.01 * f.saving_bytes, (drop, f.saving_bytes)
    # the JSON and the CSV carry the owners with the columns the docs name
    proc = run_cli("export", tmp_path / "after", "--csv", tmp_path / "csv", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    header = (tmp_path / "csv" / "owners.csv").read_text().splitlines()[0].split(",")
    assert {"role", "owner", "bytes", "device"} <= set(header)
    doc = json.loads(run_cli("report", tmp_path / "after", "--json", cwd=tmp_path).stdout)
    assert {r["device"] for r in doc["roles"]["by_role"]} == {f"cpu:{i}" for i in range(4)}
    assert {r["owner"] for r in doc["roles"]["owners"]} >= {"params['w']", "x"}
    # --by owner names a run's arrays: a profile file has none (one line, exit 2)
    prof = next((tmp_path / "after" / "snapshots").iterdir())
    bad = run_cli("show", prof, "--by", "owner", cwd=tmp_path)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and str(prof) in bad.stderr


PARTIAL_DONATION = """
import functools
import jax, jax.numpy as jnp

@functools.partial(jax.jit, donate_argnums=(0,))
def step(a, b, x):  # a is donated, b is not
    return a * 0.9 + x.mean(), b * 0.9 + x.mean()

a, b = jnp.ones((512, 512)), jnp.ones((256, 512))
for i in range(5):
    x = jnp.ones((64, 512)) * i
    a, b = step(a, b, x)
print(float(a[0, 0]))
"""


def test_with_part_of_the_state_donated_the_new_state_is_the_rest_and_owners_add_up(tmp_path):
    """XLA writes the new a into the donated a's buffer: the new state is b's
    new value alone (its owner b, 512 KiB), and no owner is larger than its
    role (was: both outputs named new state, their owners above the role)."""
    script = write_script(tmp_path, "partial.py", PARTIAL_DONATION)
    proc = run_cli("run", "-q", "-o", tmp_path / "run", script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    what = roles(attribute(load_run(tmp_path / "run")))
    by_role = dict(zip(what.by_role["role"], what.by_role["bytes"]))
    assert by_role["new state"] == 256 * 512 * 4
    new = what.owners[what.owners["role"] == "new state"]
    assert list(new["owner"]) == ["b"]
    named = what.owners.groupby("role")["bytes"].sum()
    assert all(named[r] == b for r, b in by_role.items()) and sum(by_role.values()) == what.peak_bytes
