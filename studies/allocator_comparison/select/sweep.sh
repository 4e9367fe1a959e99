#!/usr/bin/env bash
# The pre-registered selection-before-sampling sweep (PREREGISTERED.md), resumable across
# sittings and machines:
#   bash studies/allocator_comparison/select/sweep.sh RUNS CODE [JOBS]
# RUNS: a runs folder (finished runs archived in archive.tar.xz here are restored into it
# first); CODE: a checkout of the pre-registered commit, passed to the runner as --code-dir;
# JOBS: sweep processes over the same runs folder (default 1; the runner's per-run lock keeps
# two processes off the same run). Every finished run is archived here as it lands; report.sh
# writes compare.{json,md} here at the end (and can be run on a partial sweep: a regime
# without all of its seeds is labelled partial).
set -euo pipefail
RUNS=${1:?runs dir}
CODE=${2:?frozen checkout}
JOBS=${3:-1}
HERE=$(cd "$(dirname "$0")" && pwd)
ARMS=sgpo_select,sgpo_bayes_g24,dapo_g4,dapo,grpo
source "$HERE/../archive.sh"
archive_as_runs_land "$RUNS" "$HERE/archive.tar.xz"
cd "$CODE"
sweep() {
  python -m sgpo_jax.compare run --regimes paper_like --arms "$ARMS" --seeds 300-309 \
    --runs-dir "$RUNS" --code-dir "$CODE" --results-dir "$RUNS/progress/paper_like" \
    --head-to-head sgpo_select,dapo_g4 --headline paper_like/sgpo_select
  python -m sgpo_jax.compare run --regimes default,small_pool --arms "$ARMS" --seeds 300-304 \
    --runs-dir "$RUNS" --code-dir "$CODE" --results-dir "$RUNS/progress/others" \
    --head-to-head sgpo_select,dapo_g4 --headline paper_like/sgpo_select
}
for j in $(seq 2 "$JOBS"); do sweep > "$RUNS/sweep_job$j.log" 2>&1 & sleep 20; done
sweep
wait
bash "$HERE/report.sh" "$RUNS"
