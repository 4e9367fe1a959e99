#!/usr/bin/env bash
# One prepared accelerator check (<= 8 minutes on one GPU): train-step MFU and decode
# tokens/s vs the HBM roofline on a Qwen2.5-0.5B-shaped random policy in bf16. Prints JSON.
# Extra arguments go to benchmarks/bench_accelerator.py (e.g. --peak_tflops, --train_rows).
set -euo pipefail
cd "$(dirname "$0")/.."
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9}"
timeout 480 python benchmarks/bench_accelerator.py "$@"
