#!/usr/bin/env bash
# Regenerates this folder from a runs dir laid out as compare.py writes it
# (RUNS/<regime>/<arm>_seed<s>):
#   bash studies/allocator_comparison/sweeps/prelim_sgpo_bayes_v2/regenerate.sh RUNS
# Arms (see NOTES.md; the code each ran with is in its run's config.json):
#   sgpo_bayes  this branch's default; dapo_g4 / dapo_g2: DAPO at G=4 / G=2 (controls);
#   bayes_np, bayes_v2p, bayes_c, bayes_np_c, bayes_g248: variants on the way (overrides below).
set -euo pipefail
RUNS=${1:?runs dir}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../../.." && pwd)
cd "$REPO"
BASE=grpo,dapo,greso,knapsack,sgpo,sgpo_g48_k2
OLD=sgpo_bayes.reshuffle=False,sgpo_bayes.informative_floor=0.35
VARIANTS=(--arm "bayes_np=sgpo_bayes,$OLD"
          --arm "bayes_v2p=sgpo_bayes,sgpo_bayes.profile=True,$OLD"
          --arm "bayes_c=sgpo_bayes,sgpo_bayes.profile=True,sgpo_bayes.train_cost_per_row=3.5,$OLD"
          --arm "bayes_np_c=sgpo_bayes,sgpo_bayes.train_cost_per_row=3.5,$OLD"
          --arm 'bayes_g248=sgpo_bayes,sgpo_bayes.group_sizes=(2,4,8)'
          --arm 'dapo_g2=dapo,dapo.group_size=2')
analyse() {  # OUT REGIME SEEDS ARMS [extra compare args]
  local out=$1 regime=$2 seeds=$3 arms=$4
  shift 4
  python -m sgpo_jax.compare report --regimes "$regime" --arms "$BASE,$arms" "$@" \
    --seeds "$seeds" --runs-dir "$RUNS" --results-dir "$HERE/$out"
  local names
  names=$(echo "grpo,dapo,greso,$arms" "$@" | tr ' ' '\n' | sed -n 's/=.*//p;/^[a-z_0-9,]*$/p' \
    | tr '\n' ',' | sed 's/,,*/,/g;s/,$//')
  python -m sgpo_jax.compare diagnose --runs-dir "$RUNS" --regime "$regime" \
    --arms "$names" --seeds "$seeds" --out "$HERE/$out/diagnostics.md"
}
# The default regime, 5 seeds: the arm and its control.
analyse default default 0-4 dapo_g4,sgpo_bayes
# The default regime, seeds 0-2: every variant measured on the way.
analyse default_variants default 0-2 dapo_g4,sgpo_bayes "${VARIANTS[@]}"
# paper_like as defined before main retuned it (same pool as the main comparison's runs).
analyse paper_like_before_retune paper_like 0-2 dapo_g4,sgpo_bayes \
  --arm "bayes_np=sgpo_bayes,$OLD" --arm "bayes_v2p=sgpo_bayes,sgpo_bayes.profile=True,$OLD"
