"""analysis/roles.py: what the memory is at the step's largest call, by
role and owner, held to the program's sizes, XLA's memory_analysis() of the
step and the bytes jax.live_arrays() held on each device just before the
call."""

from __future__ import annotations

from jaxmemprof.analysis.roles import roles

from .programs import B_BYTES, PARAMS_BYTES, W_BYTES, X_BYTES, call_peak


def test_the_roles_on_each_device_are_the_programs_bytes_and_add_up_to_the_calls_peak(tiny_ar, oracle):
    what = roles(tiny_ar)
    ma = oracle["memory_analysis"]
    before = oracle["before_call"][-1]  # the step's largest call: its last (the program kept more each step)
    assert what.where == "during a call of step" and what.function == "step"
    on = {d: dict(zip(g["role"], g["bytes"])) for d, g in what.by_role.groupby("device")}
    cpu0 = on["cpu:0"]
    assert cpu0["parameters"] == PARAMS_BYTES  # carried from call to call
    assert cpu0["batch"] == X_BYTES  # new at every call
    assert cpu0["new state"] == PARAMS_BYTES  # not donated: XLA writes the new parameters anew
    assert cpu0["inside the call"] == ma["temp"]
    assert cpu0["parameters"] + cpu0["batch"] == ma["argument"]
    assert cpu0["new state"] + cpu0["results"] == ma["output"] - ma["alias"]
    assert cpu0["other arrays"] == before["cpu:0"] - ma["argument"]  # live before it, not its inputs
    assert sum(cpu0.values()) == what.peak_bytes == before["cpu:0"] - ma["argument"] + call_peak(ma)
    assert on["cpu:1"] == {"other arrays": before["cpu:1"]}  # the step runs on cpu:0 alone


def test_the_owners_are_the_programs_own_names(tiny_ar):
    owners = roles(tiny_ar).owners
    rows = {(o, r): b for o, r, b in zip(owners["owner"], owners["role"], owners["bytes"])}
    assert rows[("params['w']", "parameters")] == rows[("params['w']", "new state")] == W_BYTES
    assert rows[("params['b']", "parameters")] == B_BYTES and rows[("x", "batch")] == X_BYTES
