"""The jit probe on the code people write: flax.nnx, flax linen, equinox,
haiku, optax and jax.pmap training programs, and jitted functions used inside
JAX's transformations.

Each program runs under plain python and under `jaxmemprof run`: they must
behave alike, the probe must record no error, the donation advice must name
the bytes XLA then aliases (to the byte) and be written the way that library's
user writes it, and applying the advice, edited into the program as the
finding prints it, must remove the finding.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, cpu_env, in_parallel, line_of, run_cli, write_script

from jaxmemprof.analysis.advice.donation import jit_memory
from jaxmemprof.analysis.rules.donation import donation_findings
from jaxmemprof.analysis.findings import Finding, in_proportion
from jaxmemprof.analysis.rules import NOT_IN_PROPORTION
from jaxmemprof.analysis.leaks import leaks, recompiles, rejits
from jaxmemprof.analysis.rules.leaks import leak_findings
from jaxmemprof.analysis.report import build_report
from jaxmemprof.analysis.sites import Attribution
from jaxmemprof.store.reader import load_run
from jaxmemprof.render.findings import words
from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.analysis.roles import roles

PROGRAMS = REPO / "sample_runs" / "libraries"
# The MLP of the programs at their default --width: Linear(256, 512) and Linear(512, 10), float32.
PARAMS = (256 * 512 + 512 + 512 * 10 + 10) * 4
ADAM = 2 * PARAMS + 4  # mu and nu of each parameter, and the step count (int32)

CASES = {
    # program: (wrapper, the line that applies it, function, bytes to donate, the advice's edited line, devices)
    "nnx_optimizer.py": ("flax.nnx.jit", "@nnx.jit", "train_step", PARAMS + ADAM + 4,  # + nnx.Optimizer's step
                         '@nnx.jit(donate_argnames=("model", "optimizer"))', 1),
    # x and y are made once and passed to every step: donate="all" would delete them, so the advice is
    # equinox's way to keep some arguments, and the program is fixed as it says (EQUINOX_FIX).
    "equinox_optax.py": ("equinox.filter_jit", "@eqx.filter_jit", "make_step", PARAMS + ADAM, None, 1),
    "linen_trainstate.py": ("jax.jit", "@jax.jit", "train_step", PARAMS + ADAM + 4,  # + TrainState's step
                            "@functools.partial(jax.jit, donate_argnums=(0,))", 1),
    "pmap_state.py": ("jax.pmap", "pstep = jax.pmap(step)", "step", 2 * (256 * 512 + 512) * 4,
                      "pstep = jax.pmap(step, donate_argnums=(0,))", 2),
    # haiku has no jit wrapper: hk.transform's apply inside a jax.jit step, its state optax's.
    "haiku_transform.py": ("jax.jit", "@jax.jit", "train_step", PARAMS + ADAM,
                           "@functools.partial(jax.jit, donate_argnums=(0, 1))", 1),
}

OWNERS = {
    "nnx_optimizer.py": {"model.l1.kernel", "model.l2.bias", "optimizer.opt_state[0].mu.l1.kernel",
                         "optimizer.opt_state[0].nu.l2.bias", "optimizer.step"},
    "equinox_optax.py": {"model.layers[0].weight", "model.layers[1].bias", "opt_state[0].mu.layers[0].weight",
                         "opt_state[0].nu.layers[1].bias"},
    "linen_trainstate.py": {"state.params['Dense_0']['kernel']", "state.opt_state[0].mu['Dense_0']['kernel']",
                            "state.opt_state[0].nu['Dense_1']['bias']"},
    "pmap_state.py": {"state['w']", "state['b']"},
    "haiku_transform.py": {"params['mlp/~/linear_0']['w']", "params['mlp/~/linear_1']['b']",
                           "opt_state[0].mu['mlp/~/linear_0']['w']", "opt_state[0].nu['mlp/~/linear_1']['b']"},
}
# (parameters, optimizer state) at the call: nnx.Optimizer's step is optimizer state (nnx.OptState).
ROLE_BYTES = {"nnx_optimizer.py": (PARAMS, ADAM + 4), "equinox_optax.py": (PARAMS, ADAM),
              "linen_trainstate.py": (PARAMS, ADAM), "haiku_transform.py": (PARAMS, ADAM)}

EQUINOX_FIX = [
    ("@eqx.filter_jit\n", '@eqx.filter_jit(donate="all-except-first")\n'),
    ("def make_step(model, opt_state, x, y):", "def make_step(batch, model, opt_state):\n    x, y = batch"),
    ("make_step(model, opt_state, x, y)", "make_step((x, y), model, opt_state)"),
]


def row_after(run, function):
    """The function_id of the run's function named ``function``."""
    fns = run.jit.functions
    return int(fns.loc[fns["name"] == function, "function_id"].iloc[0])


def _python(script, cwd):
    return subprocess.run([sys.executable, str(script)], cwd=cwd, env=cpu_env(), capture_output=True, text=True,
                          timeout=300)


def _record(script, cwd, name):
    # A budget for the verifying compiles that a loaded machine cannot run out of (the default, a share of the
    # run's time, left nnx's donation unverified once under a whole suite beside other work).
    proc = run_cli("run", "-q", "--verify-seconds", "300", "-o", cwd / name, script, cwd=cwd)
    run = load_run(cwd / name)
    return proc, run, Attribution(roots=(run.manifest["cwd"],))


def _python_and_record(script, cwd, name):
    """(python's result, then _record's), the two processes at the same time."""
    plain, recorded = in_parallel(lambda: _python(script, cwd), lambda: _record(script, cwd, name))
    return (plain, *recorded)


def _unstamped(text: str) -> str:
    """stderr without the time and process id of XLA's log lines, and
    without its warnings and notes (a busy machine adds "slow operation"
    ones now and then)."""
    text = re.sub(r"(?m)^[WI]\d{4} [\d:.]+\s+\d+ .*\n", "", text)
    return re.sub(r"(?m)^([EF])\d{4} [\d:.]+\s+\d+ ", r"\1 ", text)


def _probe_errors(run) -> list[str]:
    ev = run.events
    return [] if ev is None or ev.empty else ev.loc[ev["kind"] == "probe-error", "message"].tolist()


@pytest.mark.parametrize("program", sorted(CASES))
def test_wrapper_gets_donation_advice_in_its_own_terms(tmp_path, program):
    wrapper, jit_text, function, saving, edited, devices = CASES[program]
    script = tmp_path / program
    shutil.copy(PROGRAMS / program, script)
    plain, proc, run, att = _python_and_record(script, tmp_path, "run")
    assert (proc.returncode, proc.stdout) == (plain.returncode, plain.stdout) == (0, plain.stdout)
    assert "jaxmemprof" not in proc.stderr and _probe_errors(run) == []

    # What the memory is: the parameters and Adam's moments at the step's call, to the byte, each array
    # named by its path in the library's own terms.
    what = roles(attribute(run))
    owners = set(what.owners["owner"])
    assert OWNERS[program] <= owners, sorted(owners)
    by_role = what.by_role.groupby("role")["bytes"].sum()
    if program != "pmap_state.py":
        assert (by_role["parameters"], by_role["optimizer state"]) == ROLE_BYTES[program]
    else:  # a dict of state pmap carries (no library says what it is), at its first call: still whole on cpu:0
        assert by_role["other state"] == 2 * (256 * 512 + 512) * 4 and set(what.by_role["device"]) == {"cpu:0"}

    fns = run.jit.functions
    [row] = fns[fns["name"] == function].itertuples()
    jit_line = line_of(script, jit_text)
    assert (row.wrapper, row.jit_file, row.jit_line) == (wrapper, str(script), jit_line)
    assert row.file == str(script)  # the user's function, not the wrapper's

    [f] = [f for f in donation_findings(attribute(run)) if f.rule == "donate"]
    assert f.site == f"{program}:{jit_line}"
    assert f.fact("donated_bytes") == saving
    assert f"of {function} (defined at {program}:" in words(f).message
    if edited is None:
        assert words(f).fix == (f'filter_jit make_step with donate="all-except-first" and pass x, y as its first argument '
                         f"(one tuple) (at {program}:{jit_line}): the program still holds them after the call (so "
                         f"donating them could break a later use), and equinox donates every array argument but the "
                         f"first's")
        text = script.read_text()
        for old, new in EQUINOX_FIX:
            assert old in text
            text = text.replace(old, new)
    else:
        # Apply the advice as printed.
        assert f":  {edited}" in words(f).fix, words(f).fix
        lines = script.read_text().splitlines()
        lines[jit_line - 1] = edited
        text = "\n".join(lines) + "\n"
    # Run again: no advice, and XLA aliases exactly the bytes predicted (its figures are per device).
    fixed = write_script(tmp_path, "fixed_" + program, text)
    proc, after, att_after = _record(fixed, tmp_path, "fixed")
    assert proc.returncode == 0 and proc.stdout == plain.stdout
    assert [f for f in donation_findings(attribute(after)) if f.rule.startswith("donat")] == []
    memory = jit_memory(attribute(after))
    [alias] = memory.loc[memory["function"] == function, "alias_bytes"]
    assert alias * devices == saving
    assert _probe_errors(after) == []
    # What the finding says it saves is the fall of the true peak that the fixed program's run
    # measures (busiest device), within 1 %: XLA's compile of the fix as printed (equinox's: its
    # arguments reordered, under filter_jit's donate option) at the end of the run.
    summaries = [build_report(attribute(r)).headline for r in (run, after)]
    peak_before, peak_after = (m["true_peak_bytes"] for m in summaries)
    where = [(m.get("true_peak_where"), m.get("peak_bytes")) for m in summaries]  # said if it fails
    fall = peak_before - peak_after
    assert fall > 0 and f.fact("verified") and f.fact("true_peak_before_bytes") == peak_before, (f.facts, peak_before)
    assert abs(f.fact("saving_bytes_per_device") - fall) <= 0.01 * peak_before, (f.facts, peak_before,
                                                                                 peak_after, where)
    assert words(f).saves.endswith("(compiled)")
    if program == "equinox_optax.py":  # the compile was the fixed program's own: XLA's figures alike
        whatif = run.jit.whatif.iloc[0]
        compiles = after.jit.compiles
        [own] = compiles.loc[compiles["function_id"] == row_after(after, function),
                             ["alias_bytes", "temp_bytes"]].drop_duplicates().itertuples(index=False)
        assert (whatif["alias_bytes"], whatif["temp_bytes"]) == tuple(own)
        assert '"pass_first": ["x", "y"]' in whatif["change"]


TRANSFORMS = """
import copy, functools, inspect, pickle, weakref
import jax, jax.numpy as jnp
from jax import lax

def g(x, n):
    return x * n

f = jax.jit(g, static_argnums=1)
x = jnp.ones((4,))
print("eval_shape", jax.eval_shape(f, x, 2))
h = jax.jit(lambda x: jnp.sin(x) * 2)
print("grad", float(jax.grad(lambda x: h(x).sum())(x)[0]))
print("vmap", jax.vmap(h)(jnp.ones((3, 4))).shape)
print("scan", float(lax.scan(lambda c, _: (h(c), None), x, None, length=3)[0][0]))
print("jaxpr", str(jax.make_jaxpr(h)(x)).count("pjit"))
print("checkpoint", float(jax.checkpoint(lambda x: h(x).sum())(x)))
print("jit in jit", float(jax.jit(lambda x: h(x) + 1)(x)[0]))
print("eval_shape of h", jax.eval_shape(h, x))

class Holder:
    def __init__(self):
        self.f = h
print("deepcopy", type(copy.deepcopy(Holder()).f) is type(h), type(copy.copy(h)) is type(h),
      float(copy.deepcopy(Holder()).f(x)[0]))
try:
    pickle.dumps(h)
except Exception as e:
    print("pickle", type(e).__name__)
print("signature", inspect.signature(f), inspect.signature(h))
print("wraps", f.__name__, f.__qualname__, f.__module__, f.__wrapped__ is g)
print("Wrapped", isinstance(f, jax.stages.Wrapped), callable(f))
r = weakref.ref(f)
print("weakref", r() is f)
print("hash", hash(f) == hash(f), f == f)

class M:
    @functools.partial(jax.jit, static_argnums=0)
    def twice(self, x):
        return x * 2
print("method", float(M().twice(x)[0]), type(M().twice).__name__)
print("lower", type(f.lower(x, 3).compile().memory_analysis()).__name__)

key = jax.random.key(0)
split = jax.jit(lambda k: jax.random.split(k))
for i in range(4):
    key = split(key)[0]
print("keys", key.dtype)
maybe = jax.jit(lambda a, b: a if b is None else a + b)
for i in range(4):
    maybe(x, None)
donating = jax.jit(lambda a: a + 1, donate_argnums=0)
y = jnp.ones((8,))
z = donating(y)
try:
    donating(y)
except Exception as e:
    print("deleted", type(e).__name__)

# After all that, the probe still observes: state = step(state) gets advice.
step = jax.jit(lambda s: {"w": s["w"] * 0.5})  # LINE-STEP
state = {"w": jnp.ones((256, 64))}
for i in range(6):
    state = step(state)
print("done", float(state["w"][0, 0]))
"""


def test_jitted_functions_inside_transformations_behave_as_under_python(tmp_path):
    script = write_script(tmp_path, "transforms.py", TRANSFORMS)
    plain, proc, run, att = _python_and_record(script, tmp_path, "run")
    assert plain.returncode == 0, plain.stderr
    assert proc.returncode == 0
    assert proc.stdout == plain.stdout
    # JAX's own messages (XLA logs the deleted array), and nothing of ours.
    assert _unstamped(proc.stderr) == _unstamped(plain.stderr)
    assert _probe_errors(run) == []
    fns, counts = run.jit.functions, run.jit.counts
    h = fns.loc[fns["line"] == line_of(script, "h = jax.jit"), "function_id"].min()  # (then its copies)
    c = counts.set_index("function_id").loc[h]
    # grad, vmap, scan, make_jaxpr, checkpoint and jit-in-jit trace it: no device call.
    assert (c["calls"], c["traced"]) == (0, 6)
    [f] = [f for f in donation_findings(attribute(run)) if f.rule == "donate"]
    assert f.site == f"transforms.py:{line_of(script, 'LINE-STEP')}" and f.fact("donated_bytes") == 256 * 64 * 4


RECOMPILES = """
import jax, jax.numpy as jnp
import jaxmemprof

def scale(x, k):
    return x * k

def init(shapes):  # an optimizer-style init: one shape per parameter, once each
    params, opt = [], []
    for s in shapes:
        params.append(jnp.ones(s))  # SITE-INIT
        opt.append(jnp.zeros_like(params[-1]))
        jaxmemprof.snapshot("init")  # each new executable seen, as a slow init would be
    return opt

opt = init([(i + 1, 3) for i in range(8)])
static_scale = jax.jit(scale, static_argnums=1)
plain_scale = jax.jit(scale)
outs = []
for i in range(12):
    jaxmemprof.mark(f"step {i}")
    outs.append(plain_scale(jnp.ones((i + 1,)), 2.0))  # SITE-SHAPE
    outs.append(static_scale(jnp.ones((4,)), float(i)))  # SITE-STATIC
    outs.append(jax.jit(lambda x: x * i)(jnp.ones((4,))))  # SITE-LOOPJIT
    outs.append(plain_scale(jnp.ones((4,)), 3.0))  # SITE-SAME
    jaxmemprof.snapshot(f"step {i}")
"""


def test_recompiles_that_keep_coming_are_found_and_setup_compiles_are_not(tmp_path):
    script = write_script(tmp_path, "recompiles.py", RECOMPILES)
    run_cli("run", "-q", "--interval", "1000", "-o", tmp_path / "run", script, cwd=tmp_path, check=0)
    run = load_run(tmp_path / "run")
    found = [f for f in leak_findings(leaks(attribute(run)), recompiles(attribute(run)), rejits(attribute(run)))
             if f.rule == "recompile"]
    lines = {int(f.site.split(":")[1].split()[0]) for f in found}
    assert lines == {line_of(script, m) for m in ("SITE-SHAPE", "SITE-STATIC", "SITE-LOOPJIT")}
    rc = recompiles(attribute(run))
    init = rc[rc["line"] == line_of(script, "SITE-INIT")]
    # 8 executables at one line, one per shape, as many as the old rule (5 or more) called a recompilation.
    assert len(init) == 1 and init["max_count"].item() == 8 and not init["suspect"].item()
    assert init["new_after_setup"].item() == 0
    [loop] = [f for f in found if "jitted 12 times" in words(f).message]
    assert loop.site.startswith(f"recompiles.py:{line_of(script, 'SITE-LOOPJIT')}")
    assert "outside the loop" in words(loop).fix


def test_severity_in_proportion_to_the_peak():
    def f(saving, severity="medium", rule="donate"):
        return Finding(rule=rule, severity=severity, site="a.py:1", saving_bytes=saving)

    MiB, GiB = 1024**2, 1024**3
    got = in_proportion([f(396), f(2 * MiB, "high"), f(41 * MiB, "high"), f(None), f(10, rule="recompile")], 4 * GiB,
                       NOT_IN_PROPORTION)
    # Under 1 % of 4 GiB: info; 41 MiB is 1.0 %: kept; no saving: kept; a recompilation is about time.
    assert [x.severity for x in got] == ["info", "info", "high", "medium", "medium"]
    got = in_proportion([f(396), f(600 * 1024, "high")], 40 * MiB)  # a small run: 396 B is 0.001 %, 600 KiB 1.5 %
    assert [x.severity for x in got] == ["info", "high"]


ERRORS = """
import jax, jax.numpy as jnp

add = jax.jit(lambda x: x + jnp.ones(3))
try:
    add(jnp.ones(4))
except TypeError as e:
    raise RuntimeError("the step failed") from e
"""


def test_an_error_inside_a_jitted_function_reads_as_under_python(tmp_path):
    """The probe's frames between the script and the jitted function exist
    only under run: the traceback, and the one it was raised from, leave
    them out, as python would print them."""
    script = write_script(tmp_path, "errors.py", ERRORS)
    plain, proc = in_parallel(lambda: _python(script, tmp_path),
                              lambda: run_cli("run", "-q", "-o", tmp_path / "run", script, cwd=tmp_path))
    assert plain.returncode == proc.returncode == 1
    assert "The above exception was the direct cause" in plain.stderr
    assert _unstamped(proc.stderr) == _unstamped(plain.stderr)


ADVICE_CASES = """
import jax, jax.numpy as jnp


def make():
    return jnp.ones((64, 64)) * 0.01


@jax.jit
def step(w, x):  # LINE-STEP: w = step(w, x), the old w dropped at once
    return w - 0.1 * x.mean()


@jax.jit
def norm(w):  # called on the new w, which the next step still needs
    return w / jnp.linalg.norm(w)


@jax.jit
def kept(w):  # LINE-KEPT: the caller keeps the old value (old = w) and uses it after
    return w * 0.5


@jax.jit
def same_statement(w):  # its input is used later in the same statement
    return w + 1.0


@jax.jit
def twice(a, b):  # the same array passed twice
    return a + 1.0, b + 1.0


@jax.jit
def inner(w):  # LINE-INNER: through a helper that returns its result
    return w * 0.9


def helper(w):
    return inner(w)


@jax.jit
def first_kept(w):  # LINE-FIRST: the value set up before the loop stays named
    return w * 0.99


x = jnp.ones((8,))
w, k, s, h, f = make(), make(), make(), make(), make()
a = make()
f0 = f
for i in range(6):
    w = step(w, x)
    n = norm(w)
    old = k
    k = kept(k)
    drift = float((k - old).sum())
    s, total = same_statement(s), float(s.sum())
    a, b = twice(a, a)
    h = helper(h)
    f = first_kept(f)
print(round(float(n.sum()), 4), round(drift, 4), round(total, 2), round(float(h.sum()), 4), float(f0.sum()))
"""


def test_donation_is_advised_only_where_nothing_uses_the_input_again(tmp_path):
    """Each function of the script at its known line: advice where the call
    replaces the caller's value and nothing runs before the old one is
    dropped, none where the program uses it again, and a caveat where only
    the first call's value stays named."""
    script = write_script(tmp_path, "advice.py", ADVICE_CASES)
    plain, proc, run, att = _python_and_record(script, tmp_path, "run")
    assert proc.returncode == plain.returncode == 0 and proc.stdout == plain.stdout
    found = {f.site: f for f in donation_findings(attribute(run)) if f.rule == "donate"}
    at = {name: f"advice.py:{line_of(script, marker) - 1}" for name, marker in
          (("step", "LINE-STEP"), ("inner", "LINE-INNER"), ("first_kept", "LINE-FIRST"))}
    assert set(found) == set(at.values())  # not norm, kept, same_statement or twice
    assert "stayed referenced" not in words(found[at["step"]]).fix
    assert "the first call's w stayed referenced" in words(found[at["first_kept"]]).fix
    assert found[at["first_kept"]].fact("first_kept") == ["w"] and found[at["step"]].fact("first_kept") == []


SCRIPT_VIEWS = """
import traceback
import jax, jax.numpy as jnp


def inner(x):
    return jnp.sin(x) * 2


def outer(x):
    return jax.jit(inner)(x) + 1.0


print(jax.make_jaxpr(outer)(1.0).pretty_print(source_info=True))
try:
    jax.jit(lambda x: x)("a string")
except TypeError:
    traceback.print_exc()
try:
    jax.jit(lambda x: x, donate_argnames="y")
except ValueError:
    traceback.print_exc()


@jax.pmap
def bad(x):
    return x @ jnp.ones((5, 5))


try:
    bad(jnp.ones((1, 3)))
except TypeError as e:
    print("pmap error:", str(e)[:40])
"""


def test_what_the_script_sees_of_its_jitted_functions_is_as_under_python(tmp_path):
    """Source lines in jaxprs, tracebacks the script prints itself, and the
    program's own errors in a pmap'd function (no probe error for them)."""
    script = write_script(tmp_path, "views.py", SCRIPT_VIEWS)
    plain, proc, run, _ = _python_and_record(script, tmp_path, "run")
    assert "views.py" in plain.stdout and "jaxmemprof" not in proc.stdout + proc.stderr
    assert proc.stdout == plain.stdout
    assert re.sub(r"0x[0-9a-f]+", "0x", _unstamped(proc.stderr)) == re.sub(r"0x[0-9a-f]+", "0x",
                                                                          _unstamped(plain.stderr))
    assert _probe_errors(run) == []


COPIED = """
import copy, dataclasses
import jax, jax.numpy as jnp


@dataclasses.dataclass
class Trainer:
    step_fn: object


def sgd(w, x):
    return w - 0.1 * x * w


base = Trainer(jax.jit(sgd))  # LINE-JIT
trainer = copy.deepcopy(base)  # one trainer per experiment, from a template
w, x = jnp.ones((256, 256)), jnp.ones((256, 256))
for i in range(6):
    w = trainer.step_fn(w, x)
print(float(w[0, 0]))
"""


def test_a_copied_jitted_function_is_observed_too(tmp_path):
    """copy.deepcopy of a jitted function makes a jitted function of its own
    (JAX cannot lower it: no memory analysis), whose calls are observed."""
    script = write_script(tmp_path, "copied.py", COPIED)
    plain, proc, run, att = _python_and_record(script, tmp_path, "run")
    assert proc.stdout == plain.stdout and _probe_errors(run) == []
    [f] = [f for f in donation_findings(attribute(run)) if f.rule == "donate"]
    assert f.site == f"copied.py:{line_of(script, 'LINE-JIT')}" and f.fact("donated_bytes") == 256 * 256 * 4
