"""A run attributed once: the tables every section of a report reads.

As pprof transforms a profile once and lets every view read the result, the
report attributes a run once: each table below is computed on first use,
under one attribution, and then shared by every analysis that needs it —
the per-site series (timeline and leaks), the array lifetimes (lifetimes,
reuse, leaks), the buffers and their holders (the ``shared`` flag of
lifetimes, and reuse), the XLA buffers by line (the inside-jit tables and
hints) and the peak.
"""

from __future__ import annotations

from functools import cached_property

import pandas as pd

from jaxmemprof.analysis.inside_jit import attributed_buffers
from jaxmemprof.analysis.lifetimes import array_lifetimes
from jaxmemprof.analysis.runs import Peak, run_peak
from jaxmemprof.analysis.shards import match_holders, shard_table
from jaxmemprof.analysis.sites import Attribution
from jaxmemprof.analysis.timeline import SiteSeries


class Attributed:
    """``run`` under ``attribution``, each derived table computed once."""

    def __init__(self, run, attribution: Attribution = Attribution()):
        self.run = run
        self.attribution = attribution

    @cached_property
    def peak(self) -> Peak | None:
        return run_peak(self.run.snapshots)

    @cached_property
    def series(self) -> SiteSeries:
        """Live bytes and arrays per site per snapshot."""
        return SiteSeries(self.run, self.attribution)

    @cached_property
    def shards(self) -> pd.DataFrame:
        """One row per buffer (array shard)."""
        return shard_table(self.run)

    @cached_property
    def holders(self) -> pd.DataFrame:
        """Per buffer: whose address it took, and whether another array held it."""
        return match_holders(self.shards) if not self.shards.empty else pd.DataFrame(
            {"is_reuse": pd.Series(dtype=bool), "is_alias": pd.Series(dtype=bool), "previous": pd.Series(dtype=int)})

    @cached_property
    def arrays(self) -> pd.DataFrame:
        """One row per array, with its site and lifetime."""
        return array_lifetimes(self.run, self.attribution, shard_rows=self.shards, holders=self.holders)

    @cached_property
    def jit_buffers(self) -> pd.DataFrame:
        """XLA's buffers of each dumped program, with the user's line that made each."""
        return attributed_buffers(self.run, self.attribution)
