#!/usr/bin/env bash
# Regenerates this folder from a runs dir laid out as compare.py writes it (RUNS/<regime>/<arm>_seed<s>):
#   bash experiments/results/compare_prelim_sgpo_bayes_v2/regenerate.sh RUNS SEEDS
# Arms (the code each was run with is in its run's config.json; see NOTES.md):
#   sgpo_bayes  this branch's default (profile off, post-filter + refill, reshuffle, floor 0.25)
#   bayes_np    an earlier v2: profile off, pool order every epoch, informative_floor 0.35
#   bayes_v2p   an earlier v2: lazy adaptive profile on, pool order, informative_floor 0.35
#   dapo_g4     DAPO at G=4 (control); the others are compare.py's baseline arms.
set -euo pipefail
RUNS=${1:?runs dir}
SEEDS=${2:-0-2}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
cd "$REPO"
python experiments/compare.py --analyse-only --regimes default,paper_like \
  --arms grpo,dapo,greso,knapsack,sgpo,sgpo_g48_k2,dapo_g4,sgpo_bayes \
  --arm 'bayes_np=sgpo_bayes,sgpo_bayes.reshuffle=False,sgpo_bayes.informative_floor=0.35' \
  --arm 'bayes_v2p=sgpo_bayes,sgpo_bayes.profile=True,sgpo_bayes.reshuffle=False,sgpo_bayes.informative_floor=0.35' \
  --seeds "$SEEDS" --runs-dir "$RUNS" --results-dir "$HERE"
for regime in default paper_like; do
  python experiments/bayes_diagnostics.py --runs-dir "$RUNS" --regime "$regime" \
    --arms grpo,dapo,greso,dapo_g4,sgpo_bayes,bayes_np,bayes_v2p --seeds "$SEEDS" \
    --out "$HERE/diagnostics_$regime.md"
done
