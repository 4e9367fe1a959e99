#!/usr/bin/env bash
# The pre-registered headline sweep (PREREGISTERED.md), resumable across sittings and machines:
#   bash studies/allocator_comparison/headline/sweep.sh RUNS CODE
# RUNS: a runs folder (finished runs archived in archive.tar.xz here are restored into it first);
# CODE: a checkout of the pre-registered commit, passed to the runner as --code-dir.
# Every finished run is archived here as it lands (archive_runs.py); a progress table is
# regenerated under RUNS/progress/ after each run, and report.sh writes the headline report
# (compare.{json,md} here, all three regimes) at the end.
set -euo pipefail
RUNS=${1:?runs dir}
CODE=${2:?frozen checkout}
HERE=$(cd "$(dirname "$0")" && pwd)
ARMS=grpo,dapo,dapo_g4,greso,knapsack,sgpo,sgpo_bayes_g24
source "$HERE/../archive.sh"
archive_as_runs_land "$RUNS" "$HERE/archive.tar.xz"
cd "$CODE"
python -m sgpo_jax.compare run --regimes paper_like --arms "$ARMS" --seeds 100-109 \
  --runs-dir "$RUNS" --code-dir "$CODE" --results-dir "$RUNS/progress/paper_like"
python -m sgpo_jax.compare run --regimes default,small_pool --arms "$ARMS" --seeds 100-104 \
  --runs-dir "$RUNS" --code-dir "$CODE" --results-dir "$RUNS/progress/others"
bash "$HERE/report.sh" "$RUNS"
