"""run --target SLICE: the program's step compiled for a TPU slice that is
not there (libtpu's deviceless topology), from a CPU machine.

Every figure is held to an independent compile: the same step function,
imported from the same program, lowered by a separate process on the same
topology with ``jax.ShapeDtypeStruct`` arguments of the same shapes and
shardings, and its ``compile().memory_analysis()`` read. Three programs,
recorded at once (module-scoped):

- the bundled MLP (sample_runs/train_mlp.py, one device), batch 32;
- a step over a 2x2 mesh of four CPU devices (``SHARDED``), beside one on
  a single device, named with a slice of four chips (v5e:2x2: both
  compiled) and with one of eight (v5e:2x4: the mesh's step cannot be, which
  must be said, and the slice's gate cannot pass on the other alone);
- a wide step (``WIDE``, 4 MiB an example) recorded with ``--plan
  --plan-scales 2``: the largest batch that fits a v5e chip, searched by
  compiling for it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from conftest import REPO, cpu_env, run_cli, write_script

from jaxmemprof.facts import tpus
from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.analysis.options import Options
from jaxmemprof.store.reader import load_run

pytestmark = pytest.mark.skipif(tpus.libtpu_missing(), reason="libtpu is not installed (pip install 'jaxmemprof[tpu]')")

MLP = REPO / "sample_runs" / "train_mlp.py"
FIGURES = ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "generated_code_bytes")

SHARDED = """
import jax
jax.config.update("jax_num_cpu_devices", 4)
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P


def step(w, x):
    h = jnp.tanh(x @ w)
    return w - 0.01 * (x.T @ h) / x.shape[0], jnp.mean(h * h)


def local(v, x):  # on one device, about as large a call as step's per device
    return v - 0.01 * (x.T @ jnp.tanh(x @ v)) / x.shape[0]


def shardings(devices):
    mesh = Mesh(np.array(devices).reshape(2, 2), ("data", "model"))
    return NamedSharding(mesh, P(None, "model")), NamedSharding(mesh, P("data", None))


if __name__ == "__main__":
    ws, xs = shardings(jax.devices())
    w = jax.device_put(jnp.ones((256, 512)), ws)
    f, g = jax.jit(step), jax.jit(local)
    v = jnp.ones((256, 256))
    for i in range(3):
        x = jax.device_put(jnp.full((128, 256), float(i)), xs)
        w, loss = f(w, x)
        v = g(v, jnp.full((96, 256), float(i)))
    print(float(loss), float(v[0, 0]))
"""

WIDE = """
import jax
import jax.numpy as jnp

WIDTH = 1 << 20  # 4 MiB of float32 an example


def step(w, x):
    return w + 1e-3 * jnp.sum(jnp.tanh(x * w), axis=0)


if __name__ == "__main__":
    f = jax.jit(step)
    w = jnp.ones((WIDTH,))
    for i in range(3):
        x = jnp.full((4, WIDTH), float(i))
        w = f(w, x)
    print(float(w[0]))
"""

# The independent compile: the program's own step, lowered on the slice's
# devices from shapes alone, by a process that does not import jaxmemprof
# (one process for several programs and slices: each spec's compiles, in turn).
# Its temporaries: XLA:TPU's buffer assignment's in device memory (the chip's reservation, docs/tpu.md),
# read from the compile's dump by a parse of its own: the allocations with no colour that are neither
# parameters, outputs, constants nor thread-local.
INDEPENDENT = r"""
import glob, json, re, shutil, sys, tempfile
import jax, jax.numpy as jnp
import numpy as np
from jax.experimental import topologies
from jax.sharding import Mesh, NamedSharding, SingleDeviceSharding, PartitionSpec as P

specs = json.loads(sys.argv[1])


def reservation(path):
    total = 0
    for line in open(path):
        m = re.match(r"^allocation \d+: size (\d+)(.*):$", line)
        if m and not re.search(r"color|parameter|output|maybe-live-out|constant|thread-local", m.group(2)):
            total += int(m.group(1))
    return total


programs = {}
for spec in specs:  # every program imported before any compile (sharded.py sets JAX's CPU devices)
    sys.path.insert(0, spec["dir"])
    programs[spec["module"]] = __import__(spec["module"])
results = []
for spec in specs:
    program = programs[spec["module"]]
    # a slice of one host laid out as one (v5e:1x1 is refused with libtpu's default hosts of 2x2x1)
    bounds = {"chips_per_host_bounds": spec["bounds"]} if spec.get("bounds") else {}
    devices = topologies.get_topology_desc(topology_name=spec["slice"], platform="tpu", **bounds).devices
    results.append(out := [])
    for case in spec["cases"]:
        if spec["module"] == "train_mlp":
            shapes = jax.eval_shape(lambda: program.init_params(jax.random.PRNGKey(0), [512, 1024, 1024, 10]))
            one = SingleDeviceSharding(devices[0])
            dtype = jnp.bfloat16 if case["narrow"] else jnp.float32
            s = lambda shape: jax.ShapeDtypeStruct(shape, dtype, sharding=one)
            params = jax.tree_util.tree_map(lambda a: s(a.shape), shapes)
            args = (params, params, s((case["batch"], 512)), s((case["batch"], 10)))
            fn = jax.jit(program.train_step, donate_argnums=(0, 1) if case["donate"] else ())
        elif spec["module"] == "sharded":
            ws, xs = program.shardings(devices[:4])
            args = (jax.ShapeDtypeStruct((256, 512), jnp.float32, sharding=ws),
                    jax.ShapeDtypeStruct((case["batch"], 256), jnp.float32, sharding=xs))
            fn = jax.jit(program.step)
        elif spec["module"] == "refused":
            one = SingleDeviceSharding(devices[0])
            args = (jax.ShapeDtypeStruct((256, 256), jnp.float32, sharding=one),
                    jax.ShapeDtypeStruct((case["batch"], 256), jnp.float32, sharding=one))
            fn = program.step
        else:
            one = SingleDeviceSharding(devices[0])
            args = (jax.ShapeDtypeStruct((program.WIDTH,), jnp.float32, sharding=one),
                    jax.ShapeDtypeStruct((case["batch"], program.WIDTH), jnp.float32, sharding=one))
            fn = jax.jit(program.step)
        dump = tempfile.mkdtemp()
        try:
            ma = fn.lower(*args).compile(compiler_options={"xla_dump_to": dump, "xla_dump_hlo_as_text": True}
                                         ).memory_analysis()
        except Exception as exc:  # XLA:TPU's own "too large for the device" is an answer
            if "RESOURCE_EXHAUSTED" not in str(exc):
                raise
            out.append({"refused": str(exc).splitlines()[0]})
            continue
        finally:
            reserved = sum(reservation(p) for p in glob.glob(dump + "/*after_optimizations-buffer-assignment.txt"))
            shutil.rmtree(dump)
        out.append({"argument_bytes": ma.argument_size_in_bytes, "output_bytes": ma.output_size_in_bytes,
                    "alias_bytes": ma.alias_size_in_bytes, "temp_bytes": reserved,
                    "generated_code_bytes": ma.generated_code_size_in_bytes})
print(json.dumps(results))
"""


def _spec(directory, module: str, slice_: str, cases: list, bounds=None) -> dict:
    return {"dir": str(directory), "module": module, "slice": slice_, "cases": cases, "bounds": bounds}


def _independents(*specs: dict) -> list:
    """Each spec's independent compiles (a list per spec), in one process."""
    proc = subprocess.run([sys.executable, "-c", INDEPENDENT, json.dumps(list(specs))],
                          # another process may hold libtpu's lock meanwhile (a run beside it): a deviceless
                          # compile needs none
                          env=cpu_env(ALLOW_MULTIPLE_LIBTPU_LOAD="1", TPU_MIN_LOG_LEVEL="3", TPU_SKIP_MDS_QUERY="1"),  # no /tmp/tpu_logs
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _independent(directory, module: str, slice_: str, cases: list, bounds=None) -> list:
    (out,) = _independents(_spec(directory, module, slice_, cases, bounds))
    return out


def _record(argv, out) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "jaxmemprof", "run", "-o", str(out), *map(str, argv)],
                            env=cpu_env(COLUMNS="200"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    d = tmp_path_factory.mktemp("targets")
    write_script(d, "sharded.py", SHARDED)
    write_script(d, "wide.py", WIDE)
    procs = {
        "mlp": _record(["--target", "v5e:2x2", MLP, "--batch", 32, "--steps", 3], d / "mlp"),
        "sharded": _record(["--target", "v5e:2x2", "--target", "v5e:2x4", d / "sharded.py"], d / "sharded"),
        "wide": _record(["--plan-scales", "2", "--target", "v5e:2x2", d / "wide.py"], d / "wide"),
    }
    said = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, f"{name}: exit {proc.returncode}\n{out}\n{err}"
        said[name] = (out, err)
    return d, said


@pytest.fixture(scope="module")
def independent(recorded):
    """The independent compiles the three recorded programs are held to, in one process: the MLP at
    batch 32 (as recorded, donated, in bfloat16), the mesh's step at batch 128, and the wide step at
    the largest batch its search found and the next."""
    d, _ = recorded
    t, _ = _points(d / "wide")
    (row,) = t.rows.to_dict("records")
    ends = [row["largest_batch"], row["next_batch"]]
    mlp, sharded, wide = _independents(
        _spec(MLP.parent, "train_mlp", "v5e:2x2", [
            {"batch": 32, "donate": False, "narrow": False}, {"batch": 32, "donate": True, "narrow": False},
            {"batch": 32, "donate": False, "narrow": True}]),
        _spec(d, "sharded", "v5e:2x2", [{"batch": 128}]),
        _spec(d, "wide", "v5e:2x2", [{"batch": int(b)} for b in ends] if all(ends) else []))
    return {"mlp": mlp, "sharded": sharded, "wide": wide}


def _points(run, target="v5e:2x2"):
    from jaxmemprof.analysis.advice.targets import build_targets

    t = build_targets(attribute(load_run(run), Options()))
    return t, t.points[t.points["target"] == target]


def test_the_mlps_figures_are_those_of_an_independent_compile_for_the_slice(recorded, independent):
    d, said = recorded
    t, points = _points(d / "mlp")
    at = {(r["variant"]): r for _, r in points.iterrows()}
    assert set(at) == {"recorded", "donated", "bfloat16"}
    want = independent["mlp"]  # batch 32: as recorded, donated, in bfloat16
    for variant, figures in zip(("recorded", "donated", "bfloat16"), want):
        got = {f: int(at[variant][f]) for f in FIGURES}
        assert got == figures, variant
    assert at["recorded"]["device"].startswith("TPU_0") and at["recorded"]["backend"] == "tpu"
    (row,) = t.rows.to_dict("records")
    assert row["chip"] == "TPU v5 lite" and row["hbm_bytes"] == 16 * 2**30 and row["fits"] is True
    assert row["peak_bytes"] == row["call_peak_bytes"] + row["live_outside_bytes"]
    assert row["call_peak_bytes"] == sum(want[0][f] for f in FIGURES if f != "alias_bytes") - want[0]["alias_bytes"]
    # the run's own backend beside it: its compile of the same step (jit_compiles)
    assert row["run_backend"] == "cpu" and row["run_temp_bytes"] is not None
    # XLA:TPU's buffers at its peak, by the program's lines: they add up to that peak, which is the
    # independent compile's arguments and outputs; its temporaries' block (the chip's reservation for
    # the whole call, 705,024 B with libtpu 0.0.42.1, where memory_analysis() says 0 B) holds no value
    # live there
    lines = t.lines[t.lines["target"] == "v5e:2x2"]
    assert lines["bytes"].sum() == lines["program_peak_bytes"].iloc[0]
    assert want[0]["temp_bytes"] > 0
    assert lines["program_peak_bytes"].iloc[0] == want[0]["argument_bytes"] + want[0]["output_bytes"] \
        - want[0]["alias_bytes"]
    assert lines.loc[lines["kind"] == "argument", "bytes"].sum() == want[0]["argument_bytes"]
    assert lines["site"].str.contains("train_mlp.py:").any()
    out, err = said["mlp"]
    assert f"target v5e:2x2: train_step {_mib(row['peak_bytes'])} per device at batch 32, fits a TPU v5 lite" in err
    # libtpu's own lines go to the journal, whole
    assert "InitGoogle" not in err and "TPU_WORKER" not in err and "common_lib" not in err


def _mib(n) -> str:
    from jaxmemprof.units import format_bytes

    return format_bytes(int(n))


def test_a_four_device_mesh_maps_to_a_four_chip_slice_with_the_same_specs(recorded, independent):
    d, _ = recorded
    t, points = _points(d / "sharded")
    rec = points[(points["variant"] == "recorded") & (points["function"] == "step")]
    assert len(rec) == 4 and rec["device"].nunique() == 4  # each of the slice's four devices
    assert set(t.rows.loc[t.rows["target"] == "v5e:2x2", "function"]) == {"step", "local"}
    (want,) = independent["sharded"]  # at batch 128
    for _, r in rec.iterrows():
        assert {f: int(r[f]) for f in FIGURES} == want
    # a quarter of x (128x256 over data=2) and half of w (over model=2) on each device
    assert want["argument_bytes"] == 128 * 256 * 4 // 2 + 256 * 512 * 4 // 2


def test_a_mesh_of_another_size_is_said_with_the_slices_that_fit_it(recorded):
    d, said = recorded
    t, _ = _points(d / "sharded")
    why = t.not_compiled("v5e:2x4")
    assert why.startswith("step: not compiled: ")  # though local was compiled for it
    assert set(t.rows.loc[t.rows["target"] == "v5e:2x4", "function"]) == {"step", "local"}
    assert "the program's mesh has 4 devices and v5e:2x4 has 8" in why
    assert "v5e:2x2" in why and "v6e:2x2" in why
    assert "target v5e:2x4: " in said["sharded"][1]  # run's closing lines, on stderr
    assert t.not_compiled("v5e:2x2") is None


def test_the_largest_batch_on_the_slice_is_compiled_and_fits_and_the_next_does_not(recorded, independent):
    d, said = recorded
    t, points = _points(d / "wide")
    (row,) = t.rows.to_dict("records")
    largest, nxt = row["largest_batch"], row["next_batch"]
    assert largest and nxt and nxt > largest
    searched = points[(points["variant"] == "recorded") & (points["source"] == "search")]
    assert len(searched) >= 2
    outside = int(row["live_outside_bytes"])
    usable = tpus.usable_bytes("v5e:2x2")
    fit, over = independent["wide"]  # at largest, then at nxt

    def peak(f):
        return (f["argument_bytes"] + f["output_bytes"] - f["alias_bytes"] + f["temp_bytes"]
                + f["generated_code_bytes"] + outside)

    # the next: XLA:TPU refuses it for the device's memory, or compiles it to a peak past what it may use
    assert peak(fit) <= usable and ("refused" in over or peak(over) > usable), (fit, over)
    assert f"largest batch that fits: {largest:,}" in said["wide"][1]


# A step whose TPU program is far larger than its CPU one (lax.platform_dependent): XLA:TPU refuses it
# at the recorded batch ("Ran out of memory on HBM"), which is an answer: it does not fit, and the
# search for the largest batch goes down from there.
REFUSED = """
import jax, jax.numpy as jnp


def cpu_branch(w, x):
    return w - 0.01 * (x.T @ (x @ w))


def tpu_branch(w, x):
    n = x.shape[0] * 1100
    y = jnp.broadcast_to(x[:1, :1] + w[:1, :1], (n, n))
    return w - 0.01 * (x.T @ (x @ w)) + jnp.exp(y @ y)[:256, :256]


@jax.jit
def step(w, x):
    return jax.lax.platform_dependent(w, x, cpu=cpu_branch, tpu=tpu_branch)


if __name__ == "__main__":
    w = jnp.ones((256, 256))
    for i in range(3):
        w = step(w, jnp.ones((64, 256)) * i)  # the step's call
    print(float(w.sum()))
"""


def test_a_step_the_slice_refuses_does_not_fit_and_the_search_goes_down(tmp_path):
    write_script(tmp_path, "refused.py", REFUSED)
    proc = run_cli("run", "--plan-scales", "0.5", "--target", "v5e:2x2", "-o", tmp_path / "run",
                   tmp_path / "refused.py", check=0)
    t, _ = _points(tmp_path / "run")
    (row,) = t.rows.to_dict("records")
    assert row["fits"] is False and "RESOURCE_EXHAUSTED" in row["error"] and pd_isna(row["peak_bytes"])
    assert t.not_compiled("v5e:2x2") is None  # refused for its size: an answer
    largest, nxt = row["largest_batch"], row["next_batch"]
    assert 0 < largest < nxt <= 64
    fit, over = _independent(tmp_path, "refused", "v5e:2x2", [{"batch": largest}, {"batch": nxt}])
    call = sum(fit[f] for f in FIGURES if f != "alias_bytes") - fit["alias_bytes"]
    assert call + int(row["live_outside_bytes"] or 0) <= tpus.usable_bytes("v5e:2x2") and "refused" in over
    assert "target v5e:2x2: step does NOT fit a TPU v5 lite at batch 64: JaxRuntimeError: RESOURCE_EXHAUSTED" \
        in proc.stderr and f"largest batch that fits: {largest:,}" in proc.stderr
    assert run_cli("check", tmp_path / "run", "--target-fits", "v5e:2x2", check=1).stdout.startswith(
        "FAIL --target-fits v5e:2x2: step does not fit a TPU v5 lite: JaxRuntimeError: RESOURCE_EXHAUSTED")


def pd_isna(v) -> bool:
    import pandas as pd

    return pd.isna(v)


def test_report_export_and_check_read_the_slices(recorded, tmp_path):
    d, _ = recorded
    rep = run_cli("report", d / "mlp", env=cpu_env(COLUMNS="160"), check=0).stdout
    assert "Compiled for TPU slices" in rep and "v5e:2x2" in rep and "yes (15.75 GiB)" in rep
    doc = json.loads(run_cli("report", d / "mlp", "--json", check=0).stdout)
    assert doc["targets"]["asked"] == ["v5e:2x2"] and doc["targets"]["rows"][0]["fits"] is True
    run_cli("export", d / "mlp", "--csv", tmp_path / "csv", check=0)
    assert (tmp_path / "csv" / "targets.csv").read_text().count("v5e:2x2") == 1
    assert (tmp_path / "csv" / "target_points.csv").read_text().count("v5e:2x2") == 3
    assert "train_mlp.py:" in (tmp_path / "csv" / "target_lines.csv").read_text()
    assert "at its peak (" in rep
    ok = run_cli("check", d / "mlp", "--target-fits", "v5e:2x2", check=0).stdout
    assert ok.startswith("ok   --target-fits v5e:2x2: train_step needs")
    # a slice the run was not compiled for, and one whose mesh did not map: the gate cannot look
    for run, name in ((d / "mlp", "v6e:2x2"), (d / "sharded", "v5e:2x4")):
        proc = run_cli("check", run, "--target-fits", name, check=2)
        assert proc.stderr.count("\n") == 1 and name in proc.stderr and "Traceback" not in proc.stderr


def test_check_fails_a_step_that_does_not_fit_and_a_damaged_table(recorded, tmp_path):
    """The gate's two other ends, on a copy of the MLP's run: its target
    rows' temporaries raised past a chip (exit 1), then a row torn (exit 2)."""
    import shutil
    import sqlite3

    d, _ = recorded
    copy = tmp_path / "mlp"
    shutil.copytree(d / "mlp", copy)
    with sqlite3.connect(copy / "journal.sqlite") as con:
        con.execute("UPDATE jit_targets SET temp_bytes = 17 * 1024 * 1024 * 1024 WHERE variant = 'recorded'")
    failed = run_cli("check", copy, "--target-fits", "v5e:2x2", check=1).stdout
    assert failed.startswith("FAIL --target-fits v5e:2x2: train_step needs 17.")
    # XLA:TPU's own refusal (what it says of a step too large for the device, as the --plan search
    # meets at large batches): no figures, and the gate fails with its words
    refusal = ("JaxRuntimeError: RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO "
               "temporaries (16.00G) exceeds available HBM (15.75G).")
    with sqlite3.connect(copy / "journal.sqlite") as con:
        con.execute("UPDATE jit_targets SET argument_bytes = NULL, output_bytes = NULL, alias_bytes = NULL, "
                    "temp_bytes = NULL, generated_code_bytes = NULL, error = ? WHERE variant = 'recorded'", (refusal,))
    refused = run_cli("check", copy, "--target-fits", "v5e:2x2", check=1).stdout
    assert refused.startswith("FAIL --target-fits v5e:2x2: train_step does not fit a TPU v5 lite: JaxRuntimeError: "
                              "RESOURCE_EXHAUSTED")
    with sqlite3.connect(copy / "journal.sqlite") as con:
        con.execute("UPDATE jit_targets SET function_id = 'torn' WHERE variant = 'donated'")
    torn = run_cli("check", copy, "--target-fits", "v5e:2x2", check=2)
    error = torn.stderr.splitlines()[-1]  # after the reader's warning, the one-line error
    assert error.startswith("jaxmemprof: error: ") and "jit_targets are damaged" in error
    assert "--target-fits cannot be checked" in error and "Traceback" not in torn.stderr


def test_a_program_without_a_jitted_step_says_so_and_its_gate_cannot_pass(tmp_path):
    script = write_script(tmp_path, "nojit.py", """
        import sys
        import jax.numpy as jnp
        x = jnp.ones((256, 256))
        print(float(x.sum()))
        sys.exit(3)
    """)
    plain = subprocess.run([sys.executable, str(script)], env=cpu_env(), capture_output=True, text=True)
    proc = run_cli("run", "--target", "v5e:2x2", "-o", tmp_path / "run", script, check=plain.returncode)
    assert proc.stdout == plain.stdout
    assert "target v5e:2x2: not compiled: nothing planned: no jitted function" in proc.stderr
    run = load_run(tmp_path / "run")
    assert not (run.events["kind"] == "target-log").any()  # libtpu not loaded: there was nothing to compile
    gate = run_cli("check", tmp_path / "run", "--target-fits", "v5e:2x2", check=2)
    assert "nothing planned" in gate.stderr and gate.stderr.count("\n") == 1


STEP_ONCE = """
import sys, threading, time
import jax, jax.numpy as jnp

ticks = [0]


def tick():  # a thread of the program's that goes on writing to stderr while the run ends
    while True:
        ticks[0] += 1
        print(f"tick {ticks[0]}", file=sys.stderr, flush=True)
        time.sleep(0.01)


threading.Thread(target=tick, daemon=True).start()
step = jax.jit(lambda w, x: w + jnp.tanh(x.T @ x))
w = step(jnp.ones((128, 128)), jnp.ones((64, 128)))  # called once: no batch can be told
print("END", ticks[0], float(w[0, 0]), flush=True)
"""


def test_a_step_called_once_is_compiled_with_plan_and_the_programs_stderr_goes_on(tmp_path):
    script = write_script(tmp_path, "once.py", STEP_ONCE)
    proc = run_cli("run", "--plan", "--target", "v5e:2x2", "-o", tmp_path / "run", script, check=0)
    t, points = _points(tmp_path / "run")
    (row,) = t.rows.to_dict("records")
    assert row["fits"] is True and row["peak_bytes"] > 0  # its recorded batch, compiled though not planned
    assert set(points["variant"]) >= {"recorded", "bfloat16"}
    # the thread's lines reached stderr, every one, libtpu's did not; the thread stopped with the script
    # (capture/parking.py), as python's finalisation stops it, before the slice's compiles
    end = int(proc.stdout.split("END ")[1].split()[0])
    # (a tick's print writes its text and its newline apart: run's own closing lines may come between)
    seen = [int(n) for n in re.findall(r"tick (\d+)", proc.stderr)]
    assert seen[:end] == list(range(1, end + 1)), (end, seen[:end + 3])
    assert max(seen) <= end + 100, (end, max(seen))  # not on through the compiles (about 2,000 before)
    assert "InitGoogle" not in proc.stderr and "common_lib" not in proc.stderr
    log = load_run(tmp_path / "run").events
    assert not log.loc[log["kind"] == "target-log", "message"].str.contains("tick").any()


def test_a_run_ended_by_sigterm_compiles_nothing_more_and_says_so(tmp_path):
    import signal

    script = write_script(tmp_path, "term.py", """
        import time
        import jax, jax.numpy as jnp
        step = jax.jit(lambda w, x: w - 0.01 * (x.T @ (x @ w)))
        w = jnp.ones((256, 256))
        for i in range(1000):
            w = step(w, jnp.ones((64, 256)) * i)
            if i == 5:
                print("ready", flush=True)
            time.sleep(0.05)
    """)
    proc = subprocess.Popen([sys.executable, "-m", "jaxmemprof", "run", "--target", "v5e:2x2", "-o",
                             str(tmp_path / "run"), str(script)], env=cpu_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGTERM or proc.returncode == 128 + signal.SIGTERM
    run = load_run(tmp_path / "run")
    said = run.events.loc[run.events["kind"] == "target", "message"].tolist()
    assert said == ["v5e:2x2: not compiled: the run was ended by SIGTERM, and compiling for a slice takes seconds "
                    "a scheduler may not give"]
    assert not (run.events["kind"] == "target-log").any()  # libtpu never loaded
    gate = run_cli("check", tmp_path / "run", "--target-fits", "v5e:2x2", "--allow-unfinished", check=2)
    assert "ended by SIGTERM" in gate.stderr


def test_names_are_checked_before_the_script_runs(tmp_path):
    marker = tmp_path / "ran"
    script = write_script(tmp_path, "s.py", f"open({str(marker)!r}, 'w').close()\n")
    unknown = run_cli("run", "--target", "v9:2x2", script, check=2)
    assert unknown.stderr.count("\n") == 1 and "v5e:2x2" in unknown.stderr and "v4:AxBxC" in unknown.stderr
    dims = run_cli("run", "--target", "v4:2x2", script, check=2)
    assert "three dimensions" in dims.stderr
    assert not marker.exists()


def test_without_libtpu_one_line_names_the_package(tmp_path):
    script = write_script(tmp_path, "s.py", "print('ran')\n")
    blocked = r"""
import sys, importlib.abc
class NoLibtpu(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "libtpu" or name.startswith("libtpu."):
            raise ModuleNotFoundError(name)
sys.meta_path.insert(0, NoLibtpu())
from jaxmemprof.cli import main
main(sys.argv[1:])
"""
    proc = subprocess.run([sys.executable, "-c", blocked, "run", "--target", "v5e:2x2", str(script)],
                          env=cpu_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "ran" not in proc.stdout
    assert proc.stderr.count("\n") == 1 and "pip install 'jaxmemprof[tpu]'" in proc.stderr


SINGLE = """
import jax
import jax.numpy as jnp

WIDTH = 1 << 14


def step(w, x):
    return w + 1e-3 * jnp.sum(jnp.tanh(x * w), axis=0)


if __name__ == "__main__":
    f = jax.jit(step)
    w = jnp.ones((WIDTH,))
    for i in range(3):
        w = f(w, jnp.full((64, WIDTH), float(i)))
    print(float(w[0]))
"""


def test_a_single_chip_slice_compiles_with_the_figures_of_jaxs_own_compile_for_one_chip(tmp_path):
    """v5e:1x1 and v6e:1x1, the commonest rentals, which libtpu refuses with its default hosts of
    2x2x1 chips: compiled, each figure that of jax's own deviceless compile of the same step for one
    chip (``chips_per_host_bounds=(1, 1, 1)``), and the same per chip as a 2x2 slice's."""
    write_script(tmp_path, "single.py", SINGLE)
    proc = subprocess.run([sys.executable, "-m", "jaxmemprof", "run", "--target", "v5e:1x1", "--target", "v6e:1x1",
                           "--target", "v5e:2x2", "-o", str(tmp_path / "run"), str(tmp_path / "single.py")],
                          env=cpu_env(COLUMNS="200"), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    t, _ = _points(tmp_path / "run")
    rec = t.points[t.points["variant"] == "recorded"]
    got = {r["target"]: {f: int(r[f]) for f in FIGURES} for _, r in rec.iterrows()}
    assert set(got) == {"v5e:1x1", "v6e:1x1", "v5e:2x2"}, t.points[["target", "variant", "error"]]
    wants = _independents(*(_spec(tmp_path, "single", name, [{"batch": 64}], bounds=[1, 1, 1])
                            for name in ("v5e:1x1", "v6e:1x1")))  # one process, each slice's compile
    for (name, kind), (want,) in zip((("v5e:1x1", "TPU v5 lite"), ("v6e:1x1", "TPU v6 lite")), wants):
        assert t.not_compiled(name) is None
        assert got[name] == want, name
        assert want["argument_bytes"] >= (64 + 1) * (1 << 14) * 4  # x and w, at least
        (row,) = t.rows[t.rows["target"] == name].to_dict("records")
        assert row["chip"] == kind and row["fits"] is True
        assert f"target {name}: step " in proc.stderr and "not divisible" not in proc.stderr
    # the same chip's memory however many chips the slice has; its code is a little smaller alone
    # (libtpu 0.0.42.1: 140,800 B on v5e:1x1, 141,312 B on v5e:2x2, 2x4 and 4x4)
    for f in FIGURES:
        if f != "generated_code_bytes":
            assert got["v5e:1x1"][f] == got["v5e:2x2"][f], f
    assert abs(got["v5e:1x1"]["generated_code_bytes"] - got["v5e:2x2"]["generated_code_bytes"]) <= 4096


LAYOUTS = r"""
import json, sys
from jaxmemprof.facts import tpus
out = {}
for name in sys.argv[1:]:
    devices = tpus.topology(name).devices
    out[name] = [len(devices), sorted({d.process_index for d in devices})]
print(json.dumps(out))
"""


def test_every_slice_a_user_can_rent_has_a_topology():
    """Google Cloud's v5e and v6e slices (1, 4, 8 chips on one host; 16 and more on hosts of 4) and
    the documented v4 and v5p ones: libtpu lays each out, one host where the slice is one (in a
    process of its own: libtpu is not loaded into the test's)."""
    names = ("v5e:1x1", "v5e:2x2", "v5e:2x4", "v5e:4x4", "v5e:4x8", "v5e:8x8", "v5e:16x16",
             "v6e:1x1", "v6e:2x2", "v6e:2x4", "v6e:4x4", "v6e:16x16", "v5p:2x2x1", "v5p:2x2x2", "v4:2x2x1")
    proc = subprocess.run([sys.executable, "-c", LAYOUTS, *names],
                          env=cpu_env(ALLOW_MULTIPLE_LIBTPU_LOAD="1", TPU_MIN_LOG_LEVEL="3", TPU_SKIP_MDS_QUERY="1"),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    laid = json.loads(proc.stdout.strip().splitlines()[-1])
    for name in names:
        assert tpus.problem(name) is None, name
        devices, processes = laid[name]
        assert devices == tpus.chip(name)[5], name
        one_host = tpus.host_bounds(name) is not None
        assert one_host == (tpus.chip(name)[4] <= tpus.HOST_CHIPS[name.split(":")[0]]), name
        if one_host:  # a v5e-8 is one host of 2x4 chips, not two of 2x2
            assert processes == [0], name
        else:  # hosts of 2x2 chips (a v4 chip is two devices)
            assert len(processes) == tpus.chip(name)[4] // 4, name
