#!/usr/bin/env bash
# One prepared accelerator check (<= 8 minutes on one GPU / TPU chip): Qwen3-0.6B-shaped
# sampler and train step with random weights; peak memory, decode tokens/s vs the HBM
# roofline, train-step MFU, the dry run's predicted peaks. JSON on the last line.
# Extra arguments go to benchmarks/accelerator_real_shape.py (e.g. --decode_rows 128).
set -euo pipefail
cd "$(dirname "$0")/.."
timeout 480 python benchmarks/accelerator_real_shape.py "$@"
