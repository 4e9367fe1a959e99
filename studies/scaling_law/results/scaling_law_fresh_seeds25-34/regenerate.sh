#!/usr/bin/env bash
# Regenerates the fourth fresh-seed test (PLAN.md in this folder):
#   bash studies/scaling_law/results/scaling_law_fresh_seeds25-34/regenerate.sh           # from trajectories
#   bash studies/scaling_law/results/scaling_law_fresh_seeds25-34/regenerate.sh NEW_RUNS  # from run folders
# The new runs were made with (two processes sharing NEW_RUNS; a clone of 2821c3a as CODE; the
# warm-start cache of the earlier sweeps as CACHE; the runner skips finished runs):
#   COMMON="--runs-dir NEW_RUNS --code-dir CODE --cache-dir CACHE --regimes default,paper_like"
#   python -m sgpo_jax.compare run $COMMON --arms sgpo --seeds 25-34    # the runner adds grpo
#   python -m sgpo_jax.compare run $COMMON \
#     --arms grpo,dapo,sgpo,greso,knapsack,sgpo_bayes,dapo_g4,sgpo_bayes_g24 --seeds 25-29
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../../.."
RESULTS=studies/scaling_law/results
REL=$RESULTS/scaling_law_fresh_seeds25-34  # relative paths: reports quote their command
PLAN=$REL/PLAN.md
S3=$RESULTS/scaling_law_fresh_seeds15-24
FRESH="$RESULTS/scaling_law_fresh/trajectories.json $RESULTS/scaling_law_fresh_seeds10-14/trajectories.json $S3/all_seeds15-19_extended/trajectories.json $S3/sgpo_grpo_seeds15-24_extended/trajectories.json"
# The shipped sets before this test (commit 2821c3a), from the repository's history.
BASE=/tmp/calibration_runs_seeds0-4.json
STOP_BASE=/tmp/stop_calibration_runs_seeds5-9.json
git show 2821c3a:sgpo_jax/scaling_law/calibration_runs.json > "$BASE"
git show 2821c3a:sgpo_jax/scaling_law/stop_calibration_runs.json > "$STOP_BASE"
CANDIDATE=/tmp/calibration_runs_seeds0-24_k9.json  # a fixed path: reports name it
# 1. Change 1: the seeds 0-4 set extended with the 260 fresh runs of seeds 5-24, intervals per
#    config (>= 9 scores), and the plan's design evidence (runs already seen).
python -m studies.scaling_law.extend_calibration --trajectories $FRESH \
  --base "$BASE" --out "$CANDIDATE" --pool-check "$REL/pool_check.md" --config-scores-min 9
# The candidate met the plan's rule and ships as the CLI's set: the same bytes, xz-compressed.
xz -dc sgpo_jax/scaling_law/calibration_runs.json.xz | cmp "$CANDIDATE" -
# 2. The CLI on the new runs, with the candidate and (reference) the seeds 0-4 set:
#    (a) seeds 25-29, all 16 configs; (b) seeds 25-34, the sGPO and GRPO configs.
for SET in candidate previous; do
  CAL=$BASE
  [ "$SET" = candidate ] && CAL=$CANDIDATE
  if [ $# -ge 1 ]; then
    python -m studies.scaling_law.fresh "$1"/default/*_seed2[5-9] \
      "$1"/paper_like/*_seed2[5-9] --calibration "$CAL" --plan "$PLAN" \
      --out "$HERE/all_seeds25-29_$SET"
    python -m studies.scaling_law.fresh "$1"/*/sgpo_seed* "$1"/*/grpo_seed* \
      --calibration "$CAL" --plan "$PLAN" --out "$HERE/sgpo_grpo_seeds25-34_$SET"
  else  # a trajectories.json is read whole before it is rewritten (with the same content)
    for PART in all_seeds25-29 sgpo_grpo_seeds25-34; do
      python -m studies.scaling_law.fresh \
        --trajectories "$REL/${PART}_candidate/trajectories.json" --calibration "$CAL" \
        --plan "$PLAN" --out "$HERE/${PART}_$SET"
    done
  fi
done
rm "$HERE"/*_previous/trajectories.json  # the same runs as the candidate ones' files
# 3. Change 2: rule 'bound' chosen as the trainer runs it on the 260 runs of seeds 5-24, tested
#    on seeds 25-29; the trainer's calibration set of those 260 runs.
python -m studies.scaling_law.stop_trainer --design $FRESH \
  --test "$REL/all_seeds25-29_candidate/trajectories.json" \
  --reference-calibration "$STOP_BASE" \
  --write-calibration /tmp/stop_calibration_seeds5-24.json --out "$HERE"
# The design half alone (how the plan's setting was fixed before any test run was read):
#   python -m studies.scaling_law.stop_trainer --design $FRESH \
#     --out "$REL/stop_design_half"
