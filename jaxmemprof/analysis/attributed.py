"""A run attributed once: the stage every analysis of a run reads.

As pprof transforms a profile once and lets every view read the result, a
run is attributed once, by :func:`attribute`, under one set of
:class:`~jaxmemprof.analysis.options.Options`: each table below is computed
on first use and then shared by every analysis that needs it — the sites of
the recorded stacks, the per-site series (timeline and leaks), the array
lifetimes (lifetimes, reuse, leaks), the buffers and their holders (the
``shared`` flag of lifetimes, and reuse), the XLA buffers by line (the
inside-jit tables and hints), the peak and the sites holding it, the run's peaks (``peaks``). Analyses
take the :class:`Attributed` and nothing else about attribution.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property

import numpy as np
import pandas as pd

from jaxmemprof.analysis.groups import Breakdown, summarize, top
from jaxmemprof.analysis.options import Options
from jaxmemprof.analysis.sites import Attribution, FileView, run_stack_sites
from jaxmemprof.facts import backends
from jaxmemprof.facts.backends import Backend
from jaxmemprof.store.jit_tables import JitTables


class Files:
    """Each source file under the run's attribution once: its
    :class:`~jaxmemprof.analysis.sites.FileView` (whether it is library
    code, and how it is shown), for a file the run names outside its stacks
    (a jitted function's, a caller's, a holder's)."""

    def __init__(self, attribution: Attribution):
        self._attribution = attribution
        self._views: dict[str, FileView] = {}

    def view(self, file: str) -> FileView:
        got = self._views.get(file)
        if got is None:
            got = self._views[file] = self._attribution.file(file)
        return got

    def is_library(self, file: str) -> bool:
        return self.view(file).library

    def display_path(self, file: str) -> str:
        return self.view(file).shown


class Attributed:
    """``run`` under ``options``, each derived table computed once."""

    def __init__(self, run, options: Options):
        self.run = run
        self.options = options
        self.timelines: dict = {}  # top_sites -> the Timeline (analysis/timeline.py timeline), each made once

    @cached_property
    def attribution(self) -> Attribution:
        return self.options.attribution(self.run)

    @cached_property
    def files(self) -> Files:
        return Files(self.attribution)

    @cached_property
    def backend(self) -> Backend:
        """The backend the run recorded (facts/backends ``of_run``), chosen
        once: the chip's counters, the fit, the plan and the rules ask it."""
        return backends.of_run(self.run.manifest)

    def prepare(self) -> Attributed:
        """Attribute at once everything a report reads, in the stage's order:
        the stacks' sites, the per-site series, the peak's sites, XLA's
        buffers and curves by line, and the files the jit tables name; the
        analyses after it read tables already attributed."""
        # Each cached property computed for its effect: the stack sites with the first.
        names = ("site_codes", "series") + (("_peak_sites",) if self.peak is not None else ()) + (
            "jit_buffers", "jit_curves")
        for name in names:
            getattr(self, name)
        jit = getattr(self.run, "jit", None) or JitTables()
        for rows, columns in ((jit.functions, ("file", "jit_file")), (jit.calls, ("caller_file",))):
            for c in columns:
                if c in rows:
                    for file in rows[c].dropna().unique():
                        if isinstance(file, str):
                            self.files.view(file)
        return self

    @cached_property
    def stack_sites(self) -> pd.DataFrame:
        """Per recorded stack id: ``site, file, line, function, stack``."""
        return run_stack_sites(self.run.stacks, self.attribution)

    @cached_property
    def site_codes(self) -> tuple[pd.DataFrame, pd.Series]:
        """(table of distinct sites, stack_id -> its row in the table)."""
        per_stack = self.stack_sites
        if per_stack.empty:
            table = pd.DataFrame({"site": pd.Series(dtype=object), "file": pd.Series(dtype=object),
                                  "line": pd.Series(dtype=np.int64), "function": pd.Series(dtype=object)})
            return table, pd.Series(dtype=np.int64)
        codes, _ = pd.factorize(per_stack["site"])
        first = pd.Series(np.arange(len(codes))).groupby(codes).first().to_numpy()
        table = per_stack.iloc[first][["site", "file", "line", "function"]].reset_index(drop=True)
        return table, pd.Series(codes, index=per_stack.index.to_numpy(dtype=np.int64))

    @cached_property
    def peaks(self):
        """The run's peaks (analysis/peaks.py ``Peaks``): the live peak, each
        call's, the true peak; computed once, read by the report, the rules
        and the advice (a change made: ``Peaks.with_change``)."""
        from jaxmemprof.analysis.peaks import run_peaks
        from jaxmemprof.analysis.timeline import timeline

        return run_peaks(self.run, timeline(self))

    @cached_property
    def chip(self) -> dict | None:
        """The chip's own counters beside the model (analysis/counters.py
        ``chip_counters``, read at the run's peaks); computed once, read by
        the report and the queued-steps rule. None: no counters."""
        from jaxmemprof.analysis.counters import chip_counters

        p = self.peaks
        return chip_counters(self, p.call, p.device_bytes, p.busiest_live_bytes)

    @cached_property
    def peak(self):
        from jaxmemprof.analysis.runs import run_peak

        return run_peak(self.run.snapshots)

    @cached_property
    def series(self):
        """Live bytes and arrays per site per snapshot (a SiteSeries)."""
        from jaxmemprof.analysis.timeline import SiteSeries

        return SiteSeries(self)

    @cached_property
    def shards(self) -> pd.DataFrame:
        """One row per buffer (array shard)."""
        from jaxmemprof.analysis.shards import shard_table

        return shard_table(self.run)

    @cached_property
    def holders(self) -> pd.DataFrame:
        """Per buffer: whose address it took, and whether another array held it."""
        from jaxmemprof.analysis.shards import match_holders

        return match_holders(self.shards) if not self.shards.empty else pd.DataFrame(
            {"is_reuse": pd.Series(dtype=bool), "is_alias": pd.Series(dtype=bool), "previous": pd.Series(dtype=int)})

    @cached_property
    def arrays(self) -> pd.DataFrame:
        """One row per array, with its site and lifetime."""
        from jaxmemprof.analysis.lifetimes import array_lifetimes

        return array_lifetimes(self)

    @cached_property
    def jit_buffers(self) -> pd.DataFrame:
        """XLA's buffers of each program read, with the user's line that made each."""
        from jaxmemprof.analysis.inside_jit import attributed_buffers

        return attributed_buffers(self.run, self.attribution)

    @cached_property
    def jit_curves(self) -> pd.DataFrame:
        """Each function's largest signature in program order: the bytes live
        at each position by the user's line."""
        from jaxmemprof.analysis.inside_jit import attributed_curves

        return attributed_curves(self.run, self.attribution)

    def sites_holding(self, snapshot: int, n: int | None = None) -> Breakdown:
        """The ``n`` (default: ``options.top_sites``) sites holding the most
        bytes in a snapshot, its buffers only (the bytes live_bytes counts: the
        executables' code is counted apart), sites of 0 bytes left out; the peak's,
        read once."""
        if self.peak is not None and snapshot == self.peak.snapshot:
            full = self._peak_sites
        else:
            full = summarize(self.run.profile(snapshot).without_kind("executable"), "site", self.attribution)
        held = replace(full, rows=full.rows[full.rows["bytes"] > 0].reset_index(drop=True))
        return top(held, self.options.top_sites if n is None else n)

    @cached_property
    def _peak_sites(self) -> Breakdown:
        return summarize(self.run.profile(self.peak.snapshot).without_kind("executable"), "site", self.attribution)


def attribute(run, options: Options = Options()) -> Attributed:
    """``run`` attributed under ``options`` (its tables computed on first use)."""
    return Attributed(run, options)
