"""analysis/documents.py: the documents the formats print. The plan's
peaks per batch keep the batches each variant compiled, smallest first;
importing the module imports neither pandas nor numpy (show of a profile
file needs neither)."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO

from jaxmemprof.analysis.documents import BatchPeaks, ProfilesDocument


def test_a_variants_points_are_the_batches_it_compiled_smallest_first():
    peaks = BatchPeaks(variants=["recorded", "donated"], batches=[8, 16, 32],
                       peak={("recorded", 8): 100, ("recorded", 32): 300, ("donated", 16): 150}, devices=["cpu:0"])
    assert peaks.points("recorded") == [(8, 100), (32, 300)]
    assert peaks.points("donated") == [(16, 150)]
    assert peaks.points("bfloat16") == []
    assert peaks.compiled("recorded") == [8, 32] and peaks.compiled("donated") == [16]


def test_the_documents_import_no_pandas():
    code = ("import sys; import jaxmemprof.analysis.documents as d; "
            "d.ProfilesDocument('show', names=['a'], profiles=[]); "
            "print(sorted(m for m in ('pandas', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert ProfilesDocument("diff", names=["a", "b"], profiles=[]).page is None
