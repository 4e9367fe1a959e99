#!/usr/bin/env bash
# The real-model report from the sweep's finished runs (no runs started): compare.json,
# compare.md, plots/ and diagnostics_real.md beside this file, with the pre-registered seeds:
#   bash studies/allocator_comparison/real/report.sh [RUNS]
# RUNS: the sweep's runs folder. Without it, the runs are restored from archive.tar.xz beside
# this file into a temporary folder, removed at the end.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../archive.sh"
runs_or_archive "$HERE/archive.tar.xz" "$@"
cd "$HERE/../../.."
ARMS=sgpo_bayes_g24,dapo_g4,dapo,sgpo_select,grpo
# --no-grpo: DAPO's final accuracy is the target (PREREGISTERED.md) even once GRPO runs exist;
# --required: the regime is complete with the three required arms at every seed.
python -m sgpo_jax.compare report --runs-dir "$RUNS" --regimes real --arms "$ARMS" \
  --seeds 200-202 --results-dir "$HERE" --head-to-head sgpo_bayes_g24,dapo_g4 \
  --headline real/sgpo_bayes_g24 --no-grpo --required dapo,dapo_g4,sgpo_bayes_g24 \
  --note 'The real regime (SmolLM2-135M-Instruct, LoRA), pre-registered in PREREGISTERED.md: DAPO, DAPO at G=4 and sgpo_bayes G{2,4} at seeds 200-202 (sgpo_select for the selection study, GRPO as a reference); runs made by sweep.sh on a frozen checkout; this report is written by report.sh.' \
  > /dev/null
python -m sgpo_jax.compare diagnose --runs-dir "$RUNS" --regime real --arms "$ARMS" \
  --seeds 200-202 --out "$HERE/diagnostics_real.md"
python -m studies.compact_png "$HERE"/plots/*.png
