#!/usr/bin/env bash
# Regenerates the third fresh-seed test (PLAN.md in this folder):
#   bash studies/scaling_law/results/scaling_law_fresh_seeds15-24/regenerate.sh           # from trajectories
#   bash studies/scaling_law/results/scaling_law_fresh_seeds15-24/regenerate.sh NEW_RUNS  # from run folders
# The new runs were made with (two processes sharing NEW_RUNS; a clone of bb8a97f as CODE; the
# warm-start cache of the seeds 10-14 sweep as CACHE; the runner skips finished runs):
#   COMMON="--runs-dir NEW_RUNS --code-dir CODE --cache-dir CACHE --regimes default,paper_like"
#   python -m sgpo_jax.compare run $COMMON --arms sgpo --seeds 15-24    # the runner adds grpo
#   python -m sgpo_jax.compare run $COMMON \
#     --arms grpo,dapo,sgpo,greso,knapsack,sgpo_bayes,dapo_g4,sgpo_bayes_g24 --seeds 15-19
# The extended calibration set under test did not pass the plan's rule, so the shipped set is
# the previous one (seeds 0-4) and the extended one is rebuilt here, outside the package.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../../.."
RESULTS=studies/scaling_law/results
REL=$RESULTS/scaling_law_fresh_seeds15-24  # relative paths: reports quote their command
PLAN=$REL/PLAN.md
FRESH="$RESULTS/scaling_law_fresh/trajectories.json $RESULTS/scaling_law_fresh_seeds10-14/trajectories.json"
SHIPPED=sgpo_jax/scaling_law/calibration_runs.json.xz
EXTENDED=/tmp/calibration_runs_seeds0-14.json  # a fixed path: reports name it
# 1. The change under test: the shipped set extended with the seeds 5-14 runs, and the plan's
#    design evidence (runs already seen).
python -m studies.scaling_law.extend_calibration --trajectories $FRESH \
  --out "$EXTENDED" --pool-check "$REL/pool_check.md"
# 2. The CLI on the new runs, with the extended set and (reference) the shipped one:
#    (a) seeds 15-19, all 16 configs; (b) seeds 15-24, the sGPO and GRPO configs.
for SET in extended previous; do
  CAL=$SHIPPED
  [ "$SET" = extended ] && CAL=$EXTENDED
  if [ $# -ge 1 ]; then
    python -m studies.scaling_law.fresh "$1"/default/*_seed1[5-9] \
      "$1"/paper_like/*_seed1[5-9] --calibration "$CAL" --plan "$PLAN" \
      --out "$HERE/all_seeds15-19_$SET"
    python -m studies.scaling_law.fresh "$1"/*/sgpo_seed* "$1"/*/grpo_seed* \
      --calibration "$CAL" --plan "$PLAN" --out "$HERE/sgpo_grpo_seeds15-24_$SET"
  else  # a trajectories.json is read whole before it is rewritten (with the same content)
    for PART in all_seeds15-19 sgpo_grpo_seeds15-24; do
      python -m studies.scaling_law.fresh \
        --trajectories "$REL/${PART}_extended/trajectories.json" --calibration "$CAL" \
        --plan "$PLAN" --out "$HERE/${PART}_$SET"
    done
  fi
done
rm "$HERE"/*_previous/trajectories.json  # the same runs as the extended ones' files
# 3. The trainer's rule 'bound' as shipped (chosen on seeds 5-9), tested on seeds 15-19.
python -m studies.scaling_law.stop_transfer \
  --design "$RESULTS/scaling_law_fresh/trajectories.json" \
  --test "$REL/all_seeds15-19_extended/trajectories.json" --out "$HERE" --trainer-in-plan
# 4. After the test (not in the plan): leave each seed of 0-24 out, with the regime's pooled
#    scores and with intervals from the config's own runs (an untested option).
python -m studies.scaling_law.extend_calibration --trajectories $FRESH \
  "$REL/sgpo_grpo_seeds15-24_extended/trajectories.json" \
  --pool-check "$REL/pool_check_post_hoc.md" --config-scores-min 9
