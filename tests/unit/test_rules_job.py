"""analysis/rules/job.py: a job's own findings on processes whose peaks are
known: imbalance past a quarter of the median process's peak (and 1 MiB),
every process that did not finish."""

from __future__ import annotations

import pandas as pd

from jaxmemprof.analysis.rules.job import IMBALANCE_FRACTION, IMBALANCE_MIN_BYTES, imbalance, unfinished

MiB = 1024**2


def _processes(peaks, finished=None):
    n = len(peaks)
    return pd.DataFrame({"process": range(n), "snapshots": [3] * n, "peak_bytes": peaks,
                         "finished": finished or [True] * n, "running": [False] * n, "last_t": [1.0] * n,
                         "error": [None] * n})


def test_the_heavy_process_is_named_with_its_excess_over_the_median():
    peaks = [10 * MiB, 10 * MiB, 10 * MiB, 30 * MiB]
    sites = pd.DataFrame({"process": [0, 3, 3], "site": ["a.py:1", "a.py:1", "b.py:2"],
                          "bytes": [10 * MiB, 10 * MiB, 20 * MiB]})
    (j,) = imbalance(_processes(peaks), sites)
    assert (j.rule, j.severity, j.processes, j.finding.saving_bytes) == ("imbalance", "high", (3,), 20 * MiB)
    assert j.finding.site == "b.py:2"
    small = [10 * MiB, 10 * MiB, int(10 * MiB * (1 + IMBALANCE_FRACTION)) - 1]
    assert imbalance(_processes(small), sites.iloc[0:0]) == []
    assert IMBALANCE_MIN_BYTES == MiB


def test_every_process_that_did_not_finish_is_named():
    (j,) = unfinished(_processes([MiB, MiB, MiB], finished=[True, False, False]))
    assert (j.rule, j.severity, j.processes) == ("unfinished", "high", (1, 2))
    assert unfinished(_processes([MiB])) == []
