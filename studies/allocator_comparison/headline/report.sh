#!/usr/bin/env bash
# The headline report from the sweep's finished runs (no runs started): compare.json,
# compare.md, plots/ and diagnostics_<regime>.md beside this file, all three regimes in one
# table, each with its pre-registered seeds (PREREGISTERED.md):
#   bash studies/allocator_comparison/headline/report.sh [RUNS]
# RUNS: the sweep's runs folder (sweep.sh fills it). Without it, the runs are restored from
# archive.tar.xz beside this file into a temporary folder, removed at the end; the archive
# lacks the padding rows, so the diagnostics are then printed (padding columns blank) and the
# committed diagnostics_<regime>.md, made from the full runs, are left as they are.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../archive.sh"
runs_or_archive "$HERE/archive.tar.xz" "$@"
DIAG_OUT=$HERE
[ $# -ge 1 ] || DIAG_OUT=
cd "$HERE/../../.."
ARMS=grpo,dapo,dapo_g4,greso,knapsack,sgpo,sgpo_bayes_g24
python -m sgpo_jax.compare report --runs-dir "$RUNS" --regimes paper_like,default,small_pool \
  --arms "$ARMS" --seeds 100-104 --regime-seeds paper_like=100-109 --results-dir "$HERE" \
  --note 'The pre-registered headline (PREREGISTERED.md): the default path, 7 arms, seeds none of the project'"'"'s earlier runs used; runs made by sweep.sh on the frozen checkout a1c1753; this report, one table for all three regimes, is written by report.sh with the current analysis code.' \
  > /dev/null
for regime in paper_like default small_pool; do
  seeds=100-104
  [ "$regime" = paper_like ] && seeds=100-109
  python -m sgpo_jax.compare diagnose --runs-dir "$RUNS" --regime "$regime" --arms "$ARMS" \
    --seeds "$seeds" ${DIAG_OUT:+--out "$DIAG_OUT/diagnostics_$regime.md"}
done
# The report's plots as palette PNGs (a third of the bytes; studies/compact_png.py says why).
python -m studies.compact_png "$HERE"/plots/*.png
