#!/usr/bin/env bash
# Regenerates this folder: the comparison rerun with the packed train step for EVERY arm
# (`train.packing=True, train.pack_rows=8`: the step runs only the [8, T] buffers that hold
# real tokens, so padded rows and padded tokens cost no FLOPs), on the reference machine
# (AMD EPYC), from the warm starts of studies/allocator_comparison/compare.md:
#   bash studies/allocator_comparison/sweeps/packed/regenerate.sh PACKED_RUNS PROBE_RUNS
# PACKED_RUNS was made with (two processes sharing it; a frozen checkout as --code-dir;
# the warm-start cache of the unpacked sweep, so the same initial policies):
#   python -m sgpo_jax.compare run --runs-dir PACKED_RUNS --cache-dir RUNS/warm_start \
#     --code-dir CODE --regimes R --arms A --seeds 0-4 \
#     --set train.packing=True --set train.pack_rows=8
#   for R in paper_like default, A in grpo,dapo,greso,knapsack,sgpo and
#   sgpo_bayes,sgpo_bayes_cut,dapo_g4,sgpo_bayes_pooled.
# The packed step's loss equals the padded one up to float rounding: each run samples the
# same rewards step for step as its unpacked twin (checked on dapo and sgpo_bayes_cut seed
# 0-1), it just fits more steps into the FLOPs budget.
# PROBE_RUNS (RUNS of the unpacked sweep) holds 2-seed probes of one generation round per
# optimizer step (`max_rounds=1`, packed): the cheapest steps the packed layout allows.
set -euo pipefail
RUNS=${1:?packed runs dir}
PROBES=${2:?runs dir holding the *_pk probes}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../../.." && pwd)
cd "$REPO"
NOTE="Every arm with the packed train step (train.packing=True, pack_rows=8), reference machine (AMD EPYC), same warm starts as studies/allocator_comparison/compare.md. studies/allocator_comparison/sweeps/packed/regenerate.sh."
ARMS=grpo,dapo,greso,knapsack,sgpo,dapo_g4,sgpo_bayes,sgpo_bayes_pooled,sgpo_bayes_cut
for R in paper_like default; do
  python -m sgpo_jax.compare report --regimes $R --arms "$ARMS" --seeds 0-4 \
    --runs-dir "$RUNS" --results-dir "$HERE/$R" --note "$NOTE"
  python -m sgpo_jax.compare diagnose --runs-dir "$RUNS" --regime $R --arms "$ARMS" \
    --seeds 0-4 --out "$HERE/$R/diagnostics.md"
done
PK="train.packing=True,train.pack_rows=8"
CUT="sgpo_bayes,sgpo_bayes.pooled_prior=difficulty,sgpo_bayes.prioritise=True,sgpo_bayes.epoch_cut=0.3"
#   python -m sgpo_jax.compare run --runs-dir PROBE_RUNS --code-dir CODE --regimes paper_like \
#     --arms grpo --seeds 0,1 --arm <each of the four below>
python -m sgpo_jax.compare report --regimes paper_like --arms grpo --seeds 0,1 \
  --arm "dapo_pk=dapo,$PK" --arm "dapo_r1_pk=dapo,dapo.max_rounds=1,$PK" \
  --arm "cut_pk=$CUT,$PK" --arm "cut_r1_pk=$CUT,sgpo_bayes.max_rounds=1,$PK" \
  --runs-dir "$PROBES" --results-dir "$HERE/paper_like_r1_probe" \
  --note "$NOTE (Probe, seeds 0-1: one generation round per optimizer step. grpo here is unpacked.)"
