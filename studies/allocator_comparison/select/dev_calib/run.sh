#!/usr/bin/env bash
# Development runs, not a result: `sgpo_select` (this checkout's code and defaults) at the
# development seeds 900-901 in paper_like and small_pool, for the posterior's calibration
# table; then `compare diagnose` writes diagnostics_<regime>.md here (about 1.5 min a run):
#   bash studies/allocator_comparison/select/dev_calib/run.sh RUNS
set -euo pipefail
RUNS=${1:?runs dir}
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../../.."
for regime in paper_like small_pool; do
  mkdir -p "$RUNS/$regime"
  for seed in 900 901; do
    wd=$RUNS/$regime/sgpo_select_seed$seed
    [ -f "$wd/summary.json" ] && continue  # finished: resumable
    python -m sgpo_jax.main --config sgpo_jax/configs/default.py:regime=$regime --workdir "$wd" \
      --config.method=sgpo_select --config.seed=$seed \
      --config.warm_start.cache_dir="$RUNS/warm_start" > "$wd.log" 2>&1
  done
  python -m sgpo_jax.compare diagnose --runs-dir "$RUNS" --regime "$regime" \
    --arms sgpo_select --seeds 900-901 --out "$HERE/diagnostics_$regime.md" > /dev/null
done
