"""analysis/rules/history.py: the output-history finding from the arrays IPython's output history keeps alive, on
a run recorded by %%jaxmemprof in an IPython shell; the saving is what
deleting the entry freed there (jax.live_arrays(), before and after)."""

from __future__ import annotations

from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.analysis.rules.history import history_findings
from jaxmemprof.store.reader import load_run


def test_the_entry_nothing_else_holds_is_named_and_its_saving_is_what_deleting_it_freed(recorded):
    n, freed = recorded.history_oracle["entry"], recorded.history_oracle["freed"]
    assert freed == 256 * 512 * 4  # jnp.tanh of a float32 [256, 512]
    (f,) = history_findings(attribute(load_run(recorded.history)))
    assert f.rule == "output-history" and f.saving_bytes == freed
    assert f.site == f"In [{n}]:1 (<module>)"
    first, second = f.fact("entries")
    assert (first["holder"], first["freed_bytes"], first["freed_arrays"]) == (f"Out[{n}]", freed, 1)
    assert f"_{n}" in first["names"]
    # Out[n + 1] is `kept`, which the name `kept` holds too: letting the entry go frees nothing.
    assert (second["holder"], second["bytes"], second["freed_bytes"]) == (f"Out[{n + 1}]", 128 * 4, 0)
    assert f.fact("held_bytes") == freed + 128 * 4


def test_a_run_recorded_outside_ipython_has_no_history_finding(tiny_ar):
    assert history_findings(tiny_ar) == []
