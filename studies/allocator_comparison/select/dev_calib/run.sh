#!/usr/bin/env bash
# Development runs, not a result (seeds 900-901, this checkout's code): `sgpo_select` for the
# posterior's calibration table, `prior_forget` 0.5 (arm pf05, the level prior's own faster
# decay) beside it, DAPO at G=4 and DAPO, in paper_like and small_pool. Resumable; writes
# compare.{json,md}, plots/ and diagnostics_<regime>.md here (about 1.5 min a run):
#   bash studies/allocator_comparison/select/dev_calib/run.sh RUNS
set -euo pipefail
RUNS=${1:?runs dir}
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../../.."
ARMS=sgpo_select,dapo_g4,dapo
python -m sgpo_jax.compare run --runs-dir "$RUNS" --regimes paper_like,small_pool \
  --arms "$ARMS" --arm 'pf05=sgpo_select,sgpo_select.prior_forget=0.5' --seeds 900-901 \
  --no-grpo --results-dir "$HERE" --head-to-head pf05,dapo_g4 --headline paper_like/pf05 \
  --note 'Development runs (seeds 900-901), not a result: sgpo_select and its option prior_forget=0.5 (pf05) against DAPO at G=4 and DAPO; written by dev_calib/run.sh.' \
  > /dev/null
for regime in paper_like small_pool; do
  python -m sgpo_jax.compare diagnose --runs-dir "$RUNS" --regime "$regime" \
    --arms "sgpo_select,pf05,dapo_g4,dapo" --seeds 900-901 --out "$HERE/diagnostics_$regime.md" > /dev/null
done
python -m studies.compact_png "$HERE"/plots/*.png > /dev/null
