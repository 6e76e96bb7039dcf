#!/usr/bin/env bash
# The TPU lane: the bundled MLP and a GPT-style model run on a real TPU under
# python and under jaxmemprof, with the chip's own counters read by each
# program (benchmarks/tpu/gpt.py --stats), the runs kept for CI's fixtures
# (tests/fixtures/tpu/) and their figures for docs/tpu.md.
#
#   bash benchmarks/tpu/lane.sh OUTDIR [SRC]
#   LANE_ONLY="mlp-leak-1500 heartbeat" bash benchmarks/tpu/lane.sh OUTDIR   # some parts only
#
# SRC: the jaxmemprof checkout to run (default: this one). Runs where JAX
# sees a TPU; elsewhere it says so and exits 0. Wheels the machine lacks
# (click, rich, protobuf, equinox, ...) may wait in .whl-tpu/ (see
# docs/tpu.md for the recipe).
set -uo pipefail
out=${1:?OUTDIR}
src=${2:-$(cd "$(dirname "$0")/../.." && pwd)}
mkdir -p "$out/runs"
if [ -d "$src/.whl-tpu" ] && ls "$src"/.whl-tpu/*.whl >/dev/null 2>&1; then
  PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps --no-compile \
    --no-cache-dir --upgrade --target /tmp/site "$src"/.whl-tpu/*.whl
  if [ -d /opt/pypi/simple ]; then  # the machine's own index, with what each needs, after its own JAX
    PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --only-binary=:all: \
      --index-url file:///opt/pypi/simple --target /tmp/site2 flax optax pandas jaxtyping wadler-lindig 2>&1 | tail -2
    # --target installs flax's own jax and jaxlib too, and on PYTHONPATH they would come before the
    # machine's (with its libtpu): JAX falls back to the CPU ("either a TPU-enabled jaxlib or libtpu
    # is not installed"), as it did on 2026-12-07. The machine's JAX is the one to measure.
    rm -rf /tmp/site2/jax /tmp/site2/jax-* /tmp/site2/jaxlib /tmp/site2/jaxlib-* /tmp/site2/libtpu*
  fi
  export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}/tmp/site:/tmp/site2
fi
export PYTHONPATH=$src:${PYTHONPATH:-}
unset JAX_PLATFORMS
if ! python3 -c 'import jax, sys; sys.exit(0 if jax.default_backend() == "tpu" else 1)' 2>/dev/null; then
  echo "no TPU here: the lane is skipped"; exit 0
fi
python3 -c 'import jax, jaxlib; print("jax", jax.__version__, "jaxlib", jaxlib.__version__, jax.devices())' | tee "$out/versions.txt"
jmp() { python3 -m jaxmemprof "$@"; }
# LANE_ONLY="name ...": run only those parts of the lane (all by default).
t() { local name=$1; shift; case " ${LANE_ONLY:-$name} " in *" $name "*) ;; *) return 0;; esac; local s=$SECONDS; "$@" > "$out/$name.log" 2>&1; echo "$name: exit $? in $((SECONDS - s)) s" | tee -a "$out/lane.txt"; }

mlp=$src/sample_runs/train_mlp.py
gpt=$src/benchmarks/tpu/gpt.py
t mlp-no-donation jmp run -o "$out/runs/mlp-no-donation" --plan "$mlp" --steps 120
t mlp-donated jmp run -o "$out/runs/mlp-donated" "$mlp" --donate --steps 120
t mlp-leak-1500 jmp run -o "$out/runs/mlp-leak-1500" "$mlp" --leak --steps 1500
t gpt8-python python3 "$gpt" --batch 8 --steps 10 --stats "$out/gpt8-python.json"
t gpt8 jmp run -o "$out/runs/gpt8" "$gpt" --batch 8 --steps 10 --stats "$out/gpt8.json"
t gpt16-donated jmp run -o "$out/runs/gpt16-donated" "$gpt" --batch 16 --steps 10 --donate --stats "$out/gpt16-donated.json"
t gpt32-oom jmp run -o "$out/runs/gpt32-oom" "$gpt" --batch 32 --steps 2 --donate
# How far the program runs ahead of the chip (its queued steps, the chip's
# peak_bytes_in_use), watched and not: under python with the host busy 0.25 s
# a step (what a step snapshot in the program's thread costs on gpt8), under
# run without the jit probe, and under run with a stack sampler (where the
# program's thread spends its time); what a snapshot costs, by part.
t gpt8-python-busy python3 "$gpt" --batch 8 --steps 10 --host-delay 0.25 --stats "$out/gpt8-python-busy.json"
t gpt8-noprobe jmp run -q --no-jit-probe -o "$out/runs/gpt8-noprobe" "$gpt" --batch 8 --steps 10 --stats "$out/gpt8-noprobe.json"
t gpt8-where python3 "$src/benchmarks/where_main_waits.py" "$out/gpt8-where.txt" -- run -q -o "$out/runs/gpt8-where" "$gpt" --batch 8 --steps 10 --stats "$out/gpt8-where.json"
t snapshot-parts python3 "$src/benchmarks/bench_snapshot_parts.py" --wall --arrays 228 1000 --repeat 5
# The lane's largest model at 150 donated steps, under python and under run
# (run's cost beside python's, the end's compiles overlapping the program).
t gpt150-python python3 "$gpt" --batch 16 --steps 150 --donate --stats "$out/gpt150-python.json"
t gpt150 jmp run -q -o "$out/runs/gpt150" "$gpt" --batch 16 --steps 150 --donate --stats "$out/gpt150.json"
# The plan by compiles for the chip (--plan-device-memory), on a 2-layer GPT:
# the batch it names runs, and the next is refused.
small="--layers 2 --steps 3 --donate"
t plan-chip jmp run -o "$out/runs/plan-chip" --plan --plan-device-memory 15.75GiB "$gpt" --batch 8 $small
jmp report "$out/runs/plan-chip" > "$out/plan-chip.plan.txt" 2>&1
best=$(grep -oE "largest batch (at least )?[0-9,]+" "$out/plan-chip.plan.txt" | head -1 | grep -oE "[0-9,]+$" | tr -d ,)
if [ -n "$best" ]; then
  t plan-chip-at-best python3 "$gpt" --batch "$best" $small --stats "$out/plan-chip-at-best.json"
  t plan-chip-next python3 "$gpt" --batch "$((best + 1))" $small
fi
# The libraries' own training steps (flax nnx, linen, equinox with optax)
# with run --plan: the true peak beside the chip's counters for each.
lib=$src/sample_runs/libraries
for prog in nnx_optimizer equinox_optax linen_trainstate; do
  t "$prog" jmp run -o "$out/runs/$prog" --plan "$lib/$prog.py" --width 65536 --steps 40
done
# How far the libraries' steps run ahead of the chip under plain python
# (benchmarks/tpu/chip_stats.py reads the counters after the script), beside
# the runs above.
for prog in nnx_optimizer linen_trainstate; do
  t "$prog-python" python3 "$src/benchmarks/tpu/chip_stats.py" "$out/$prog-python.json" "$lib/$prog.py" --width 65536 --steps 40
done
# What part of a snapshot taken in the program's thread changes how far a
# fast loop runs ahead of the chip (benchmarks/tpu/observer.py: linen's step
# under python, one part after each dispatch).
for after in none profile live stats sleep thread-profile grid-busy grid-deferred; do
  t "observer-$after" python3 "$src/benchmarks/tpu/observer.py" "$out/observer-$after.json" --after "$after"
done
# The program's daemon thread stops with it (a heartbeat every 0.1 s): the
# lines it wrote after the script's last atexit handler, under python and run.
hb=$src/tests/scripts/end_phase_step.py
t heartbeat-python python3 "$hb" "$out/hb-python.marker" --ops 30 --heartbeat "$out/hb-python.beats"
t heartbeat jmp run -q --plan -o "$out/runs/heartbeat" "$hb" "$out/hb-run.marker" --ops 30 --heartbeat "$out/hb-run.beats"
# Issue 64's donated ViT (linen, nn.scan, TrainState, its first call's step a Python 0): the donation's
# saving as run says it against the chip's fall, each program under python with the chip's counters read
# after its last synced step (docs/tpu.md); `python3 benchmarks/tpu/vit_check.py OUTDIR` compares them.
# The undonated program three times: its chip peak varies from run to run (docs/tpu.md).
vit=$src/benchmarks/tpu/vit.py
t vit-python python3 "$vit" --batch 24 --stats "$out/vit-python.json"
t vit-python-2 python3 "$vit" --batch 24 --stats "$out/vit-python-2.json"
t vit-python-3 python3 "$vit" --batch 24 --stats "$out/vit-python-3.json"
# The control: each step's inputs given 0.5 s to be freed before the next step runs.
t vit-settled-python python3 "$vit" --batch 24 --settle 0.5 --stats "$out/vit-settled-python.json"
t vit-settled-python-2 python3 "$vit" --batch 24 --settle 0.5 --stats "$out/vit-settled-python-2.json"
t vit-donated-python python3 "$vit" --batch 24 --donate --stats "$out/vit-donated-python.json"
t vit jmp run -o "$out/runs/vit" "$vit" --batch 24 --stats "$out/vit.json"
for r in "$out"/runs/*; do jmp report "$r" > "$out/$(basename "$r").report.txt" 2>&1; done
case " ${LANE_ONLY:-vit} " in *" vit "*) jmp report "$out/runs/vit" --json > "$out/vit.report.json" 2>/dev/null
  python3 "$src/benchmarks/tpu/vit_check.py" "$out" | tee "$out/vit-check.txt";; esac
exit 0
