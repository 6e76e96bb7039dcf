#!/bin/sh
# Records the bundled runs in sample_runs/runs/ again with this checkout's
# jaxmemprof (after a change to the run directory's format, or to what a run
# records), then regenerates what is held from them: tests/golden/ and the
# README's and docs' example blocks (tests/test_golden.py). Run it on an idle
# machine: a loaded one stretches the run and adds snapshots. From anywhere:
#     sh sample_runs/record.sh
set -eu
cd "$(dirname "$0")/.."
export JAX_PLATFORMS=cpu
rm -rf sample_runs/runs/mlp-no-donation sample_runs/runs/mlp-donated sample_runs/runs/mlp-leak
jaxmemprof run -q --interval 0.1 -o sample_runs/runs/mlp-no-donation sample_runs/train_mlp.py --steps 120
jaxmemprof run -q --interval 0.1 -o sample_runs/runs/mlp-donated sample_runs/train_mlp.py --donate --steps 120
# docs/targets.md's: the step compiled for two TPU slices (needs libtpu: pip install 'jaxmemprof[tpu]').
rm -rf sample_runs/runs/mlp-target
jaxmemprof run -q --plan --target v5e:2x2 --target v6e:2x2 -o sample_runs/runs/mlp-target sample_runs/train_mlp.py --steps 30
# The README's example, its command exactly: the script's own stdout is held as
# recorded; the summary on stderr is rendered again from the run by the test.
COLUMNS=100 jaxmemprof run --interval 0.1 -o sample_runs/runs/mlp-leak sample_runs/train_mlp.py --leak --steps 120 \
    > tests/golden/run-mlp-leak.script-stdout.txt
python -m pytest -q -p no:cacheprovider tests/test_golden.py --update-golden
