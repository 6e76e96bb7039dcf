"""run --plan: the step compiled at other batch sizes at the end of the run
(XLA's figures from the arguments' shapes, nothing allocated), the largest
batch that fits a device, and what each fix buys there.

The figures are held to their source: the same programs run at the batches
the plan names, recorded by jaxmemprof without --plan, and their call peaks
read as the report reads them (XLA's memory_analysis() of the program's own
compile). The bundled MLP (sample_runs/train_mlp.py, jax.jit) and the flax
nnx program (sample_runs/libraries/nnx_optimizer.py, flax.nnx.jit), each
recorded once with --plan (module-scoped), both at batch 32.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import pandas as pd
import pytest

from conftest import REPO, cli_batch, cpu_env, run_cli, write_script

from jaxmemprof.analysis.advice.donation import jit_memory
from jaxmemprof.analysis.rules.donation import donation_findings
from jaxmemprof.analysis.advice.plan import (Curve, build_plan, fits_at_all, fits_by_default,
                                             largest_fitting_peak)
from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.analysis.options import Options
from jaxmemprof.capture.jit.plan import search
from jaxmemprof.store.reader import load_run
from jaxmemprof.units import parse_size

MLP = REPO / "sample_runs" / "train_mlp.py"
NNX = REPO / "sample_runs" / "libraries" / "nnx_optimizer.py"
NNX_BATCH = "x, y = jnp.ones((32, 256)), jnp.zeros((32,), jnp.int32)"  # the program's batch (it has no option)
SEARCHED = "128MiB"  # the MLP's plan searches for this device (its largest batch: about a thousand)
NNX_SCALES = "0.5,4"


def _record(argv, out) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "jaxmemprof", "run", "-o", str(out), *map(str, argv)],
                            env=cpu_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait(proc: subprocess.Popen) -> tuple[str, str]:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out}\n{err}"
    return out, err


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """The MLP (searching the largest batch for a 128 MiB device) and the
    nnx program, recorded with --plan at the same time."""
    d = tmp_path_factory.mktemp("plan")
    mlp = _record(["--plan-device-memory", SEARCHED, MLP, "--batch", 32, "--steps", 3], d / "mlp")
    nnx = _record(["--plan-scales", NNX_SCALES, NNX, "--steps", 3], d / "nnx")
    _, mlp_err = _wait(mlp)
    _, nnx_err = _wait(nnx)
    return d, mlp_err, nnx_err


def _plan_rows(run) -> pd.DataFrame:
    plan = build_plan(attribute(run, Options()))
    assert plan is not None
    return plan.points


@pytest.fixture(scope="module")
def actual(planned):
    """The same two programs run at every batch the plans compiled (and the
    MLP with --donate at its recorded batch), in one process recorded by
    jaxmemprof without --plan: each run of a program jits its step anew
    (one step each: XLA's figures come from the compile)."""
    d, _, _ = planned
    mlp_batches = sorted(set(_plan_rows(load_run(d / "mlp"))["batch"]))
    nnx_batches = sorted(set(_plan_rows(load_run(d / "nnx"))["batch"]))
    code = textwrap.dedent(f"""
        import runpy, sys
        for b in {mlp_batches!r}:
            sys.argv = [{str(MLP)!r}, "--batch", str(b), "--steps", "1"]
            runpy.run_path({str(MLP)!r}, run_name="__main__")
        sys.argv = [{str(MLP)!r}, "--batch", "32", "--steps", "1", "--donate"]
        runpy.run_path({str(MLP)!r}, run_name="__main__")
        source = open({str(NNX)!r}).read()
        assert source.count({NNX_BATCH!r}) == 1
        for b in {nnx_batches!r}:
            sys.argv = [{str(NNX)!r}, "--steps", "1"]
            program = source.replace({NNX_BATCH!r}, f"x, y = jnp.ones(({{b}}, 256)), jnp.zeros(({{b}},), jnp.int32)")
            exec(compile(program, {str(NNX)!r}, "exec"), {{"__name__": "__main__"}})
    """)
    # XLA's figures are the program's own compiles: the donation's verifying compiles and the holder
    # search at the end, which nothing here reads, are skipped
    run_cli("run", "-q", "--verify-seconds", "0", "--no-holders", "-o", d / "actual", "-c", code, cwd=d, check=0)
    return load_run(d / "actual")


def _call_peaks(run) -> dict:
    """(program, batch, donated) -> XLA's call peak of the step, as the
    report reads it (jit.csv's call_peak_bytes), for the run's jitted steps."""
    jm = jit_memory(attribute(run, Options())).set_index("function_id")
    functions = run.jit.functions.set_index("function_id")
    compiles = run.jit.compiles
    out = {}
    for fid, sig in zip(compiles["function_id"], compiles["signature"]):
        fn = functions.loc[fid]
        if fn["name"] != "train_step" or fid not in jm.index:
            continue
        mlp = re.search(r"float32\[(\d+),512\], float32\[\d+,10\]$", sig)  # x, y: the signature's end
        nnx = re.search(r"float32\[(\d+),256\], int32\[\d+\]$", sig)
        program, batch = ("mlp", int(mlp.group(1))) if mlp else ("nnx", int(nnx.group(1)))
        out[(program, batch, json.loads(fn["donate_argnums"]) != [])] = int(jm.loc[fid, "call_peak_bytes"])
    return out


# -- the plan against the programs run at its batches ----------------------------------------------


def test_the_plan_holds_the_step_at_each_batch_within_two_percent(planned, actual):
    d, _, _ = planned
    peaks = _call_peaks(actual)
    compared = []
    for program in ("mlp", "nnx"):
        points = _plan_rows(load_run(d / program))
        rec = points[(points["variant"] == "recorded") & points["call_peak_bytes"].notna()]
        assert rec["error"].isna().all(), rec["error"].tolist()
        for batch, plan_peak in zip(rec["batch"], rec["call_peak_bytes"]):
            real = peaks[(program, int(batch), False)]
            compared.append((program, int(batch), int(plan_peak), real))
            assert abs(int(plan_peak) - real) <= 0.02 * real, (program, batch, plan_peak, real)
    assert {p for p, *_ in compared} == {"mlp", "nnx"}
    assert len([c for c in compared if c[0] == "mlp"]) >= 8  # 16..256, the recorded 32, and the search's
    assert sorted(b for p, b, *_ in compared if p == "nnx") == [16, 32, 128]


def test_the_donated_plan_needs_less_by_what_xla_aliases(planned, actual):
    """The donated variant donates what the report advises; XLA aliases
    exactly those bytes; its peak is the program's own with the fix applied
    (--donate), and the saving is the aliased bytes less the temporaries XLA
    CPU adds when it writes in place (measured, not assumed)."""
    d, _, _ = planned
    run = load_run(d / "mlp")
    ar = attribute(run, Options())
    points = build_plan(ar).points
    at32 = points[points["batch"] == 32].set_index("variant")
    advice = [f for f in donation_findings(ar) if f.rule == "donate"]
    assert len(advice) == 1 and advice[0].fact("arguments") == ["params", "momentum"]
    donated_bytes = advice[0].fact("donated_bytes")
    inputs = json.loads(run.jit.calls["inputs"].iloc[-1])
    assert donated_bytes == sum(leaf["bytes"] for leaf in inputs if leaf["name"] in ("params", "momentum"))
    assert int(at32.loc["donated", "alias_bytes"]) == donated_bytes
    assert int(at32.loc["recorded", "alias_bytes"]) == 0
    saving = int(at32.loc["recorded", "peak_bytes"]) - int(at32.loc["donated", "peak_bytes"])
    extra_temps = int(at32.loc["donated", "temp_bytes"]) - int(at32.loc["recorded", "temp_bytes"])
    assert saving == donated_bytes - extra_temps and 0 < saving <= donated_bytes
    peaks = _call_peaks(actual)
    real_saving = peaks[("mlp", 32, False)] - peaks[("mlp", 32, True)]
    assert abs(int(at32.loc["donated", "call_peak_bytes"]) - peaks[("mlp", 32, True)]) <= 0.02 * peaks[("mlp", 32, True)]
    assert saving == real_saving
    plan = build_plan(ar, donation_findings(ar))
    assert plan.functions[0].donated == plan.functions[0].advised == ["params", "momentum"]


def test_the_search_names_the_largest_batch_and_the_program_there_fits(planned, actual):
    d, mlp_err, _ = planned
    run = load_run(d / "mlp")
    device = parse_size(SEARCHED)
    plan = build_plan(attribute(run, Options()))  # the device the run searched for
    assert plan.device_bytes == plan.searched_bytes == device
    model = plan.models[(plan.models["variant"] == "recorded") & (plan.models["device"] == "cpu:0")].iloc[0]
    best = int(model["largest_batch"])
    rec = plan.points[plan.points["variant"] == "recorded"]
    over = rec.loc[rec["peak_bytes"] > largest_fitting_peak(device), "batch"]
    assert best > 256 and over.min() > best  # the bracket the search left: within 1 %, or its compiles spent
    assert over.min() - best <= max(1, best // 100) or (rec["source"] == "search").sum() == 8
    # Run at that batch, the program's own call holds what the plan says, and fits; the next
    # compiled batch does not.
    live = int(rec.loc[rec["batch"] == best, "live_outside_bytes"].iloc[0])
    real = _call_peaks(actual)[("mlp", best, False)]
    assert fits_by_default(live + real, device)
    assert not fits_by_default(live + _call_peaks(actual)[("mlp", int(over.min()), False)], device)
    # The fixes were compiled at that batch.
    at = plan.points[plan.points["batch"] == best]
    assert set(at["variant"]) == {"recorded", "donated", "bfloat16"} and at["error"].isna().all()
    assert f"plan: train_step compiled for batches 16-{rec['batch'].max():,}" in mlp_err
    assert f"({plan.compiles} compiles, " in mlp_err


# -- the report, export, JSON and the page -----------------------------------------------------------


@pytest.fixture(scope="module")
def outputs(planned, actual):
    """report (text, at 1 GiB, and as the run searched), report --json,
    export --csv and report --html of the MLP's plan, and report --json and
    export --csv of the run without --plan (``actual``), through one process."""
    d, _, _ = planned
    jobs = [["report", d / "mlp", "--device-memory", "1GiB"], ["report", d / "mlp"],
            ["report", d / "mlp", "--json", "--device-memory", "1GiB"], ["export", d / "mlp", "--csv", d / "csv"],
            ["report", d / "mlp", "--html", d / "page.html"], ["report", d / "nnx", "--device-memory", "64MiB"],
            ["report", d / "actual", "--json"], ["export", d / "actual", "--csv", d / "csv-actual"]]
    done = cli_batch(jobs, d, workers=1)
    for r in done:
        assert r.returncode == 0, (r.args, r.stderr)
    return d, done


def test_report_names_the_largest_batch_and_the_backend(outputs):
    d, done = outputs
    text_1g, text_searched, nnx_text = done[0].stdout, done[1].stdout, done[5].stdout
    assert "Plan by batch (run --plan: train_step compiled by XLA on cpu" in text_1g
    m = re.search(r"for a 1\.00 GiB device \(cpu:0\): largest batch (at least )?([\d,]+)", text_1g)
    assert m, text_1g
    doc = json.loads(done[2].stdout)
    model = next(r for r in doc["plan"]["models"] if r["variant"] == "recorded")
    assert int(m.group(2).replace(",", "")) == model["largest_batch"] > 0
    assert doc["plan"]["backends"] == ["cpu"] and doc["plan"]["device_bytes"] == 1 << 30
    assert doc["plan"]["compile_s"] > 0 and doc["plan"]["compiles"] == doc["plan"]["functions"][0]["compiles"]
    assert re.search(r"largest batch [\d,]+ \(compiled, and fits; [\d,]+, the next compiled, does not; found by "
                     r"compiles for this device\)", text_searched), text_searched
    assert "donated params, momentum (as the report advises)" in text_searched
    # 64 MiB: less than the fit rule's headroom, at the smallest batch compiled
    assert re.search(r"largest batch none \(\d+, the smallest compiled, does not fit\)", nnx_text), nnx_text
    assert "extrapolated" not in text_1g + text_searched + nnx_text


def test_plan_csv_and_json_carry_the_same_rows(outputs):
    d, done = outputs
    csv_rows = pd.read_csv(d / "csv" / "plan.csv")
    assert {"function", "batch", "peak_bytes", "variant"} <= set(csv_rows.columns)
    doc = json.loads(done[2].stdout)
    assert len(csv_rows) == len(doc["plan"]["points"])
    for row, point in zip(csv_rows.to_dict(orient="records"), doc["plan"]["points"]):
        assert (row["function"], row["variant"], row["batch"], row["peak_bytes"]) == (
            point["function"], point["variant"], point["batch"], point["peak_bytes"])
    plan = build_plan(attribute(load_run(d / "mlp"), Options()))
    assert csv_rows["peak_bytes"].tolist() == plan.points["peak_bytes"].astype(int).tolist()
    assert (pd.read_csv(d / "csv" / "plan_models.csv")["function"] == "train_step").all()


def test_the_page_plots_every_compile_and_the_device_line(outputs):
    d, _ = outputs
    html = (d / "page.html").read_text()
    data = json.loads(re.search(r'<script type="application/json" id="jmp-data">(.*?)</script>', html, re.S).group(1))
    plan = data["plan"]
    assert plan["device_bytes"] == parse_size(SEARCHED)
    assert plan["fit_peak_bytes"] == largest_fitting_peak(parse_size(SEARCHED))
    points = build_plan(attribute(load_run(d / "mlp"), Options())).points
    drawn = {(v["variant"], b): p for v in plan["functions"][0]["variants"] for b, p in v["points"]}
    assert drawn == {(v, int(b)): int(p) for v, b, p in zip(points["variant"], points["batch"], points["peak_bytes"])}


# -- without --plan -------------------------------------------------------------------------------------


def test_a_run_without_plan_writes_no_plan(outputs, actual):
    d, done = outputs
    assert actual.jit.plans.empty
    assert actual.manifest["settings"]["plan"] is None
    assert json.loads(done[6].stdout)["plan"] is None
    assert pd.read_csv(d / "csv-actual" / "plan.csv").empty
    bundled = load_run(REPO / "sample_runs" / "schema-1" / "mlp-leak")  # recorded before the table existed
    assert bundled.jit.plans.empty and not any("jit_plans" in w for w in bundled.warnings)


NUMPY_FED = """
import sys
import numpy as np
import jax
import jax.numpy as jnp

batch = int(sys.argv[1])


def loss(w, x, y):
    return jnp.mean((jnp.tanh(x @ w) - y) ** 2)


@jax.jit
def step(w, x, y):
    return w - 0.1 * jax.grad(loss)(w, x, y)


w = jnp.ones((256, 128)) * 0.01
rng = np.random.default_rng(0)
for i in range(6):  # a numpy loader: new host arrays at every step
    x = rng.standard_normal((batch, 256), dtype=np.float32)
    y = rng.standard_normal((batch, 128), dtype=np.float32)
    w = step(w, x, y)
print(float(w[0, 0]))
"""


NUMPY_DEVICE = "96MiB"  # by the fit rule about 7.6 MiB for the step: a few thousand examples


@pytest.fixture(scope="module")
def numpy_fed(tmp_path_factory):
    """The numpy-fed step planned at batch 32 (the default scales, 16 to 256,
    and the search for a 96 MiB device), and run at batch 64, at once."""
    d = tmp_path_factory.mktemp("numpy_fed")
    script = write_script(d, "numpy_fed.py", NUMPY_FED)
    planned, at64 = cli_batch([["run", "-q", "--plan", "--plan-device-memory", NUMPY_DEVICE, "-o", d / "plan",
                                script, "32"], ["run", "-q", "-o", d / "at64", script, "64"]], d)
    assert planned.returncode == at64.returncode == 0, planned.stderr + at64.stderr
    return d, script


def test_a_numpy_fed_step_is_planned_by_its_host_arrays(numpy_fed):
    """The batch of a step fed numpy arrays (most input pipelines) is its
    host arrays; compiled at twice the batch, XLA's call peak is the one a
    run at that batch compiles."""
    tmp_path, _ = numpy_fed
    plan = build_plan(attribute(load_run(tmp_path / "plan"), Options()))
    (f,) = plan.functions
    assert (f.function, f.batch_inputs, f.batch_flow, f.recorded_batch) == ("step", ["x", "y"], "per-step", 32)
    points = plan.points[plan.points["variant"] == "recorded"].set_index("batch")
    assert points["error"].isna().all(), points["error"].tolist()
    real = jit_memory(attribute(load_run(tmp_path / "at64"))).set_index("function").loc["step"]
    assert int(points.loc[64, "call_peak_bytes"]) == int(real["call_peak_bytes"])


def _searched(plan) -> tuple[int, int, int]:
    """(the largest batch the plan says fits, the next batch it compiled, the live bytes outside the call there)."""
    model = plan.models[plan.models["variant"] == "recorded"].iloc[0]
    best = int(model["largest_batch"])
    rec = plan.points[plan.points["variant"] == "recorded"]
    over = rec.loc[(rec["batch"] > best) & rec["peak_bytes"].notna(), "batch"].min()
    live = int(rec.loc[rec["batch"] == best, "live_outside_bytes"].iloc[0])
    return best, int(over), live


def test_a_numpy_fed_steps_largest_batch_fits_when_run_and_the_next_does_not(numpy_fed, tmp_path):
    """The plan's answer for a numpy-fed step is a batch it compiled: a run of
    the program at that batch fits the device (XLA's call peak of the
    program's own compile there, and the live bytes beside it), a run at the
    next batch the search compiled does not. No figure is read off a line."""
    d, script = numpy_fed
    plan = build_plan(attribute(load_run(d / "plan"), Options()))
    best, over, live = _searched(plan)
    assert 1000 < best < over <= best + max(1, best // 100) + 1
    runs = cli_batch([["run", "-q", "-o", tmp_path / "at-best", script, str(best)],
                      ["run", "-q", "-o", tmp_path / "at-over", script, str(over)]], tmp_path)
    assert all(r.returncode == 0 for r in runs), [r.stderr for r in runs]
    device = parse_size(NUMPY_DEVICE)
    peak = {b: int(jit_memory(attribute(load_run(tmp_path / name))).set_index("function").loc["step",
                                                                                              "call_peak_bytes"])
            for b, name in ((best, "at-best"), (over, "at-over"))}
    assert fits_by_default(live + peak[best], device) and not fits_by_default(live + peak[over], device)
    assert "extrapolated" not in run_cli("report", d / "plan", cwd=tmp_path).stdout


STATIC_BATCH = """
import functools
import jax, jax.numpy as jnp

@functools.partial(jax.jit, static_argnums=(2,))
def step(w, key, batch_size):
    x = jax.random.normal(key, (batch_size, 1024))  # the batch is made inside: only its size is passed
    return w - 0.1 * jax.grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w)

w = jnp.ones((1024, 1024)) * 0.01
key = jax.random.PRNGKey(0)
for i in range(4):
    key, sub = jax.random.split(key)
    w = step(w, sub, 32)
print(float(w[0, 0]))
"""


def test_a_batch_set_by_a_static_argument_is_planned_through_it(tmp_path):
    """A step whose batch is a static Python int (the PRNG key, new at every
    call, is no batch): planned by compiling the function with that argument
    changed; the answer checked against XLA's own compile at that batch and
    the next."""
    import jax

    script = write_script(tmp_path, "static.py", STATIC_BATCH)
    # one scale (twice the batch: the static argument doubled) before the search; the others added nothing here
    planned = run_cli("run", "-q", "--plan-scales", "2", "--plan-device-memory", "128MiB", "-o", tmp_path / "plan",
                      script, cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    plan = build_plan(attribute(load_run(tmp_path / "plan"), Options()))
    (f,) = plan.functions
    assert (f.batch_inputs, f.recorded_batch) == (["batch_size (static)"], 32)
    best, over, live = _searched(plan)
    namespace: dict = {}
    exec(STATIC_BATCH.split("w = jnp.ones")[0], namespace)
    w = jax.numpy.ones((1024, 1024))

    def peak(b):
        ma = namespace["step"].lower(w, jax.random.PRNGKey(0), b).compile().memory_analysis()
        return ma.argument_size_in_bytes + ma.output_size_in_bytes - ma.alias_size_in_bytes + ma.temp_size_in_bytes

    device = parse_size("128MiB")
    assert fits_by_default(live + peak(best), device) and not fits_by_default(live + peak(over), device)


def test_without_plan_the_probe_plans_nothing_and_keeps_nothing_after_the_run():
    """Without --plan the planner keeps the sampled calls' shapes for the
    donation advice's compiles only; at the end it plans nothing and lets
    go of what it kept."""
    from jaxmemprof.capture.jit import JitProbe
    from jaxmemprof.capture.jit.plan import PlanOptions, Slot
    from jaxmemprof.capture.jit.state import FunctionState

    probe = JitProbe(writer=None, verify_s=0.0)
    assert probe.planner.options is None and JitProbe(writer=None, plan=PlanOptions()).planner.options is not None
    assert FunctionState(1, [], [], [], None, False).plan is None  # a library's function: nothing kept
    state = FunctionState(1, [], [], [], None, False)
    state.plan = Slot("jit", {})
    state.plan.abstract["sig"], state.plan.real = object(), object()
    probe._states.append(state)
    probe.planner.run()  # verify_s 0: no compile; no options: no plan
    assert state.plan.abstract == {} and state.plan.real is None


# -- the nnx program ----------------------------------------------------------------------------------


def test_the_nnx_plan_lowers_inside_nnx_and_donates_its_state(planned):
    d, _, nnx_err = planned
    plan = build_plan(attribute(load_run(d / "nnx"), Options()))
    (f,) = plan.functions
    assert (f.function, f.batch_inputs, f.batch_flow, f.recorded_batch) == ("train_step", ["x", "y"], "held", 32)
    assert plan.points["error"].isna().all(), plan.points["error"].tolist()
    ar = attribute(load_run(d / "nnx"), Options())
    (advice,) = [x for x in donation_findings(ar) if x.rule == "donate"]
    assert f.donated == advice.fact("arguments") == ["model", "optimizer"]
    at32 = plan.points[plan.points["batch"] == 32].set_index("variant")
    # XLA aliases what the advice donates, and the plan's donated compile is the advice's own
    assert int(at32.loc["donated", "alias_bytes"]) == advice.fact("donated_bytes") == advice.fact("aliased_bytes")
    assert int(at32.loc["donated", "temp_bytes"]) == advice.fact("temp_after_bytes")
    assert int(at32.loc["donated", "peak_bytes"]) < int(at32.loc["recorded", "peak_bytes"])
    assert "plan: train_step compiled for batches 16-128" in nnx_err


# -- bad input ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, says", [
    (["--plan-scales", "2,x"], "'x' is not a number"),
    (["--plan-scales", "0"], "a scale is a number above 0"),
    (["--plan-scales", "nan"], "a scale is a number above 0"),
    (["--plan-scales", "1,inf"], "a scale is a number above 0"),
    (["--plan-axis", "-1"], "--plan-axis"),
    (["--plan", "--no-jit-probe"], "drop --no-jit-probe"),
    (["--plan-device-memory", "lots"], "--plan-device-memory"),
])
def test_bad_plan_options_are_usage_errors(tmp_path, argv, says):
    proc = run_cli("run", *argv, "-o", tmp_path / "r", "-c", "pass", cwd=tmp_path)
    assert proc.returncode == 2 and says in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "r").exists()


# -- the model and the search, on known curves ----------------------------------------------------


def test_the_line_and_the_fit_rule():
    line = Curve([16, 32, 64, 256], [1000 + 10 * b for b in (16, 32, 64, 256)])
    assert line.affine and line.slope == pytest.approx(10) and line.intercept == pytest.approx(1000)
    # An answer is a compiled batch, never one read off the line (which says 400 fits 5000).
    assert line.largest(lambda p: p <= 5000) == 256 and line.above(256, lambda p: p <= 5000) is None
    assert line.largest(lambda p: p <= 2000) == 64 and line.above(64, lambda p: p <= 2000) == 256
    assert line.largest(lambda p: p <= 500) == 0 and line.above(0, lambda p: p <= 500) == 16
    assert line.at(64) == 1640 and line.at(100) is None
    bent = Curve([16, 32, 64, 256], [1000, 1100, 1300, 9000])
    assert not bent.affine and bent.largest(lambda p: p <= 5000) == 64
    # A compiled batch past one that does not fit is not an answer (the bracket is the first failure).
    dip = Curve([16, 32, 64], [1000, 6000, 1000])
    assert dip.largest(lambda p: p <= 5000) == 16 and dip.above(16, lambda p: p <= 5000) == 32
    device = parse_size("16GiB")
    top = largest_fitting_peak(device)
    assert fits_by_default(top, device) and not fits_by_default(top + 1, device)
    assert fits_at_all(top + 1, device)


@pytest.mark.parametrize("name, peak, target, truth", [
    ("line", lambda b: 1000 + 10 * b, 5000, 400),
    ("jump", lambda b: 1000 + 10 * b + (20000 if b > 300 else 0), 5000, 300),
    ("quadratic", lambda b: 1000 + 10 * b + b * b // 100, 5000, 306),
    ("none fits", lambda b: 4000 + 100 * b, 900, 0),
])
def test_the_search_finds_the_largest_batch_to_within_one_percent(name, peak, target, truth):
    compiled = []

    def at(b):
        compiled.append(b)
        return peak(b)

    known = {b: peak(b) for b in (16, 32, 256)}
    found = search(known, target, at)
    assert peak(found) <= target if found else truth == 0
    assert truth - max(1, truth // 100) <= found <= truth and len(compiled) <= 8, (found, compiled)


# -- a batch sharded over two devices ----------------------------------------------------------------

SHARDED = """
import jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
mesh = Mesh(jax.devices()[:2], ("data",))
w = jax.device_put(jnp.ones((256, 512)), NamedSharding(mesh, P()))

@jax.jit
def step(w, x):
    g = jax.grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w)
    return w - 0.1 * g

for i in range(3):
    x = jax.device_put(jnp.ones((60, 256)) * i, NamedSharding(mesh, P("data")))
    w = step(w, x)
print(float(w.sum()))
"""


def test_a_sharded_batch_is_planned_per_device_at_multiples_of_its_shards(tmp_path):
    from conftest import write_script

    script = write_script(tmp_path, "sharded.py", SHARDED)
    env = cpu_env(XLA_FLAGS="--xla_force_host_platform_device_count=2")
    proc = subprocess.run([sys.executable, "-m", "jaxmemprof", "run", "-q", "--plan-scales", "0.55,2", "-o",
                           tmp_path / "r", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    plan = build_plan(attribute(load_run(tmp_path / "r"), Options()), device_bytes=parse_size("1GiB"))
    (f,) = plan.functions
    assert (f.function, f.batch_inputs, f.batch_flow, f.recorded_batch) == ("step", ["x"], "per-step", 60)
    points = plan.points
    assert points["error"].isna().all(), points["error"].tolist()
    assert sorted(set(points["batch"])) == [32, 60, 120]  # 0.55 x 60 = 33, to a multiple of the 2 shards
    assert set(points["device"]) == {"cpu:0", "cpu:1"} and len(points) == 2 * len(points.drop_duplicates(
        ["variant", "batch"]))
    # XLA's figures are per device: the sharded batch's argument bytes are half of it on each.
    rec = points[(points["variant"] == "recorded") & (points["device"] == "cpu:0")].set_index("batch")
    assert int(rec.loc[120, "argument_bytes"]) - int(rec.loc[60, "argument_bytes"]) == 60 * 256 * 4 // 2
    job = plan.models[plan.models["device"] == "job"]
    assert set(job["variant"]) == {"recorded", "donated", "bfloat16"}


ONLY_32 = """
import jax, jax.numpy as jnp
import numpy as np

@jax.jit
def step(w, x):
    assert x.shape[0] == 32, "this step takes batch 32 only"  # traced: other batches fail to compile
    return w - 1e-3 * (x.T @ (x @ w))

w = jnp.ones((64, 64))
for i in range(3):
    w = step(w, jnp.asarray(np.full((32, 64), i, np.float32)))
print(float(w.sum()))
"""


def test_a_step_of_one_batch_and_a_step_called_once_are_said_plainly(tmp_path):
    """A step that compiles at batch 32 only: 'compiled for batch 32 only',
    the failures counted as such (was: 'batches 16-256 (...; 6 failed)'),
    no line through one point (was: 'the 1 points do not lie on one line');
    a step called once is not planned for that reason (was: 'no input with a
    dimension 0 that is new at every call')."""
    from conftest import write_script

    script = write_script(tmp_path, "only32.py", ONLY_32)
    proc = run_cli("run", "--plan", "-o", tmp_path / "r", script, cwd=tmp_path, check=0)
    text = run_cli("report", tmp_path / "r", "--device-memory", "1GiB", cwd=tmp_path, check=0).stdout
    plan = build_plan(attribute(load_run(tmp_path / "r"), Options()))
    (f,) = [f for f in plan.functions if f.function == "step"]
    compiled = plan.points[(plan.points["function_id"] == f.function_id) & plan.points["peak_bytes"].notna()]
    assert set(compiled["batch"]) == {32} and f.failed >= 4, (f, plan.points)
    said = f"plan: step compiled for batch 32 only ({f.compiles} compiles, "
    assert said in proc.stderr and f"; {f.failed} at other batches failed: plan.csv's error column says why)" \
        in proc.stderr, proc.stderr
    assert "recorded: one batch compiled (32): no line through one point" in text, text
    assert "1 points" not in text + proc.stderr
    once = write_script(tmp_path, "once.py", "import jax, jax.numpy as jnp\n"
                                             "w = jax.jit(lambda w, x: (x @ w).sum() * w)(jnp.ones((64, 64)), "
                                             "jnp.ones((32, 64)))\n")
    proc = run_cli("run", "--plan", "-o", tmp_path / "once", once, cwd=tmp_path, check=0)
    assert "plan: <lambda>: not planned: called once (or no two calls in a row were sampled)" in proc.stderr, \
        proc.stderr
