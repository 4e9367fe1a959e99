"""Config errors fail before any compute, naming the field and the fix."""

from __future__ import annotations

import os
import subprocess
import sys

import ml_collections
import pytest

from sgpo_jax import configs
from sgpo_jax.config import check as config_check
from sgpo_jax.config import defaults as default_config

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def config(**top):
  c = default_config.get_config()
  for k, v in top.items():
    c[k] = v
  return c


def test_default_and_variants_pass():
  for arg in (None, 'method=grpo', 'method=dapo,runlocal=1'):
    config_check.check_config(default_config.get_config(arg), num_devices=1)


def test_unknown_field_is_named():
  c = config()
  c.train.learning_rat = 1e-3
  with pytest.raises(ValueError, match=r"Unknown config field 'train.learning_rat'.*spelling"):
    config_check.check_config(c)


def test_unknown_section_is_named():
  c = config()
  c.optimiser = ml_collections.ConfigDict({'lr': 1.0})
  with pytest.raises(ValueError, match="Unknown config field 'optimiser'"):
    config_check.check_config(c)


def test_wrong_type_is_named():
  # A config file built from scratch (not by overriding the default) can hold any type.
  fields = default_config.get_config().to_dict()
  fields['train']['num_steps'] = 'many'
  c = ml_collections.ConfigDict(fields)
  with pytest.raises(ValueError, match=r"config.train.num_steps='many' has type str; expected "
                     r"int"):
    config_check.check_config(c)


def test_int_accepted_where_float_expected_but_not_bool_for_int():
  c = config()
  c.train.learning_rate = 1
  config_check.check_config(c)
  c.train.num_steps = True
  with pytest.raises(ValueError, match='train.num_steps=True'):
    config_check.check_config(c)


def test_mesh_that_does_not_fit_devices():
  c = config()
  c.mesh.shape = (3, 1, 1)
  with pytest.raises(ValueError, match=r'mesh.shape=\(3, 1, 1\) needs 3 devices but 1 are'):
    config_check.check_config(c, num_devices=1)
  c.mesh.shape = (-1, 3, 1)
  with pytest.raises(ValueError, match=r'mesh.shape=\(-1, 3, 1\) does not fit 8 devices'):
    config_check.check_config(c, num_devices=8)


def test_sequence_longer_than_model():
  c = config()
  c.sampling.max_new_tokens = 40
  with pytest.raises(ValueError, match=r'max_prompt_len \+ sampling.max_new_tokens = 12 \+ 40 = '
                     r'52 exceeds model.max_len=32'):
    config_check.check_config(c)


def test_rows_not_multiple_of_group_size_and_method():
  c = config(method='sgpo')
  c.train.rows_per_batch = 60
  with pytest.raises(ValueError, match='train.rows_per_batch=60 is not a multiple of the '
                     r'largest group size 8 \(group sizes \(2, 4, 8\)\)'):
    config_check.check_config(c)
  c = config(method='ppo')
  with pytest.raises(ValueError, match="config.method='ppo'"):
    config_check.check_config(c)


def test_rows_must_divide_over_batch_devices():
  c = config()
  c.train.rows_per_batch = 24
  c.sgpo.group_sizes = (2, 4, 8)
  c.mesh.shape = (16, 1, 1)
  with pytest.raises(ValueError, match='not divisible by the mesh batch axes size 16'):
    config_check.check_config(c, num_devices=16)


def test_more_processes_than_rows_stops_before_compute():
  """The default path (sgpo_bayes, packed) on 8 processes of one device with 4 rows."""
  c = default_config.get_config()
  c.train.rows_per_batch = 4
  config_check.check_config(c, num_devices=4, num_processes=4)
  with pytest.raises(ValueError, match=r'train.rows_per_batch=4 is fewer than the 8 data-'
                     r'parallel shards \(mesh.shape=\(8, 1, 1\) over 8 processes\).*set '
                     r'train.rows_per_batch to a multiple of 8'):
    config_check.check_config(c, num_devices=8, num_processes=8)


@pytest.mark.parametrize('field, value, message', [
    ('pack_len', 19, r'train.pack_len=19 is shorter than the longest row \(sampling.'
     r'max_prompt_len \+ sampling.max_new_tokens = 20\); set train.pack_len >= 20 or 0'),
    ('pack_len', -1, r'train.pack_len=-1 is shorter than the longest row'),
    ('pack_rows', 0, r'train.pack_rows=0 must be >= 1.*set train.pack_rows=8'),
])
def test_bad_pack_shape_stops_before_compute(field, value, message):
  c = default_config.get_config()
  assert c.train.packing and c.sampling.max_prompt_len + c.sampling.max_new_tokens == 20
  c.train[field] = value
  with pytest.raises(ValueError, match=message):
    config_check.check_config(c)
  with pytest.raises(ValueError, match=message):
    config_check.check_config(c, num_devices=2, num_processes=2)


def test_cli_rejects_unknown_override_before_compute(tmp_path):
  out = subprocess.run(
      [sys.executable, '-m', 'sgpo_jax.main', '--config', 'default',
       '--workdir', str(tmp_path / 'w'), '--config.train.nums_steps=3'],
      cwd=REPO, capture_output=True, text=True, timeout=300)
  assert out.returncode != 0
  assert 'nums_steps' in out.stderr
  assert not os.path.exists(tmp_path / 'w')


@pytest.mark.parametrize('fields, match', [
    ({'policy_loss': 'grpo'}, r"train.policy_loss='grpo' is not one of \('cispo', 'ppo'\)"),
    ({'importance_level': 'seq'},
     r"train.importance_level='seq' is not one of \('sequence', 'token'\)"),
    ({'clip_eps_low': 1.5}, r'train.clip_eps_low=1.5 must be in \[0, 1\].*CISPO'),
    ({'importance_level': 'sequence', 'clip_eps_high': 0.28, 'packing': False},
     r'importance_level=sequence with train.clip_eps_high=0.28.*unset.*3e-4 / 4e-4'),
    ({'policy_loss': 'cispo', 'clip_eps_low': 1.5}, r'train.clip_eps_low=1.5 must be in'),
])
def test_loss_fields_are_checked(fields, match):
  c = config()
  c.train.update(fields)
  with pytest.raises(ValueError, match=match):
    config_check.check_config(c)


@pytest.mark.parametrize('fields', [
    {'importance_level': 'sequence', 'clip_eps_low': 3e-4, 'clip_eps_high': 4e-4,
     'packing': False},
    {'importance_level': 'sequence', 'packing': True},  # GSPO on the packed step
    {'policy_loss': 'cispo', 'clip_eps_low': 1.0, 'clip_eps_high': 0.28},
])
def test_gspo_and_cispo_settings_pass(fields):
  c = config()
  c.train.update(fields)
  config_check.check_config(c)


@pytest.mark.parametrize('fields, expected', [
    ({}, (0.2, 0.28)),
    ({'importance_level': 'sequence'}, (3e-4, 4e-4)),  # GSPO: the paper's bounds
    ({'policy_loss': 'cispo'}, (1.0, 0.28)),  # CISPO: no lower bound
    ({'policy_loss': 'cispo', 'clip_eps_high': 2.0}, (1.0, 2.0)),  # a set bound wins
    ({'importance_level': 'sequence', 'clip_eps_low': 1e-3}, (1e-3, 4e-4)),
])
def test_unset_clip_bounds_resolve_to_the_chosen_losses_defaults(fields, expected):
  from sgpo_jax.rl import learner
  c = config()
  assert c.train.clip_eps_low is None and c.train.clip_eps_high is None  # unset by default
  c.train.update(fields)
  config_check.check_config(c)
  settings = learner.LossSettings.from_config(c)
  assert (settings.clip_eps_low, settings.clip_eps_high) == expected


def _config_module(name):
  import importlib.util
  spec = importlib.util.spec_from_file_location(name, configs.path(name))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_parse_arg_is_typed_and_strict():
  from sgpo_jax.config.args import parse_arg
  spec = dict(method='sgpo', gpu=False, steps=10, lr=0.5)
  assert parse_arg(None, **spec) == spec
  assert parse_arg('gpu=1,steps=3,lr=1e-3,method=grpo', **spec) == dict(
      method='grpo', gpu=True, steps=3, lr=1e-3)
  for false in ('0', 'false', 'False', '', 'no', 'off'):
    assert parse_arg(f'gpu={false}', **spec)['gpu'] is False, false
  assert parse_arg('gpu', **spec)['gpu'] is True  # a bare bool key means True
  with pytest.raises(ValueError, match=r"unknown config arg 'gpus'.*known: \['gpu', 'lr', "
                     r"'method', 'steps'\]"):
    parse_arg('gpus=1', **spec)
  with pytest.raises(ValueError, match="gpu='maybe' is not a bool"):
    parse_arg('gpu=maybe', **spec)
  with pytest.raises(ValueError, match="steps='x' is not an int"):
    parse_arg('steps=x', **spec)


def test_every_config_file_uses_the_strict_parser():
  for name in ('qwen2_5_math_1_5b_gsm8k', 'qwen2_5_math_1_5b_dapo_math', 'qwen3_0_6b_gsm8k',
               'qwen3_1_7b_gsm8k', 'llama3_2_3b_gsm8k'):
    module = _config_module(name)
    assert module.get_config('gpu=0').mesh.shape == 'auto:fsdp=8', name  # '0' is False
    assert module.get_config('gpu=1').mesh.shape == 'auto', name  # one GPU: 1x1x1
    assert module.get_config('method=dapo,gpu=false').method == 'dapo'
    with pytest.raises(ValueError, match='unknown config arg'):
      module.get_config('gpu=1,runlocal=1')
  default = _config_module('default')
  assert default.get_config('runlocal=0').train.num_steps == \
      default_config.get_config().train.num_steps
  assert default.get_config('runlocal=1').train.num_steps < \
      default_config.get_config().train.num_steps
  with pytest.raises(ValueError, match=r"known: \['method', 'regime', 'runlocal'\]"):
    default.get_config('methd=grpo')


@pytest.mark.parametrize('field, value, message', [
    ('sgpo.phase_epochs', 0.0, 'sgpo.phase_epochs=0.0 must be > 0'),
    ('sgpo.trivial_replay_fraction', 1.0, r'sgpo.trivial_replay_fraction=1.0 must be in \[0, 1\)'),
    ('sgpo.trivial_threshold', 1.5, r'sgpo.trivial_threshold=1.5 must be in \[0, 1\]'),
    ('sgpo.rounding', 'sideways', "sgpo.rounding='sideways' is not one of"),
    ('sgpo.prior_eps', 0.0, 'sgpo.prior_eps=0.0 must be > 0'),
    ('dapo.max_rounds', 0, 'dapo.max_rounds=0 must be >= 1'),
    ('grpo.group_size', 1, r'grpo.group_size=1 must be >= 2 \(a group of 1 never'),
    ('data.format_reward', 1.0, r'data.format_reward=1.0 must be in \[0, 1\)'),
    ('dapo.group_size', 1, 'dapo.group_size=1 must be >= 2'),
    ('sgpo.group_sizes', (1, 2),
     r'sgpo.group_sizes=\(1, 2\) must be a non-empty set of integers >= 2'),
    ('train.schedule', 'linear', "train.schedule='linear' is not one of"),
    ('train.loss_agg', 'sum', "train.loss_agg='sum' is not one of"),
    ('sampling.top_p', 0.0, r'sampling.top_p=0.0 must be in \(0, 1\]'),
    ('eval.every_steps', 0, 'eval.every_steps=0 must be >= 1'),
    ('eval.at_budget_fractions', (0.5,), r'needs train.flops_budget > 0 \(got 0.0\)'),
    ('train.early_stop.confidence', 1.0, r'train.early_stop.confidence=1.0 must be in \(0, 1\)'),
])
def test_range_checks_live_in_config_check(field, value, message):
  c = default_config.get_config()
  *sections, key = field.split('.')
  section = c
  for name in sections:
    section = section[name]
  section[key] = value
  with pytest.raises(ValueError, match=message):
    config_check.check_config(c)


def test_sequence_level_ratios_pass_with_and_without_packing():
  c = config()
  c.train.update(packing=True, importance_level='sequence', clip_eps_low=3e-4,
                 clip_eps_high=4e-4)
  config_check.check_config(c)  # the packed step averages each sequence's own tokens
  c.train.packing = False
  config_check.check_config(c)


@pytest.mark.parametrize('fractions, message', [
    ((0.0, 0.5), r'must be numbers in \(0, 1\]'),
    ((0.5, 1.5), r'must be numbers in \(0, 1\]'),
    ((0.5, 0.25), 'must be strictly increasing'),
    ((0.5, 0.5), 'must be strictly increasing'),
])
def test_eval_budget_fractions_are_checked(fractions, message):
  c = default_config.get_config()
  c.train.flops_budget = 1e12
  c.eval.at_budget_fractions = fractions
  with pytest.raises(ValueError, match=message):
    config_check.check_config(c)
  c.eval.at_budget_fractions = (0.25, 0.5, 1.0)
  config_check.check_config(c)


def _leaves(tree, prefix=''):
  for key, value in sorted(tree.items()):
    if isinstance(value, dict):
      yield from _leaves(value, f'{prefix}{key}.')
    else:
      yield f'{prefix}{key}', value


def test_defaults_equal_the_snapshot_of_commit_09e509c():
  """The allocator sections built from the settings dataclasses, and the regimes set by
  sgpo_jax/configs/regimes.py, give the configs of 09e509c (when each section was written out in
  defaults.py and the regimes lived there) value for value and type for type; the snapshot
  is written by tests/fixtures/make_config_snapshot.py from that commit's file."""
  import json
  import lzma
  with lzma.open(os.path.join(REPO, 'tests', 'fixtures', 'config_09e509c.json.xz'), 'rt') as f:
    snapshot = json.load(f)['configs']
  assert '' in snapshot and 'regime=paper_like' in snapshot
  for arg, expected in snapshot.items():
    tree = _config_module('default').get_config(arg).to_dict()
    values, types = _with_intended_changes(expected['values'], expected['types'])
    if 'method=' not in arg:  # issue 43: the recommended allocator is the default method
      values['method'] = 'sgpo_bayes'
    assert json.dumps(tree, sort_keys=True) == json.dumps(values, sort_keys=True), arg
    assert {k: type(v).__name__ for k, v in _leaves(tree)} == types, arg


# Deliberate changes to the defaults since the snapshot, each with its reason; anything else
# that differs from 09e509c is a regression of the move.
INTENDED_CHANGES = {
    # Unset clip bounds resolve to the chosen loss's paper bounds (rl/losses.py
    # DEFAULT_CLIP_BOUNDS), so GSPO and CISPO no longer inherit PPO's 0.2 / 0.28.
    'train.clip_eps_low': None,
    'train.clip_eps_high': None,
    # New fields, off by default: the dry run's target device ('' = the present one) and
    # DAPO's overlong handling.
    'dry_run_device': '',
    'train.overlong_mask': False,
    'train.overlong_penalty_len': 0,
    # The model's attention kernel and layer scan, and the weights' dtype while sampling.
    'model.attention_impl': 'chunked',
    'model.attention_q_chunk': 128,
    'model.attention_kv_chunk': 512,
    'model.scan_unroll': 1,
    'sampling.param_dtype': 'auto',
    # How tokens are drawn (gumbel = as before; blocked = cheaper, another random stream).
    'sampling.draw': 'gumbel',
    # Issue 45: LoRA / QLoRA through qwix, off by default (rank 0 = full fine-tuning).
    'model.lora_rank': 0,
    'model.lora_alpha': 16.0,
    'model.lora_targets': 'q,k,v,o,gate,up,down',
    'model.lora_base_dtype': None,
    # Issue 43: the recommended path is the default: sgpo_bayes with G in {2, 4} (method
    # above, where the arg names none) and the packed train step (8 packed rows per buffer,
    # as the held-out comparison ran). The sampling engine stays static: on the README run
    # continuous batching measured slower (~1.1 against ~2.0 steps/s on 2 CPU cores).
    'sgpo_bayes.group_sizes': (2, 4),
    'train.packing': True,
    'train.pack_rows': 8,
    # Issue 51: metrics to Weights & Biases, off by default (a new section).
    'logging.wandb_project': '',
    # Issue 50: a catalog model fetched on first use, and the arithmetic task in words for
    # chat models; both off ('') by default.
    'model.pretrained': '',
    'data.question_template': '',
    # Issue 53: the selection-before-sampling allocator's section (a new registered method).
    'sgpo_select.group_sizes': (2, 4),
    'sgpo_select.prior_alpha': 0.5,
    'sgpo_select.prior_beta': 0.5,
    'sgpo_select.pooled_prior': 'auto',
    'sgpo_select.pooled_prior_strength': 1.0,
    'sgpo_select.pooled_max_concentration': 8.0,
    'sgpo_select.forget': 0.9,
    'sgpo_select.signal_exponent': 1.0,
    'sgpo_select.explore_rows': 8,
    'sgpo_select.max_rounds': 4,
    'sgpo_select.train_cost_per_row': 0.0,
    'sgpo_select.fill_target': 1.0,  # issue 53, after the study: off (fill the batch)
    'sgpo_select.train_cooldown': 0,  # issue 53, after the study: off
    'sgpo_select.prior_forget': 0.0,  # issue 53, after the study: off (the prior reads forget's)
}


def _with_intended_changes(values, types):
  import copy
  values, types = copy.deepcopy(values), dict(types)
  for key, value in INTENDED_CHANGES.items():
    *path, leaf = key.split('.')
    node = values
    for part in path:
      node = node.setdefault(part, {})  # a section added since the snapshot
    node[leaf] = value
    types[key] = type(value).__name__
  return values, types

