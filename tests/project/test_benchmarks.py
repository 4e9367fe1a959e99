"""The benchmark scripts in benchmarks/ run end to end at tiny sizes and report what they
promise (the numbers themselves are measured on real sizes, not asserted here)."""

from __future__ import annotations

import json
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, 'benchmarks'))


@pytest.mark.slow
def test_bench_rl_step_tiny(capsys):
  import bench_rl_step
  result = bench_rl_step.main(['--prompts', '2', '--samples', '2', '--min_prompt', '4',
                               '--max_prompt', '16', '--max_new', '16', '--mean_len', '6',
                               '--vocab', '64', '--d_model', '32', '--layers', '1',
                               '--slots', '2', '--steps', '1'])
  last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  for key in ('useful_share_rollout', 'useful_share_train', 'speedup_vs_static'):
    assert last[key] == pytest.approx(result[key])
  assert 0 < last['useful_share_rollout'] <= 1 and 0 < last['useful_share_train'] <= 1
  assert last['speedup_vs_static'] > 0
  for path in result['paths'].values():
    assert path['compiles_sampler'] == 1 and path['compiles_train_step'] == 1
  # The continuous sampler computes fewer wasted token slots than the static one.
  assert last['useful_share_rollout'] >= last['static_useful_share_rollout']


def test_bench_rl_step_refuses_bad_lengths():
  import bench_rl_step
  with pytest.raises(SystemExit):
    bench_rl_step.parse_args(['--min_prompt', '70', '--max_prompt', '64'])


@pytest.mark.slow
def test_bench_accelerator_tiny_on_cpu():
  import bench_accelerator
  result = bench_accelerator.main([
      '--hidden', '32', '--layers', '1', '--heads', '2', '--kv_heads', '1', '--head_dim', '16',
      '--intermediate', '64', '--vocab', '128', '--train_rows', '2', '--train_len', '32',
      '--decode_rows', '2', '--prompt_len', '8', '--decode_len', '8', '--peak_tflops', '1',
      '--hbm_gbps', '10', '--repeats', '1'])
  assert result['device_kind'] and result['train_step_seconds'] > 0
  assert result['train_mfu'] == pytest.approx(result['train_tflops'] / 1.0)
  # Roofline by hand: (bf16 params + KV read at mean context 12) / 10 GB/s for 2 rows.
  kv = 2 * 12 * 1 * 2 * 1 * 16 * 2
  assert result['kv_bytes_per_step'] == kv
  assert result['roofline_tokens_per_second'] == pytest.approx(
      2 / ((result['param_bytes_bf16'] + kv) / 10e9))
