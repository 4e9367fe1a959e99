#!/usr/bin/env bash
# Regenerates the third fresh-seed test (PLAN.md in this folder):
#   bash experiments/results/scaling_law_fresh_seeds15-24/regenerate.sh           # from trajectories
#   bash experiments/results/scaling_law_fresh_seeds15-24/regenerate.sh NEW_RUNS  # from run folders
# The new runs were made with (two processes sharing NEW_RUNS; a clone of bb8a97f as CODE; the
# warm-start cache of the seeds 10-14 sweep as CACHE; the runner skips finished runs):
#   COMMON="--runs-dir NEW_RUNS --code-dir CODE --cache-dir CACHE --regimes default,paper_like"
#   python experiments/compare.py $COMMON --arms sgpo --seeds 15-24    # the runner adds grpo
#   python experiments/compare.py $COMMON \
#     --arms grpo,dapo,sgpo,greso,knapsack,sgpo_bayes,dapo_g4,sgpo_bayes_g24 --seeds 15-19
# Needs the git history: the previous calibration set is read from commit bb8a97f.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../.."
RESULTS=experiments/results
PLAN=$RESULTS/scaling_law_fresh_seeds15-24/PLAN.md
FRESH="$RESULTS/scaling_law_fresh/trajectories.json $RESULTS/scaling_law_fresh_seeds10-14/trajectories.json"
PREVIOUS=/tmp/calibration_runs_bb8a97f.json  # a fixed path: reports name it
git show bb8a97f:sgpo_jax/scaling_law/calibration_runs.json > "$PREVIOUS"
# 1. The change under test: the CLI's calibration set extended with the seeds 5-14 runs, and
#    the design evidence of the plan (runs already seen).
PYTHONPATH=. python experiments/scaling_law_extend_calibration.py --trajectories $FRESH \
  --base "$PREVIOUS" --out sgpo_jax/scaling_law/calibration_runs.json
PYTHONPATH=. python experiments/scaling_law_extend_calibration.py --trajectories $FRESH \
  --base "$PREVIOUS" --pool-check "$HERE/pool_check.md"
# 2. The CLI on the new runs, with the extended set and (reference) the previous one:
#    (a) seeds 15-19, all 16 configs; (b) seeds 15-24, the sGPO and GRPO configs.
for SET in extended previous; do
  CAL=sgpo_jax/scaling_law/calibration_runs.json
  [ "$SET" = previous ] && CAL="$PREVIOUS"
  if [ $# -ge 1 ]; then
    PYTHONPATH=. python experiments/scaling_law_fresh.py "$1"/default/*_seed1[5-9] \
      "$1"/paper_like/*_seed1[5-9] --calibration "$CAL" --plan "$PLAN" --out "$HERE/all_seeds15-19_$SET"
    PYTHONPATH=. python experiments/scaling_law_fresh.py "$1"/*/sgpo_seed* "$1"/*/grpo_seed* \
      --calibration "$CAL" --plan "$PLAN" --out "$HERE/sgpo_grpo_seeds15-24_$SET"
  else
    for PART in all_seeds15-19 sgpo_grpo_seeds15-24; do
      PYTHONPATH=. python experiments/scaling_law_fresh.py \
        --trajectories "$HERE/${PART}_extended/trajectories.json" --calibration "$CAL" \
        --plan "$PLAN" --out "$HERE/${PART}_$SET"
    done
  fi
done
rm "$HERE"/*_previous/trajectories.json  # the same runs as the extended ones' files
# 3. The trainer's rule 'bound' as shipped (chosen on seeds 5-9), tested on seeds 15-19.
PYTHONPATH=. python experiments/scaling_law_stop_transfer.py \
  --design "$RESULTS/scaling_law_fresh/trajectories.json" \
  --test "$HERE/all_seeds15-19_extended/trajectories.json" --out "$HERE" --trainer-in-plan
