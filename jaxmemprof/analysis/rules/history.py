"""A notebook's output history: ``output-history``, found here from what
analysis/history.py saw IPython's ``Out`` hold."""

from __future__ import annotations

from jaxmemprof.analysis.attributed import Attributed
from jaxmemprof.analysis.findings import Finding, in_proportion
from jaxmemprof.analysis.history import history_holders
from jaxmemprof.analysis.rules.base import Context, Rule, Words, fmt, listed


def detect(ctx: Context) -> list[Finding]:
    return history_findings(ctx.ar)


def history_findings(ar: Attributed) -> list[Finding]:
    """One finding for a run whose last recorded look at IPython's output
    history found live arrays there that letting an entry go would free."""
    facts = history_holders(ar)
    if facts is None:
        return []
    finding = Finding(rule="output-history", severity="medium", site=facts["entries"][0]["made_at"],
                      saving_bytes=facts["freed_bytes"], facts=facts)
    peak = ar.peak
    return in_proportion([finding], peak.live_bytes if peak is not None else 0)


def _entry(e: dict) -> str:
    arrays = "1 array" if e["freed_arrays"] == 1 else f"{e['freed_arrays']} arrays"
    made = f", made at {e['made_at']}" if e.get("made_at") else ""
    return f"{e['holder']} {fmt(e['freed_bytes'])} ({arrays}{made})"


def _xdel(entries) -> str:
    """``%xdel _4; %xdel _7``: each entry's value dropped from everywhere
    IPython keeps it (Out, _N, _, __, ___, the hidden copy of _N)."""
    return "; ".join(f"%xdel _{e['holder'][4:-1]}" for e in entries)


def _output_history(f: Finding, x: dict) -> Words:
    freeing = [e for e in x["entries"] if e["freed_bytes"]]
    shown = freeing[:3]
    more = len(freeing) - len(shown) + max(0, x["entries_holding"] - len(x["entries"]))
    names = listed(e["holder"] for e in shown) + (f" and {more} more" if more > 0 else "")
    reset = x.get("reset_frees")
    version = x.get("ipython_version") or "this IPython"
    if reset:
        brief_fix = f"{_xdel(shown)} (or %reset -f out: the whole history); end a cell with ; to keep its value out"
        reset_words = "%reset -f out drops the whole history."
    else:
        brief_fix = (f"{_xdel(shown)} (%reset -f out keeps the hidden _N in IPython {version})"
                     if reset is False else f"{_xdel(shown)}") + "; end a cell with ; to keep its value out"
        reset_words = ("%reset -f out drops the whole history only from IPython 8.15 on: before, it keeps the "
                       "hidden copy of each _N" + (f" (this run's IPython is {version})." if reset is False else "."))
    return Words(
        brief=f"IPython's output history keeps {fmt(x['freed_bytes'])} alive that nothing else holds: {names}.",
        brief_fix=brief_fix,
        message=(f"IPython's output history holds {fmt(x['held_bytes'])} of live arrays, {fmt(x['freed_bytes'])} of "
                 f"them held by nothing else: {listed(_entry(e) for e in freeing)}. A cell's value (its last "
                 "expression) stays in Out[N] and under _N, _, __ and ___ (and a hidden copy of _N), so neither "
                 "del of a variable nor del Out[N] frees it."),
        fix=(f"{_xdel(freeing)} drops every reference IPython keeps to each value (Out, _N, _, the hidden copy, the "
             f"displayhook's). {reset_words} Ending a cell with ; keeps its value out of the history; "
             "c.InteractiveShell.cache_size = 0 keeps no output history at all."),
        evidence=(f"At snapshot {x['snapshot']}, {x['entries_holding']} entries of Out held {x['arrays']} live "
                  f"arrays ({fmt(x['held_bytes'])}); every reference to those of {fmt(x['freed_bytes'])}, and to the "
                  "containers on the way to them, was one of IPython's history or of such a container (each "
                  "object's references counted against sys.getrefcount)."))


OUTPUT_HISTORY = Rule(
    "output-history", made_by="analysis/rules/history.py",
    finds=("Live arrays that only IPython's output history (`Out[N]`, `_N`, `_`) keeps, at a notebook run's end "
             "(analysis/rules/history.py; docs/notebooks.md)."),
    facts={"": ("snapshot", "entries", "entries_holding", "held_bytes", "freed_bytes", "arrays", "ipython_version",
                "reset_frees")},
    meanings={"snapshot": "The snapshot at which the history was looked at (the run's last).",
              "entries": ("The (up to 5) entries holding live arrays, those that free most first: objects of "
                          "`holder` (`Out[12]`), `names` (every name IPython binds to its value: `Out[12]`, `_12`, "
                          "`_`), `arrays`, `bytes`, `freed_bytes` and `freed_arrays` (what letting it go frees) "
                          "and `made_at` (the site that made most of its bytes)."),
              "entries_holding": "The entries of `Out` that hold live arrays.",
              "held_bytes": "Bytes of the live arrays the entries hold.",
              "freed_bytes": ("Bytes of those that nothing else refers to: what letting the entries go frees (the "
                              "finding's saving)."),
              "arrays": "Live arrays the entries hold.",
              "ipython_version": "The IPython that ran (empty where the run does not say).",
              "reset_frees": ("True when that IPython's `%reset -f out` frees them (8.15 and later; before, it "
                              "keeps the hidden copy of `_N`); null when not known.")},
    words={"": _output_history},
)

RULES = (OUTPUT_HISTORY,)
