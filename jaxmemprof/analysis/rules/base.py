"""What a finding rule is, and the phrases its words share.

A ``Rule`` keeps in one place what a finding of it means: its name, the
module that makes it, what it finds (``finds``, in docs/columns.md), the
facts each of its cases writes, in order, with their meanings where the
column glossary does not already say them, and its words: for each case, a
function from the finding to ``Words``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from collections.abc import Callable

from jaxmemprof.analysis.advice.allocator import FRACTION
from jaxmemprof.units import format_bytes

if TYPE_CHECKING:
    import pandas as pd

    from jaxmemprof.analysis.advice.capacity import Fit
    from jaxmemprof.analysis.attributed import Attributed
    from jaxmemprof.analysis.findings import Finding
    from jaxmemprof.analysis.timeline import Timeline


@dataclass(frozen=True)
class Words:
    """A finding in words: ``brief`` and ``brief_fix`` for the terminal
    (``report``, ``run``'s summary); ``message``, ``fix`` and ``evidence``
    in full, with the trade-offs and every figure behind it (``report
    --explain``, JSON, CSV)."""
    brief: str
    brief_fix: str
    message: str
    fix: str
    evidence: str
    saves: str = ""  # what acting on it saves, in words, where "saves N" alone would mislead


@dataclass
class Context:
    """What a family's ``detect`` reads (analysis/report.py ``build_report``
    runs them in turn): the attributed run, its timeline, the report's
    tables a rule reads, and ``found``: the findings made before it (the fit
    names the fixes that would make the run fit)."""

    ar: Attributed  # its peaks: ar.peaks (analysis/peaks.py), computed once
    tl: Timeline
    leaks: pd.DataFrame | None = None  # analysis/leaks.py leaks(ar)
    recompiles: pd.DataFrame | None = None  # analysis/leaks.py recompiles(ar)
    holders: pd.DataFrame | None = None  # analysis/py_holders.py holders(ar): what keeps arrays alive
    device_peak: int | None = None  # the true peak on the busiest device (Headline.true_peak_bytes)
    fit: Fit | None = None  # for --device-memory, else None
    found: list[Finding] = field(default_factory=list)


@dataclass(frozen=True)
class Rule:
    name: str  # the finding's ``rule`` (``check --fail-on`` takes it)
    made_by: str  # the module that makes its findings: the rule's own, where its detection is
    finds: str  # what it finds, in one sentence (docs/columns.md)
    facts: dict  # case ("" for every case) -> the names of its facts, in the order written
    words: dict  # case ("" for every case) -> Callable[[Finding, dict], Words]
    meanings: dict = field(default_factory=dict)  # fact -> meaning, where the column glossary does not say it
    optional: tuple = ()  # facts only some of its findings carry
    in_proportion: bool = True  # under 1 % of the run's peak saved: info (analysis/findings.py in_proportion)
    about_a_call: bool = False  # its saving lowers the peak only during a call of its function (by_effect)

    def words_for(self, case: str) -> Callable[[Finding, dict], Words] | None:
        return self.words.get(case) or self.words.get("")

    def fact_names(self) -> tuple:
        """Every fact a finding of this rule (any case) may carry, in order."""
        return tuple(dict.fromkeys(n for names in self.facts.values() for n in names))


# -- shared phrases --------------------------------------------------------------------


def fmt(n) -> str:
    return "?" if n is None else format_bytes(n)


def exact(n) -> str:
    """Bytes in units and exactly: ``1.00 GiB (1073741824 bytes)``."""
    return f"{fmt(n)} ({n} bytes)"


def listed(names) -> str:
    return ", ".join(str(n) for n in names)


def peak_source(facts: dict) -> str:
    device = facts.get("peak_device")
    source = str(facts.get("peak_source"))
    return {
        "true_peak_bytes": "the estimated true peak (XLA temporaries included)",
        "peak_bytes_in_use": f"the allocator's high-water mark (peak_bytes_in_use) on {device}",
        "device_live_bytes": f"the most live array bytes on {device} in a snapshot (XLA temporaries not included)",
        "live_bytes": "the most live bytes in a snapshot (XLA temporaries not included)",
    }.get(source, source)


def set_fraction(facts: dict) -> str:
    """``NAME=.80``, and the other name to unset where the run sets it."""
    text = facts["set"]
    if facts.get("unset"):
        why = ("jaxlib raises ValueError when both are set" if text.startswith(FRACTION + "=")
               else f"jaxlib {facts.get('jaxlib_version')} does not read it")
        text += f" and unset {facts['unset']} ({why})"
    return text


TPU_DOCS = "docs/tpu.md"  # what a TPU finding points to
LOWER_THE_PEAK = ("Lower the peak (donate arguments, rematerialise with jax.checkpoint, smaller batches, shard "
                  "over more devices) or use a device with more memory.")
POOL_TRADE_OFF = ("What the pool takes, other processes and the libraries outside it (CUDA context, cuDNN/cuBLAS "
                  "workspaces, NCCL) cannot have")
