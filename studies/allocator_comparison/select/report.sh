#!/usr/bin/env bash
# The selection-before-sampling report from the sweep's finished runs (no runs started):
# compare.json, compare.md, plots/ and diagnostics_<regime>.md beside this file, each regime
# with its pre-registered seeds (PREREGISTERED.md):
#   bash studies/allocator_comparison/select/report.sh [RUNS]
# RUNS: the sweep's runs folder. Without it, the runs are restored from archive.tar.xz beside
# this file into a temporary folder, removed at the end. The real-model regime's runs belong to
# ../real/'s sweep: report_real.sh writes real/ here from ../real/archive.tar.xz, last.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../archive.sh"
runs_or_archive "$HERE/archive.tar.xz" "$@"
cd "$HERE/../../.."
ARMS=sgpo_select,sgpo_bayes_g24,dapo_g4,dapo,grpo
python -m sgpo_jax.compare report --runs-dir "$RUNS" --regimes paper_like,default,small_pool \
  --arms "$ARMS" --seeds 300-304 --regime-seeds paper_like=300-309 --results-dir "$HERE" \
  --head-to-head sgpo_select,dapo_g4 --headline paper_like/sgpo_select \
  --note 'Selection before sampling (issue 53), pre-registered in PREREGISTERED.md: sgpo_select vs sgpo_bayes G{2,4} and DAPO at G=4 (DAPO and GRPO as references), seeds no earlier run used; runs made by sweep.sh on a frozen checkout; this report is written by report.sh.' \
  > /dev/null
for regime in paper_like default small_pool; do
  seeds=300-304
  [ "$regime" = paper_like ] && seeds=300-309
  python -m sgpo_jax.compare diagnose --runs-dir "$RUNS" --regime "$regime" --arms "$ARMS" \
    --seeds "$seeds" --out "$HERE/diagnostics_$regime.md"
done
# The report's plots as palette PNGs (a third of the bytes; studies/compact_png.py says why).
python -m studies.compact_png "$HERE"/plots/*.png
bash "$HERE/report_real.sh"
