"""Every finding rule, one place each: its facts, their meanings and its words.

A finding (analysis/findings.py) is data: a rule, a case, a severity, a site,
a saving and facts. Each module here declares the ``Rule`` records of one
family of findings (the analysis module that makes them is named in each):
the facts every case writes, what a fact means where the column glossary
does not already say it, what the rule finds in one sentence, and the words
for each case. ``render/findings.py`` words a finding through ``RULES``;
``python -m jaxmemprof.glossary`` writes docs/columns.md from them; ``check
--fail-on`` takes their names.

A new rule: its producer in analysis/ (a ``Finding`` with its facts), and
its ``Rule`` in the family's module here (or a new module, added to
``_FAMILIES``).
"""

from __future__ import annotations

from jaxmemprof.rules import allocator, capacity, donation, history, inside_jit, job, leaks, sharding
from jaxmemprof.rules.base import Rule, Words

_FAMILIES = (leaks, donation, allocator, capacity, inside_jit, job, sharding, history)

RULES: dict[str, Rule] = {r.name: r for family in _FAMILIES for r in family.RULES}

__all__ = ["RULES", "Rule", "Words"]
