"""End-to-end runs of the main job on a tiny config: contracts, compile counts, resume, NaN."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import types
import zlib

import jax
import numpy as np
import pytest

from sgpo_jax import allocators as allocators_lib
from sgpo_jax import tasks, train
from sgpo_jax.allocators import coverage as coverage_lib
from sgpo_jax.compare import analysis as compare_analysis
from sgpo_jax.config import defaults as default_config
from sgpo_jax.outputs import checkpoint as checkpoint_lib
from sgpo_jax.rl import learner as learner_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tiny_run_config(method: str = 'sgpo', **train_overrides):
  c = default_config.get_config(f'method={method},runlocal=1')
  c.model.d_model, c.model.n_layers, c.model.d_ff = 32, 2, 64
  c.model.n_heads, c.model.n_kv_heads, c.model.head_dim = 4, 2, 8
  c.data.num_train, c.data.num_eval = 96, 32
  c.warm_start.steps = 30
  c.warm_start.cache_dir = os.path.join(os.environ.get('SGPO_TEST_CACHE', '/tmp'),
                                        'sgpo_test_warm_start')
  c.train.rows_per_batch = 16
  c.train.num_steps = 4
  c.eval.every_steps = 2
  c.checkpoint.every_steps = 2
  c.sgpo.unsolved_keep_fraction = 1.0  # a random tiny policy solves little: keep it all
  c.sgpo.trivial_threshold = 0.99
  c.sgpo.fill_phase_tail = False  # keep padded phase tails: the padding tests need them
  c.sgpo.curriculum = True  # the phase-crossing tests need G2 -> G4 -> G8 phases
  for k, v in train_overrides.items():
    c.train[k] = v
  return c


def read_jsonl(path):
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


OUTPUTS_DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           'docs', 'outputs.md')


def documented_fields(section: str) -> list[re.Pattern]:
  """The field names in the first column of docs/outputs.md's `## section` tables, as
  patterns (`eval_accuracy_d<k>` matches eval_accuracy_d1, eval_accuracy_d2, ...)."""
  with open(OUTPUTS_DOC) as f:
    text = f.read()
  body = text.split(f'## {section}\n', 1)[1].split('\n## ', 1)[0]
  names = [name for line in body.splitlines() if line.startswith('| `')
           for name in re.findall(r'`([^`]+)`', line.split('|')[1])]
  return [re.compile(re.escape(n).replace(re.escape('<k>'), r'\d+') + '$') for n in names]


def assert_outputs_documented(workdir: str) -> None:
  """Every metrics.jsonl and summary.json field the run wrote is a row of docs/outputs.md
  (the contract other tools read): a new field lands with its line there."""
  for section, keys in (
      ('metrics.jsonl', {k for r in read_jsonl(os.path.join(workdir, 'metrics.jsonl')) for k in r}),
      ('summary.json', set(json.load(open(os.path.join(workdir, 'summary.json')))))):
    patterns = documented_fields(section)
    missing = sorted(k for k in keys if not any(p.match(k) for p in patterns))
    assert not missing, f'docs/outputs.md ## {section} does not list {missing}'


def coin_flip_reward(data_config):
  """A deterministic pseudo-random 0/1 reward per (query, completion): a tiny barely-trained
  policy then has a spread of p_hat, so the allocation has several G phases to walk through."""
  def reward(completions, queries):
    return np.array([zlib.crc32(f'{q.id}|{c}'.encode()) % 2 for c, q in zip(completions, queries)],
                    np.float32)
  return reward


@pytest.fixture(scope='module')
def sgpo_run(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp('sgpo_run'))
  config = tiny_run_config('sgpo', num_steps=6)
  config.sgpo.phase_epochs = 0.25
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(tasks, 'get_reward_fn', coin_flip_reward)
    summary = train.run(config, workdir, show_progress=False)
  return workdir, summary


@pytest.mark.slow
def test_sgpo_run_writes_output_contract(sgpo_run):
  workdir, summary = sgpo_run
  for name in ('config.json', 'profile.jsonl', 'metrics.jsonl', 'summary.json', 'report.md',
               'plots/p_hat_histogram.png', 'plots/group_size_histogram.png',
               'plots/eval_accuracy_vs_flops.png', 'tokenizer'):
    assert os.path.exists(os.path.join(workdir, name)), name
  profile = read_jsonl(os.path.join(workdir, 'profile.jsonl'))
  assert len(profile) == 96
  for row in profile:
    assert row['p_hat'] == row['n_correct'] / row['n_samples']
    assert row['group_size'] in (0, 2, 4, 8)
  with open(os.path.join(workdir, 'summary.json')) as f:
    on_disk = json.load(f)
  for key in ('method', 'steps', 'eval_accuracy_initial', 'eval_accuracy_final', 'flops',
              'compiles', 'padding_fraction', 'wall_seconds', 'profile'):
    assert key in on_disk, key
  assert set(on_disk['flops']) >= {'profile', 'rollout', 'reference', 'train', 'total'}
  assert summary['steps'] == 6
  assert_outputs_documented(workdir)


@pytest.mark.slow
def test_train_step_compiles_once_and_ledger_adds_up(sgpo_run):
  workdir, summary = sgpo_run
  rows = [r for r in read_jsonl(os.path.join(workdir, 'metrics.jsonl')) if 'reward_mean' in r]
  phases = [r['phase'] for r in rows]
  assert len(set(phases)) >= 2, phases  # the run crossed curriculum phases ...
  assert summary['compiles']['train_step'] == 1  # ... on one train-step compilation
  assert summary['compiles']['sampler'] == 1  # one prompt bucket serves profile, RL, eval
  flops_total = [r['flops_total'] for r in rows]
  assert all(b > a for a, b in zip(flops_total, flops_total[1:]))
  f = summary['flops']
  assert f['total'] == pytest.approx(f['profile'] + f['rollout'] + f['reference'] +
                                     f['old_logprob'] + f['train'])
  assert f['old_logprob'] == 0.0  # train.mu = 1: the sampling log-probs are the old ones
  assert f['profile'] > 0 and f['rollout'] > 0 and f['train'] > 0
  assert flops_total[-1] == pytest.approx(f['total'])


@pytest.mark.slow
def test_padding_fraction_is_masked_row_share(sgpo_run):
  workdir, summary = sgpo_run
  rows = [r for r in read_jsonl(os.path.join(workdir, 'metrics.jsonl')) if 'reward_mean' in r]
  for r in rows:
    # With R=16 rows, every logged fraction is (masked rows)/16 exactly.
    assert r['padding_fraction'] * 16 == pytest.approx(round(r['padding_fraction'] * 16))
    assert r['padding_fraction'] * 16 + r['group_size_mean'] * r['n_prompts'] == \
        pytest.approx(16)
  assert summary['padding_fraction'] == pytest.approx(np.mean([r['padding_fraction']
                                                               for r in rows]))


GRPO_ARGS = ('--config.method=grpo', '--config.grpo.group_size=4')


def _run_main(workdir, kill_after_step=None, steps=6, method_args=GRPO_ARGS):
  # The killed run goes through tests/sigkill_main.py: the fault hook lives in the tests.
  entry = (['tests.sigkill_main', f'--kill_after_step={kill_after_step}']
           if kill_after_step is not None else ['sgpo_jax.main'])
  cmd = [sys.executable, '-m', *entry, '--config', 'default:runlocal=1',
         '--workdir', workdir, f'--config.train.num_steps={steps}',
         '--config.checkpoint.every_steps=2', '--config.eval.every_steps=3',
         '--config.data.num_train=96', '--config.data.num_eval=32',
         '--config.train.rows_per_batch=16', *method_args, '--config.warm_start.steps=20',
         '--config.model.n_layers=2', '--config.model.d_model=32', '--config.model.d_ff=64',
         '--config.model.head_dim=8']
  return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)


def assert_metrics_match(full_dir, resumed_dir) -> None:
  """The two runs' metrics.jsonl hold the same steps and values, timing fields aside."""
  a = read_jsonl(os.path.join(full_dir, 'metrics.jsonl'))
  b = read_jsonl(os.path.join(resumed_dir, 'metrics.jsonl'))
  assert [r['step'] for r in a] == [r['step'] for r in b]
  skip = {'tokens_per_second', 'seconds'}
  for ra, rb in zip(a, b):
    assert {k: v for k, v in ra.items() if k not in skip} == \
        {k: v for k, v in rb.items() if k not in skip}


@pytest.mark.slow
def test_sigkill_and_resume_matches_uninterrupted(tmp_path):
  full = _run_main(str(tmp_path / 'full'))
  assert full.returncode == 0, full.stderr[-3000:]
  killed = _run_main(str(tmp_path / 'killed'), kill_after_step=3)
  assert killed.returncode == -signal.SIGKILL
  # Step 3 was logged but not checkpointed (checkpoints at 2, 4, ...): resume redoes it.
  assert max(r['step'] for r in read_jsonl(str(tmp_path / 'killed' / 'metrics.jsonl'))) == 3
  ckpt = checkpoint_lib.Checkpointer(str(tmp_path / 'killed' / 'checkpoints'))
  first_sitting = ckpt.restore_meta(2)['wall_seconds']
  ckpt.close()
  resumed = _run_main(str(tmp_path / 'killed'))
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert_metrics_match(str(tmp_path / 'full'), str(tmp_path / 'killed'))
  # The wall clock of a resumed run adds the second sitting to the first (as checkpointed);
  # the comparison reads it as is (no warm-start seconds subtracted: issue of a negative ratio).
  with open(tmp_path / 'killed' / 'summary.json') as f:
    summary = json.load(f)
  assert 0 < first_sitting < summary['wall_seconds']
  assert compare_analysis.run_wall_seconds(summary) == summary['wall_seconds']


@pytest.mark.slow
def test_nan_stops_run_and_keeps_last_checkpoint(tmp_path, monkeypatch):
  real = tasks.get_reward_fn
  calls = {'n': 0}

  def poisoned(data_config):
    fn = real(data_config)

    def reward(completions, queries):
      calls['n'] += 1
      out = fn(completions, queries)
      # eval (initial) is call 1; rollouts of steps 1..3 are calls 2..4 -> poison step 3.
      return out * np.nan if calls['n'] == 4 else out
    return reward

  monkeypatch.setattr(tasks, 'get_reward_fn', poisoned)
  config = tiny_run_config('grpo', num_steps=6)
  config.grpo.group_size = 4
  config.eval.every_steps = 100
  workdir = str(tmp_path)
  with pytest.raises(learner_lib.NonFiniteError, match='step 3'):
    train.run(config, workdir, show_progress=False)
  ckpt = checkpoint_lib.Checkpointer(os.path.join(workdir, 'checkpoints'))
  assert ckpt.latest_step() == 2
  assert ckpt.restore_meta(2)['step'] == 2


def test_bad_config_fails_before_compute(tmp_path):
  config = tiny_run_config('sgpo')
  config.train.rows_per_batch = 20
  with pytest.raises(ValueError, match='rows_per_batch=20 is not a multiple'):
    train.run(config, str(tmp_path))
  assert not os.path.exists(os.path.join(tmp_path, 'checkpoints'))


@pytest.mark.slow
def test_export_of_trained_run_loads_in_transformers_with_same_logits(sgpo_run, tmp_path):
  torch = pytest.importorskip('torch')
  import transformers

  from sgpo_jax import export
  from sgpo_jax.model import transformer as model_lib
  workdir, _ = sgpo_run
  params, cfg, step = export.load_policy(workdir)
  assert step == 6
  export.export_run(workdir, str(tmp_path / 'hf'))
  hf_model = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / 'hf'),
                                                               dtype=torch.float32)
  tokens = np.array([[1, 4, 5, 13, 6, 14, 3, 9]], np.int32)
  ours = np.asarray(model_lib.forward(model_lib.Transformer(cfg), params, tokens,
                                      np.ones_like(tokens)))
  with torch.no_grad():
    theirs = hf_model(torch.tensor(tokens, dtype=torch.long)).logits.numpy()
  np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=1e-4)


@pytest.mark.slow
def test_early_stop_option_stops_the_loop_and_records_why(tmp_path, monkeypatch):
  from sgpo_jax.scaling_law import early_stop

  class ScriptedStopper(early_stop.EarlyStopper):
    """The real stopper's fit is tested on synthetic curves; here: the trainer's wiring."""

    def update(self, step, reward, flops_total):
      self.observe(step, reward, flops_total)
      if step < 3:
        return None
      return early_stop.StopDecision(True, 'plateau 0.50 reached', step, 0.5, (0.45, 0.55),
                                     0.001, 2.0, flops_saved_estimate=123.0)

  monkeypatch.setattr(early_stop, 'EarlyStopper', ScriptedStopper)
  config = tiny_run_config('grpo', num_steps=8)
  config.grpo.group_size = 4
  config.train.early_stop.enabled = True
  config.train.early_stop.rule = 'forecast'
  config.train.mu = 2  # also: the old-log-prob recompute is booked as its own category
  summary = train.run(config, str(tmp_path), show_progress=False)
  assert summary['steps'] == 3
  f = summary['flops']
  # one [R, T] forward per step, i.e. a third of one of the mu=2 train passes (3x forward)
  assert f['reference'] == 0.0 and f['old_logprob'] == pytest.approx(f['train'] / 6)
  assert summary['stop_reason'] == 'early stop at step 3: plateau 0.50 reached'
  last = read_jsonl(str(tmp_path / 'metrics.jsonl'))[-1]
  assert last['early_stop_reason'] == 'plateau 0.50 reached'
  assert last['flops_saved_estimate'] == 123.0
  assert 'eval_accuracy' in last  # the stopping step is always evaluated


@pytest.mark.slow
def test_trend_early_stop_reads_evals_and_stops_the_loop(tmp_path):
  config = tiny_run_config('grpo', num_steps=8)
  config.grpo.group_size = 4
  config.eval.every_steps = 1
  config.train.early_stop.update(enabled=True, rule='trend', min_fraction=0.0,
                                 window_fraction=1.0, epsilon=1.0)  # any gain < 1: stop
  summary = train.run(config, str(tmp_path), show_progress=False)
  # Evals at steps 0 (initial), 1, 2: the first window with 3 evals is at step 2.
  assert summary['steps'] == 2
  assert summary['stop_reason'].startswith('early stop at step 2: stop at step 2/8: a line')


def zero_reward(data_config):
  """Reward 0 on every completion: every group is all-equal, no batch is informative."""
  return lambda completions, queries: np.zeros(len(completions), np.float32)


def test_batch_without_informative_group_skips_the_step_but_counts_its_flops(
    tmp_path, monkeypatch):
  """Issue 50 item 6: DAPO runs its max_rounds, finds no group with reward spread, and the
  trainer then leaves parameters and optimizer state alone, logs `skipped_step`, and keeps
  the rounds' rollout FLOPs in the ledger; the step counter still advances."""
  monkeypatch.setattr(tasks, 'get_reward_fn', zero_reward)
  config = tiny_run_config('dapo', num_steps=2)
  config.dapo.group_size, config.dapo.max_rounds = 4, 2
  su = train.setup(config, str(tmp_path), show_progress=False)
  rs = train.restore_or_init(su, show_progress=False)
  train.start_loop(su, rs)
  before = jax.device_get(rs.train_state)
  flops_before, rollout_before = su.ledger.total, su.ledger.computed('rollout')
  train_before = su.ledger.computed('train')
  row = train.rl_step(su, rs)
  assert row['skipped_step'] == 1 and row['step'] == rs.step == 1
  assert row['rounds'] == 2 and row['n_prompts'] == 0 and row['dapo_dropped_groups'] == 8
  assert 'loss' not in row and 'grad_norm' not in row  # no update, so no update metrics
  assert su.ledger.computed('rollout') > rollout_before  # both rounds were paid for
  assert row['flops_total'] == su.ledger.total > flops_before
  assert su.ledger.computed('train') == train_before
  after = jax.device_get(rs.train_state)
  assert jax.tree.structure(before) == jax.tree.structure(after)
  for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  rs.ckpt.close()
  rs.writer.close()


def test_has_informative_group_reads_spread_within_valid_rows():
  layout = types.SimpleNamespace(group_id_R=np.array([0, 0, 1, 1, 2, 3]),
                                 valid_R=np.array([1, 1, 1, 1, 0, 0], bool), num_groups=6)
  assert not train.has_informative_group(layout, np.array([1, 1, 0, 0, 0, 1.0]))
  assert train.has_informative_group(layout, np.array([1, 0, 0, 0, 0, 0.0]))
  # A NaN reward goes on to the learner, whose finiteness check stops the run.
  assert train.has_informative_group(layout, np.array([1, 1, np.nan, 0, 0, 0]))


@pytest.mark.slow
def test_continuous_packed_run_matches_static_padded_run(tmp_path, monkeypatch):
  """sampling.engine='continuous' + train.packing: the same rollouts (rewards, lengths) and
  the same first update as the static, padded run; one compilation each; shares logged."""
  monkeypatch.setattr(tasks, 'get_reward_fn', coin_flip_reward)
  runs = {}
  for name, engine, packing in (('static', 'static', False), ('fast', 'continuous', True)):
    config = tiny_run_config('grpo', num_steps=2, packing=packing, pack_rows=2)
    config.grpo.group_size = 4
    config.sampling.engine, config.sampling.decode_slots = engine, 4
    summary = train.run(config, str(tmp_path / name), show_progress=False)
    assert summary['compiles'] == {'train_step': 1, 'sampler': 1}
    runs[name] = read_jsonl(str(tmp_path / name / 'metrics.jsonl'))
  initial = {name: rows.pop(0) for name, rows in runs.items()}
  assert initial['fast']['eval_accuracy'] == initial['static']['eval_accuracy']  # greedy eval
  for slow, fast in zip(runs['static'], runs['fast']):
    assert fast['completion_len_mean'] == slow['completion_len_mean']
    assert fast['reward_mean'] == slow['reward_mean']
    assert fast['useful_share_rollout'] > slow['useful_share_rollout']
    assert fast['useful_share_train'] > slow['useful_share_train']
    assert 0 < slow['useful_share_train'] < fast['useful_share_train'] <= 1
  assert runs['fast'][0]['loss'] == pytest.approx(runs['static'][0]['loss'], rel=1e-4, abs=1e-6)


@pytest.mark.slow
def test_bound_early_stop_forecasts_from_the_shipped_set_and_stops_the_loop(tmp_path):
  config = tiny_run_config('grpo', num_steps=8)
  config.grpo.group_size = 4
  config.eval.every_steps = 1
  config.train.early_stop.update(enabled=True, rule='bound', bound_fractions=(0.25, 0.5),
                                 bound_delta=1.0, peak_tolerance=float('inf'))  # any bound
  summary = train.run(config, str(tmp_path), show_progress=False)
  # 0.25 of 8 steps is step 2: the first checkpoint, where a loss bound of 1 always holds.
  assert summary['steps'] == 2
  reason = summary['stop_reason']
  assert reason.startswith('early stop at step 2: stop at step 2/8: checkpoint 0.25')
  assert 'grpo runs of' in reason  # no runs of its regime or config: the method's


@pytest.mark.slow
def test_pool_coverage_of_a_resumed_run_equals_the_uninterrupted_run(tmp_path, monkeypatch):
  """Issue 53: the trainer marks every pool query a generation call sampled and checkpoints
  the marks, so a run stopped at a checkpoint and continued reports the same coverage; each
  metrics row's filled_share is its batch's valid-row share."""
  monkeypatch.setattr(tasks, 'get_reward_fn', coin_flip_reward)

  def config(num_steps):
    c = tiny_run_config('grpo', num_steps=num_steps)
    c.grpo.group_size = 4  # 16 rows: 4 prompts a step, 16 of the 96 in 4 steps
    c.eval.every_steps = 100
    return c

  full = train.run(config(4), str(tmp_path / 'full'), show_progress=False)
  coverage = dict(full['pool_coverage'])
  trained = {k: coverage.pop(k) for k in ('trained_groups', 'trained_prompts_share',
                                          'top_decile_trained_share')}
  assert coverage == {'pool_size': 96, 'sampled': 16,
                      'never_sampled_share': pytest.approx(80 / 96)}
  # Coin-flip rewards: most groups of 4 have spread; each prompt is trained once at most.
  assert 0 < trained['trained_groups'] <= 16
  assert trained['trained_prompts_share'] == pytest.approx(trained['trained_groups'] / 96)
  rows = [r for r in read_jsonl(str(tmp_path / 'full' / 'metrics.jsonl')) if 'reward_mean' in r]
  assert [r['filled_share'] for r in rows] == [1.0 - r['padding_fraction'] for r in rows]
  part = str(tmp_path / 'part')
  train.run(config(2), part, show_progress=False)
  ckpt = checkpoint_lib.Checkpointer(os.path.join(part, 'checkpoints'))
  assert len(ckpt.restore_meta(2)['sampled_query_index']) == 8
  assert ckpt.restore_meta(2)['trained_groups_per_query']  # [query, count] pairs
  ckpt.close()
  os.remove(os.path.join(part, 'summary.json'))
  resumed = train.run(config(4), part, show_progress=False)
  assert resumed['pool_coverage'] == full['pool_coverage']


def test_rollout_fn_marks_the_valid_rows_queries_of_every_category(monkeypatch):
  monkeypatch.setattr(train, 'rollout', lambda su, params, layout, rng, category: category)
  su = types.SimpleNamespace(config=types.SimpleNamespace(seed=0))
  sampled_Q = np.zeros(6, bool)
  rollout_fn = train.make_rollout_fn(su, None, 3, sampled_Q)
  layout = types.SimpleNamespace(row_query_index_R=np.array([4, 4, 1, 1, -1, -1]),
                                 valid_R=np.array([1, 1, 1, 1, 0, 0], bool))
  assert rollout_fn(layout, 0, 'profile') == 'profile'
  np.testing.assert_array_equal(sampled_Q, [0, 1, 0, 0, 1, 0])
  layout.row_query_index_R = np.array([2, 2, 0, 0, 0, 0])
  layout.valid_R = np.array([1, 1, 0, 0, 0, 0], bool)
  rollout_fn(layout)
  np.testing.assert_array_equal(sampled_Q, [0, 1, 1, 0, 1, 0])
  assert coverage_lib.pool_coverage(sampled_Q) == {'pool_size': 6, 'sampled': 3,
                                                  'never_sampled_share': 0.5}



@pytest.mark.slow
@pytest.mark.parametrize('serves,eval_every', [(3, 2), (2, 2), (2, 3)])
def test_exhausted_allocator_ends_evaluated_and_checkpointed(tmp_path, monkeypatch, serves,
                                                             eval_every):
  """An allocator that runs out of batches (fill_batch -> None) ends the run at its last
  step: that step's parameters are evaluated unless they already were ((3, 2): step 3 is off
  the schedule; (2, 2): on it, not evaluated twice; (2, 3): step 2 is checkpointed on
  schedule but not evaluated), and checkpointed with the stop reason (over the scheduled
  checkpoint of step 2), so a resume returns the same summary without asking for a batch."""
  calls = {'fill': 0, 'served': 0}
  fill = allocators_lib.GRPOAllocator.fill_batch

  def fill_then_run_out(self, rollout_fn):
    calls['fill'] += 1
    if calls['served'] >= serves:
      return None
    calls['served'] += 1
    return fill(self, rollout_fn)

  monkeypatch.setattr(allocators_lib.GRPOAllocator, 'fill_batch', fill_then_run_out)
  monkeypatch.setattr(tasks, 'get_reward_fn', coin_flip_reward)  # steps that train
  config = tiny_run_config('grpo', num_steps=6)  # checkpoint every 2 steps
  config.grpo.group_size, config.eval.every_steps = 4, eval_every
  workdir = str(tmp_path / 'run')
  summary = train.run(config, workdir, show_progress=False)
  assert summary['steps'] == serves and summary['stop_reason'] == 'allocator exhausted'
  assert calls['fill'] == serves + 1
  rows = read_jsonl(os.path.join(workdir, 'metrics.jsonl'))
  evals = [r for r in rows if 'eval_accuracy' in r]
  assert [r['step'] for r in evals] == [s for s in range(serves + 1)
                                        if s % eval_every == 0 or s == serves]
  assert summary['eval_accuracy_final'] == evals[-1]['eval_accuracy']
  assert evals[-1]['flops_total'] == summary['flops']['total']
  ckpt = checkpoint_lib.Checkpointer(os.path.join(workdir, 'checkpoints'))
  _, meta = ckpt.restore(ckpt.all_steps()[-1], None)
  ckpt.close()
  assert meta['step'] == serves and meta['stop_reason'] == 'allocator exhausted'
  assert 'eval_accuracy' in meta['last_eval']  # the last step's eval, as its row logged it
  assert {k: evals[-1][k] for k in meta['last_eval']} == meta['last_eval']
  resumed = train.run(config, workdir, show_progress=False)
  assert calls['fill'] == serves + 1  # the resume asked for no batch
  process_local = ('wall_seconds', 'compiles')
  assert {k: v for k, v in resumed.items() if k not in process_local} == {
      k: v for k, v in summary.items() if k not in process_local}
  assert read_jsonl(os.path.join(workdir, 'metrics.jsonl')) == rows
