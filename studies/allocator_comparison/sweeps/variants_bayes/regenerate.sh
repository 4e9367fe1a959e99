#!/usr/bin/env bash
# Regenerates this folder from the comparison's runs dir (RUNS/<regime>/<arm>_seed<s>):
#   bash studies/allocator_comparison/sweeps/variants_bayes/regenerate.sh RUNS
# The variants of sgpo_bayes measured on the way to its floor-0.1 default (seeds 0-2), next
# to the baselines and the default it replaced (sgpo_bayes_floor25). Each run's config.json
# holds the code's settings it ran with; the runs were made with
#   python -m sgpo_jax.compare run --runs-dir RUNS --seeds 0-2 --regimes R --arms grpo \
#     --arm NAME=SPEC ...   (the specs below)
set -euo pipefail
RUNS=${1:?runs dir}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../../.." && pwd)
cd "$REPO"
F25=sgpo_bayes.informative_floor=0.25
PAPER_LIKE=(--arm "bayes_r2=sgpo_bayes,$F25,sgpo_bayes.max_rounds=2"
            --arm "bayes_r1=sgpo_bayes,$F25,sgpo_bayes.max_rounds=1"
            --arm "bayes_r2_f10=sgpo_bayes,sgpo_bayes.max_rounds=2,sgpo_bayes.informative_floor=0.1"
            --arm "dapo_g4_r2=dapo,dapo.group_size=4,dapo.max_rounds=2")
COMMON=(--arm "bayes_f10=sgpo_bayes,sgpo_bayes.informative_floor=0.1"
        --arm "bayes_easy=sgpo_bayes,$F25,sgpo_bayes.skip_side=easy")
ARMS=grpo,dapo,greso,knapsack,dapo_g4,sgpo_bayes_floor25,sgpo_bayes
analyse() {  # OUT REGIME [extra arms]
  local out=$1 regime=$2
  shift 2
  python -m sgpo_jax.compare report --regimes "$regime" --arms "$ARMS" "$@" \
    --seeds 0-2 --runs-dir "$RUNS" --results-dir "$HERE/$out" --note \
    "Variants of sgpo_bayes, seeds 0-2 (studies/allocator_comparison/sweeps/variants_bayes/regenerate.sh)."
  local names
  names=$(printf '%s\n' "$@" | sed -n 's/=.*//p' | tr '\n' ',' | sed 's/,$//')
  python -m sgpo_jax.compare diagnose --runs-dir "$RUNS" --regime "$regime" \
    --arms "grpo,dapo,dapo_g4,sgpo_bayes_floor25,sgpo_bayes,$names" --seeds 0-2 \
    --out "$HERE/$out/diagnostics.md"
}
analyse paper_like paper_like "${COMMON[@]}" "${PAPER_LIKE[@]}"
analyse default default "${COMMON[@]}"
analyse small_pool small_pool "${COMMON[@]}"
