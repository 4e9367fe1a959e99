#!/usr/bin/env bash
# Regenerates studies/compare.{md,json}, its plots and compare_diagnostics_<regime>.md
# from the comparison's runs dir (RUNS/<regime>/<arm>_seed<s>), on the reference machine type:
#   bash studies/allocator_comparison/regenerate.sh RUNS
# The runs were made with (two processes sharing the runs dir; a frozen checkout as --code-dir;
# the runner skips finished runs, so one command both starts and resumes a sweep):
#   python -m sgpo_jax.compare run --runs-dir RUNS --code-dir CODE --regimes paper_like,default \
#     --arms "$ARMS" --seeds 0-4
#   python -m sgpo_jax.compare run --runs-dir RUNS --code-dir CODE --regimes small_pool \
#     --arms "$ARMS" --seeds 0-2
# sgpo_bayes_g24 joined later, its runs made the same way (seeds 0-4, small_pool 0-2) with
# `--arm 'sgpo_bayes_g24=sgpo_bayes,sgpo_bayes.group_sizes=(2,4)'`; adding an arm resamples
# the bootstrap, so intervals of the other arms shift slightly (point values do not).
set -euo pipefail
RUNS=${1:?runs dir}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
cd "$REPO"
ARMS=grpo,dapo,sgpo,sgpo_g48_k2,greso,knapsack,sgpo_bayes,sgpo_bayes_floor25,dapo_g4,sgpo_bayes_pooled,sgpo_bayes_cut,sgpo_bayes_g24
python -m sgpo_jax.compare report --runs-dir "$RUNS" \
  --regimes paper_like,default,small_pool --arms "$ARMS" --seeds 0-4 --results-dir "$HERE"
python -m studies.compact_png "$HERE"/plots/compare_*.png  # palette PNGs, as committed
DIAG=grpo,dapo,dapo_g4,greso,knapsack,sgpo,sgpo_bayes_floor25,sgpo_bayes,sgpo_bayes_pooled,sgpo_bayes_cut,sgpo_bayes_g24
for regime in paper_like default small_pool; do
  seeds=0-4
  [ "$regime" = small_pool ] && seeds=0-2
  python -m sgpo_jax.compare diagnose --runs-dir "$RUNS" --regime "$regime" --arms "$DIAG" \
    --seeds "$seeds" --out "$HERE/compare_diagnostics_$regime.md"
done
