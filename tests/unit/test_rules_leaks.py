"""analysis/rules/leaks.py on the bundled mlp-leak run (one (1024,) float32
array of losses kept a step): the leak finding from analysis/leaks.py's
table, its severity by its projected share of the peak, found by the
family's detector as the report finds it."""

from __future__ import annotations

from jaxmemprof.analysis.attributed import attribute
from jaxmemprof.analysis.leaks import leaks, recompiles
from jaxmemprof.analysis.options import Options
from jaxmemprof.analysis.rules import leaks as rule
from jaxmemprof.analysis.rules.base import Context
from jaxmemprof.analysis.timeline import timeline


def test_the_detector_finds_the_leak_the_table_holds_with_its_projected_growth(mlp_leak):
    ar = attribute(mlp_leak, Options())
    rows = leaks(ar)
    found = rule.detect(Context(ar, timeline(ar), leaks=rows, recompiles=recompiles(ar)))
    (f,) = found
    (r,) = rows.to_dict("records")
    assert (f.rule, f.site, f.saving_bytes) == ("leak", r["site"], int(r["projected_growth_bytes"]))
    share = r["projected_share_of_peak"]
    assert f.severity == ("high" if share >= 0.5 else "medium" if share >= 0.1 else "low")
    assert f.fact("growth_bytes_per_step") == 1024 * 4 and f.fact("projected_share_of_peak") == share


def test_a_run_without_growth_has_no_leak(tiny_ar):
    ctx = Context(tiny_ar, timeline(tiny_ar), leaks=leaks(tiny_ar), recompiles=recompiles(tiny_ar))
    assert [f for f in rule.detect(ctx) if f.rule == "leak"] == []
