"""The jit probe and donation advice, proven on real training loops.

Each script runs under `jaxmemprof run`; the advice must be exactly right:
the arguments to donate, their bytes, and nothing about arguments the caller
still uses. Applying the advice must lower the call's peak by what it said.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pandas as pd
import pytest

from conftest import cli_batch, cpu_env, in_parallel, line_of, run_cli, write_script

from jaxmemprof.analysis.advice.donation import jit_memory
from jaxmemprof.analysis.rules.donation import donation_findings
from jaxmemprof.analysis.sites import Attribution
from jaxmemprof.store.reader import load_run
from jaxmemprof.render.findings import words
from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.analysis.report import build_report
from jaxmemprof.units import format_bytes

KiB = 1024

TRAIN = """
import functools
import jax
import jax.numpy as jnp

def init():
    params = {"w": jnp.ones((512, 256), jnp.float32), "b": jnp.zeros((256,), jnp.float32)}
    opt = {"w": jnp.zeros((512, 256), jnp.float32), "b": jnp.zeros((256,), jnp.float32)}
    return params, opt

def update(params, opt, batch):
    grads = jax.tree_util.tree_map(lambda p: p * jnp.mean(batch), params)
    opt = jax.tree_util.tree_map(lambda m, g: 0.9 * m + g, opt, grads)
    params = jax.tree_util.tree_map(lambda p, m: p - 0.01 * m, params, opt)
    return params, opt, jnp.mean(batch)

step = jax.jit(update{DONATE})  # LINE-JIT
params, opt = init()
batch = jnp.ones((64, 512), jnp.float32)
for i in range(8):
    params, opt, loss = step(params, opt, batch)  # LINE-CALL
print(float(loss))
"""
STATE_BYTES = 2 * (512 * 256 * 4 + 256 * 4)  # params and opt


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Every program of this module recorded once under `jaxmemprof run`,
    two at a time (each recording waits on its own process), and the probe's
    semantics program under plain python and without the probe beside them:
    name -> the completed process. Each test checks its own exit status."""
    d = tmp_path_factory.mktemp("donation")
    for name, source in PROGRAMS.items():
        write_script(d, name, source)

    def record(name, *extra, out=None):
        return lambda: run_cli("run", "-q", "-o", d / (out or name + ".run"), *extra, d / name, cwd=d)

    calls = {name: record(name) for name in PROGRAMS}
    calls["forms.py plain"] = lambda: subprocess.run([sys.executable, str(d / "forms.py")], cwd=d, env=cpu_env(),
                                                     capture_output=True, text=True, timeout=300)
    calls["forms.py off"] = record("forms.py", "--no-jit-probe", out="off.run")
    for name, body in PROBE_SCRIPTS.items():
        (d / name).mkdir()
        script = write_script(d / name, name + ".py", _probe_script(d / name, body))
        calls[name] = lambda script=script: subprocess.run([sys.executable, str(script)], capture_output=True,
                                                           text=True, env=cpu_env(), timeout=300)
    return d, dict(zip(calls, in_parallel(*calls.values())))


def _record(recorded, name, check=0):
    """(the script, its run, the attribution, the completed process) of a
    program the module fixture recorded; its exit status must be ``check``."""
    d, procs = recorded
    proc = procs[name]
    assert proc.returncode == check, (
        f"exit {proc.returncode}, expected {check}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    run = load_run(d / (name + ".run"))
    return d / name, run, Attribution(roots=(run.manifest["cwd"],)), proc


def _donations(run, att):
    return [f for f in donation_findings(attribute(run)) if f.rule == "donate"]


def test_forgotten_donation_is_recommended_with_the_right_bytes(recorded):
    script, run, att, _ = _record(recorded, "nodonate.py")
    [f] = _donations(run, att)
    assert f.site == f"nodonate.py:{line_of(script, 'LINE-JIT')}"
    assert f.fact("donated_bytes") == STATE_BYTES
    assert "'params'" in words(f).message and "'opt'" in words(f).message and "'batch'" not in words(f).message
    assert "donate_argnums=(0, 1)" in words(f).fix
    assert "step = jax.jit(update, donate_argnums=(0, 1))  # LINE-JIT" in words(f).fix  # the edited line
    assert "params['w'] float32[512,256] -> output[0]['w']" in words(f).evidence


def test_without_its_compile_a_donation_saves_up_to_its_bytes_said_as_not_verified(tmp_path):
    script = write_script(tmp_path, "train.py", TRAIN.replace("{DONATE}", ""))
    proc = run_cli("run", "--verify-seconds", "0", "-o", tmp_path / "run", script, cwd=tmp_path, check=0)
    assert "verified by compiling" not in proc.stderr, proc.stderr
    run = load_run(tmp_path / "run")
    assert run.jit.whatif.empty  # nothing compiled at the end
    [f] = _donations(run, None)
    assert not f.fact("verified") and f.saving_bytes == f.fact("donated_bytes") == STATE_BYTES
    assert "--verify-seconds 0" in f.fact("not_verified")
    assert words(f).saves == f"saves up to {format_bytes(STATE_BYTES)} (not verified)"
    assert f"saves up to {format_bytes(STATE_BYTES)} (not verified)" in proc.stderr, proc.stderr


MANY_STEPS = "\n".join(
    ["import jax, jax.numpy as jnp"]
    + [f"step{k} = jax.jit(lambda s: s * 1.0001 + {k})\ns{k} = jnp.ones(({64 * (k + 1)}, 64))" for k in range(10)]
    + ["for _ in range(4):"] + [f"    s{k} = step{k}(s{k})" for k in range(10)] + ["print(float(s0[0, 0]))", ""])


def test_a_donation_whose_shapes_were_not_kept_says_why_it_is_not_verified(tmp_path):
    """The probe keeps the arguments' shapes of the 8 functions with the
    largest call peaks: the 2 smallest of 10 get no compile, and say so."""
    script = write_script(tmp_path, "many.py", MANY_STEPS)
    run_cli("run", "-q", "-o", tmp_path / "run", script, cwd=tmp_path, check=0)
    found = sorted(_donations(load_run(tmp_path / "run"), None), key=lambda f: f.fact("donated_bytes"))
    assert [f.fact("donated_bytes") for f in found] == [64 * 64 * 4 * (k + 1) for k in range(10)]
    assert [f.fact("verified") for f in found] == [False] * 2 + [True] * 8
    for f in found[:2]:
        assert "shapes were not kept" in f.fact("not_verified") and f.saving_bytes == f.fact("donated_bytes")


def test_the_fix_is_written_on_the_line_as_it_was_recorded(recorded):
    # The script edited after its run (two lines added above the jit): the
    # fix still says what the run ran, where it was, not the line now there.
    # The module's recording of the program (TRAIN without donation, `run -q`),
    # its script put back as it was after the report.
    script, _, _, _ = _record(recorded, "nodonate.py")
    jit_line = line_of(script, "LINE-JIT")
    source = script.read_text()
    try:
        script.write_text("# edited\nimport os\n" + source)
        assert "LINE-JIT" not in script.read_text().splitlines()[jit_line - 1]
        report = run_cli("report", script.parent / "nodonate.py.run", cwd=script.parent, check=0).stdout
    finally:
        script.write_text(source)
    assert f"nodonate.py:{jit_line}" in report, report
    assert "fix: step = jax.jit(update, donate_argnums=(0, 1))  # LINE-JIT" in report, report


def test_applied_donation_gets_no_advice_and_lowers_the_peak_by_the_prediction(recorded):
    _, before, att_b, _ = _record(recorded, "nodonate.py")
    [advice] = _donations(before, att_b)
    _, after, att_a, _ = _record(recorded, "donated.py")
    assert _donations(after, att_a) == []
    mb, ma = jit_memory(attribute(before)).iloc[0], jit_memory(attribute(after)).iloc[0]
    assert mb["alias_bytes"] == 0
    # XLA's own account of the donation that took effect: what the compile at the end of the run said.
    assert ma["alias_bytes"] == advice.fact("aliased_bytes") and ma["temp_bytes"] == advice.fact("temp_after_bytes")
    # What it saves is the fall of the true peak that running the fixed program shows (within 1 %).
    peak_before, peak_after = (build_report(attribute(r)).headline.true_peak_bytes
                               for r in (before, after))
    assert advice.fact("verified") and advice.fact("true_peak_before_bytes") == peak_before
    assert abs(advice.fact("true_peak_after_bytes") - peak_after) <= 0.01 * peak_after
    assert abs(advice.saving_bytes - (peak_before - peak_after)) <= 0.01 * (peak_before - peak_after)
    assert words(advice).saves == f"saves {format_bytes(advice.saving_bytes)} (compiled)"
    # The compile that measured it, and what it cost, are in the run.
    (row,) = before.jit.whatif.itertuples()
    assert json.loads(row.change)["donate"] == ["params", "opt"] and pd.isna(row.error) and row.compile_s > 0
    assert row.alias_bytes == ma["alias_bytes"]


REUSE = TRAIN.replace("{DONATE}", "").replace(
    "    params, opt, loss = step(params, opt, batch)  # LINE-CALL",
    "    new_params, opt, loss = step(params, opt, batch)  # LINE-CALL\n"
    "    drift = jax.tree_util.tree_map(lambda a, b: a - b, new_params, params)  # uses the old params\n"
    "    params = new_params")


def test_an_argument_used_after_the_call_is_never_recommended(recorded):
    _, run, att, _ = _record(recorded, "reuse.py")
    [f] = _donations(run, att)
    assert "'opt'" in words(f).message and "'params'" not in words(f).message
    assert f.fact("donated_bytes") == STATE_BYTES // 2
    assert "donate_argnums=(1,)" in words(f).fix


KEYWORD = """
import jax
import jax.numpy as jnp

@jax.jit
def step(batch, *, state):
    return {"w": state["w"] + batch.sum()}

state = {"w": jnp.zeros((1024,), jnp.float32)}
batch = jnp.ones((8,), jnp.float32)
for i in range(5):
    state = step(batch, state=state)
"""


def test_keyword_state_gets_donate_argnames(recorded):
    _, run, att, _ = _record(recorded, "kw.py")
    [f] = _donations(run, att)
    assert 'donate_argnames=("state",)' in words(f).fix and "donate_argnums" not in words(f).fix
    assert f.fact("donated_bytes") == 4096
    assert '@functools.partial(jax.jit, donate_argnames=("state",))' in words(f).fix


SHARDED = """
import jax
jax.config.update("jax_num_cpu_devices", 2)
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

mesh = jax.make_mesh((2,), ("x",))
state = jax.device_put(jnp.zeros((4096, 64), jnp.float32), NamedSharding(mesh, P("x")))
replicated = jax.device_put(jnp.zeros((256,), jnp.float32), NamedSharding(mesh, P()))
step = jax.jit(lambda s, r: (s + 1.0, r * 2.0))
for i in range(5):
    state, replicated = step(state, replicated)
"""


def test_sharded_state_is_matched_per_shard(recorded):
    _, run, att, _ = _record(recorded, "sharded.py")
    [f] = _donations(run, att)
    # The sharded state: 1 MiB over 2 devices; the replicated array: 1 KiB on each of 2 devices.
    assert f.fact("donated_bytes") == 4096 * 64 * 4 + 2 * 256 * 4
    assert "donate_argnums=(0, 1)" in words(f).fix


UNUSABLE = """
import jax
import jax.numpy as jnp

step = jax.jit(lambda x, y: (x * 2.0).sum(), donate_argnums=(0, 1))
x = jnp.ones((1000,), jnp.float32)
for i in range(3):
    y = jnp.ones((10,), jnp.int32)
    out = step(x, y)
"""


def test_unusable_donation_is_explained(recorded):
    _, run, att, proc = _record(recorded, "unusable.py")
    assert "Some donated buffers were not usable" in proc.stderr  # JAX's warning, still shown
    warnings = run.events[run.events["kind"] == "warning"]["message"].tolist()
    assert any("Some donated buffers were not usable" in w for w in warnings)
    [f] = [f for f in donation_findings(attribute(run)) if f.rule == "donation-unusable"]
    # y is never read: jit prunes it, and JAX neither warns of it nor deletes it.
    assert "float32[1000]" in words(f).message and "int32[10]" not in words(f).message
    assert "JAX warned" in words(f).message
    assert "float32[]" in words(f).evidence  # the only output


USED = """
import jax
import jax.numpy as jnp

step = jax.jit(lambda s: s + 1.0, donate_argnums=0)
state = jnp.zeros((100,), jnp.float32)
new = step(state)
print(state + 1)  # state was donated
"""


def test_using_a_donated_array_is_explained(recorded):
    _, run, att, proc = _record(recorded, "used.py", check=1)
    assert "deleted" in proc.stderr
    [f] = [f for f in donation_findings(attribute(run)) if f.rule == "donated-then-used"]
    assert "<lambda>" in words(f).evidence and f.severity == "high"


PROBE_SEMANTICS = """
import dataclasses, functools, json, sys
import jax
import jax.numpy as jnp
import numpy as np

@dataclasses.dataclass
class State:
    w: jax.Array
    n: int

jax.tree_util.register_dataclass(State, data_fields=["w"], meta_fields=["n"])

@jax.jit
def plain(x, y):
    return x * y

@jax.jit(donate_argnums=0)
def factory(x):
    return x + 1

@functools.partial(jax.jit, static_argnums=1)
def static(x, k):
    return x * k

@functools.partial(jax.jit, static_argnames="mode")
def named(x, mode="add"):
    return x + 1 if mode == "add" else x - 1

class Model:
    def __init__(self):
        self.scale = 3.0

    @functools.partial(jax.jit, static_argnums=0)
    def apply(self, x):
        return x * self.scale

@jax.jit
def tree(state, d, items):
    return State(state.w + d["a"] + items[0], state.n), [d["b"] * 2]

x = jnp.arange(6.0)
results = {
    "plain": plain(x, x).tolist(),
    "factory": factory(jnp.ones(3)).tolist(),
    "static": static(x, 2).tolist(),
    "named": named(x, mode="sub").tolist(),
    "method": Model().apply(x).tolist(),
    "tree": [tree(State(x, 1), {"a": x, "b": x}, [x, x])[0].w.tolist()],
    "lower": plain.lower(x, x).compile()(x, x).tolist(),
    "trace": str(plain.trace(x, x).jaxpr).count("mul"),
    "eval_shape": str(plain.eval_shape(x, x).shape),
    "name": plain.__name__,
    "wrapped": plain.__wrapped__.__name__,
}
for i in range(4):
    results["loop"] = plain(x, x).sum().item()
print(json.dumps(results, sort_keys=True))
"""


def test_probe_keeps_every_jit_form_working_with_identical_results(recorded):
    d, procs = recorded
    plain = procs["forms.py plain"]
    assert plain.returncode == 0, plain.stderr
    _, run, _, probed = _record(recorded, "forms.py")
    assert json.loads(probed.stdout) == json.loads(plain.stdout)
    names = set(run.jit.functions["name"])
    assert {"plain", "factory", "static", "named", "apply", "tree"} <= names
    counts = run.jit.counts.merge(run.jit.functions, on="function_id").set_index("name")
    # Calls through the proxy: not the one through .lower(...).compile(), which runs the executable.
    assert counts.loc["plain", "calls"] == 1 + 4
    factory = run.jit.functions.set_index("name").loc["factory"]
    assert json.loads(factory["donate_argnums"]) == [0]
    # Without the probe, nothing is recorded about jitted functions.
    off = procs["forms.py off"]
    assert off.returncode == 0, off.stderr
    assert load_run(d / "off.run").jit.functions.empty


def test_report_shows_the_donation_and_memory_inside_jit(recorded):
    d = _record(recorded, "nodonate.py")[0].parent
    text, json_ = cli_batch([["report", d / "nodonate.py.run"], ["report", d / "nodonate.py.run", "--json"]], d,
                            workers=1)
    assert (text.returncode, json_.returncode) == (0, 0), text.stderr + json_.stderr
    out = text.stdout
    assert "Memory inside jitted functions" in out
    assert "Donate 'params', 'opt' of update" in out
    assert "true peak" in out and "XLA's temporaries included" in out
    doc = json.loads(json_.stdout)
    [jm] = [r for r in doc["jit_memory"] if r["function"] == "update"]
    assert jm["alias_bytes"] == 0 and jm["call_peak_bytes"] >= 2 * STATE_BYTES
    [d] = [f for f in doc["findings"] if f["rule"] == "donate"]
    assert d["facts"]["donated_bytes"] == STATE_BYTES and d["facts"]["verified"]
    assert d["saving_bytes"] == d["facts"]["true_peak_before_bytes"] - d["facts"]["true_peak_after_bytes"]


MANY = """
import jax
import jax.numpy as jnp

f = jax.jit(lambda x: x * 2.0)
a, b = jnp.ones((16,), jnp.float32), jnp.ones((32,), jnp.float32)
for i in range(1200):  # well past the last sampled call
    a = f(a)
for i in range(3):
    b = f(b)  # a new signature, compiled after sampling ended
"""


def test_calls_after_sampling_cost_nothing_and_new_compilations_are_analysed(recorded):
    script, run, att, _ = _record(recorded, "many.py")
    counts = run.jit.counts.iloc[0]
    # Once its samples are taken, calls go straight to the jitted function
    # (uncounted); the compilation of the new signature wakes the probe,
    # which analyses it at the next call.
    assert counts["compiles"] == 2 and counts["calls_complete"] == 0
    assert 20 < counts["calls"] < 1203
    compiles = run.jit.compiles
    assert sorted(compiles["argument_bytes"].tolist()) == [64, 128]
    # The sample is capped, but for the first call of each signature analysed
    # after it: each compiled signature has a call that names it.
    # A sample whose inputs the program dropped while a snapshot held them
    # tells no fate (inputs_alive empty) and is not counted: the next call is
    # sampled instead (probe._check_liveness), as a loaded machine's timing has it.
    calls = run.jit.calls
    told = calls[calls["inputs_alive"].notna()]
    assert told["signature"].tolist() == ["float32[16]"] * 20 + ["float32[32]"]
    sampled = set(calls["call_index"].tolist())
    untold = calls[calls["inputs_alive"].isna()]
    assert all(int(i) + 1 in sampled for i in untold["call_index"]), calls[["call_index", "inputs_alive"]]
    assert len(untold) < len(told), calls[["call_index", "inputs_alive"]]  # a race, not the rule
    out = run_cli("report", script.parent / "many.py.run", cwd=script.parent, check=0).stdout
    assert f"≥{counts['calls']}" in out


def _probe_script(directory, body: str):
    """A script that runs ``body`` (which asserts) in a fresh process with a
    JitProbe installed on a RunWriter at directory/run: JAX stays out of the
    test process."""
    source = (
        "import jax, jax.numpy as jnp\n"
        "from jaxmemprof.capture.jit import JitProbe, Probed, QuietProbed\n"
        "from jaxmemprof.store.writer import RunWriter\n"
        f"writer = RunWriter(__import__('pathlib').Path({str(directory / 'run')!r}), {{'argv': []}})\n"
        "probe = JitProbe(writer, sample_first=1, sample_every=1, max_samples=2)\n"
        "probe.install()\n"
        "try:\n"
        + "".join(f"    {line}\n" for line in textwrap.dedent(body).strip().splitlines())
        + "finally:\n    probe.uninstall()\n    writer.finish()\n"
        "assert not isinstance(jax.jit(lambda x: x), Probed)  # uninstalled\n"
    )
    return source


def _probed(recorded, name):
    """The run of a probe script the module fixture ran (it must have exited 0)."""
    d, procs = recorded
    proc = procs[name]
    assert proc.returncode == 0, proc.stderr[-3000:]
    return load_run(d / name / "run")


POLL = """
        if probe._monitoring is not None:
            probe._monitoring.unregister_event_duration_listener(probe._listener)
        f = jax.jit(lambda x: x * 2.0)
        a, b = jnp.ones((16,), jnp.float32), jnp.ones((32,), jnp.float32)
        for _ in range(5):
            a = f(a)
        assert isinstance(f, QuietProbed) and float(a[0]) == 32.0
        b = f(b)  # compiles a second signature, unobserved
        assert isinstance(f, QuietProbed)
        probe.poll()
        assert type(f) is Probed
        b = f(b)  # observed again: analysed, and sampled (the first call of a signature analysed) ...
        assert type(f) is Probed and float(b[0]) == 4.0
        b = f(b)  # ... then quiet again, once that call's inputs' fate is known
        assert isinstance(f, QuietProbed) and float(b[0]) == 8.0
"""


def test_a_snapshot_wakes_a_quiet_function_that_compiled_again(recorded):
    """Without JAX's compile events (older JAX), the snapshot's poll finds the
    grown compile cache of a quiet function and the next call is analysed;
    while quiet, its calls are not observed (their live bytes only counted)."""
    run = _probed(recorded, "poll")
    assert sorted(run.jit.compiles["argument_bytes"].tolist()) == [64, 128]
    counts = run.jit.counts.iloc[0]
    assert counts["compiles"] == 2 and counts["calls_complete"] == 0


EPOCHS = """
        f = jax.jit(lambda x: x + 1.0)
        full, last = jnp.zeros((16,), jnp.float32), jnp.zeros((4,), jnp.float32)
        for epoch in range(2):
            for _ in range(5):
                f(full)
            f(last)
        f(full)  # the analysed signature's call was sampled: quiet once its inputs' fate is known
        assert isinstance(f, QuietProbed)
"""


def test_a_signature_compiled_while_quiet_is_analysed_when_it_comes_back(recorded):
    """A smaller last batch each epoch: compiled while the function was quiet
    (its arguments unseen), analysed at the next call that has it; the
    signature seen in between is not analysed twice."""
    run = _probed(recorded, "epochs")
    assert sorted(run.jit.compiles["signature"]) == ["float32[16]", "float32[4]"]
    assert run.jit.counts.iloc[0]["compiles"] == 2


PRUNED = """
import json
import jax
import jax.numpy as jnp

def update(state, batch):
    # "count" is not read, only replaced: jit prunes it from the program.
    return {"w": state["w"] + batch.mean(), "count": jnp.zeros_like(state["count"])}

step = jax.jit(update)
state = {"w": jnp.ones((256, 256), jnp.float32), "count": jnp.zeros((64,), jnp.float32)}
batch = jnp.ones((8,), jnp.float32)
for i in range(6):
    state = step(state, batch)
fixed = jax.jit(update, donate_argnums=(0,)).lower(state, batch).compile().memory_analysis()
print(json.dumps({"aliased": fixed.alias_size_in_bytes}))
"""


def test_a_leaf_jit_prunes_is_not_counted_in_the_saving(recorded):
    # The oracle: XLA's aliased bytes once the fix is applied, which leave out the pruned leaf.
    _, run, att, proc = _record(recorded, "pruned.py")
    aliased = json.loads(proc.stdout.strip().splitlines()[-1])["aliased"]
    assert aliased == 256 * 256 * 4
    [f] = _donations(run, att)
    assert f.fact("donated_bytes") == f.fact("aliased_bytes") == aliased  # the compile at the run's end: the fix's
    assert "donate_argnums=(0,)" in words(f).fix
    assert "state['count']" not in words(f).evidence and "state['w'] float32[256,256]" in words(f).evidence


PRUNED_EQUINOX = """
import equinox as eqx
import jax
import jax.numpy as jnp

class Model(eqx.Module):
    w: jax.Array
    steps: jax.Array  # replaced each step, never read: jit prunes it

def step(x, m):
    g = jax.grad(lambda w: jnp.mean((x @ w) ** 2))(m.w)
    m = eqx.tree_at(lambda m: m.w, m, m.w - 0.1 * g)
    return eqx.tree_at(lambda m: m.steps, m, jnp.zeros_like(m.steps))

train = eqx.filter_jit(step{DONATE})
m = Model(jnp.ones((128, 128), jnp.float32), jnp.zeros((32,), jnp.float32))
x = jnp.ones((16, 128), jnp.float32)
for i in range(6):
    m = train(x, m)
"""


def test_an_equinox_field_jit_prunes_is_not_counted_and_the_fix_aliases_the_prediction(recorded):
    _, before, att_b, _ = _record(recorded, "eqx_before.py")
    [f] = _donations(before, att_b)
    assert f.fact("donated_bytes") == 128 * 128 * 4  # m.w; not m.steps
    assert 'donate="all-except-first"' in words(f).fix
    _, after, att_a, _ = _record(recorded, "eqx_after.py")
    assert _donations(after, att_a) == []
    # XLA's own account once the fix is applied: what was predicted, to the byte.
    assert int(jit_memory(attribute(after)).iloc[0]["alias_bytes"]) == f.fact("donated_bytes")


MULTILINE = """
import functools, json
import jax
import jax.numpy as jnp

def update(params, x, scale):
    return jax.tree.map(lambda p: p - scale * x.mean() * p, params)

step = jax.jit(  # LINE-JIT-A
    update,
    static_argnums=(2,),
)

@functools.partial(jax.jit,  # LINE-JIT-B
                   static_argnames=("scale",))
def step2(params, x, scale):
    return jax.tree.map(lambda p: p + scale * x.mean() * p, params)

params = {"w": jnp.ones((256, 256), jnp.float32), "b": jnp.ones((256,), jnp.float32)}
x = jnp.ones((64, 256), jnp.float32)
aliased = {"update": step.lower(params, x, 0.1).compile().memory_analysis().alias_size_in_bytes,
           "step2": step2.lower(params, x, scale=0.1).compile().memory_analysis().alias_size_in_bytes}
for i in range(6):
    params = step(params, x, 0.1)
    params = step2(params, x, scale=0.1)
print(json.dumps(aliased))
"""


def test_a_wrapper_called_over_several_lines_gets_the_whole_statement_edited(recorded, tmp_path):
    script, run, att, proc = _record(recorded, "multiline.py")
    assert json.loads(proc.stdout.splitlines()[-1]) == {"update": 0, "step2": 0}
    found = {f.facts["function"]: f for f in _donations(run, att)}
    fns = run.jit.functions.set_index("name")
    report = run_cli("report", "--explain", script.parent / "multiline.py.run", cwd=script.parent, check=0).stdout
    text = script.read_text()
    for function, marker, lines in (("update", "LINE-JIT-A", 4), ("step2", "LINE-JIT-B", 2)):
        f = found[function]
        assert f.fact("donated_bytes") == 256 * 256 * 4 + 256 * 4
        # What the probe kept is the statement as the file has it, from the line that jits to its last bracket.
        statement = fns.loc[function, "jit_source"]
        assert statement.split("\n")[0].endswith(f"# {marker}") and statement.count("\n") == lines - 1
        assert statement + "\n" in text
        edited = f.facts["edited_line"]
        assert words(f).fix.endswith(":\n" + edited) and "donate_argnums=(0,)" in edited
        # The terminal shows it as a block under the sentence, a line at a time.
        first, *rest = edited.split("\n")
        assert "\n".join([f"at multiline.py:{line_of(script, marker)}):", "        " + first]
                         + ["        " + r for r in rest]) in report, report
        text = text.replace(statement, edited)
    # Applied as printed: XLA aliases what was predicted, in each function.
    fixed = write_script(tmp_path, "fixed.py", text)
    out = subprocess.run([sys.executable, str(fixed)], cwd=tmp_path, env=cpu_env(), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1]) == {fn: f.fact("donated_bytes") for fn, f in found.items()}


# The programs the module fixture records (file name -> source), each once.
PROGRAMS = {
    "nodonate.py": TRAIN.replace("{DONATE}", ""),
    "donated.py": TRAIN.replace("{DONATE}", ", donate_argnums=(0, 1)"),
    "reuse.py": REUSE,
    "kw.py": KEYWORD,
    "sharded.py": SHARDED,
    "unusable.py": UNUSABLE,
    "used.py": USED,
    "forms.py": PROBE_SEMANTICS,
    "many.py": MANY,
    "pruned.py": PRUNED,
    "eqx_before.py": PRUNED_EQUINOX.replace("{DONATE}", ""),
    "eqx_after.py": PRUNED_EQUINOX.replace("{DONATE}", ', donate="all-except-first"'),
    "multiline.py": MULTILINE,
}
# Scripts run under plain python with a JitProbe installed by hand (_probe_script).
PROBE_SCRIPTS = {"poll": POLL, "epochs": EPOCHS}
