"""Findings: what the analyses conclude, as data.

Every rule (leaks, recompiles, donation, allocator and capacity advice,
inside-jit hints) adds to one list of ``Finding`` records. A finding holds
facts, never sentences: its rule, severity, the user's line it is about, what
acting on it saves, and ``facts``, the figures and names behind it under the
names docs/columns.md gives them. Each rule is declared once, in
jaxmemprof/analysis/rules/ (its facts, their meanings, its words); ``render/findings.py``
turns a finding into those words (terse in the terminal, in full with
``report --explain``, in JSON and CSV), so the same facts can be said in every
output.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

SEVERITIES = ("high", "medium", "low", "info")


@dataclass(frozen=True, eq=False)
class Finding:
    rule: str  # e.g. "leak", "donate", "allocator-fraction"
    severity: str  # high, medium, low, info
    site: str = ""  # path:line (function) it is about, or "" when it is about the whole run
    saving_bytes: int | None = None  # what acting on it saves, where known
    facts: dict = field(default_factory=dict)  # the figures and names behind it (JSON values only)
    case: str = ""  # which of the rule's cases, where it has several (the words differ)

    def fact(self, name, default=None):
        return self.facts.get(name, default)

    @property
    def device_saving(self) -> int | None:
        """What acting on it saves on the busiest device (the device whose
        true peak a report leads with, and what its words say): its fact
        ``saving_bytes_per_device`` where it has one (a donation on several
        devices keeps in ``saving_bytes`` the fall on all of them summed),
        never below 0; else its ``saving_bytes``. The one meaning of the
        outputs' ``saving_bytes`` (findings.csv, the JSON's findings)."""
        per = self.facts.get("saving_bytes_per_device")
        if self.saving_bytes is None or not isinstance(per, (int, float)) or isinstance(per, bool):
            return self.saving_bytes
        return max(int(per), 0)


def in_proportion(findings: list[Finding], peak_bytes: int, exempt=()) -> list[Finding]:
    """Severities in proportion to the run: a finding that saves under 1 % of
    the peak is ``info`` (on a run whose peak is GiB-scale, that is every
    saving under 10 MiB). ``exempt``: the rules whose saving is not what
    they are about (a recompilation costs time; the rule says so:
    ``Rule.in_proportion``)."""
    return [replace(f, severity="info")
            if f.saving_bytes is not None and f.rule not in exempt and f.saving_bytes < 0.01 * peak_bytes
            else f for f in findings]


def by_effect(findings: list[Finding], peak_function: str | None, peak_where: str, about_a_call=()) -> list[Finding]:
    """Advice on a function whose calls do not hold the run's (true) peak:
    ``info``, with where the peak is (``peak_elsewhere``); its saving stays
    its own. ``about_a_call``: the rules whose saving lowers the peak only
    during a call of their function (``Rule.about_a_call``);
    ``peak_function``: the function during whose call the peak is, or None
    when the peak is not inside a call (nothing is changed)."""
    if peak_function is None:
        return findings
    return [replace(f, severity="info", facts={**f.facts, "peak_elsewhere": peak_where})
            if f.rule in about_a_call and f.fact("function") not in (None, peak_function) else f
            for f in findings]


def unverified(f: Finding) -> bool:
    """A finding whose saving is a bound that no compile measured (its
    ``verified`` fact false: over the compile budget, not sampled, a run
    recorded without compiles); one without that fact is about no compile."""
    return f.facts.get("verified") is False


def ranked(findings: list[Finding]) -> list[Finding]:
    """Severity first; within a severity, the findings whose saving XLA's
    compile measured before those whose saving is an unverified bound
    (``unverified``), then bytes saved (largest first), then rule and site.

    An unverified finding never ranks above a verified one of its severity,
    however large its bound: "up to" is what the change could save, and the
    compile that was not made may show it saves nothing (XLA refuses the
    sharding, the step gathers the arrays back, the peak is elsewhere).
    Its severity is left as its rule set it rather than capped: it says how
    much is at stake, and in a run where nothing was compiled (recorded with
    --verify-seconds 0, by an older jaxmemprof, or with the budget spent)
    a cap would put a change worth hundreds of MiB below a measured saving
    of a few, and make ``check --fail-on`` turn on the compile budget."""
    order = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(findings, key=lambda f: (order.get(f.severity, len(SEVERITIES)), unverified(f),
                                           -(f.saving_bytes if f.saving_bytes is not None else -1), f.rule, f.site))


@dataclass(frozen=True)
class JobFinding:
    """A finding over the processes of a job: ``finding`` is the one of the
    process where it is most severe and saves most (its figures are that
    process's); ``processes`` those it applies to; ``saving_bytes_total``
    what acting on it saves over all of them, where known."""

    finding: Finding
    processes: tuple
    saving_bytes_total: int | None = None

    @property
    def rule(self) -> str:
        return self.finding.rule

    @property
    def severity(self) -> str:
        return self.finding.severity

    @property
    def site(self) -> str:
        return self.finding.site
