#!/usr/bin/env bash
# The pre-registered real-model sweep (PREREGISTERED.md here), resumable across sittings:
#   bash studies/allocator_comparison/real/sweep.sh RUNS CODE
# RUNS: a runs folder (finished runs archived in archive.tar.xz here are restored into it
# first; an unfinished run resumes from its last checkpoint); CODE: a checkout of the commit
# the sweep started from, passed to the runner as --code-dir. One process: a real-model run
# already keeps both cores busy. Order: the three required arms seed-major (PREREGISTERED.md),
# then `sgpo_select` at the same seeds for the selection study (../select/PREREGISTERED.md),
# then GRPO as a reference. Every finished run is archived here as it lands; report.sh writes
# compare.{json,md} here (a regime without all of its seeds is labelled partial).
set -euo pipefail
RUNS=${1:?runs dir}
CODE=${2:?frozen checkout}
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../archive.sh"
archive_as_runs_land "$RUNS" "$HERE/archive.tar.xz"
cd "$CODE"
REQUIRED=dapo,dapo_g4,sgpo_bayes_g24
# Finished runs are skipped: each pass starts only the arm it adds. --no-grpo: the runner
# would otherwise start the GRPO reference first; GRPO runs last here (PREREGISTERED.md).
for arms in "$REQUIRED" "$REQUIRED,sgpo_select" "$REQUIRED,sgpo_select,grpo"; do
  no_grpo=--no-grpo
  case "$arms" in *,grpo) no_grpo= ;; esac
  python -m sgpo_jax.compare run --regimes real --arms "$arms" --seeds 200-202 $no_grpo \
    --runs-dir "$RUNS" --code-dir "$CODE" --results-dir "$RUNS/progress" \
    --headline real/sgpo_bayes_g24 --head-to-head sgpo_bayes_g24,dapo_g4 \
    || true  # exit 1 = no report yet (the runner logs failed runs); the sweep goes on
done
bash "$HERE/report.sh" "$RUNS"
