"""analysis/rules/base.py: what a rule is (its facts in order, its words per
case, how the report groups it) and the context its family's detector
reads, on every rule the report knows."""

from __future__ import annotations

from jaxmemprof.analysis.findings import SEVERITIES
from jaxmemprof.analysis.leaks import leaks, recompiles
from jaxmemprof.analysis.rules import ABOUT_A_CALL, DETECTORS, NOT_IN_PROPORTION, RULES
from jaxmemprof.analysis.rules.base import Context, Rule
from jaxmemprof.analysis.timeline import timeline


def test_every_rule_says_each_of_its_cases_and_is_made_where_it_is_declared():
    for name, rule in RULES.items():
        assert isinstance(rule, Rule) and rule.name == name and rule.finds
        assert rule.words and all(rule.words_for(case) for case in rule.words), name
        assert set(rule.optional) <= set(rule.fact_names()), name
        module = rule.made_by.removesuffix(".py").replace("/", ".")
        assert any(f"jaxmemprof.{module}" == family.__name__ for family in DETECTORS) or name in (
            "imbalance", "unfinished"), name  # the job's own rules run on a job (analysis/job.py)
    # the report's grouping is data on the rules
    assert ABOUT_A_CALL == {"donate", "remat", "narrow-dtype"} and NOT_IN_PROPORTION == {"recompile"}


def test_the_detectors_read_a_context_and_make_findings_of_their_own_rules(tiny_ar):
    ctx = Context(tiny_ar, timeline(tiny_ar), leaks=leaks(tiny_ar), recompiles=recompiles(tiny_ar))
    assert ctx.found == [] and ctx.fit is None
    for family in DETECTORS:
        for f in family.detect(ctx):
            rule = RULES[f.rule]
            assert rule.made_by == f"analysis/rules/{family.__name__.rsplit('.', 1)[1]}.py", f.rule
            assert f.severity in SEVERITIES and set(f.facts) <= set(rule.fact_names()) | {"peak_elsewhere"}
