"""On a TPU the chip reserves for a program its buffer assignment's
temporaries in device memory (colour 0), not XLA:TPU's
``memory_analysis().temp_size``: every figure jaxmemprof gives there takes
its temporaries from the compile's dump (xla/dump.reserved_figures,
docs/tpu.md "The program's reservation").

- a deviceless v5e compile (libtpu, no chip) of a small donated scan step,
  through the what-ifs' own compile (compiles.compile_call): its temporaries
  are the dump's colour-0 temporary allocations, read here by a parse of
  this file's own, and XLA:TPU's memory_analysis() says another figure;
- on XLA:CPU the same parse equals memory_analysis() (no CPU figure moves);
- the chip's counters of the ViT (tests/fixtures/tpu/vit-b16-batch24,
  measured on a v5e) against the rule applied to its buffer assignment.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import cpu_env

from jaxmemprof.facts import tpus
from jaxmemprof.facts.backends.tpu import RESERVATION_BEYOND_ASSIGNMENT
from jaxmemprof.xla.dump import allocations, device_temporaries, read_dump, reserved_figures

VIT = Path(__file__).parent / "fixtures" / "tpu" / "vit-b16-batch24"
ALLOCATION = re.compile(r"^allocation \d+: size (\d+)(.*):$")


def colour0_temporaries(text: str) -> int:
    """This test's own reading: allocations with no colour (the device's
    memory) that are neither parameters, outputs, constants nor thread-local."""
    total = 0
    for line in text.splitlines():
        m = ALLOCATION.match(line)
        if m and not any(word in m.group(2) for word in ("color", "parameter", "output", "maybe-live-out",
                                                         "constant", "thread-local")):
            total += int(m.group(1))
    return total


TPU_STEP = r"""
import glob, json, os, sys, tempfile
import jax, jax.numpy as jnp
from jax.sharding import SingleDeviceSharding
from jaxmemprof.facts.tpus import topology
from jaxmemprof.capture.jit.compiles import compile_call

one = SingleDeviceSharding(topology("v5e:1x1").devices[0])


def step(w, xs):
    def body(c, x):
        h = jnp.tanh(x @ c)
        return c - 0.01 * (x.T @ h), jnp.sum(h)
    return jax.lax.scan(body, w, xs)


f = jax.jit(step, donate_argnums=(0,))
args = (jax.ShapeDtypeStruct((512, 512), jnp.float32, sharding=one),
        jax.ShapeDtypeStruct((8, 256, 512), jnp.float32, sharding=one))
done, seconds, error, said = compile_call(jax, f, args, {}, "jax.jit", retraced=False)
assert error is None, error
# the independent compile: the same lowering, dumped by XLA's own option, and its memory_analysis()
d = tempfile.mkdtemp()
compiled = f.lower(*args).compile(compiler_options={"xla_dump_to": d, "xla_dump_hlo_as_text": True})
ma = compiled.memory_analysis()
texts = [open(p).read() for p in glob.glob(d + "/*after_optimizations-buffer-assignment.txt")]

# the program's own signature, dumped (its executable holds no buffer assignment): its jit_compiles row's
# temporaries made the dump's, and said
from jaxmemprof.capture.jit.programs import Programs
from jaxmemprof.capture.totals import _TotalsWriter


from jaxmemprof.capture.jit.programs import program_digest


# A second signature of the program (its step counter a Python 0, then the int32 it returned: one program
# to XLA), and a third that is another program (another length of xs): the dump read for the first gives
# the second's temporaries, not the third's.
def counted(n, w, xs):
    return n + 1, *step(w, xs)


g = jax.jit(counted, donate_argnums=(1,))
counter = jax.ShapeDtypeStruct((), jnp.int32, sharding=one)
lowerings = {"sig": g.lower(0, *args), "sig-array": g.lower(counter, *args),
             "sig-other": g.lower(0, args[0], jax.ShapeDtypeStruct((4, 256, 512), jnp.float32, sharding=one))}


class State:
    function_id, curves, row = 1, 0, {"name": "step"}
    programs = {sig: program_digest(low) for sig, low in lowerings.items()}
    reserved = {}


own = Programs()
own.writer, own._jax = _TotalsWriter(), jax
for sig, low in lowerings.items():
    m = low.compile().memory_analysis()
    own.writer.add_jit_compile((1, 1, 0.0, sig, m.argument_size_in_bytes, m.output_size_in_bytes,
                                m.alias_size_in_bytes, m.temp_size_in_bytes, m.generated_code_size_in_bytes))
own._dump_lowered(State, "sig", lowerings["sig"])
print(json.dumps({"figures": list(done[0]), "said": said, "texts": texts, "leftover": os.listdir(tempfile.gettempdir()),
                  "own": {c["signature"]: c["temp_bytes"] for c in own.writer.compiles}, "events": own.writer.events,
                  "digests": State.programs,
                  "ma": [ma.argument_size_in_bytes, ma.output_size_in_bytes, ma.alias_size_in_bytes,
                         ma.temp_size_in_bytes, ma.generated_code_size_in_bytes]}))
"""


@pytest.mark.skipif(tpus.libtpu_missing(), reason="libtpu is not installed (pip install 'jaxmemprof[tpu]')")
def test_a_tpu_compiles_temporaries_are_its_buffer_assignments(tmp_path):
    proc = subprocess.run([sys.executable, "-c", TPU_STEP], capture_output=True, text=True, timeout=300,
                          env=cpu_env(ALLOW_MULTIPLE_LIBTPU_LOAD="1", TPU_MIN_LOG_LEVEL="3", TMPDIR=str(tmp_path)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    (text,) = out["texts"]
    reserved = colour0_temporaries(text)
    figures, ma = out["figures"], out["ma"]
    assert reserved > 0 and ma[3] != reserved  # XLA:TPU's memory_analysis() says another figure (0 here)
    assert figures[3] == reserved == device_temporaries(text)
    assert figures[:3] == ma[:3] and figures[4] == ma[4]  # the rest as memory_analysis() gives them
    assert out["said"] == []  # read from the dump, nothing to say
    # the program's own signature's, once its dump is read, and its twin's (one program: its counter a
    # Python 0, then an int32 array); not another program's
    digests = out["digests"]
    assert digests["sig"] == digests["sig-array"] != digests["sig-other"]
    assert out["own"]["sig"] == out["own"]["sig-array"] == reserved != out["own"]["sig-other"]
    assert [k for k, _ in out["events"]] == ["reservation"] * 2
    assert all(f"temporaries {reserved:,} B" in e for _, e in out["events"])
    assert "sig-array" in out["events"][1][1] and "(the program of sig)" in out["events"][1][1]
    assert not [n for n in out["leftover"] if n.startswith(".xla-dump-")]  # the compile's own dump removed


def test_on_cpu_the_colour_0_temporaries_are_memory_analysis():
    """No CPU figure moves: XLA:CPU's memory_analysis() temp is its buffer
    assignment's temporaries, and reserved_figures leaves CPU figures alone."""
    import jax
    import jax.numpy as jnp

    def step(w, xs):
        def body(c, x):
            h = jnp.tanh(x @ c)
            return c - 0.01 * (x.T @ h), jnp.sum(h)
        return jax.lax.scan(body, w, xs)

    args = (jax.ShapeDtypeStruct((256, 256), jnp.float32), jax.ShapeDtypeStruct((4, 64, 256), jnp.float32))
    for donate in ((), (0,)):
        with tempfile.TemporaryDirectory() as d:
            compiled = jax.jit(step, donate_argnums=donate).lower(*args).compile(
                compiler_options={"xla_dump_to": d, "xla_dump_hlo_as_text": True})
            ma = compiled.memory_analysis()
            (path,) = Path(d).glob("*jit_step*after_optimizations-buffer-assignment.txt")
            text = path.read_text()
            assert ma.temp_size_in_bytes > 0
            assert device_temporaries(text) == colour0_temporaries(text) == ma.temp_size_in_bytes
            (program,) = read_dump(d, "jit_step")
            assert (program.argument_bytes, program.output_bytes, program.alias_bytes, program.temp_bytes) == (
                ma.argument_size_in_bytes, ma.output_size_in_bytes, ma.alias_size_in_bytes, ma.temp_size_in_bytes)
            five = (1, 2, 3, 4, 5)
            assert reserved_figures(five, "cpu", d) == (five, "memory_analysis")
            assert reserved_figures(five, "tpu", d) == ((1, 2, 3, ma.temp_size_in_bytes, 5), "buffer_assignment")


def _vit(name: str) -> str:
    return (VIT / f"{name}.buffer-assignment.txt").read_text()


def test_the_vit_on_the_chip_reserved_its_buffer_assignments_temporaries():
    """The chip's peak_bytes_reserved of the ViT, undonated and donated, is
    the rule applied to its buffer assignment (plus a constant 15,872 B),
    where memory_analysis()'s temp_size is 33 and 390 MB off."""
    chip = json.loads((VIT / "chip.json").read_text())
    extra = chip["reservation_constant_bytes"]
    assert extra == RESERVATION_BEYOND_ASSIGNMENT
    for name in ("undonated", "donated"):
        text = _vit(name)
        assert device_temporaries(text) == colour0_temporaries(text)
        assert device_temporaries(text) + extra == chip[name]["peak_bytes_reserved"]
        assert chip[name]["memory_analysis_temp_bytes"] - chip[name]["peak_bytes_reserved"] > 30_000_000
    assert device_temporaries(_vit("undonated")) == 6_391_153_152
    assert device_temporaries(_vit("donated")) == 7_254_491_648
    # the step's own saving by the rule: undonated arguments + outputs + reservation, less donated
    # arguments + outputs not aliased to them + reservation (the rest of the chip's fall: docs/tpu.md)
    totals = {n: allocations(_vit(n))[1] for n in ("undonated", "donated")}

    def held(t):
        return t["argument"] + t["aliased"] + t["output"] + t["temporary"]  # each aliased buffer once

    assert held(totals["undonated"]) == 8_487_120_896
    assert held(totals["donated"]) == 8_310_733_824
    assert held(totals["undonated"]) - held(totals["donated"]) == 176_387_072
    fall = sum(chip["undonated"][k] - chip["donated"][k] for k in ("peak_bytes_in_use", "peak_bytes_reserved"))
    assert fall == chip["chip_fall_bytes"] == 527_782_912
    assert fall - 176_387_072 == 351_395_840  # the first parameters the program still holds (docs/tpu.md)


def test_other_memory_spaces_are_not_the_devices():
    """XLA:TPU's on-chip memories (colour 1: VMEM, 117 MB of the ViT's) are in
    no figure: the dump's temp_bytes counted every colour before."""
    text = _vit("donated")
    every = sum(int(m.group(1)) for m in map(ALLOCATION.match, text.splitlines())
                if m and "preallocated-temp" in m.group(2))
    assert every == 7_371_692_204
    assert allocations(text)[1]["temporary"] == 7_254_491_648
