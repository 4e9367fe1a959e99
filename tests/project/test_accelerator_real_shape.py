"""benchmarks/accelerator_real_shape.sh runs end to end at its --smoke shape on CPU and
reports the roofline and MFU it promises (numbers on real hardware are not asserted)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from sgpo_jax.model import flops
from sgpo_jax.model import transformer as model_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_smoke_on_cpu_through_the_wrapper():
  proc = subprocess.run(
      ['bash', 'benchmarks/accelerator_real_shape.sh', '--smoke', '--hbm_gbps', '10',
       '--peak_tflops', '1'], cwd=ROOT, capture_output=True, text=True, timeout=900,
      env=dict(os.environ, JAX_PLATFORMS='cpu'))
  assert proc.returncode == 0, proc.stderr[-3000:]
  result = json.loads(proc.stdout.strip().splitlines()[-1])
  # The smoke model: d 64, 2 layers, 4 / 2 heads of 16, MLP 128, vocab 256, tied, QK-norm.
  cfg = model_lib.ModelConfig(vocab_size=256, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2,
                              head_dim=16, d_ff=128, tie_embeddings=True, qk_norm=True)
  params = flops.param_counts(cfg)['total']
  assert result['params'] == params
  assert result['weight_bytes'] == 4 * params  # the trainer's float32 master weights
  # KV read per decode step: 2 rows x mean context (8 + 8/2) x 2 layers x (K, V) x 2 heads
  # x 16 x 2 bytes (bf16).
  kv = 2 * 12 * 2 * 2 * 2 * 16 * 2
  assert result['kv_bytes_per_step'] == kv
  assert result['roofline_tokens_per_second'] == pytest.approx(
      2 / ((4 * params + kv) / 10e9))
  # MFU: 2 rows x 15 targets x train FLOPs per token, over step time and 1 TFLOP/s.
  model_flops = 2 * 15 * flops.train_flops_per_token(cfg, 15)
  assert result['train_model_flops'] == model_flops
  assert result['train_mfu'] == pytest.approx(model_flops / result['train_step_seconds'] / 1e12)
  assert set(result['predicted_peak_bytes']) == {'sampler', 'train_step'}
  assert all(v > 0 for v in result['predicted_peak_bytes'].values())
  assert result['peak_bytes_after_train'] is None  # CPU reports no memory stats
