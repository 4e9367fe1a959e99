#!/usr/bin/env bash
# The selection study's real-model regime (PREREGISTERED.md: `sgpo_select` at seeds 200-202
# beside ../real/'s arms, same runs and archive): real/compare.{json,md}, real/plots/ and
# real/diagnostics_real.md below this file, with the head-to-head this study's rule reads
# (`sgpo_select` vs `dapo_g4`; ../real/ reports `sgpo_bayes_g24` vs `dapo_g4` from the same runs):
#   bash studies/allocator_comparison/select/report_real.sh [RUNS]
# RUNS: the real sweep's runs folder. Without it, the runs are restored from
# ../real/archive.tar.xz into a temporary folder, removed at the end. report.sh here runs it.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../archive.sh"
runs_or_archive "$HERE/../real/archive.tar.xz" "$@"
OUT=$HERE/real
mkdir -p "$OUT"
cd "$HERE/../../.."
# The arms in ../real/report.sh's order: one bootstrap replicate draws every arm's seeds in
# turn (analysis.bootstrap_flops), so the same order gives the same intervals as that report.
ARMS=sgpo_bayes_g24,dapo_g4,dapo,sgpo_select,grpo
# The rule's target is DAPO's final accuracy (--no-grpo: GRPO runs are references only); the
# regime is complete when the rule, its control and DAPO (the target) have all three seeds.
python -m sgpo_jax.compare report --runs-dir "$RUNS" --regimes real --arms "$ARMS" \
  --seeds 200-202 --results-dir "$OUT" --head-to-head sgpo_select,dapo_g4 \
  --headline real/sgpo_select --no-grpo --required sgpo_select,dapo_g4,dapo \
  --note 'Selection before sampling (issue 53), its real-model regime, pre-registered in ../PREREGISTERED.md: sgpo_select at seeds 200-202 beside the real study'"'"'s arms (same runs, ../../real/archive.tar.xz), made from that sweep'"'"'s frozen checkout, which prices unseen prompts with the pooled prior'"'"'s old estimate; this report is written by report_real.sh.' \
  > /dev/null
python -m sgpo_jax.compare diagnose --runs-dir "$RUNS" --regime real --arms "$ARMS" \
  --seeds 200-202 --out "$OUT/diagnostics_real.md"
python -m studies.compact_png "$OUT"/plots/*.png
