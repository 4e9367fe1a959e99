#!/usr/bin/env bash
# Regenerates this folder from a runs dir of the second machine (RUNS/<regime>/<arm>_seed<s>):
#   bash studies/allocator_comparison/sweeps/second_machine/regenerate.sh RUNS
# The same configs and code as studies/allocator_comparison/compare.md, run on another machine type
# (summary.json's `environment` names it): its warm starts come out different (other SFT
# final losses and initial accuracies), so these runs form their own comparison and are never
# mixed with the committed one (compare.py leaves runs of another initial policy out).
# The runs were made with (two processes sharing the runs dir; a frozen checkout as
# --code-dir):
#   python -m sgpo_jax.compare run --runs-dir RUNS --code-dir CODE --regimes default \
#     --arms grpo,dapo,sgpo_bayes_pooled,sgpo_bayes,dapo_g4,greso,knapsack,sgpo_bayes_priority \
#     --seeds 0-4
#   python -m sgpo_jax.compare run --runs-dir RUNS --code-dir CODE --regimes paper_like \
#     --arms grpo,dapo,sgpo_bayes_pooled,sgpo_bayes,dapo_g4,greso,sgpo_bayes_priority --seeds 0-2
# (paper_like: greso at seed 0 only; the others at seeds 0-2, priority 0-1).
set -euo pipefail
RUNS=${1:?runs dir}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../../.." && pwd)
cd "$REPO"
NOTE="Second machine: the same configs and code as studies/allocator_comparison/compare.md, run on an Intel Xeon with AVX-512 and AMX (jax/jaxlib 0.10.2, flax 0.12.8, optax 0.2.8, numpy 2.4.6; most runs predate the environment record, so the Measured-on line may say not recorded). Its warm starts differ from the first machine's, so nothing here is comparable run for run with compare.md. studies/allocator_comparison/sweeps/second_machine/regenerate.sh."
python -m sgpo_jax.compare report --regimes default \
  --arms grpo,dapo,greso,knapsack,dapo_g4,sgpo_bayes,sgpo_bayes_pooled,sgpo_bayes_priority \
  --seeds 0-4 --runs-dir "$RUNS" --results-dir "$HERE/default" --note "$NOTE"
python -m sgpo_jax.compare diagnose --runs-dir "$RUNS" --regime default \
  --arms grpo,dapo,dapo_g4,sgpo_bayes,sgpo_bayes_pooled,sgpo_bayes_priority --seeds 0-4 \
  --out "$HERE/default/diagnostics.md"
python -m sgpo_jax.compare report --regimes paper_like \
  --arms grpo,dapo,greso,dapo_g4,sgpo_bayes,sgpo_bayes_pooled,sgpo_bayes_priority --seeds 0-2 \
  --runs-dir "$RUNS" --results-dir "$HERE/paper_like" --note "$NOTE"
# The scaling-law study on these runs alone (leave-one-run-out within this machine's runs; the
# CLI calibration set in sgpo_jax/scaling_law/calibration_runs.json.xz is left as it is):
python -m studies.scaling_law.calibrate $(ls -d "$RUNS"/*/*_seed*) \
  --out "$HERE" --stem scaling_law_calibrated
