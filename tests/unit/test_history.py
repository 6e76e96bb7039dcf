"""analysis/history.py: what IPython's output history held at the run's
last look, on a run recorded by %%jaxmemprof in an IPython shell: each
entry's arrays and bytes, and what letting it go frees (jax.live_arrays(),
before and after deleting it, is the oracle)."""

from __future__ import annotations

from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.analysis.history import history_holders
from jaxmemprof.store.reader import load_run


def test_the_holders_are_the_entries_and_what_letting_each_go_frees(recorded):
    n, freed = recorded.history_oracle["entry"], recorded.history_oracle["freed"]
    facts = history_holders(attribute(load_run(recorded.history)))
    assert facts["freed_bytes"] == freed and facts["entries_holding"] == 2
    assert [(e["holder"], e["freed_bytes"]) for e in facts["entries"]] == [(f"Out[{n}]", freed), (f"Out[{n + 1}]", 0)]
    assert facts["held_bytes"] == sum(e["bytes"] for e in facts["entries"])


def test_a_run_recorded_outside_ipython_has_no_holders(tiny_ar):
    assert history_holders(tiny_ar) is None
