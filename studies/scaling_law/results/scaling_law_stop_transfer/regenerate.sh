#!/usr/bin/env bash
# Regenerates the second fresh-seed test (PLAN.md in this folder), on the reference machine type:
#   bash studies/scaling_law/results/scaling_law_stop_transfer/regenerate.sh           # from trajectories
#   bash studies/scaling_law/results/scaling_law_stop_transfer/regenerate.sh NEW_RUNS  # from run folders
# The new runs (seeds 10-14) were made with (two processes sharing NEW_RUNS; the checkout at
# 92208d5 as CODE; shipped warm starts; the runner skips finished runs):
#   python -m sgpo_jax.compare run --runs-dir NEW_RUNS --code-dir CODE \
#     --regimes default,paper_like \
#     --arms grpo,dapo,sgpo,greso,knapsack,sgpo_bayes,dapo_g4,sgpo_bayes_g24 --seeds 10-14
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../../.."
RESULTS=studies/scaling_law/results
FIRST=$RESULTS/scaling_law_fresh/trajectories.json
NEW=$RESULTS/scaling_law_fresh_seeds10-14
mkdir -p "$NEW" "$RESULTS/scaling_law_fresh_seeds5-14"
# 1. The first fresh test's script, unchanged, on seeds 10-14 (it also writes their trajectories).
if [ $# -ge 1 ]; then
  python -m studies.scaling_law.fresh "$1"/default/*_seed* \
    "$1"/paper_like/*_seed* --out "$NEW"
else  # trajectories.json is read whole before it is rewritten (with the same content)
  python -m studies.scaling_law.fresh --trajectories "$NEW/trajectories.json" \
    --out "$NEW"
fi
# 2. Seeds 5-14 together.
python -m studies.scaling_law.fresh --trajectories "$FIRST" \
  "$NEW/trajectories.json" --out "$RESULTS/scaling_law_fresh_seeds5-14"
rm "$RESULTS/scaling_law_fresh_seeds5-14/trajectories.json"  # the two files above, concatenated
# 3. Rule 'bound' chosen on seeds 5-9, tested on seeds 10-14.
python -m studies.scaling_law.stop_transfer --design "$FIRST" \
  --test "$NEW/trajectories.json" --out "$HERE" \
  --write-calibration sgpo_jax/scaling_law/stop_calibration_runs.json.xz
