"""xprof/xplane._runs_by_op: a CPU profile of JAX 0.6 names no run, so the
runs of a program are counted from its operations' events: an operation of
its entry computation runs once a run, one in a loop's body more often (not
counted), and each device runs it (the most over the devices, not their
sum); where no operation has an event (host_tracer_level 1), from the calls
of the jitted function of its name. The HLO is XLA's own compile."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jaxmemprof.xprof.programs import entry_operations
from jaxmemprof.xprof.xplane import Program, _runs_by_op


def _module() -> bytes:
    def f(x):
        return lax.fori_loop(0, 5, lambda i, c: jnp.tanh(c) * 2, x).sum()

    compiled = jax.jit(f).lower(jnp.ones((8, 8))).compile()
    return compiled.runtime_executable().hlo_modules()[0].as_serialized_hlo_module_proto()


def test_runs_are_an_entry_operations_events_on_one_device():
    hlo = _module()
    entry = entry_operations(hlo)
    first, second = sorted(entry)[:2]  # two of the entry's operations, as this XLA named them
    assert "body_fusion" not in entry
    runs: dict = {}
    # 3 runs on each of 2 devices: the entry's operations once a run, a loop body's fusion 5 times
    by_op = {(7, first, 0): 3, (7, second, 0): 3, (7, "body_fusion", 0): 15,
             (7, first, 1): 3, (7, second, 1): 2, (7, "body_fusion", 1): 15}  # one event lost on device 1
    _runs_by_op(by_op, [Program(7, "jit_f", hlo, b"")], runs)
    assert runs == {7: (3, {0, 1})}


def test_without_operations_events_the_calls_of_its_function_are_its_runs():
    hlo = _module()
    runs: dict = {}
    programs = [Program(3, "jit_f", hlo, b""), Program(5, "jit_g", hlo, b""), Program(6, "jit_g", hlo, b"")]
    _runs_by_op({("call", "f"): 4, ("call", "g"): 2}, programs, runs)
    assert runs == {3: (4, {0})}  # g: two programs of that name, which ran is not known
