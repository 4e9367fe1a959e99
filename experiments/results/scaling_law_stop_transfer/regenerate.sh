#!/usr/bin/env bash
# Regenerates the second fresh-seed test (PLAN.md in this folder), on the reference machine type:
#   bash experiments/results/scaling_law_stop_transfer/regenerate.sh           # from trajectories
#   bash experiments/results/scaling_law_stop_transfer/regenerate.sh NEW_RUNS  # from run folders
# The new runs (seeds 10-14) were made with (two processes sharing NEW_RUNS; the checkout at
# 92208d5 as CODE; shipped warm starts; the runner skips finished runs):
#   python experiments/compare.py --runs-dir NEW_RUNS --code-dir CODE \
#     --regimes default,paper_like \
#     --arms grpo,dapo,sgpo,greso,knapsack,sgpo_bayes,dapo_g4,sgpo_bayes_g24 --seeds 10-14
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../.."
RESULTS=experiments/results
FIRST=$RESULTS/scaling_law_fresh/trajectories.json
NEW=$RESULTS/scaling_law_fresh_seeds10-14
mkdir -p "$NEW" "$RESULTS/scaling_law_fresh_seeds5-14"
# 1. The first fresh test's script, unchanged, on seeds 10-14 (it also writes their trajectories).
if [ $# -ge 1 ]; then
  PYTHONPATH=. python experiments/scaling_law_fresh.py "$1"/default/*_seed* \
    "$1"/paper_like/*_seed* --out "$NEW"
else  # trajectories.json is read whole before it is rewritten (with the same content)
  PYTHONPATH=. python experiments/scaling_law_fresh.py --trajectories "$NEW/trajectories.json" \
    --out "$NEW"
fi
# 2. Seeds 5-14 together.
PYTHONPATH=. python experiments/scaling_law_fresh.py --trajectories "$FIRST" \
  "$NEW/trajectories.json" --out "$RESULTS/scaling_law_fresh_seeds5-14"
rm "$RESULTS/scaling_law_fresh_seeds5-14/trajectories.json"  # the two files above, concatenated
# 3. Rule 'bound' chosen on seeds 5-9, tested on seeds 10-14.
PYTHONPATH=. python experiments/scaling_law_stop_transfer.py --design "$FIRST" \
  --test "$NEW/trajectories.json" --out "$HERE" \
  --write-calibration sgpo_jax/scaling_law/stop_calibration_runs.json
