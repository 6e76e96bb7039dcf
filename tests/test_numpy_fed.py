"""Programs fed numpy (issue 52): a step whose batch is a fresh numpy array at
every call, and a classifier whose first parameters are numpy float64 arrays
(as jax's examples make them with numpy.random). Each program prints its own
oracle: the bytes of its device arrays live before each call
(jax.live_arrays()) and XLA's memory_analysis() of the signature each call
runs; never a figure copied from jaxmemprof's output.

- A numpy argument is on no device before the call: the true peak does not
  take it off the bytes live then (it did, as if it had been there), so the
  true peak is what the roles add up to, and ``check --max-true-peak`` and
  the plan read that figure.
- Numpy-made first parameters do not hide the donation the later calls
  allow, and its saving is the fall of the donated program's true peak.
- The donated program gets no advice to stop donating: JAX casts the
  float64 parameters to float32 before the call, and XLA aliases them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import cli_batch, in_parallel, run_cli, run_script

from jaxmemprof.analysis.advice.plan import build_plan
from jaxmemprof.analysis.rules.base import fmt
from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.store.reader import load_run

SCRIPTS = Path(__file__).resolve().parent / "scripts"
MiB = 2**20


def _record(directory: Path, script: str, *args: str, options=()) -> tuple[Path, dict]:
    run = directory / (Path(script).stem + "".join(a.strip("-") for a in args))
    proc = run_cli("run", "-q", *options, "-o", run, SCRIPTS / script, *args, cwd=directory, check=0)
    return run, json.loads(proc.stdout.strip().splitlines()[-1])


DEVICE = 128 * MiB  # the plan's device: its largest batch is some 2,000 rows of the step


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    """numpy_fed_step.py recorded with a plan for a DEVICE: (the run, its oracle)."""
    return _record(tmp_path_factory.mktemp("fed"), "numpy_fed_step.py",
                   options=("--plan-device-memory", str(DEVICE)))


def test_a_numpy_batch_is_not_taken_off_the_bytes_live_on_the_device(fed):
    run, oracle = fed
    # The program's own sizes: 4 MiB of parameters and 4 MiB kept on the
    # device, a 2 MiB numpy batch; XLA's call peak holds the parameters, the
    # batch's copy, the new parameters and a 2 MiB temporary.
    assert (oracle["params"], oracle["kept"], oracle["batch"]) == (4 * MiB, 4 * MiB, 2 * MiB)
    assert oracle["call_peak"] >= 12 * MiB
    # Live before a call: the parameters, the kept array and the last loss
    # (4 bytes); less the parameters, which XLA counts; plus XLA's call peak.
    assert oracle["true_peak"] == oracle["kept"] + 4 + oracle["call_peak"]
    report, over, under = cli_batch([["report", run, "--json"], ["check", run, "--max-true-peak", "15MiB"],
                                     ["check", run, "--max-true-peak", str(oracle["true_peak"])]], run.parent)
    assert report.returncode == 0, report.stderr
    doc = json.loads(report.stdout)
    s = doc["summary"]
    assert s["true_peak_bytes"] == s["true_peak_total_bytes"] == oracle["true_peak"]
    # The roles of that call add up to it.
    roles = doc["roles"]
    assert roles["where"] == "during a call of step"
    assert sum(r["bytes"] for r in roles["by_role"]) == oracle["true_peak"]
    batch = [r for r in roles["by_role"] if r["role"] == "batch"]
    assert [(r["largest_owner"], r["bytes"]) for r in batch] == [("x", oracle["batch"])]
    # The gate reads the same figure: over 15 MiB fails, at it passes.
    assert over.returncode == 1, over.stdout + over.stderr
    assert f"estimated true peak {oracle['true_peak'] / MiB:.2f} MiB" in over.stdout
    assert under.returncode == 0, under.stdout + under.stderr


def test_the_plan_counts_the_bytes_outside_the_call_the_same_way(fed):
    run, oracle = fed
    points = build_plan(attribute(load_run(run))).points
    assert not points.empty
    # Outside the call at every batch size: what lives on the device before it, less its device arguments.
    assert set(points["live_outside_bytes"]) == {oracle["true_peak"] - oracle["call_peak"]}
    [recorded] = points.loc[(points["variant"] == "recorded") & (points["scale"] == 1), "peak_bytes"]
    assert recorded == oracle["true_peak"]


def _fits(peak: int) -> bool:
    """The fit rule the plan applies (README, docs/advice.md): the peak plus 5 % and 64 MiB of headroom within
    JAX's default pool, 75 % of the device."""
    return peak * 1.05 + 64 * MiB <= 0.75 * DEVICE


def test_the_plans_largest_batch_fits_when_the_program_runs_at_it(fed):
    """The largest batch the plan finds for DEVICE, and the next it
    compiled, run as plain python: the first fits by the program's own true
    peak, the next does not (before, the plan took the numpy batch off the
    bytes live outside the call and named a batch whose run did not fit)."""
    run, _ = fed
    points = build_plan(attribute(load_run(run))).points
    recorded = points[points["variant"] == "recorded"].sort_values("batch")
    largest = int(recorded.loc[recorded["fits"].eq(True), "batch"].max())  # eq: a nullable column
    above = int(recorded.loc[recorded["batch"] > largest, "batch"].min())
    # Two steps: the second runs beside the first's loss, as every later one does (8 steps, the default,
    # print the same true peak at each batch).
    at, over = in_parallel(*(lambda b=b: run_script(SCRIPTS / "numpy_fed_step.py", "--batch", b, "--steps", 2,
                                                    cwd=run.parent)
                             for b in (largest, above)))
    at, over = (json.loads(p.stdout.strip().splitlines()[-1]) for p in (at, over))
    assert _fits(at["true_peak"]) and not _fits(over["true_peak"]), (largest, at, above, over)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    """numpy_params_classifier.py recorded as it is and with its parameters
    donated, fed as jax's example feeds it (two epochs, each ending with a
    leftover batch that no sampled call runs): {"as is": (run, oracle),
    "donated": (run, oracle)}."""
    d = tmp_path_factory.mktemp("classifier")
    plain, donated = in_parallel(lambda: _record(d, "numpy_params_classifier.py", "--leftover"),
                                 lambda: _record(d, "numpy_params_classifier.py", "--leftover", "--donate"))
    return {"as is": plain, "donated": donated}


def _doc(run: Path) -> dict:
    return json.loads(run_cli("report", run, "--json", check=0).stdout)


def test_numpy_made_first_parameters_still_get_the_donation_and_it_saves_the_fall(classifier):
    (run, oracle), (fixed_run, fixed) = classifier["as is"], classifier["donated"]
    # The fix works: XLA aliases all the parameters' bytes (float32 on the
    # device) in every call of the donated program, and lowers its true peak.
    assert set(fixed["aliased"]) == {fixed["params"]} and set(oracle["aliased"]) == {0}
    fall = oracle["true_peak"] - fixed["true_peak"]
    assert fall > 0
    doc, fixed_doc = in_parallel(lambda: _doc(run), lambda: _doc(fixed_run))
    assert doc["summary"]["true_peak_bytes"] == oracle["true_peak"]
    assert fixed_doc["summary"]["true_peak_bytes"] == fixed["true_peak"]
    [donate] = [f for f in doc["findings"] if f["rule"] == "donate"]
    x = donate["facts"]
    assert (x["function"], x["arguments"], x["argnums"]) == ("update", ["params"], [0])
    assert x["donated_bytes"] == oracle["params"]  # the float32 parameters on the device
    assert x["verified"] and x["aliased_bytes"] == fixed["params"]
    # Every signature compiled donated: the first call's (numpy float64 parameters), the full batches' and the
    # leftover's, which no sampled call ran (was "saves 977 KiB", the leftover counted undonated: issue 52)
    assert (x["signatures_verified"], x["signatures"]) == (3, 3), x.get("not_verified")
    assert donate["saving_bytes"] == fall
    # The roles of the run's largest call add up to its true peak: the first
    # call's numpy float64 parameters count at the float32 JAX passes.
    roles = doc["roles"]
    assert sum(r["bytes"] for r in roles["by_role"]) == oracle["true_peak"]


def test_a_working_donation_of_numpy_float64_parameters_is_not_called_unusable(classifier):
    fixed_run, fixed = classifier["donated"]
    assert fixed["unusable_warnings"] == []  # JAX did not warn
    assert set(fixed["aliased"]) == {fixed["params"]}  # XLA aliased them, the first call's included
    doc = _doc(fixed_run)
    assert [f["rule"] for f in doc["findings"] if f["rule"].startswith("donat")] == []


def test_what_jax_passes_of_a_numpy_argument_is_told_by_xlas_argument_bytes():
    """truepeak.as_passed and placement on leaves as the probe records them:
    a float64 numpy leaf is float32 on the device with x64 off (XLA's
    argument bytes are its half), float64 where XLA's figure holds it whole
    or a device array of a 64-bit dtype shows x64 on; a numpy leaf is never
    among the bytes already on the device."""
    from jaxmemprof.facts.truepeak import as_passed, placement

    host = {"path": "[0]", "shape": [256, 256], "dtype": "float64", "bytes": 256 * 256 * 8, "devices": 1,
            "host": True, "on": []}
    dev = {"path": "[1]", "shape": [256], "dtype": "float32", "bytes": 256 * 4, "devices": 1, "on": ["cpu:0"]}
    narrowed = 256 * 256 * 4 + 256 * 4
    [h, d] = as_passed([host, dev], [], narrowed)
    assert (h["dtype"], h["bytes"], d) == ("float32", 256 * 256 * 4, dev)
    [h, _] = as_passed([host, dev], [], 256 * 256 * 8 + 256 * 4)
    assert (h["dtype"], h["bytes"]) == ("float64", 256 * 256 * 8)
    wide_out = [dict(dev, dtype="float64", bytes=256 * 8)]
    assert as_passed([host], wide_out)[0]["dtype"] == "float64"
    assert as_passed([host])[0]["dtype"] == "float32"  # nothing says x64: JAX's default
    n, share = placement([host, dev], [dev], narrowed)
    assert (n, share) == (1, 256 * 4 / narrowed)
    assert placement([host], [dev]) == (1, 0.0)


@pytest.fixture(scope="module")
def leftover(tmp_path_factory):
    """numpy_leftover_step.py recorded as it is, with its state donated (the
    fix), with a masked leftover batch, and with leftovers of 9 sizes:
    {variant: (run, oracle)}."""
    d = tmp_path_factory.mktemp("leftover")
    variants = ("as is", "--donate", "--masked-leftover", "--ragged")
    runs = in_parallel(*(lambda v=v: _record(d, "numpy_leftover_step.py", *([v] if v != "as is" else []))
                         for v in variants))
    return dict(zip(variants, runs))


def _donate_finding(run: Path) -> dict:
    [donate] = [f for f in _doc(run)["findings"] if f["rule"] == "donate"]
    return donate


def test_a_leftover_signature_never_sampled_is_compiled_from_its_shapes_and_saves_the_fall(leftover):
    """Issue 52, item 2: the leftover batch's signature (40 rows) is
    compiled in a call the probe does not sample, so no sampled call kept its
    arguments' shapes; the donated compile at the end makes them from the
    full batches' arguments with the leftover's shapes
    (capture/jit/unsampled.py), so both signatures are compiled donated and
    the saving is the fall of the donated program's true peak, as a run of
    the fixed program records it (was "saves at least 352.00 KiB": the
    leftover counted undonated at the true peak with the change, where the
    donated program falls 8 MiB)."""
    (run, oracle), (fixed_run, fixed) = leftover["as is"], leftover["--donate"]
    fall = oracle["true_peak"] - fixed["true_peak"]
    assert fall == oracle["state"]  # the donated program holds one generation of the state less
    doc, fixed_doc = in_parallel(lambda: _doc(run), lambda: _doc(fixed_run))
    assert doc["summary"]["true_peak_bytes"] == oracle["true_peak"]
    assert fixed_doc["summary"]["true_peak_bytes"] == fixed["true_peak"]
    [donate] = [f for f in doc["findings"] if f["rule"] == "donate"]
    x = donate["facts"]
    assert x["verified"] and (x["signatures_verified"], x["signatures"]) == (2, 2), x.get("not_verified")
    assert not x.get("not_verified")
    assert abs(donate["saving_bytes"] - fall) <= 0.01 * fall, (donate["saving_bytes"], fall)
    assert x["true_peak_after_bytes"] == fixed["true_peak"]
    # Each signature's figures, the leftover's included, are those of the fixed program's own compile of it:
    # the step jitted with donate_argnums=(0,), as the fix says.
    assert x["option"] == "donate_argnums=(0,)"
    figures = ["argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "generated_code_bytes"]
    whatif = load_run(run).jit.whatif.set_index("signature")[figures].astype(int)
    own = load_run(fixed_run).jit.compiles.drop_duplicates("signature").set_index("signature")[figures].astype(int)
    assert len(whatif) == 2 and whatif.sort_index().equals(own.sort_index()), (whatif, own)
    assert "1 of its 2" not in donate["message"] and "not sampled" not in donate["message"]
    text = run_cli("report", run, check=0).stdout
    assert f"saves {fmt(donate['saving_bytes'])} (compiled)" in text and "saves at least" not in text


def test_a_leftover_whose_arguments_differ_in_more_than_shapes_is_said_not_sampled(leftover):
    """Where the leftover batch has another leaf (a mask of its rows), its
    arguments cannot be made from the full batches' by their shapes: the
    finding says it was not sampled and why (not "over the budget"), and,
    the run's true peak with the change being a call of it, that its saving
    is at least the figure shown, which is at most the donated program's
    fall."""
    (run, oracle), (_, fixed) = leftover["--masked-leftover"], leftover["--donate"]
    fall = oracle["true_peak"] - fixed["true_peak"]
    assert fall == oracle["state"]  # the mask's 160 bytes do not reach the true peak: the full batch's call holds it
    donate = _donate_finding(run)
    x = donate["facts"]
    if (x["signatures_verified"], x["signatures"]) == (2, 2):
        # the leftover's compile woke the probe at a snapshot that saw the function's cache grow (when a snapshot
        # lands between its compile and its call: the machine's pace), so its call was sampled: all compiled
        assert 0 < donate["saving_bytes"] <= fall and "not sampled" not in (x.get("not_verified") or "")
        return
    assert x["verified"] and (x["signatures_verified"], x["signatures"]) == (1, 2)
    assert "1 not sampled (float32[2048,1024], np:float32[40,1024], np:float32[40]: no sampled call ran it, " \
           "and its arguments differ from every kept signature's in more than their shapes and dtypes" \
        in x["not_verified"], x["not_verified"]
    assert "over the compile budget" not in x["not_verified"] and "over the budget" not in donate["message"]
    assert "lower bound" in x["not_verified"]
    assert 0 < donate["saving_bytes"] <= fall
    text = run_cli("report", run, check=0).stdout
    assert f"saves at least {fmt(donate['saving_bytes'])} (compiled)" in text


def test_leftovers_of_many_sizes_are_each_compiled_donated_replayed_or_retraced(leftover):
    """Nine leftover sizes, none sampled: the probe keeps the run's traces of
    the four largest once a later call is sampled (capture/jit/unsampled.py),
    so those are replayed and the others re-traced (shielded); every one is
    compiled donated, and the saving is the fall of the donated program's
    true peak."""
    (run, oracle) = leftover["--ragged"]
    fixed = json.loads(run_script(SCRIPTS / "numpy_leftover_step.py", "--ragged", "--donate",
                                  cwd=run.parent).stdout.strip().splitlines()[-1])
    fall = oracle["true_peak"] - fixed["true_peak"]
    assert fall == oracle["state"]
    donate = _donate_finding(run)
    x = donate["facts"]
    assert (x["signatures_verified"], x["signatures"]) == (10, 10), x.get("not_verified")
    assert abs(donate["saving_bytes"] - fall) <= 0.01 * fall, (donate["saving_bytes"], fall)
    w = load_run(run).jit.whatif
    assert w["error"].isna().all() and len(w) == 10
    # Each compile's argument bytes are the program's own compile's of that signature (its batch's rows).
    compiles = load_run(run).jit.compiles.set_index("signature")["argument_bytes"]
    assert [int(compiles[s]) for s in w["signature"]] == [int(a) for a in w["argument_bytes"]]
    events = load_run(run).events
    assert any("re-trace" in m for m in events.loc[events["kind"] == "whatif", "message"])


def test_a_float64_numpy_batch_counts_at_what_jax_passes_to_the_device(tmp_path):
    """Issue 52, item 5: with x64 off JAX passes a float64 numpy batch as
    float32; the roles count it at that size (half its host bytes), and add
    up to the true peak."""
    run, oracle = _record(tmp_path, "numpy_float64_batch.py")
    assert oracle["passed_batch"] * 2 == oracle["host_batch"] == 2 * MiB
    doc = _doc(run)
    assert doc["summary"]["true_peak_bytes"] == oracle["true_peak"]
    roles = doc["roles"]["by_role"]
    assert [(r["role"], r["largest_owner"], r["bytes"]) for r in roles if r["role"] == "batch"] == [
        ("batch", "x", oracle["passed_batch"])]
    assert sum(r["bytes"] for r in roles) == oracle["true_peak"]
