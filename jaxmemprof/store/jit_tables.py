"""What the jit probe recorded in a run, as named tables (``Run.jit``): one
DataFrame per journal table, each empty where the run has none (a
directory of profiles, a run recorded before the table was added, a table
left out as damaged). See store/layout.py for the columns."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import pandas as pd


def _table() -> pd.DataFrame:
    return pd.DataFrame()


@dataclass
class JitTables:
    functions: pd.DataFrame = field(default_factory=_table)  # jit_functions: each jitted function, where it was jitted
    compiles: pd.DataFrame = field(default_factory=_table)  # jit_compiles: XLA's figures per compiled signature
    calls: pd.DataFrame = field(default_factory=_table)  # jit_calls: the sampled calls, their leaves as JSON
    counts: pd.DataFrame = field(default_factory=_table)  # jit_counts: calls and compiles per function
    call_live: pd.DataFrame = field(default_factory=_table)  # jit_call_live: every call's live bytes (the largest)
    programs: pd.DataFrame = field(default_factory=_table)  # jit_programs: XLA's account of each signature
    buffers: pd.DataFrame = field(default_factory=_table)  # jit_buffers: its buffers live at its own peak
    curves: pd.DataFrame = field(default_factory=_table)  # jit_curves: its bytes at each position of its program
    plans: pd.DataFrame = field(default_factory=_table)  # jit_plans: run --plan's compiles at other batch sizes
    whatif: pd.DataFrame = field(default_factory=_table)  # jit_whatif: signatures compiled with a change made
    targets: pd.DataFrame = field(default_factory=_table)  # jit_targets: run --target's compiles for a TPU slice
    target_buffers: pd.DataFrame = field(default_factory=_table)  # jit_target_buffers: XLA:TPU's buffers there
    snapshot_calls: pd.DataFrame = field(default_factory=_table)  # snapshot_calls: the calls in progress at each


# The journal table each is read from.
JOURNAL_TABLES = {f.name: f.name if f.name == "snapshot_calls" else f"jit_{f.name}" for f in fields(JitTables)}
