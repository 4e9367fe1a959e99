#!/usr/bin/env bash
# Creates a separate virtualenv holding Tunix for benchmarks/bench_tunix.py.
# Tunix pins its own transformers/safetensors versions, so it is never a dependency of
# sgpo_jax: it lives only in this venv (default /work/venv_tunix; pass another path as $1).
set -euo pipefail
VENV="${1:-/work/venv_tunix}"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/pip" install --quiet --upgrade pip
"$VENV/bin/pip" install --quiet "google-tunix==0.1.7"
"$VENV/bin/python" -c "import tunix, jax, flax; print('tunix ok; jax', jax.__version__, 'flax', flax.__version__)"
