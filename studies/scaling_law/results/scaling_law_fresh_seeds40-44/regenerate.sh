#!/usr/bin/env bash
# Regenerates the sixth fresh-seed test (PLAN.md in this folder):
#   bash studies/scaling_law/results/scaling_law_fresh_seeds40-44/regenerate.sh           # from trajectories
#   bash studies/scaling_law/results/scaling_law_fresh_seeds40-44/regenerate.sh NEW_RUNS  # from run folders
# The new runs were made as the fifth test's (two processes sharing NEW_RUNS, the same command; a
# clone of 1c951bd as CODE; the warm-start cache of the earlier sweeps as CACHE; the runner skips
# finished runs; FRACTIONS = default_config.REGIME_EVAL_FRACTIONS and 0.955, 0.96, ..., 0.995):
#   COMMON="--runs-dir NEW_RUNS --code-dir CODE --cache-dir CACHE --regimes default,paper_like"
#   python -m sgpo_jax.compare run $COMMON \
#     --arms grpo,dapo,sgpo,greso,knapsack,sgpo_bayes,dapo_g4,sgpo_bayes_g24 --seeds 40-44 \
#     --set "eval.at_budget_fractions=(FRACTIONS)"
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../../.."
RESULTS=studies/scaling_law/results
REL=$RESULTS/scaling_law_fresh_seeds40-44  # relative paths: reports quote their command
PLAN=$REL/PLAN.md
S3=$RESULTS/scaling_law_fresh_seeds15-24
S4=$RESULTS/scaling_law_fresh_seeds25-34
DESIGN="$RESULTS/scaling_law_fresh/trajectories.json $RESULTS/scaling_law_fresh_seeds10-14/trajectories.json $S3/all_seeds15-19_extended/trajectories.json $S3/sgpo_grpo_seeds15-24_extended/trajectories.json $S4/all_seeds25-29_candidate/trajectories.json $S4/sgpo_grpo_seeds25-34_candidate/trajectories.json $RESULTS/scaling_law_fresh_seeds35-39/dense/trajectories.json"
TABLES=${TABLES:-/tmp/stop_design_tables_seeds5-39_k9.json}  # the design half, reused by step 3's second call
# 1. The CLI (shipped calibration set) on the dense runs; their trajectories.
if [ $# -ge 1 ]; then
  python -m studies.scaling_law.fresh "$1"/default/*_seed4[0-4] \
    "$1"/paper_like/*_seed4[0-4] --plan "$PLAN" --out "$REL/dense"
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
# 3. Early stop as the trainer runs it: chosen with intervals per config on seeds 5-39, on each
#    final; the candidate's calibration set (what ships if the plan's rule says so).
for FINAL in dense thinned; do
  python -m studies.scaling_law.stop_trainer --design $DESIGN \
    --config-scores-min 9 --design-cache "$TABLES" --test "$REL/$FINAL/trajectories.json" \
    --write-calibration "${STOP_SET:-/tmp/stop_calibration_seeds5-39_k9.json}" --out "$REL/stop_$FINAL"
done
# 3b. For comparison (after the plan, on the design runs only): the same design half with pooled
#     intervals, and the frontier points of both rules.
python -m studies.scaling_law.stop_trainer --design $DESIGN --least-worst-row \
  --design-cache "${POOLED_TABLES:-/tmp/stop_design_tables_seeds5-39_pooled.json}" \
  --out "$REL/stop_design_pooled"
# 4. Side by side.
python -m studies.scaling_law.dense_final --side-by-side \
  "$REL/stop_dense/stop_results.json" "$REL/stop_thinned/stop_results.json" \
  "$REL/dense/results.json" "$REL/thinned/results.json" "$REL/side_by_side.md"
