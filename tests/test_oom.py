"""Out of memory (issue 53, items 1, 2 and 5): XLA's messages read, the
failing call kept with XLA's figures, what fits compiled at the end of the
run (the largest batch that compiles under the limit, the next that does
not, checked against an independent compile), a --target slice that refuses
the recorded step searched with or without --plan, and the gates.

The messages are real: the chip's (tests/fixtures/tpu/gpt32-oom and
gpt32-oom-fit, recorded on a v5e), XLA:TPU's of a deviceless compile and
XLA:CPU's of a host allocation under RLIMIT_AS, both produced here by the
tests, and published ones quoted with their source (GPU and the older TPU
form: no GPU was at hand)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys

import pytest

from conftest import REPO, cpu_env, line_of, run_cli, write_script
from test_targets import REFUSED  # a step XLA:CPU runs in a few MiB and XLA:TPU refuses

from jaxmemprof.facts import tpus
from jaxmemprof.xla.oom import read

FIXTURES = REPO / "tests" / "fixtures" / "tpu"
GiB = 1 << 30
MiB = 1 << 20

# Published texts, excerpts as their issues show them (GitHub), used only as the parser's inputs.
# google/trax #1343: XLA:TPU's older form, its listing naming the source line.
TRAX_1343 = """Ran out of memory in memory space hbm. Used 97.92G of 15.48G hbm. Exceeded hbm capacity by 82.44G.

Total hbm usage >= 97.92G:
    reserved        528.00M
    program          97.92G
    arguments            0B

Program hbm requirement 97.92G:
    global           260.0K
    HLO temp         97.92G (89.3% utilization: Unpadded (87.45G) Padded (97.92G), 0.0% fragmentation (0B))

  Largest program allocations in hbm:

  1. Size: 1.00G
     Operator: op_type="add_any" op_name="pmap(mapped_update)/add_any" source_file="/home/jupyter/.local/lib/python3.7/site-packages/trax/supervised/trainer_lib.py" source_line=711
     Shape: f32[1,524288,512]{2,1,0:T(8,128)}
     Unpadded size: 1.00G
     Allocation type: HLO temp
     ==========================

  2. Size: 1.00G
     Operator: op_name="DUMMY_47"
     Shape: f32[524288,512]{1,0:T(8,128)}
     Unpadded size: 1.00G
     Allocation type: HLO temp
     ==========================
"""
# DifferentiableUniverseInitiative/flowpm #27: the older form's first line and header.
FLOWPM_27 = ("Compilation failure: Ran out of memory in memory space hbm. Used 41.74G of 16.00G hbm. Exceeded hbm "
             "capacity by 25.74G.")
# jax-ml/jax #13428: a GPU's allocator at run time, with BufferAssignment's stats and peak buffers.
JAX_13428 = """RESOURCE_EXHAUSTED: Out of memory while trying to allocate 6291456 bytes.
BufferAssignment OOM Debugging.
BufferAssignment stats:
             parameter allocation:    6.00MiB
              constant allocation:         0B
        maybe_live_out allocation:    6.00MiB
     preallocated temp allocation:         0B
                 total allocation:   12.00MiB
              total fragmentation:         0B (0.00%)
Peak buffers:
        Buffer 1:
                Size: 6.00MiB
                Operator: op_name="jit(concatenate)/jit(main)/concatenate[dimension=0]" source_file="/media/gccrcv/Data/Opensources/multinerf/internal/models.py" source_line=689
                XLA Label: concatenate
                Shape: f32[4096,128,3]
                ==========================

        Buffer 2:
                Size: 384.0KiB
                Entry Parameter Subshape: f32[256,128,3]
                ==========================
"""
# patrickbryant1/AFProfile #8: the GPU allocator's stats alone.
AFPROFILE_8 = """RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4770354232 bytes.
BufferAssignment OOM Debugging.
BufferAssignment stats:
             parameter allocation:  372.76MiB
              constant allocation:    48.5KiB
        maybe_live_out allocation:    9.64GiB
     preallocated temp allocation:    4.44GiB
                 total allocation:   14.44GiB
              total fragmentation:  680.30MiB (4.60%)
"""

# XLA's runtime out-of-memory forms, word for word as XLA's sources write them (no chip or GPU ran out here):
# openxla/xla xla/error/error_codes.h formats a coded error "EXXXX: Name:" + "\n" + the message + "\nSee
# https://openxla.org/xla/errors/error_XXXX for more details."; the messages are the samples of its
# docs/errors/error_0100.md (XLA:TPU's buffer allocation) and error_0101.md (loading a program), with the
# figures of the chip's own failure in issue 64 (256.00M asked, 252.58M free).
E0100 = ("RESOURCE_EXHAUSTED: E0100: RuntimeBufferAllocationFailure:\nError allocating device buffer: Attempting to "
         "allocate 256.00M. That was not possible. There are 252.58M free.; (0x0x0_HBM0)\n"
         "See https://openxla.org/xla/errors/error_0100 for more details.")
E0100_DOC = ("ValueError: RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to allocate 8.00M. That was not "
             "possible. There are 6.43M free.; (0x0x1_HBM0)")
E0101_DOC = ("XlaRuntimeError: RESOURCE_EXHAUSTED: Error loading program 'jit_embedding_pipeline_step_fn': Attempting "
             "to reserve 29.49G at the bottom of memory. That was not possible. There are 147.64M free, 0B reserved, "
             "and 147.64M reservable. Scope: unknown..: while running replica 0 and partition 34 of a replicated "
             "computation (other replicas may have failed as well).")
# docs/errors/error_1000.md and error_1001.md: XLA:TPU's compile-time forms.
E1000_DOC = ("RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm. Used 49.34G "
             "of 32.00G hbm. Exceeded hbm capacity by 17.34G.")
E1000_EARLY = ("RESOURCE_EXHAUSTED: Compilation failure: Aborting compilation early because it's unlikely to have enough "
               "memory. Requires 3.84T, has 90.96G available. If more detailed logging is desired, set "
               "--xla_tpu_impure_oom_fast_exit_threshold=-1")
E1001_DOC = ("XlaRuntimeError: RESOURCE_EXHAUSTED: Allocation (size=134217728) would exceed memory (size=67108864) :: "
             "#allocation25 [shape = 'u8[134217728]{0}', space=vmem, size = 0x8000000, tag = 'scoped memory for "
             "ragged_latency_optimized_all_gather_lhs_contracting_gated_matmul_kernel.2'] :: "
             "ragged_latency_optimized_all_gather_lhs_contracting_gated_matmul_kernel.2")
# xla/stream_executor/integrations/tf_allocator_adapter.cc (MemoryAllocationError): the GPU's BFC allocator, device
# and pinned host; the platform allocator (stream_executor_memory_allocator.cc): "Failed to allocate request for
# %s (%uB) on device ordinal %d", its size as tsl's HumanReadableNumBytes writes it.
GPU_BFC = "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 301989888 bytes."
GPU_HOST = ("RESOURCE_EXHAUSTED: Out of host memory while trying to allocate 68719476736 bytes. Please set the "
            "environment variable XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB to allocate larger host memory than the default "
            "64 GB.")
GPU_PLATFORM = "RESOURCE_EXHAUSTED: Failed to allocate request for 1.00GiB (1073741824B) on device ordinal 0"

# A step that runs out of host memory at its first call: XLA:CPU's RESOURCE_EXHAUSTED under RLIMIT_AS.
HOST = """
import resource
import sys

import jax
import jax.numpy as jnp

jax.config.update("jax_cpu_enable_async_dispatch", False)  # the failure raised by the call itself
M = int(sys.argv[1])


def train_step(w, x):
    y = jnp.einsum("mij,mjk->mik", x, x + w[None])
    z = jnp.einsum("mij,mjk->mik", y, x)
    return w + 1e-3 * (z * y).sum(0), (z * y).sum()


step = jax.jit(train_step)
w = jnp.ones((3, 3))
x = jax.random.normal(jax.random.key(0), (M, 3, 3))
x.block_until_ready()
step.lower(w, x).compile()  # compiled before the limit: the call fails allocating
with open("/proc/self/status") as f:
    vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
resource.setrlimit(resource.RLIMIT_AS, (vm + (64 << 20), hard))
try:
    if len(sys.argv) > 2:
        big = jnp.zeros((1 << 30,))  # eager: outside any jitted call
    w, loss = step(w, x)  # the step's call
finally:
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
"""

WIDE = cpu_env(COLUMNS="400")  # run's closing lines unwrapped
needs_libtpu = pytest.mark.skipif(tpus.libtpu_missing(), reason="libtpu is not installed (pip install 'jaxmemprof[tpu]')")


def _events(run_dir, kind):
    with sqlite3.connect(f"file:{run_dir}/journal.sqlite?mode=ro", uri=True) as c:
        return [m for (m,) in c.execute("SELECT message FROM events WHERE kind = ? ORDER BY rowid", (kind,))]


def _python(code: str, **env) -> str:
    proc = subprocess.run([sys.executable, "-c", code], env=cpu_env(**env), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


# -- the messages ------------------------------------------------------------------------------------------


def test_the_chips_refusal_is_read():
    (message,) = _events(FIXTURES / "gpt32-oom", "oom")
    r = read(message)
    assert (r.when, r.space, r.what) == ("compile", "hbm", "HLO temporaries")
    assert r.needed_bytes == round(30.01 * GiB) and r.available_bytes == round(15.75 * GiB)
    # the chip's own bytes_limit (tests/fixtures/tpu/README.md) is what XLA rounds to 15.75G
    assert abs(r.available_bytes - 16_909_336_064) < 0.005 * GiB


@needs_libtpu
def test_a_deviceless_refusal_and_a_host_failure_are_read():
    deviceless = _python(
        "import jax, jax.numpy as jnp, json\n"
        "from jax.experimental import topologies\n"
        "from jax.sharding import SingleDeviceSharding\n"
        "t = topologies.get_topology_desc(topology_name='v5e:2x2', platform='tpu')\n"
        "x = jax.ShapeDtypeStruct((8 << 20, 3, 3), jnp.float32, sharding=SingleDeviceSharding(t.devices[0]))\n"
        "f = lambda x: (jnp.einsum('mij,mjk->mik', jnp.einsum('mij,mjk->mik', x, x), x) * x).sum()\n"
        "try:\n    jax.jit(f).lower(x).compile()\nexcept Exception as e:\n    print(json.dumps(str(e)))\n",
        ALLOW_MULTIPLE_LIBTPU_LOAD="1", TPU_MIN_LOG_LEVEL="3")
    r = read(json.loads(deviceless))
    assert r.when == "compile" and r.what == "HLO temporaries" and r.needed_bytes > r.available_bytes
    assert r.available_bytes == round(15.75 * GiB)
    host = _python(
        "import resource, json\n"
        "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, resource.getrlimit(resource.RLIMIT_AS)[1]))\n"
        "import jax.numpy as jnp\n"
        "try:\n    (jnp.ones((1 << 30,)) + 1).block_until_ready()\nexcept Exception as e:\n    print(json.dumps(str(e)))\n")
    r = read(json.loads(host))
    assert (r.when, r.request_bytes) == ("host", 4 << 30)


def test_published_tpu_and_gpu_forms_are_read():
    r = read(TRAX_1343)
    assert (r.when, r.needed_bytes, r.available_bytes) == ("compile", round(97.92 * GiB), round(15.48 * GiB))
    a = r.allocations[0]
    assert (a.bytes, a.line, a.kind) == (GiB, 711, "HLO temp") and a.file.endswith("trainer_lib.py")
    assert a.op == "pmap(mapped_update)/add_any" and a.shape.startswith("f32[1,524288,512]")
    assert len(r.allocations) == 2 and r.allocations[1].line == 0
    r = read(FLOWPM_27)
    assert (r.needed_bytes, r.available_bytes) == (round(41.74 * GiB), 16 * GiB)
    r = read(JAX_13428)
    assert (r.when, r.request_bytes, r.needed_bytes) == ("run", 6291456, 12 << 20)
    assert [(a.bytes, a.line) for a in r.allocations] == [(6 << 20, 689), (384 << 10, 0)]
    assert r.allocations[0].shape == "f32[4096,128,3]" and r.allocations[1].kind == "parameter"
    r = read(AFPROFILE_8)
    assert (r.request_bytes, r.needed_bytes) == (4770354232, round(14.44 * GiB))
    assert read("ValueError: shapes do not match") is None



def test_xlas_runtime_forms_are_read_in_full():
    """XLA:TPU's coded runtime form is read past its first line
    (``E0100: RuntimeBufferAllocationFailure:``, which was all the reason
    said): the allocation, the free bytes, the code; the documented
    samples, the compile forms and the GPU allocators' alike."""
    r = read(E0100)
    assert (r.when, r.space, r.request_bytes, r.free_bytes) == ("run", "hbm", 256 << 20, round(252.58 * MiB))
    assert r.code == "E0100 RuntimeBufferAllocationFailure"
    assert r.reason == ("Error allocating device buffer: Attempting to allocate 256.00M. That was not possible. "
                        "There are 252.58M free.; (0x0x0_HBM0)")
    wrapped = E0100.replace(" That was", "\nThat was")  # as logs quote it, a sentence a line
    assert (read(wrapped).request_bytes, read(wrapped).free_bytes) == (r.request_bytes, r.free_bytes)
    fragmented = E0100.replace("free.;", "free. The largest contiguous region of free memory is 128.00M due to "
                                         "fragmentation.;")
    assert read(fragmented).largest_free_bytes == 128 << 20
    r = read(E0100_DOC)
    assert (r.when, r.request_bytes, r.free_bytes, r.code) == ("run", 8 << 20, round(6.43 * MiB), "")
    r = read(E0101_DOC)
    assert (r.when, r.what, r.request_bytes, r.free_bytes) == ("run", "the program", round(29.49 * GiB),
                                                                round(147.64 * MiB))
    r = read(E1000_DOC)
    assert (r.when, r.needed_bytes, r.available_bytes) == ("compile", round(49.34 * GiB), 32 * GiB)
    r = read(E1000_EARLY)
    assert (r.when, r.needed_bytes, r.available_bytes) == ("compile", round(3.84 * (GiB << 10)), round(90.96 * GiB))
    r = read(E1001_DOC)
    assert (r.when, r.space, r.needed_bytes, r.available_bytes) == ("compile", "vmem", 134217728, 67108864)
    r = read(GPU_BFC)
    assert (r.when, r.request_bytes) == ("run", 301989888)
    r = read(GPU_HOST)
    assert (r.when, r.space, r.request_bytes) == ("host", "host", 64 << 30)
    r = read(GPU_PLATFORM)
    assert (r.when, r.request_bytes) == ("run", 1 << 30)
    for form in (E0100, E0100_DOC, E0101_DOC, E1000_DOC, E1000_EARLY, E1001_DOC, GPU_BFC, GPU_HOST, GPU_PLATFORM):
        assert not read(form).damaged and read(form).reason and "\n" not in read(form).reason


# -- the chip's runs ---------------------------------------------------------------------------------------


def test_the_chips_refusal_leads_the_report_and_fails_check(tmp_path):
    for name in ("gpt32-oom", "gpt32-oom-fit"):
        shutil.copytree(FIXTURES / name, tmp_path / name)
    first = run_cli("report", tmp_path / "gpt32-oom", check=0).stdout.splitlines()[0]
    assert first.startswith("out of memory at compile: train_step (") and "gpt.py:80)" in first
    assert "needs 30.01 GiB of HLO temporaries; the device has 15.75 GiB" in first
    proc = run_cli("check", tmp_path / "gpt32-oom", "--max-peak", "100GiB", check=1)
    assert proc.stdout.startswith("FAIL out-of-memory (compile): train_step") and "(30.01G)" in proc.stdout
    # recorded with the failing call kept: its line, batch, and what fits as XLA:TPU compiled it on the chip
    out = run_cli("report", tmp_path / "gpt32-oom-fit", check=0).stdout.splitlines()
    assert "train_step (benchmarks/tpu/gpt.py:92) needs 30.01 GiB of HLO temporaries at batch 32; the device " \
           "has 15.75 GiB" in out[0]
    fit = next(x for x in out if x.startswith("what fits"))
    assert "fits at batch 16 (compiled; 17 does not)" in fit and "bfloat16: fits at batch 32 (compiled)" in fit
    proc = run_cli("check", tmp_path / "gpt32-oom-fit", "--max-peak", "100GiB", check=1)
    assert "at batch 32, the device has 15.75 GiB; fits at batch 16 (compiled)" in proc.stdout


def test_an_out_of_memory_whose_message_is_not_kept_cannot_pass_check(tmp_path):
    shutil.copytree(FIXTURES / "gpt32-oom", tmp_path / "run")
    with sqlite3.connect(tmp_path / "run" / "journal.sqlite") as c:
        c.execute("DELETE FROM events WHERE kind = 'oom'")
    proc = run_cli("check", tmp_path / "run", "--max-peak", "100GiB", check=2)
    assert "ran out of memory, and its message is not one jaxmemprof reads" in proc.stderr


# -- what fits, compiled at the end of the run -------------------------------------------------------------


def test_a_host_oom_in_a_jitted_call_is_answered_by_compiles_under_plan_device_memory(tmp_path):
    script = write_script(tmp_path, "host.py", HOST)
    m = 4 << 20
    proc = run_cli("run", "--plan-device-memory", "512MiB", "--verify-seconds", "120", "-o", "run",
                   "host.py", m, check=1, env=WIDE, cwd=tmp_path)
    line = line_of(script, "# the step's call")
    err = proc.stderr.splitlines()
    lead = next(i for i, x in enumerate(err) if x.startswith("jaxmemprof: out of memory"))
    assert err[lead] == (f"jaxmemprof: out of memory: train_step (host.py:{line}) could not allocate 288.00 MiB on "
                         f"the host at batch {m:,} (Out of memory allocating 301989888 bytes.)")
    assert lead < next(i for i, x in enumerate(err) if "exit 1 (oom)" in x)  # it leads the closing lines
    (fit,) = [json.loads(x) for x in _events(tmp_path / "run", "oom-fit")]
    assert fit["batch"] == m and fit["batch_inputs"] == ["x"] and fit["limit_from"] == "--plan-device-memory"
    rec = fit["variants"]["recorded"]
    largest, nxt, limit = rec["largest"], rec["next"], fit["limit_bytes"]
    assert 0 < largest < nxt < m and nxt - largest <= max(1, largest // 100)
    peaks = json.loads(_python(
        "import jax, jax.numpy as jnp, json\n"
        "def train_step(w, x):\n"
        "    y = jnp.einsum('mij,mjk->mik', x, x + w[None])\n"
        "    z = jnp.einsum('mij,mjk->mik', y, x)\n"
        "    return w + 1e-3 * (z * y).sum(0), (z * y).sum()\n"
        "out = []\n"
        f"for b in ({largest}, {nxt}):\n"
        "    a = jax.jit(train_step).lower(jax.ShapeDtypeStruct((3, 3), jnp.float32),\n"
        "                                  jax.ShapeDtypeStruct((b, 3, 3), jnp.float32)).compile().memory_analysis()\n"
        "    out.append(a.argument_size_in_bytes + a.output_size_in_bytes - a.alias_size_in_bytes\n"
        "               + a.temp_size_in_bytes + a.generated_code_size_in_bytes)\n"
        "print(json.dumps(out))\n"))
    outside = fit["outside_bytes"]
    assert outside + peaks[0] <= limit < outside + peaks[1]  # XLA's own compile: that batch fits, the next does not
    said = next(x for x in err if x.startswith("jaxmemprof: what fits under"))
    assert f"fits at batch {largest:,} (compiled; {nxt:,} does not)" in said and "bfloat16: fits at batch" in said
    proc = run_cli("check", tmp_path / "run", "--max-peak", "100GiB", check=1)
    assert proc.stdout.startswith("FAIL out-of-memory (host): train_step (") and f"fits at batch {largest:,}" \
        in proc.stdout


def test_a_failure_outside_a_jitted_call_names_its_line(tmp_path):
    script = write_script(tmp_path, "host.py", HOST)
    proc = run_cli("run", "-o", "run", "host.py", 1024, "eager", check=1, env=WIDE,
                   cwd=tmp_path)
    line = line_of(script, "# eager: outside any jitted call")
    assert f"jaxmemprof: out of memory: the program (host.py:{line}) could not allocate 4.00 GiB on the host" \
        in proc.stderr
    assert _events(tmp_path / "run", "oom-call") == []  # no jitted call failed


@needs_libtpu
def test_a_slice_that_refuses_the_recorded_step_is_searched_without_plan(tmp_path):
    script = write_script(tmp_path, "refused.py", REFUSED)
    proc = run_cli("run", "--target", "v5e:2x2", "-o", "run", "refused.py", check=0, env=WIDE,
                   cwd=tmp_path)
    said = next(x for x in proc.stderr.splitlines() if x.startswith("jaxmemprof: target v5e:2x2: step ("))
    head = f"jaxmemprof: target v5e:2x2: step (refused.py:{line_of(script, '@jax.jit')}) needs "
    assert said.startswith(head) and "of HLO temporaries at batch 64; the chip has 15.75 GiB; fits at batch" in said
    largest, nxt = (int(x.replace(",", "")) for x in said.split("fits at batch ")[1].split(" (compiled; ")[:1] +
                    said.split("(compiled; ")[1].split(" does not")[:1])
    assert 0 < largest < nxt <= 64
    got = json.loads(_python(
        "import jax, jax.numpy as jnp, json, sys\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "from refused import step\n"
        "from jax.experimental import topologies\n"
        "from jax.sharding import SingleDeviceSharding\n"
        "t = topologies.get_topology_desc(topology_name='v5e:2x2', platform='tpu')\n"
        "s = SingleDeviceSharding(t.devices[0])\n"
        "out = []\n"
        f"for b in ({largest}, {nxt}):\n"
        "    try:\n"
        "        step.lower(jax.ShapeDtypeStruct((256, 256), jnp.float32, sharding=s),\n"
        "                   jax.ShapeDtypeStruct((b, 256), jnp.float32, sharding=s)).compile()\n"
        "        out.append('compiled')\n"
        "    except Exception as e:\n"
        "        out.append(str(e).splitlines()[0])\n"
        "print(json.dumps(out))\n", ALLOW_MULTIPLE_LIBTPU_LOAD="1", TPU_MIN_LOG_LEVEL="3"))
    assert got[0] == "compiled" and "RESOURCE_EXHAUSTED" in got[1]


PLUGIN_OOM = '''
import resource

import jax
import jax.numpy as jnp
import pytest


@pytest.mark.limit_device_memory("1 GiB")
def test_runs_out():
    jnp.ones((4,)).block_until_ready()
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (vm + (64 << 20), hard))
    try:
        jnp.zeros((1 << 30,)).block_until_ready()
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
'''


def test_the_pytest_plugin_fails_a_test_that_ran_out_of_memory_with_xlas_reason(pytester, monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    pytester.makepyfile(test_runs_out=PLUGIN_OOM)
    result = pytester.runpytest_subprocess("-rA", "-p", "no:cacheprovider")
    assert result.ret == 1
    out = result.stdout.str()
    assert "jaxmemprof: limit_device_memory: the test ran out of memory (host): could not allocate 4.00 GiB " \
           "(XLA: Out of memory allocating 4294967296 bytes.)" in out, out


LATE = '''
import resource

import jax
import jax.numpy as jnp

jax.config.update("jax_cpu_enable_async_dispatch", False)


@jax.jit
def step(w, x):
    y = jnp.einsum("mij,mjk->mik", x, x + w[None])
    return w + 1e-3 * (y * x).sum(0), y.sum()


w = jnp.ones((3, 3))
x = jnp.ones((1 << 20, 3, 3))
for i in range(5):
    if i == 4:
        with open("/proc/self/status") as f:
            vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
        limits = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (vm + (16 << 20), limits[1]))
    try:
        w, s = step(w, x)  # the step's call
    finally:
        if i == 4:
            resource.setrlimit(resource.RLIMIT_AS, limits)
'''


def test_a_later_call_that_fails_on_the_host_is_out_of_memory_too(tmp_path):
    """jaxlib raises XLA:CPU's RESOURCE_EXHAUSTED of a call after the first as a ValueError: still an out of
    memory (before, the run said "exit 1 (exception)"), its call kept."""
    write_script(tmp_path, "late.py", LATE)
    proc = run_cli("run", "-o", "run", "late.py", check=1, env=WIDE, cwd=tmp_path)
    assert "exit 1 (oom)" in proc.stderr, proc.stderr
    line = line_of(tmp_path / "late.py", "# the step's call")
    assert f"jaxmemprof: out of memory: step (late.py:{line}) could not allocate 72.00 MiB on the host" in proc.stderr
    (call,) = [json.loads(x) for x in _events(tmp_path / "run", "oom-call")]
    assert call["call_number"] == 5 and call["signature"] == "float32[3,3], float32[1048576,3,3]"


# XLA:TPU's runtime refusal (E0100, its exact text), played by the step's Python past a batch of 4096: what the
# chip says when the call's buffers do not fit (no chip was at hand for the CPU suite).
CHIP_RUNTIME = f"""
import jax
import jax.numpy as jnp

E0100 = {E0100!r}


def train_step(w, x):
    if x.shape[0] > 4096:
        raise ValueError(E0100)
    return w + 1e-3 * (x @ w).sum(0), (x * x).sum()


step = jax.jit(train_step)
w = jnp.ones((64, 64))
for b in (1024, 2048, 8192):
    w, loss = step(w, jnp.ones((b, 64)))  # the step's call
"""


def test_a_runtime_oom_says_the_allocation_and_the_free_bytes_and_what_fits_under_them(tmp_path):
    """run, report and check say the failing allocation and the free bytes
    (before: '(XLA: E0100: RuntimeBufferAllocationFailure:)' and 'what fits:
    not compiled: the message says no limit'); what fits is compiled under
    what was live at the failure plus the free bytes XLA gave: the largest
    batch that compiles under it is 4096 (the refusal past it), the next
    within 1 %. Exit status and traceback as under python."""
    script = write_script(tmp_path, "chip.py", CHIP_RUNTIME)
    py = subprocess.run([sys.executable, str(script)], env=cpu_env(), capture_output=True, text=True, timeout=300)
    proc = run_cli("run", "--verify-seconds", "120", "-o", "run", "chip.py", env=WIDE, cwd=tmp_path)
    assert proc.returncode == py.returncode == 1, proc.stderr
    assert proc.stderr.startswith(py.stderr.rsplit("ValueError", 1)[0][:200])
    line = line_of(script, "# the step's call")
    said = (f"out of memory at run time: train_step (chip.py:{line}) could not allocate 256.00 MiB at batch 8,192; "
            "252.58 MiB was free (XLA E0100 RuntimeBufferAllocationFailure: Error allocating device buffer: "
            "Attempting to allocate 256.00M. That was not possible. There are 252.58M free.; (0x0x0_HBM0))")
    assert f"jaxmemprof: {said}" in proc.stderr.splitlines(), proc.stderr
    (fit,) = [json.loads(x) for x in _events(tmp_path / "run", "oom-fit")]
    args = (64 * 64 + 8192 * 64) * 4
    assert fit["limit_bytes"] == fit["outside_bytes"] + args + round(252.58 * MiB)
    assert fit["limit_from"] == "the arrays live at the failure and the free memory XLA's message gives"
    rec = fit["variants"]["recorded"]
    assert rec["largest"] <= 4096 < rec["next"] and rec["next"] - rec["largest"] <= max(1, rec["largest"] // 100)
    report = run_cli("report", tmp_path / "run", env=WIDE, check=0).stdout.splitlines()
    assert report[0] == said
    assert any(x.startswith("what fits under ") and f"fits at batch {rec['largest']:,} (compiled; "
               f"{rec['next']:,} does not)" in x for x in report)
    chk = run_cli("check", tmp_path / "run", "--max-peak", "1GiB", check=1).stdout.splitlines()
    assert chk[0].startswith("FAIL out-of-memory (run): train_step (") and "(XLA E0100 " in chk[0]
    assert (f"chip.py:{line}) could not allocate 256.00 MiB at batch 8,192, 252.58 MiB was free; fits at batch "
            f"{rec['largest']:,} (compiled)") in chk[0]
