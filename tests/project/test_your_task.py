"""docs/your_task.md runs as written: its files and its command, extracted from the markdown
(fenced blocks tagged `file=NAME`, and the one `sh` block), so the doc cannot rot."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(REPO, 'docs', 'your_task.md')
FENCE = re.compile(r'^```(\S+)([^\n]*)\n(.*?)^```$', re.MULTILINE | re.DOTALL)
# Appended to the doc's command: a tiny model and two steps, so CI finishes fast. Everything
# else (data, reward, method, workdir) is the doc's own.
TINY = ('--config.grpo.group_size=4', '--config.train.rows_per_batch=8',
        '--config.train.num_steps=2', '--config.eval.every_steps=2',
        '--config.checkpoint.every_steps=2', '--config.model.n_layers=2',
        '--config.model.d_model=32', '--config.model.d_ff=64', '--config.model.head_dim=8')


def doc_blocks() -> tuple[dict[str, str], list[str]]:
  """{file name: content} of the `file=NAME` blocks, and the `sh` block's argv."""
  with open(DOC, encoding='utf-8') as f:
    text = f.read()
  files, commands = {}, []
  for lang, info, body in FENCE.findall(text):
    name = re.search(r'file=(\S+)', info)
    if name:
      files[name.group(1)] = body
    elif lang == 'sh':
      commands.append(shlex.split(body.replace('\\\n', ' ')))
  assert len(commands) == 1, f'{DOC} should hold one sh block, found {len(commands)}'
  return files, commands[0]


def test_doc_is_short_and_complete():
  with open(DOC, encoding='utf-8') as f:
    assert len(f.read().splitlines()) < 40
  files, argv = doc_blocks()
  assert set(files) == {'my_task.jsonl', 'my_rewards.py'}
  rows = [json.loads(line) for line in files['my_task.jsonl'].splitlines()]
  assert rows and all({'id', 'prompt', 'answer'} <= set(r) for r in rows)
  assert argv[:3] == ['python', '-m', 'sgpo_jax.main']
  with open(os.path.join(REPO, 'README.md'), encoding='utf-8') as f:
    assert '(docs/your_task.md)' in f.read()


def test_doc_reward_scores_as_the_doc_says(tmp_path):
  import importlib.util
  files, _ = doc_blocks()
  (tmp_path / 'my_rewards.py').write_text(files['my_rewards.py'])
  spec = importlib.util.spec_from_file_location('doc_rewards', tmp_path / 'my_rewards.py')
  rewards = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(rewards)
  completions, answers = ['19', '18', ' 75', '1'], ['19', '19', '75', '16']
  assert rewards.exact(completions, answers) == [1.0, 0.0, 1.0, 0.0]
  assert rewards.digits(completions, answers) == [1.0, 0.5, 0.0, 0.5]


@pytest.mark.slow
def test_doc_command_runs(tmp_path):
  """The doc's files in an empty directory (the config is the shipped one, found by name), the
  doc's command run there with python = this interpreter, plus TINY."""
  files, argv = doc_blocks()
  for name, body in files.items():
    (tmp_path / name).write_text(body)
  env = {**os.environ, 'PYTHONPATH': REPO, 'JAX_PLATFORMS': 'cpu'}
  proc = subprocess.run([sys.executable, *argv[1:], *TINY], check=False, cwd=tmp_path, env=env,
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  workdir = tmp_path / argv[argv.index('--workdir') + 1]
  with open(workdir / 'config.json') as f:
    assert json.load(f)['data']['reward'] == 'my_rewards:exact=1,my_rewards:digits=0.2'
  with open(workdir / 'metrics.jsonl') as f:
    rows = [json.loads(line) for line in f if line.strip()]
  steps = [r for r in rows if 'reward_mean' in r]
  assert len(steps) == 2
  assert all(0.0 <= r['reward_mean'] <= 1.2 for r in steps)
  assert any('eval_accuracy' in r for r in rows)
