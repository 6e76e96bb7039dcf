"""One name per idea: what every CSV and JSON column means, and the two docs
made from it. A docs tool: nothing jaxmemprof runs imports it.

- ``columns.py``: ``GLOSSARY``, every column or key name that jaxmemprof
  writes to CSV or JSON -> one sentence (units, and how it is computed, in a
  few words).
- ``in_table.py``: ``IN_TABLE``: table -> {name: sentence}, where a name says
  something narrower (or other) in that one table than ``GLOSSARY`` says.
- ``terms.py``: ``TERMS``, the words the docs use (site, snapshot, peak,
  donation, ...).
- ``tables.py``: every output and its columns, in order. The column lists
  come from the analyses' own constants (imported there, never retyped);
  where a table has none (the job's processes.csv, job_peak_sites.csv and
  job_timeline.csv) the list is kept there and tests/test_columns_doc.py
  checks it against real output.
- A finding's facts, in order, and what each means where ``GLOSSARY`` does
  not say it: beside the rule's words, in jaxmemprof/analysis/rules/.
- ``docs.py``: ``python -m jaxmemprof.glossary`` writes docs/columns.md
  (every output file and JSON section, its rows, its columns in order with
  their meaning, and the facts of each finding rule) and docs/glossary.md
  (the terms); ``--check`` exits 1 when the committed files differ;
  ``--print`` writes columns.md to stdout (``--print --glossary``:
  glossary.md).
"""

from __future__ import annotations

from jaxmemprof.glossary.columns import GLOSSARY
from jaxmemprof.glossary.in_table import IN_TABLE
from jaxmemprof.analysis.rules import RULES

REGENERATE = "python -m jaxmemprof.glossary"


def meaning(name: str, table: str | None = None) -> str:
    """What ``name`` means in ``table`` (IN_TABLE, else GLOSSARY)."""
    if table is not None and name in IN_TABLE.get(table, {}):
        return IN_TABLE[table][name]
    try:
        return GLOSSARY[name]
    except KeyError:
        raise KeyError(f"{name!r} has no entry in GLOSSARY (jaxmemprof/glossary/columns.py): add one, then run "
                       f"{REGENERATE}") from None


def fact_meaning(rule: str, name: str) -> str:
    """What fact ``name`` of a finding of ``rule`` means (the rule's own
    meaning, else GLOSSARY)."""
    m = RULES[rule].meanings if rule in RULES else {}
    if name in m:
        return m[name]
    try:
        return GLOSSARY[name]
    except KeyError:
        raise KeyError(f"fact {name!r} of rule {rule!r} has no meaning in its rule (jaxmemprof/analysis/rules/) "
                       f"nor in GLOSSARY (jaxmemprof/glossary/columns.py)") from None


def documented_facts(rule: str) -> set:
    """Every fact name a finding of ``rule`` (any case) may carry."""
    return set(RULES[rule].fact_names()) if rule in RULES else set()
