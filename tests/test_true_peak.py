"""The estimated true peak is each call's own: the signature it ran (its own
executable's figures) on the bytes live just before it, per device as XLA
gives them, with the sum over devices labelled as such. Each figure is held
to XLA's memory_analysis() of the same program, printed by the program."""

from __future__ import annotations

import json

import pytest

from conftest import cli_batch, run_cli, write_script

from jaxmemprof.analysis.advice.plan import build_plan
from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.store.reader import load_run

# The program prints XLA's own figures for each signature it runs (the oracle).
ORACLE = """
import json
def figures(fn, *args):
    ma = fn.lower(*args).compile().memory_analysis()
    return (ma.argument_size_in_bytes + ma.output_size_in_bytes - ma.alias_size_in_bytes
            + ma.temp_size_in_bytes + ma.generated_code_size_in_bytes)
"""

TWO_SIGNATURES = ORACLE + """
import jax, jax.numpy as jnp

@jax.jit
def f(x):
    return jnp.sort(x @ x.T, axis=0).sum()   # an n x n temporary

big = jnp.ones((4096, 1), jnp.float32)
f(big)
del big
small = jnp.ones((512, 1), jnp.float32)
f(small)
f(small)
print(json.dumps({"big": figures(f, jnp.ones((4096, 1), jnp.float32)), "small": figures(f, small)}))
"""

FOUR_DEVICES = ORACLE + """
import jax
jax.config.update("jax_num_cpu_devices", 4)
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

mesh = jax.make_mesh((4,), ("d",))
x = jax.device_put(jnp.ones((4 * 1024, 512), jnp.float32), NamedSharding(mesh, P("d")))  # 2 MiB a device

@jax.jit
def g(x):
    return jnp.sort(jnp.concatenate([x, x, x, x], axis=1) * 2.0, axis=1).sum(axis=1)  # 8 MiB a device

for _ in range(3):
    r = g(x)
print(json.dumps({"device": figures(g, x)}))
"""


# A state made whole on cpu:0 and carried by pmap over two devices: its first
# call copies the state onto both devices (the arguments XLA counts) while the
# program's whole arrays stay alive on cpu:0 beside the copies. The program
# prints the bytes its arrays hold on cpu:0 before that call and XLA's call
# peak of the signature it runs.
PMAP_WHOLE = ORACLE + """
import jax
jax.config.update("jax_num_cpu_devices", 2)
import jax.numpy as jnp

def step(state, x):
    return jax.tree_util.tree_map(lambda s: s - 0.1 * x.mean(), state), x.sum()

pstep = jax.pmap(step)
state = {"w": jnp.ones((2, 256, 512)), "b": jnp.zeros((2, 512))}
x = jnp.ones((2, 64))
before = sum(s.data.nbytes for a in jax.live_arrays() for s in a.addressable_shards if s.device.id == 0)
call = figures(pstep, state, x)
for i in range(4):
    state, loss = pstep(state, x)
print(json.dumps({"before": before, "call": call}))
"""


def _record(tmp_path, name, source):
    script = write_script(tmp_path, name, source)
    proc = run_cli("run", "-q", "-o", tmp_path / "run", script, cwd=tmp_path, check=0)
    oracle = json.loads(proc.stdout.strip().splitlines()[-1])
    return tmp_path / "run", oracle


def _commands(cwd, *argvs):
    """``jaxmemprof ARGV`` for each of ``argvs``, in turn in one process
    (the CLI's entry point, tests/conftest.py cli_batch)."""
    return cli_batch(list(argvs), cwd, workers=1)


def test_the_true_peak_is_the_larger_signatures_call_not_the_last_analysed(tmp_path):
    run, oracle = _record(tmp_path, "two.py", TWO_SIGNATURES)
    assert oracle["big"] > 64 * 2**20 > 40 * 2**20 > oracle["small"]
    report, over = _commands(tmp_path, ["report", run, "--json"], ["check", run, "--max-true-peak", "40MiB"])
    assert report.returncode == 0, report.stderr
    summary = json.loads(report.stdout)["summary"]
    # Live before the big call: its argument alone, which XLA's figure counts.
    assert summary["true_peak_total_bytes"] == oracle["big"]
    assert summary["true_peak_bytes"] == oracle["big"]
    assert summary["true_peak_where"] == "during a call of f"
    assert over.returncode == 1, over.stdout + over.stderr


@pytest.fixture(scope="module")
def four_devices(tmp_path_factory):
    """FOUR_DEVICES recorded once: (the run, its oracle)."""
    return _record(tmp_path_factory.mktemp("four"), "four.py", FOUR_DEVICES)


def test_four_devices_each_needing_a_temporary_say_it_per_device(four_devices):
    run, oracle = four_devices
    per_device = oracle["device"]
    assert 8 * 2**20 < per_device < 11 * 2**20
    report, text = _commands(run.parent, ["report", run, "--json", "--device-memory", "16MiB"], ["report", run])
    assert (report.returncode, text.returncode) == (0, 0), report.stderr + text.stderr
    doc = json.loads(report.stdout)
    s = doc["summary"]
    assert s["devices"] == 4
    # Live before the second call on a device: its shard of x (the call's
    # argument, which XLA counts) and of the first call's result r, float32[4096]
    # (freed only once the second call has returned).
    r_shard = 4096 * 4 // 4
    assert s["true_peak_bytes"] == per_device + r_shard
    assert s["true_peak_total_bytes"] == 4 * (per_device + r_shard)
    assert doc["fit"]["peak_bytes"] == per_device + r_shard
    text = text.stdout
    mib = (per_device + r_shard) / 2**20
    assert f"true peak {mib:.2f} MiB per device ({4 * mib:.2f} MiB on all 4) during a call of g" in text


ELSEWHERE = """
import jax, jax.numpy as jnp

@jax.jit
def train(state, batch):   # state could be donated: 1 MiB
    return jax.tree_util.tree_map(lambda s: s + batch.mean(), state)

@jax.jit
def evaluate(x):
    return jnp.sort(x @ x.T, axis=0).sum()   # a 64 MiB temporary: the run's true peak

state = {"w": jnp.zeros((512, 512), jnp.float32)}
batch = jnp.ones((8,), jnp.float32)
for i in range(6):
    state = train(state, batch)
print(float(evaluate(jnp.ones((4096, 1), jnp.float32))))
"""


def test_advice_on_a_call_that_does_not_hold_the_peak_is_info(tmp_path):
    script = write_script(tmp_path, "elsewhere.py", ELSEWHERE)
    run_cli("run", "-q", "-o", tmp_path / "run", script, cwd=tmp_path, check=0)
    doc = json.loads(run_cli("report", tmp_path / "run", "--json", check=0).stdout)
    assert doc["summary"]["true_peak_where"] == "during a call of evaluate"
    [donate] = [f for f in doc["findings"] if f["rule"] == "donate"]
    assert donate["facts"]["function"] == "train"
    # Compiled donated, train lowers no peak: the run's is in evaluate.
    x = donate["facts"]
    assert x["donated_bytes"] == 512 * 512 * 4 and x["verified"] and donate["saving_bytes"] == 0
    assert x["true_peak_before_bytes"] == x["true_peak_after_bytes"] == doc["summary"]["true_peak_bytes"]
    assert donate["severity"] == "info"
    assert donate["facts"]["peak_elsewhere"] == "during a call of evaluate"
    assert "does not lower the run's peak, which is during a call of evaluate" in donate["message"]


def test_check_gates_the_true_peak_per_device(four_devices):
    run, oracle = four_devices
    per_device = oracle["device"] + 4096  # and the shard of the first call's result, as above
    under, over = _commands(run.parent, ["check", run, "--max-true-peak", str(per_device)],
                            ["check", run, "--max-true-peak", str(per_device - 1)])
    assert (under.returncode, over.returncode) == (0, 1), under.stdout + under.stderr + over.stdout + over.stderr
    assert f"estimated true peak {per_device / 2**20:.2f} MiB per device (during a call of g)" in under.stdout


STATIC_SIZES = ORACLE + """
import functools
import jax, jax.numpy as jnp

@functools.partial(jax.jit, static_argnums=1)
def f(x, n):
    return jnp.sort(jnp.tile(x, (1, n)), axis=0).sum()   # an x.size * n temporary: n decides it

x = jnp.ones((4096, 1), jnp.float32)
f(x, 4096)
f(x, 8)
f(x, 8)
print(json.dumps({"big": figures(f, x, 4096), "small": figures(f, x, 8)}))
"""


def test_a_static_argument_is_part_of_the_signature(tmp_path):
    # One array signature, two executables: the static value tells them apart,
    # as it does in JAX's cache, so the true peak is the big call's own figure.
    run, oracle = _record(tmp_path, "static.py", STATIC_SIZES)
    assert oracle["big"] > 40 * 2**20 > oracle["small"]
    signatures = sorted(load_run(run).jit.compiles["signature"])
    assert signatures == ["float32[4096,1], static:4096", "float32[4096,1], static:8"], signatures
    summary = json.loads(run_cli("report", run, "--json", check=0).stdout)["summary"]
    assert summary["true_peak_total_bytes"] == oracle["big"]


LONG_SIGNATURES = """
import jax, jax.numpy as jnp

@jax.jit
def step(params, x):
    return [p + x.sum() for p in params]

params = [jnp.ones((3, 3), jnp.float32) for _ in range(200)]  # 200 leaves before the batch
for batch in (128, 64):
    for _ in range(2):
        params = step(params, jnp.ones((batch, 4), jnp.float32))
"""


def test_long_signatures_that_differ_at_the_end_stay_apart(tmp_path):
    script = write_script(tmp_path, "long.py", LONG_SIGNATURES)
    run_cli("run", "-q", "-o", tmp_path / "run", script, cwd=tmp_path, check=0)
    programs = load_run(tmp_path / "run").jit.programs
    signatures = list(programs["signature"])
    assert len(signatures) == len(set(signatures)) == 2, signatures
    assert all(len(s) <= 2000 and "sha256" in s for s in signatures)


@pytest.mark.parametrize("interval", ["0.5", "0.002"])
def test_arrays_copied_onto_a_calls_devices_stay_alive_beside_the_copies(tmp_path, interval):
    """The first pmap call's peak on cpu:0 is the program's whole arrays
    there plus XLA's call peak (not less its arguments: those are copies),
    whenever the snapshots were taken: a snapshot inside that call saw it
    (under load; here a fast interval), and the estimate must not depend on
    whether one did."""
    script = write_script(tmp_path, "whole.py", PMAP_WHOLE)
    proc = run_cli("run", "-q", "--plan", "--interval", interval, "-o", tmp_path / "run", script, cwd=tmp_path,
                   check=0)
    oracle = json.loads(proc.stdout.strip().splitlines()[-1])
    assert oracle["before"] == (2 * 256 * 512 + 2 * 512 + 2 * 64) * 4
    summary = json.loads(run_cli("report", tmp_path / "run", "--json", check=0).stdout)["summary"]
    assert summary["true_peak_bytes"] == oracle["before"] + oracle["call"]
    # The plan's point at the recorded batch is the same call, by the same model.
    points = build_plan(attribute(load_run(tmp_path / "run"))).points
    [recorded] = points.loc[(points["variant"] == "recorded") & (points["scale"] == 1), "peak_bytes"]
    assert recorded == oracle["before"] + oracle["call"]
