"""Every finding rule, one place each: how it is found, its severity, its
facts, their meanings and its words.

A finding (analysis/findings.py) is data: a rule, a case, a severity, a site,
a saving and facts. Each module here is one family of findings: its
``detect(ctx)`` makes them (with their severities) from what the analyses
computed (``Context``: the attributed run, its timeline, the report's tables,
the findings made before it), and its ``Rule`` records say the facts every
case writes, what a fact means where the column glossary does not already
say it, what the rule finds in one sentence, the words for each case and
how the report groups it (``in_proportion``, ``about_a_call``).
analysis/report.py runs ``DETECTORS`` in turn; ``render/findings.py`` words a
finding through ``RULES``; ``python -m jaxmemprof.glossary`` writes
docs/columns.md from them; ``check --fail-on`` takes their names.

A new rule: its family's module here (or a new module, added to
``_FAMILIES`` and, if it finds in a run, to ``DETECTORS``), and its test.
"""

from __future__ import annotations

from jaxmemprof.analysis.rules import allocator, capacity, donation, history, inside_jit, job, leaks, sharding
from jaxmemprof.analysis.rules.base import Context, Rule, Words

_FAMILIES = (leaks, donation, allocator, capacity, inside_jit, job, sharding, history)

RULES: dict[str, Rule] = {r.name: r for family in _FAMILIES for r in family.RULES}

# What the report runs on a run, in order (the fit, last, names the fixes made before it; the job's own
# rules run on a job's processes: analysis/job.py).
DETECTORS = (leaks, donation, sharding, history, inside_jit, allocator, capacity)

NOT_IN_PROPORTION = frozenset(name for name, r in RULES.items() if not r.in_proportion)
ABOUT_A_CALL = frozenset(name for name, r in RULES.items() if r.about_a_call)

__all__ = ["ABOUT_A_CALL", "Context", "DETECTORS", "NOT_IN_PROPORTION", "RULES", "Rule", "Words"]
