"""Trend findings that hold on real programs (docs/advice.md, "Leaks"): a
leak is growth that continues across the run's steps, not one, two or three
level shifts (at the start, the middle or the end of the run), not a model
built slowly once, not a list of losses reset every epoch; a real leak of 4 B,
64 B or 4 KiB a step over 300 steps is one. One program holds every shape,
each at a line of its own, recorded with a snapshot and a marker a step, and
again without markers (each step's snapshot is then the axis)."""

from __future__ import annotations

import pytest

from conftest import in_parallel, line_of, run_cli, write_script

from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.analysis.leaks import continues, floor_of, leaks
from jaxmemprof.store.reader import load_run

STEPS = 300
# Staircases: a 1.5 MiB array made and kept at each of these steps.
STAIRS = {
    "STAIR-1-START": (3,), "STAIR-1-MIDDLE": (150,), "STAIR-1-END": (290,),
    "STAIR-2-START": (2, 20), "STAIR-2-MIDDLE": (120, 180), "STAIR-2-END": (250, 295),
    "STAIR-3-START": (1, 10, 30), "STAIR-3-MIDDLE": (90, 150, 210), "STAIR-3-END": (240, 270, 298),
}
LEAKS = {"LEAK-4B": 1, "LEAK-64B": 16, "LEAK-4KIB": 1024}  # float32 elements kept a step
_STAIR_LINES = "\n".join(
    f"        if i in {steps}:\n            kept.append(jnp.zeros((384, 1024), jnp.float32) + i)  # {name}"
    for name, steps in STAIRS.items())
_LEAK_LINES = "\n".join(
    f"        kept.append(jnp.zeros(({n},), jnp.float32) + i)  # {name}" for name, n in LEAKS.items())

PROGRAM = f"""
import sys
import jax, jax.numpy as jnp
import jaxmemprof

MARK = "--no-marks" not in sys.argv


def main():
    jax.devices()
    jaxmemprof.snapshot()
    kept, losses, layers = [], [], []
    for i in range({STEPS}):
        if i < 12:  # a model built slowly, once: one layer a step, then kept as it is
            layers.append(jnp.ones((64, 1024), jnp.float32) * i)  # SLOW-START
{_STAIR_LINES}
{_LEAK_LINES}
        losses.append(jnp.zeros((4096,), jnp.float32) + i)  # SAWTOOTH
        if i % 60 == 59:  # each epoch's losses, reset
            losses = []
        if MARK:
            jaxmemprof.mark(f"step {{i}}")
        jaxmemprof.snapshot()
    return kept, layers


main()
"""


@pytest.fixture(scope="module")
def trend_runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("trends")
    script = write_script(d, "shapes.py", PROGRAM)
    in_parallel(
        lambda: run_cli("run", "-q", "--interval", "1000", "--no-jit-probe", "-o", d / "marked", script, cwd=d),
        lambda: run_cli("run", "-q", "--interval", "1000", "--no-jit-probe", "-o", d / "unmarked", script,
                        "--no-marks", cwd=d))
    return script, {name: load_run(d / name) for name in ("marked", "unmarked")}


@pytest.mark.parametrize("which", ["marked", "unmarked"])
def test_only_continuing_growth_is_a_leak(trend_runs, which):
    script, runs = trend_runs
    run = runs[which]
    assert run.markers.empty == (which == "unmarked")
    found = leaks(attribute(run))
    lines = sorted(found["line"].tolist())
    assert lines == sorted(line_of(script, name) for name in LEAKS), found[["site", "growth_bytes_per_s"]]
    if which == "marked":
        per_step = dict(zip(found["line"], found["growth_bytes_per_step"]))
        for name, n in LEAKS.items():  # each step keeps one array of n float32
            assert per_step[line_of(script, name)] == 4 * n, per_step


def test_continues_on_series():
    """The rule on series whose shape is known (the axis: each point's step)."""
    steps = list(range(1, 101))
    ramp = [100 * s for s in steps]
    assert continues(ramp, steps)
    for shifts in ([50], [30, 70], [10, 50, 90], [1, 2, 3], [97, 98, 99]):  # 1, 2, 3 level shifts
        stairs = [sum(1_000 for k in shifts if s >= k) for s in steps]
        assert not continues(stairs, steps), shifts
    sawtooth = [100 * (s % 25) for s in steps]  # reset every 25 steps
    assert not continues(sawtooth, steps)
    assert not continues([min(s, 20) * 100 for s in steps], steps)  # a slow start, then flat
    # A transient spike (a call holding old and new state at one snapshot) is not a fall that lasts.
    spiky = [r + (50_000 if s % 10 == 0 else 0) for r, s in zip(ramp, steps)]
    floor = floor_of(spiky)[:-2]  # (the last points have no later one to judge them by)
    assert (floor <= [r + 200 for r in ramp[:-2]]).all() and (floor[1:] >= floor[:-1]).all()
    assert continues(spiky, steps)
    # Let go at the very end (the program ending): still a leak.
    assert continues(ramp[:-1] + [0], steps)
    # Bunched snapshots: the spans are of the axis, not of the points.
    assert continues([1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 2, 3, 4, 5, 6, 7, 8, 9])


EPOCHS = """
import sys, time
import numpy as np
import jax, jax.numpy as jnp
import jaxmemprof

EPOCHS = int(sys.argv[1])
NEW_SHAPES_EVERY_EPOCH = "--new-shapes" in sys.argv
weights = [jnp.ones((32, k), jnp.float32) for k in (24, 40, 8)]
for _ in range(10):  # loading the data: the set-up
    time.sleep(0.02)
    jaxmemprof.snapshot()
for epoch in range(EPOCHS):
    sizes = (40, 56, 72) if not NEW_SHAPES_EVERY_EPOCH else (40 + epoch, 56 + epoch, 72 + epoch)
    for n in sizes:  # three datasets, three layers: nine shapes of jnp.dot an epoch
        x = jnp.asarray(np.ones((n, 32), np.float32))
        for step in range(4):
            for w in weights:
                y = jnp.dot(x, w)  # SITE-DOT
                jaxmemprof.snapshot()
            time.sleep(0.02)
"""


def test_shapes_met_in_a_first_epoch_are_no_recompilation(tmp_path):
    """Eager code on 3 datasets x 3 layers compiles jit_dot 9 times in the
    first epoch of a 2-epoch run, over its whole first half, and never
    again: no recompile suspect. New shapes every epoch, over 4 epochs, keep
    coming: a suspect."""
    from jaxmemprof.analysis.leaks import recompiles

    script = write_script(tmp_path, "epochs.py", EPOCHS)
    in_parallel(
        lambda: run_cli("run", "-q", "--interval", "1000", "-o", tmp_path / "once", script, "2", cwd=tmp_path),
        lambda: run_cli("run", "-q", "--interval", "1000", "-o", tmp_path / "coming", script, "4", "--new-shapes",
                        cwd=tmp_path))
    line = line_of(script, "SITE-DOT")
    for name, suspect in (("once", False), ("coming", True)):
        found = recompiles(attribute(load_run(tmp_path / name)))
        dot = found[(found["line"] == line) & (found["name"] == "jit_dot")]
        assert len(dot) == 1, found
        assert int(dot["max_count"].iloc[0]) == (9 if name == "once" else 36), dot
        assert bool(dot["suspect"].iloc[0]) is suspect, (name, dot.to_dict("records"))
