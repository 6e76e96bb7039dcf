"""analysis/advice/donation.py: what donating the step's arguments saves,
XLA's figures per function and the estimated true peak, held to the
program's sizes, XLA's memory_analysis() of its step and the bytes
jax.live_arrays() held on each device just before each call."""

from __future__ import annotations

from jaxmemprof.analysis.advice.donation import donation_candidates, jit_memory
from jaxmemprof.analysis.rules.donation import donation_findings
from jaxmemprof.analysis.timeline import timeline

from .programs import BATCH, IN, OUT, PARAMS_BYTES, STEPS, TINY, call_peak


def _step_figures(donate: bool) -> dict:
    """XLA's figures for TINY's step compiled here (single device, as its
    calls ran), with its params donated or not: the program's own functions,
    taken from its text."""
    import jax
    import jax.numpy as jnp

    code = TINY[TINY.index("def loss("):TINY.index("def column_sums(")]
    scope = {"jax": jax, "jnp": jnp}
    exec(code, scope)
    params = {"w": jax.ShapeDtypeStruct((IN, OUT), jnp.float32), "b": jax.ShapeDtypeStruct((OUT,), jnp.float32)}
    fn = jax.jit(scope["step"], donate_argnums=(0,) if donate else ())
    m = fn.lower(params, jax.ShapeDtypeStruct((BATCH, IN), jnp.float32)).compile().memory_analysis()
    return {"argument": m.argument_size_in_bytes, "output": m.output_size_in_bytes, "alias": m.alias_size_in_bytes,
            "temp": m.temp_size_in_bytes, "code": m.generated_code_size_in_bytes}


def test_the_parameters_the_step_replaces_are_worth_donating(tiny_ar):
    (c,) = donation_candidates(tiny_ar)  # x is made anew before each call, not by it: not a candidate
    (d,) = c.donors
    assert (c.function, d.argument, d.position, d.leaves) == ("step", "params", 0, 2)
    assert c.donated_bytes == d.donated_bytes == PARAMS_BYTES and c.calls_sampled == STEPS


def test_what_donating_saves_is_the_fall_of_the_true_peak_with_xlas_donated_compile(tiny_ar, oracle, line):
    """The step compiled donated at the end of the run has the figures the
    program's own compile of jax.jit(step, donate_argnums=0) has; the saving
    is the run's true peak (busiest device) with those figures in place of
    the recorded ones, less the recorded one."""
    (f,) = donation_findings(tiny_ar)
    assert f.rule == "donate" and f.site == f"tiny.py:{line('jit')}"
    ma = oracle["memory_analysis"]
    assert _step_figures(donate=False) == ma  # this process compiles the program's step as the program did
    donated = _step_figures(donate=True)
    assert donated["alias"] == PARAMS_BYTES  # XLA aliases every byte of the params
    snapshots = int(timeline(tiny_ar).devices.groupby("device")["live_bytes"].max().max())

    def true_peak_with(m):  # the step's calls run on cpu:0 (its params and batch lie there)
        return max([snapshots] + [b["cpu:0"] - m["argument"] + call_peak(m) for b in oracle["before_call"]])

    x = f.facts
    assert x["verified"] and x["signatures_verified"] == x["signatures"] == 1
    assert (x["true_peak_before_bytes"], x["true_peak_after_bytes"]) == (true_peak_with(ma), true_peak_with(donated))
    assert x["saving_bytes_per_device"] == true_peak_with(ma) - true_peak_with(donated)
    assert x["aliased_bytes"] == donated["alias"] - ma["alias"] and x["donated_bytes"] == PARAMS_BYTES
    assert (x["temp_before_bytes"], x["temp_after_bytes"]) == (ma["temp"], donated["temp"])
    assert f.saving_bytes == max(x["saving_bytes_per_device"], 0)  # one device: the same fall


def test_each_functions_figures_are_xlas(tiny_ar, oracle, line):
    rows = jit_memory(tiny_ar).set_index("function")
    step, ma = rows.loc["step"], oracle["memory_analysis"]
    assert (step["argument_bytes"], step["output_bytes"], step["alias_bytes"], step["temp_bytes"],
            step["generated_code_bytes"]) == (ma["argument"], ma["output"], ma["alias"], ma["temp"], ma["code"])
    assert step["call_peak_bytes"] == call_peak(ma)
    assert (step["calls"], step["compiles"], step["donated"]) == (STEPS, 1, "")
    assert step["jitted_at"] == f"tiny.py:{line('jit')}"
