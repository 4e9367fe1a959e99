#!/usr/bin/env bash
# Regenerates the seventh fresh-seed test (PLAN.md in this folder):
#   bash studies/scaling_law/results/scaling_law_fresh_seeds45-49/regenerate.sh           # from trajectories
#   bash studies/scaling_law/results/scaling_law_fresh_seeds45-49/regenerate.sh NEW_RUNS  # from run folders
# The new runs were made as the sixth test's (two processes sharing NEW_RUNS, the same commands;
# a clone of 1c951bd as CODE; the warm-start cache of the earlier sweeps as CACHE; the runner
# skips finished runs; FRACTIONS = default_config.REGIME_EVAL_FRACTIONS and 0.955, ..., 0.995,
# sorted: the config check refuses a list that is not strictly increasing):
#   COMMON="--runs-dir NEW_RUNS --code-dir CODE --cache-dir CACHE --regimes default,paper_like"
#   python -m sgpo_jax.compare run $COMMON \
#     --arms grpo,dapo,sgpo,greso,knapsack,sgpo_bayes,dapo_g4,sgpo_bayes_g24 --seeds 45-49 \
#     --set "eval.at_budget_fractions=(FRACTIONS)"
#   python -m sgpo_jax.compare run $COMMON --arms sgpo --seeds 50-54 \
#     --set "eval.at_budget_fractions=(FRACTIONS)"   # the runner adds grpo
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../../.."
RESULTS=studies/scaling_law/results
REL=$RESULTS/scaling_law_fresh_seeds45-49  # relative paths: reports quote their command
PLAN=$REL/PLAN.md
S3=$RESULTS/scaling_law_fresh_seeds15-24
S4=$RESULTS/scaling_law_fresh_seeds25-34
# The 280 runs of seeds 25-44 the candidate adds to the set of seeds 0-24.
ADDED="$S4/all_seeds25-29_candidate/trajectories.json $S4/sgpo_grpo_seeds25-34_candidate/trajectories.json $RESULTS/scaling_law_fresh_seeds35-39/dense/trajectories.json $RESULTS/scaling_law_fresh_seeds40-44/dense/trajectories.json"
# The stop rule's design runs (seeds 5-39), as in the sixth test.
DESIGN="$RESULTS/scaling_law_fresh/trajectories.json $RESULTS/scaling_law_fresh_seeds10-14/trajectories.json $S3/all_seeds15-19_extended/trajectories.json $S3/sgpo_grpo_seeds15-24_extended/trajectories.json $S4/all_seeds25-29_candidate/trajectories.json $S4/sgpo_grpo_seeds25-34_candidate/trajectories.json $RESULTS/scaling_law_fresh_seeds35-39/dense/trajectories.json"
# The shipped set before this test (seeds 0-24, K = 9), from the repository's history.
BASE=/tmp/calibration_runs_seeds0-24_k9_shipped.json
git show 875e607:sgpo_jax/scaling_law/calibration_runs.json > "$BASE"
CANDIDATE=/tmp/calibration_runs_seeds0-44_k9.json  # a fixed path: reports name it
# 1. The candidate: the shipped set extended with the 280 runs of seeds 25-44 (K = 9), and the
#    plan's design evidence (runs already seen).
python -m studies.scaling_law.extend_calibration --trajectories $ADDED \
  --base "$BASE" --out "$CANDIDATE" --pool-check "$REL/pool_check.md" --config-scores-min 9
# 2. The CLI on the new runs, with the candidate and (reference) the shipped set:
#    (a) seeds 45-49, all 16 configs; (b) seeds 45-54, the sGPO and GRPO configs.
for SET in candidate previous; do
  CAL=$BASE
  [ "$SET" = candidate ] && CAL=$CANDIDATE
  if [ $# -ge 1 ]; then
    python -m studies.scaling_law.fresh "$1"/default/*_seed4[5-9] \
      "$1"/paper_like/*_seed4[5-9] --calibration "$CAL" --plan "$PLAN" \
      --out "$REL/all_seeds45-49_$SET"
    python -m studies.scaling_law.fresh "$1"/*/sgpo_seed* "$1"/*/grpo_seed* \
      --calibration "$CAL" --plan "$PLAN" --out "$REL/sgpo_grpo_seeds45-54_$SET"
  else  # a trajectories.json is read whole before it is rewritten (with the same content)
    for PART in all_seeds45-49 sgpo_grpo_seeds45-54; do
      python -m studies.scaling_law.fresh \
        --trajectories "$REL/${PART}_candidate/trajectories.json" --calibration "$CAL" \
        --plan "$PLAN" --out "$REL/${PART}_$SET"
    done
  fi
done
rm "$REL"/*_previous/trajectories.json  # the same runs as the candidate ones' files
# 3. Early stop as the trainer runs it (reported; nothing ships): the sixth test's design half
#    (seeds 5-39, intervals per config), on the 80 runs of part (a).
python -m studies.scaling_law.stop_trainer --design $DESIGN \
  --config-scores-min 9 --design-cache "${TABLES:-/tmp/stop_design_tables_seeds5-39_k9.json}" \
  --test "$REL/all_seeds45-49_candidate/trajectories.json" \
  --write-calibration "${STOP_SET:-/tmp/stop_calibration_seeds5-39_k9.json}" --out "$REL/stop"
