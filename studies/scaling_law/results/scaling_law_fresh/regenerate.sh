#!/usr/bin/env bash
# Regenerates results.{md,json} in this folder, on the reference machine type.
#   bash studies/scaling_law/results/scaling_law_fresh/regenerate.sh            # from trajectories.json
#   bash studies/scaling_law/results/scaling_law_fresh/regenerate.sh FRESH_RUNS # from the run folders
# The runs were made with (two processes sharing FRESH_RUNS; the checkout at 4f2af25, the
# parent of the plan's commit, as CODE; shipped warm starts; the runner skips finished runs):
#   python -m sgpo_jax.compare run --runs-dir FRESH_RUNS --code-dir CODE \
#     --regimes default,paper_like \
#     --arms grpo,dapo,sgpo,greso,knapsack,sgpo_bayes,dapo_g4,sgpo_bayes_g24 --seeds 5-9
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../../.."
if [ $# -ge 1 ]; then
  python -m studies.scaling_law.fresh "$1"/default/*_seed* "$1"/paper_like/*_seed* \
    --out "$HERE"
else  # trajectories.json is read whole before it is rewritten (with the same content)
  python -m studies.scaling_law.fresh \
    --trajectories studies/scaling_law/results/scaling_law_fresh/trajectories.json --out "$HERE"
fi
