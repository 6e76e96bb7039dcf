"""XLA's figures read from the executable the program already has
(jaxmemprof/xla/executable.py) against XLA's own dump of the same lowering
(jaxmemprof/xla/dump.py: a compile with ``xla_dump_to``, the oracle, used only
here): the peak's bytes and position, the sequence's length, the allocations
by kind, and every value listed (those live at the peak, then the largest
others: name, bytes, kind, live range, op, user frames) agree to the byte.

Both are held to XLA's own texts, counted here by hand: at every position,
the bytes of each allocation that hold a live value (XLA's live ranges and
its placement of each value), which is what the peak and the curve must be.

Real programs: a scan, jax.grad of an MLP, jax.checkpoint, a while loop, a
fori_loop, a cond, an update written over its operand in place, a donating
jit, an nnx.jit step, an equinox filter_jit step, and a program sharded over
two CPU devices. The JAX work runs in one
subprocess per group (this test process keeps its own single CPU device).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from hypothesis import given, strategies as st

from conftest import REPO, cpu_env, line_of, write_script

from jaxmemprof.xla.curve import program_curve, sweep
from jaxmemprof.xla.executable import ExecutableError, read_protos, shape_bytes, shape_text
from jaxmemprof.xla import executable_pb2 as pb

GROUP = r'''
import json, pathlib, shutil, sys, tempfile
from collections import Counter

import jax

if sys.argv[1] == "two-devices":
    jax.config.update("jax_num_cpu_devices", 2)
import jax.numpy as jnp
from jax import lax

from jaxmemprof.xla.dump import read_dump
from jaxmemprof.xla.executable import executable_protos, read_executable

out = {}


def key(b):
    return [b.name, b.bytes, b.kind, b.start, b.end, b.at_peak, b.op, [list(f) for f in b.frames]]


def by_line(p):
    c = Counter()
    for b in p.buffers:
        if b.at_peak:
            f = b.frames[0] if b.frames else ("", 0, b.op)
            c[f"{f[0]}:{f[1]} ({f[2]}) {b.kind}"] += b.bytes
    return dict(c)


def summary(p):
    return {"peak_bytes": p.peak_bytes, "peak_position": p.peak_position, "length": p.length,
            "totals": [p.argument_bytes, p.output_bytes, p.alias_bytes, p.temp_bytes], "by_line": by_line(p),
            "buffers": [key(b) for b in p.buffers], "curve": json.loads(json.dumps(p.curve))}


def check(name, lowered):
    compiled = lowered.compile()
    mine = read_executable(compiled)
    ma = compiled.memory_analysis()
    d = tempfile.mkdtemp()
    try:
        lowered.compile(compiler_options={"xla_dump_to": d})
        [ref] = read_dump(d, mine.module)
        # XLA's own texts of the program, for the tests that count its memory by hand
        xla = {}
        for part in ("buffer-assignment", "live-range"):
            [f] = pathlib.Path(d).glob(f"module_*.{mine.module}.*_after_optimizations-{part}.txt")
            xla[part] = f.read_text()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    out[name] = {"mine": summary(mine), "ref": summary(ref), "xla": xla,
                 "memory_analysis": [ma.argument_size_in_bytes, ma.output_size_in_bytes, ma.alias_size_in_bytes,
                                     ma.temp_size_in_bytes]}


x = jnp.ones((256, 256))
w = jnp.ones((256, 256)) * 0.01

if sys.argv[1] == "two-devices":
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = jax.make_mesh((2,), ("d",))
    xs = jax.device_put(jnp.ones((512, 256)), NamedSharding(mesh, P("d")))

    def sharded(x, w):
        h = jnp.tanh(x @ w)  # LINE-SHARDED
        return (h @ w.T).sum(), jnp.sort(h, axis=1)

    f = jax.jit(sharded)
    f(xs, w)
    check("sharded", f.lower(xs, w))
    out["devices"] = len(jax.devices())
else:
    def scanned(h0, w):
        def body(h, _):
            h = jnp.tanh(h @ w)
            return h, h
        h, hs = lax.scan(body, h0, None, length=8)
        return h, hs.sum(axis=0)

    def loss(params, x):
        h = x
        for p in params:
            h = jnp.tanh(h @ p)
        return (h ** 2).mean()

    def grad_step(params, x):
        g = jax.grad(loss)(params, x)
        return [p - 0.1 * gi for p, gi in zip(params, g)]

    def remat_loss(params, x):
        h = x
        for p in params:
            h = jax.checkpoint(lambda h, p: jnp.tanh(h @ p))(h, p)
        return (h ** 2).mean()

    def looped(x):
        return lax.while_loop(lambda c: c[0] < 10, lambda c: (c[0] + 1, jnp.sin(c[1]) @ c[1]), (0, x))[1]

    def fori(x):
        return lax.fori_loop(0, 5, lambda i, c: jnp.cos(c) @ c, x)

    def branch(p, x):
        return lax.cond(p > 0, lambda x: jnp.sort(x @ x), lambda x: x + 1, x)

    def donating(x, y):
        return x * 2 + y, (x @ y).sum()

    def update(w, x):
        g = x.T @ jnp.tanh(x @ w)  # LINE-PRODUCT: the program's peak
        return w - g  # written over g in place, as g dies


    params = [jnp.ones((256, 256)) * 0.01 for _ in range(4)]
    batch = jnp.ones((512, 256))
    for name, fun, args in (
        ("scan", jax.jit(scanned), (x, w)),
        ("grad", jax.jit(grad_step), (params, batch)),
        ("remat", jax.jit(lambda p, b: jax.grad(remat_loss)(p, b)), (params, batch)),
        ("while", jax.jit(looped), (x,)),
        ("fori", jax.jit(fori), (x,)),
        ("cond", jax.jit(branch), (1.0, x)),
        ("in-place", jax.jit(update), (jnp.ones((512, 256)), jnp.ones((64, 512)))),
    ):
        fun(*args)  # the program's own compile: lower().compile() is then a cache hit
        check(name, fun.lower(*args))

    d = jax.jit(donating, donate_argnums=0)
    check("donating", d.lower(jnp.ones((256, 256)), w))

    import flax.nnx as nnx
    import optax

    class MLP(nnx.Module):
        def __init__(self, rngs):
            self.l1 = nnx.Linear(256, 512, rngs=rngs)
            self.l2 = nnx.Linear(512, 10, rngs=rngs)

        def __call__(self, x):
            return self.l2(jax.nn.relu(self.l1(x)))

    model = MLP(nnx.Rngs(0))
    opt = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)

    @nnx.jit
    def train(model, opt, x, y):
        l, g = nnx.value_and_grad(lambda m: ((m(x) - y) ** 2).mean())(model)
        opt.update(model, g)
        return l

    xb, yb = jnp.ones((128, 256)), jnp.ones((128, 10))
    train(model, opt, xb, yb)
    check("nnx", train.lower(model, opt, xb, yb))

    import equinox as eqx

    mlp = eqx.nn.MLP(256, 10, 512, 2, key=jax.random.PRNGKey(0))

    @eqx.filter_jit
    def estep(m, x, y):
        l, g = eqx.filter_value_and_grad(lambda m: ((jax.vmap(m)(x) - y) ** 2).mean())(m)
        return l, eqx.apply_updates(m, jax.tree_util.tree_map(lambda g: -0.1 * g, g))

    estep(mlp, xb, yb)
    check("equinox", estep.lower(mlp, xb, yb).lowered)

    # The protos themselves, for the tests that need no JAX.
    hlo, assignment, _ = executable_protos(jax.jit(scanned).lower(x, w).compile())
    out["protos"] = [hlo.hex(), assignment.hex()]
print("RESULT " + json.dumps(out))
'''

PROGRAMS = ["scan", "grad", "remat", "while", "fori", "cond", "in-place", "donating", "nnx", "equinox"]


def _group(tmp_path_factory, name):
    d = tmp_path_factory.mktemp(name)
    script = write_script(d, "group.py", GROUP)
    env = cpu_env(PYTHONPATH=str(REPO))
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run([sys.executable, str(script), name], cwd=d, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    [line] = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    return {**json.loads(line[len("RESULT "):]), "script": script}


@pytest.fixture(scope="module")
def one_device(tmp_path_factory):
    return _group(tmp_path_factory, "one-device")


@pytest.fixture(scope="module")
def two_devices(tmp_path_factory):
    return _group(tmp_path_factory, "two-devices")


def _agree(result):
    mine, ref = result["mine"], result["ref"]
    assert mine["peak_bytes"] == ref["peak_bytes"] > 0
    assert mine["peak_position"] == ref["peak_position"]
    assert mine["length"] == ref["length"]
    assert mine["by_line"] == ref["by_line"]
    assert mine["totals"] == ref["totals"] == result["memory_analysis"]
    # every value listed, at the peak and the largest others, the same in the same order
    assert mine["buffers"] == ref["buffers"]
    # what the lines hold at the peak is the peak
    assert sum(mine["by_line"].values()) == mine["peak_bytes"]
    # the program-order curve: the same from both, its top the peak at the peak's position, and
    # each position's bytes the sum of its stacks'
    curve = mine["curve"]
    assert curve == ref["curve"]
    at = curve["positions"].index(mine["peak_position"])
    assert curve["bytes"][at] == mine["peak_bytes"] == max(curve["bytes"])
    for i, total in enumerate(curve["bytes"]):
        assert total == sum(run[i] for _, run in curve["stacks"]) + curve["other"][i]
    _held_to_xlas_count(result)


# -- the peak against XLA's own texts, counted by hand ------------------------------------------

_ALLOCATION = re.compile(r"^allocation (\d+): size (\d+)(.*):$")
_PLACED = re.compile(r"^ value: <\d+ (\S+)(?: \(\w+\))? @\d+> \(size=(\d+),offset=(\d+)\)")
_LIVE = re.compile(r"^    (\S+\{[\d,]*\}):(\d+)-(\d+)$")
_SEQUENCE = re.compile(r"^HloLiveRange \(max (\d+)\):")
_XLA_PEAK = re.compile(r"^  Live ranges at (\d+) \(peak\):$")


def _xla(texts) -> dict:
    """What XLA's buffer assignment and live ranges say, read here on their own:
    each value's place (allocation, offset, size) and range, the sequence's
    length, each allocation's size and kind words, and the live ranges' "peak"."""
    places, allocs, allocation = {}, {}, None
    for line in texts["buffer-assignment"].splitlines():
        if m := _ALLOCATION.match(line):
            allocation = int(m.group(1))
            allocs[allocation] = (int(m.group(2)), m.group(3))
        elif (m := _PLACED.match(line)) and allocation is not None:
            name = m.group(1) if m.group(1).endswith("}") else m.group(1) + "{}"
            places[name] = (allocation, int(m.group(3)), int(m.group(2)))
    ranges, length, peak = {}, None, None
    for line in texts["live-range"].splitlines():
        if m := _SEQUENCE.match(line):
            length = int(m.group(1))
        elif m := _LIVE.match(line):
            ranges[m.group(1)] = (int(m.group(2)), int(m.group(3)))
        elif m := _XLA_PEAK.match(line):
            peak = int(m.group(1))
    return {"places": places, "allocations": allocs, "ranges": ranges, "length": length, "live_range_peak": peak}


def _in_use(xla) -> list:
    """At each position of the sequence, the bytes XLA has placed live values
    in: per allocation, the bytes [offset, offset + size) of every value whose
    live range holds the position, bytes that two values share (one written
    over the other in place, a loop's carried value) once. A thread's own
    scalars (thread-local) are not the call's memory."""
    local = {a for a, (_, words) in xla["allocations"].items() if "thread-local" in words}
    end = max([xla["length"], *(e for _, e in xla["ranges"].values())]) + 1
    placed = [(place, xla["ranges"][v]) for v, place in xla["places"].items()
              if place[0] not in local and v in xla["ranges"]]
    out = []
    for t in range(end):
        spans = sorted(place for place, (start, stop) in placed if start <= t <= stop)
        used, allocation, reach = 0, None, 0
        for a, offset, size in spans:
            if a != allocation:
                allocation, reach = a, 0
            used += max(0, offset + size - max(offset, reach))
            reach = max(reach, offset + size)
        out.append(used)
    return out


def _held_to_xlas_count(result):
    """The peak, its position and the curve are XLA's own bytes in use, and
    never more than memory_analysis()'s allocations (and the constants)."""
    mine, xla = result["mine"], _xla(result["xla"])
    used = _in_use(xla)
    assert (mine["peak_bytes"], mine["peak_position"]) == (max(used), used.index(max(used)))
    assert mine["curve"]["bytes"] == [used[p] for p in mine["curve"]["positions"]]
    arguments, outputs, aliased, temporaries = result["memory_analysis"]
    constants = sum(size for size, words in xla["allocations"].values() if "constant" in words)
    assert max(used) <= arguments + outputs - aliased + temporaries + constants


@pytest.mark.parametrize("program", PROGRAMS)
def test_the_executable_says_what_the_dump_says(one_device, program):
    _agree(one_device[program])


def test_an_op_written_over_its_operand_counts_once(one_device):
    """``w - g``: XLA writes it over ``g``'s buffer as ``g`` dies (the two
    values share one slice of the output's allocation, their ranges meeting at
    the subtraction). XLA's HloLiveRange counts both there and puts its "peak"
    at the subtraction, and so did jaxmemprof (1,179,648 B there, below the
    call's own allocations). The most is one step before, where ``g`` is made
    while the activation it reads is still live: then every allocation XLA
    made for the call is full, so the peak is memory_analysis()'s arguments +
    outputs - aliased + temporaries."""
    result = one_device["in-place"]
    mine, xla = result["mine"], _xla(result["xla"])
    arguments, outputs, aliased, temporaries = result["memory_analysis"]
    f32 = 4
    assert mine["peak_bytes"] == arguments + outputs - aliased + temporaries == f32 * (
        512 * 256 + 64 * 512 + 512 * 256 + 64 * 256)  # w, x, g (then w - g), tanh(x @ w)
    # XLA's texts: g and w - g in one slice, g ending where w - g starts, at XLA's live-range "peak"
    by_place = {}
    for v, place in xla["places"].items():
        by_place.setdefault(place, []).append(xla["ranges"][v] + (v,))
    [(g, update)] = [(a[2], b[2]) for a, b in (sorted(vs) for vs in by_place.values() if len(vs) == 2) if a[1] == b[0]]
    written = xla["ranges"][update][0]
    assert xla["ranges"][g][1] == written == xla["live_range_peak"]
    assert mine["peak_position"] == xla["ranges"][g][0] == written - 1
    used = _in_use(xla)
    assert used[written] == mine["peak_bytes"] - 64 * 256 * f32  # the activation is gone; w - g adds nothing
    # at the peak: the arguments, and g and the activation at the line that makes them
    script = one_device["script"]
    line = line_of(script, "LINE-PRODUCT")
    assert mine["by_line"] == {":0 (w) argument": 512 * 256 * f32, ":0 (x) argument": 64 * 512 * f32,
                               f"{script}:{line} (update) output": 512 * 256 * f32,
                               f"{script}:{line} (update) temporary": 64 * 256 * f32}


def test_a_program_sharded_over_two_devices(two_devices):
    assert two_devices["devices"] == 2
    _agree(two_devices["sharded"])
    # per device: each holds half of the 512 rows
    by_line = two_devices["sharded"]["mine"]["by_line"]
    assert any(k.endswith("(sharded) temporary") or k.endswith("(sharded) output") for k in by_line)


def test_user_lines_and_loops_are_named(one_device):
    """The values live at a loop's peak (its carried value and the body's
    temporaries) and the scan's stacked outputs are at the user's lines, not
    left without a stack."""
    scan = one_device["scan"]["mine"]
    assert any(b[5] and b[1] == 8 * 256 * 256 * 4 and b[7] for b in scan["buffers"])
    loop = one_device["while"]["mine"]
    carried = [b for b in loop["buffers"] if b[5] and b[1] == 256 * 256 * 4 and b[2] != "argument"]
    assert carried and all(b[7] and b[7][0][0].endswith("group.py") for b in carried)


def test_missing_or_damaged_protos_are_a_clear_error(one_device):
    hlo, assignment = (bytes.fromhex(h) for h in one_device["protos"])
    p = read_protos(hlo, assignment)
    assert p.peak_bytes == one_device["scan"]["mine"]["peak_bytes"]
    for args, words in (((hlo, b""), "no buffer assignment"), ((b"", assignment), "no HLO module"),
                        ((hlo, pb.BufferAssignment().SerializeToString() + b"\x08\x01"), "empty"),
                        ((hlo, b"\xff\xff\xff"), "cannot be read"),
                        ((pb.HloModule(name="m").SerializeToString(), assignment), "entry computation")):
        with pytest.raises(ExecutableError, match=words):
            read_protos(*args)


def test_shapes_are_sized_and_written_as_xla_does():
    f32 = pb.Shape(element_type=11, dimensions=[1024, 3])
    s4 = pb.Shape(element_type=21, dimensions=[3], layout=pb.Layout(element_size_in_bits=4))
    t = pb.Shape(element_type=13, tuple_shapes=[f32, pb.Shape(element_type=4)])
    assert (shape_bytes(f32), shape_bytes(s4), shape_bytes(t)) == (1024 * 3 * 4, 2, 16)
    assert (shape_text(f32), shape_text(t)) == ("f32[1024,3]", "(f32[1024,3], s32[])")


# -- the program-order curve, against counting each position by hand -------------------------


_VALUES = st.lists(st.tuples(st.integers(0, 30), st.integers(0, 12), st.integers(1, 1000),
                             st.sampled_from([None, "a", "b", "c"]), st.sampled_from(["x", "y", "z"])),
                   max_size=25).map(lambda vs: [(s, s + n, size, buf, key) for s, n, size, buf, key in vs])


def _by_hand(values, length):
    """At each position: each buffer's largest value live there (a value in no buffer on its own)."""
    end = max([length] + [e for _, e, _, _, _ in values]) + 1
    totals, keys = [], []
    for t in range(end):
        best = {}
        for i, (s, e, size, buf, key) in enumerate(values):
            if s <= t <= e:
                slot = ("own", i) if buf is None else buf
                if slot not in best or size > best[slot][0]:
                    best[slot] = (size, key)
        per = {}
        for size, key in best.values():
            per[key] = per.get(key, 0) + size
        totals.append(sum(per.values()))
        keys.append(per)
    return totals, keys


@given(_VALUES, st.integers(0, 40))
def test_the_curve_counts_each_buffer_once_at_every_position(values, length):
    curve = program_curve(values, length)
    totals, keys = _by_hand(values, length)
    assert curve["positions"] == list(range(len(totals)))
    assert curve["bytes"] == totals
    for i, per in enumerate(keys):
        assert {k: run[i] for k, run in curve["stacks"] if run[i]} == per
        assert curve["other"][i] == 0


@given(_VALUES, st.integers(0, 40), st.integers(1, 6))
def test_a_long_curve_keeps_each_stretchs_highest_position_and_the_peak(values, length, points):
    curve = program_curve(values, length, points=points, stacks=1)
    totals, _ = _by_hand(values, length)
    kept = curve["positions"]
    assert len(kept) <= max(points, len(totals)) and kept == sorted(set(kept))
    assert totals.index(max(totals)) in kept  # the first position of most bytes: XLA's peak
    assert curve["bytes"] == [totals[p] for p in kept]
    for i in range(len(kept)):  # one stack named, the rest summed: still the position's bytes
        assert sum(run[i] for _, run in curve["stacks"]) + curve["other"][i] == curve["bytes"][i]


@given(_VALUES, st.integers(0, 40))
def test_the_peak_is_the_first_position_of_most_bytes_and_its_values_fill_it(values, length):
    swept = sweep([v[:4] for v in values], length)
    totals, _ = _by_hand(values, length)
    assert (swept.peak_bytes, swept.peak_position) == (max(totals), totals.index(max(totals)))
    at = [values[i] for i in swept.at_peak]
    assert all(s <= swept.peak_position <= e for s, e, _, _, _ in at)
    buffers = [buf for _, _, _, buf, _ in at if buf is not None]
    assert len(buffers) == len(set(buffers))  # each buffer once
    assert sum(size for _, _, size, _, _ in at) == swept.peak_bytes
