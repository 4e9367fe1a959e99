#!/usr/bin/env bash
# Regenerates this folder from a runs dir of the reference machine (RUNS/<regime>/<arm>_seed<s>):
#   bash studies/allocator_comparison/sweeps/pooled_cut/regenerate.sh RUNS
# The pooled-prior arms of sgpo_bayes (sgpo_bayes_pooled, its ablation sgpo_bayes_priority, and
# sgpo_bayes_cut: pooled + sgpo_bayes.epoch_cut 0.3) on the machine type of
# studies/allocator_comparison/compare.md (AMD EPYC), next to reruns of that comparison's baselines.
# The reruns reproduce compare.json's per-seed final accuracies bit for bit (same warm starts:
# SFT final losses 0.2487 and 0.0370), so these tables extend compare.md arm for arm.
# The runs were made with (two or three processes sharing the runs dir; a frozen checkout as
# --code-dir):
#   python -m sgpo_jax.compare run --runs-dir RUNS --code-dir CODE --regimes paper_like \
#     --arms grpo,sgpo_bayes_pooled,dapo,dapo_g4,sgpo_bayes,greso,knapsack,sgpo_bayes_priority \
#     --seeds 0-4
#   python -m sgpo_jax.compare run --runs-dir RUNS --code-dir CODE --regimes paper_like \
#     --arms grpo,sgpo_bayes_cut --seeds 0-4
#   python -m sgpo_jax.compare run --runs-dir RUNS --code-dir CODE --regimes default \
#     --arms grpo,sgpo_bayes_cut,dapo_g4,sgpo_bayes,dapo,sgpo_bayes_pooled,greso --seeds 0-4
set -euo pipefail
RUNS=${1:?runs dir}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../../.." && pwd)
cd "$REPO"
NOTE="Pooled-prior arms of sgpo_bayes on the reference machine (AMD EPYC), next to reruns of studies/allocator_comparison/compare.md's baselines that reproduce its per-seed results bit for bit. studies/allocator_comparison/sweeps/pooled_cut/regenerate.sh."
PAPER_LIKE=grpo,dapo,greso,knapsack,dapo_g4,sgpo_bayes,sgpo_bayes_pooled,sgpo_bayes_priority,sgpo_bayes_cut
DEFAULT=grpo,dapo,greso,dapo_g4,sgpo_bayes,sgpo_bayes_pooled,sgpo_bayes_cut
python -m sgpo_jax.compare report --regimes paper_like --arms "$PAPER_LIKE" \
  --seeds 0-4 --runs-dir "$RUNS" --results-dir "$HERE/paper_like" --note "$NOTE"
python -m sgpo_jax.compare diagnose --runs-dir "$RUNS" --regime paper_like \
  --arms "$PAPER_LIKE" --seeds 0-4 --out "$HERE/paper_like/diagnostics.md"
if ls "$RUNS"/default/*_seed* >/dev/null 2>&1; then
  python -m sgpo_jax.compare report --regimes default --arms "$DEFAULT" \
    --seeds 0-4 --runs-dir "$RUNS" --results-dir "$HERE/default" --note "$NOTE"
  python -m sgpo_jax.compare diagnose --runs-dir "$RUNS" --regime default \
    --arms "$DEFAULT" --seeds 0-4 --out "$HERE/default/diagnostics.md"
fi
#   python -m sgpo_jax.compare run --runs-dir RUNS --code-dir CODE --regimes small_pool \
#     --arms grpo,sgpo_bayes_cut,dapo_g4,sgpo_bayes_pooled,sgpo_bayes,dapo --seeds 0-2
SMALL_POOL=grpo,dapo,dapo_g4,sgpo_bayes,sgpo_bayes_pooled,sgpo_bayes_cut
if ls "$RUNS"/small_pool/*_seed* >/dev/null 2>&1; then
  python -m sgpo_jax.compare report --regimes small_pool --arms "$SMALL_POOL" \
    --seeds 0-2 --runs-dir "$RUNS" --results-dir "$HERE/small_pool" --note "$NOTE"
  python -m sgpo_jax.compare diagnose --runs-dir "$RUNS" --regime small_pool \
    --arms "$SMALL_POOL" --seeds 0-2 --out "$HERE/small_pool/diagnostics.md"
fi
# A probe, 2 seeds (stopped there: both seeds far behind): the cut arm with cheaper steps.
#   python -m sgpo_jax.compare run --runs-dir RUNS --code-dir CODE --regimes paper_like \
#     --arms grpo --arm "$R2" --seeds 0-4   (seeds 0-1 finished)
R2="sgpo_bayes_cut_r2=sgpo_bayes,sgpo_bayes.pooled_prior=difficulty,sgpo_bayes.prioritise=True,sgpo_bayes.epoch_cut=0.3,sgpo_bayes.max_rounds=2"
python -m sgpo_jax.compare report --regimes paper_like \
  --arms grpo,dapo,sgpo_bayes_pooled,sgpo_bayes_cut --arm "$R2" --seeds 0-1 \
  --runs-dir "$RUNS" --results-dir "$HERE/paper_like_r2_probe" --note "$NOTE (Seeds 0-1 only.)"
