#!/usr/bin/env bash
# Regenerates the fifth fresh-seed test (PLAN.md in this folder):
#   bash studies/scaling_law/results/scaling_law_fresh_seeds35-39/regenerate.sh           # from trajectories
#   bash studies/scaling_law/results/scaling_law_fresh_seeds35-39/regenerate.sh NEW_RUNS  # from run folders
# The new runs were made with (two processes sharing NEW_RUNS, the same command; a clone of
# 1c951bd as CODE; the warm-start cache of the earlier sweeps as CACHE; the runner skips
# finished runs; FRACTIONS = default_config.REGIME_EVAL_FRACTIONS and 0.955, 0.96, ..., 0.995):
#   COMMON="--runs-dir NEW_RUNS --code-dir CODE --cache-dir CACHE --regimes default,paper_like"
#   python -m sgpo_jax.compare run $COMMON \
#     --arms grpo,dapo,sgpo,greso,knapsack,sgpo_bayes,dapo_g4,sgpo_bayes_g24 --seeds 35-39 \
#     --set "eval.at_budget_fractions=(FRACTIONS)"
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../../.."
RESULTS=studies/scaling_law/results
REL=$RESULTS/scaling_law_fresh_seeds35-39  # relative paths: reports quote their command
PLAN=$REL/PLAN.md
S3=$RESULTS/scaling_law_fresh_seeds15-24
FRESH="$RESULTS/scaling_law_fresh/trajectories.json $RESULTS/scaling_law_fresh_seeds10-14/trajectories.json $S3/all_seeds15-19_extended/trajectories.json $S3/sgpo_grpo_seeds15-24_extended/trajectories.json"
# 1. The CLI (shipped calibration set) on the dense runs; their trajectories.
if [ $# -ge 1 ]; then
  python -m studies.scaling_law.fresh "$1"/default/*_seed3[5-9] \
    "$1"/paper_like/*_seed3[5-9] --plan "$PLAN" --out "$REL/dense"
else  # a trajectories.json is read whole before it is rewritten (with the same content)
  python -m studies.scaling_law.fresh --trajectories "$REL/dense/trajectories.json" \
    --plan "$PLAN" --out "$REL/dense"
fi
# 2. The same runs thinned to the comparison schedule, the final value's own noise, and the
#    CLI against the thinned final.
python -m studies.scaling_law.dense_final --trajectories "$REL/dense/trajectories.json" \
  --thinned-out "$REL/thinned/trajectories.json" --report "$REL/final_noise"
python -m studies.scaling_law.fresh --trajectories "$REL/thinned/trajectories.json" \
  --plan "$PLAN" --out "$REL/thinned"
# 3. Early stop as the trainer runs it (the fourth test's chooser on seeds 5-24), on each.
for FINAL in dense thinned; do
  python -m studies.scaling_law.stop_trainer --design $FRESH \
    --test "$REL/$FINAL/trajectories.json" --out "$REL/stop_$FINAL"
done
# 4. Side by side.
python -m studies.scaling_law.dense_final --side-by-side \
  "$REL/stop_dense/stop_results.json" "$REL/stop_thinned/stop_results.json" \
  "$REL/dense/results.json" "$REL/thinned/results.json" "$REL/side_by_side.md"
