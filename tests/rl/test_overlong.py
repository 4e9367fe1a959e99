"""DAPO overlong handling: which rows are cut, the soft penalty (eq. 13), and the trainer's
rewards and loss masks with `train.overlong_mask` / `train.overlong_penalty_len`."""

import types

import numpy as np
import pytest

from sgpo_jax import train
from sgpo_jax.allocators import rows as rows_lib
from sgpo_jax.config import check as config_check
from sgpo_jax.config import defaults
from sgpo_jax.generate.sampler import SampleOutput
from sgpo_jax.rl import overlong

PAD, STOP = 0, 9


def test_truncated_rows():
  tokens = np.array([[5, 6, STOP, PAD],   # stopped early
                     [5, 6, 7, STOP],     # stop token in the last slot: finished
                     [5, 6, 7, 8],        # cut at the cap
                     [PAD, PAD, PAD, PAD]])  # padding row
  mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1], [0, 0, 0, 0]])
  np.testing.assert_array_equal(overlong.truncated_R(tokens, mask, [STOP]),
                                [False, False, True, False])


def test_soft_penalty_by_hand():
  # L_max = 10, L_cache = 4: 0 up to 6 tokens, then (6 - |y|) / 4, -1 beyond 10.
  lengths = np.array([0, 6, 7, 8, 9, 10, 11])
  np.testing.assert_allclose(overlong.soft_overlong_penalty_R(lengths, 10, 4),
                             [0, 0, -0.25, -0.5, -0.75, -1.0, -1.0])
  with pytest.raises(ValueError, match='overlong_penalty_len=11'):
    overlong.soft_overlong_penalty_R(lengths, 10, 11)


def test_mask_truncated():
  mask = np.ones((3, 5), np.int32)
  out = overlong.mask_truncated(mask, np.array([False, True, False]))
  np.testing.assert_array_equal(out.sum(1), [5, 0, 5])
  assert out.dtype == np.int32 and mask.sum() == 15  # input untouched


def _setup(overlong_mask: bool, penalty_len: int):
  """A stand-in `Setup` whose sampler returns three fixed completions (N = 4)."""
  config = defaults.get_config()
  config.sampling.max_prompt_len = 3
  config.sampling.max_new_tokens = 4
  config.train.overlong_mask = overlong_mask
  config.train.overlong_penalty_len = penalty_len
  tokens = np.array([[5, STOP, PAD, PAD], [5, 6, 7, STOP], [5, 6, 7, 8]], np.int32)
  mask = np.array([[1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1]], np.int32)
  sampler = types.SimpleNamespace(
      rows=4, max_new_tokens=4,
      sample=lambda *a, **k: SampleOutput(tokens, mask, mask.sum(1), mask * -0.5,
                                          calls=[(3, 4)], prompt_lens_R=np.full(3, 2)))
  tokenizer = types.SimpleNamespace(pad_id=PAD, stop_token_ids=[STOP], decode=lambda ids: '')
  return types.SimpleNamespace(
      config=config, tokenizer=tokenizer, sampler=sampler, ledger=None,
      prompt_tokens=[[1, 2], [3, 4], [1]], train_queries=[None] * 3,
      reward_fn=lambda completions, queries: np.ones(len(completions), np.float32))


@pytest.mark.parametrize('overlong_mask,penalty_len', [(False, 0), (True, 0), (False, 2),
                                                       (True, 2)])
def test_trainer_rewards_and_masks(overlong_mask, penalty_len):
  su = _setup(overlong_mask, penalty_len)
  layout = rows_lib.layout_rows([0, 1, 2], [1, 1, 1], 4)  # 3 rows + 1 padding row
  rollout = train.rollout(su, None, layout, rng=None)
  batch = train.train_batch(su, layout, rollout)
  # Lengths 2, 4, 4 with L_max = 4, L_cache = 2: penalties 0, -1, -1 (eq. 13 at |y| = L_max).
  penalty = np.array([0.0, -1.0, -1.0, 0.0]) if penalty_len else np.zeros(4)
  np.testing.assert_allclose(rollout.rewards_R, np.array([1, 1, 1, 0]) + penalty)
  # Completion tokens in the loss per row: row 2 (cut at the cap) leaves it when masked.
  expected = [2, 4, 0 if overlong_mask else 4, 0]
  np.testing.assert_array_equal(batch['completion_mask_RxT1'].sum(1), expected)
  assert batch['mask_RxT'][2, 3:].sum() == 4  # the tokens stay in the model's input


def test_penalty_len_checked():
  config = defaults.get_config()
  config.train.overlong_penalty_len = config.sampling.max_new_tokens + 1
  with pytest.raises(ValueError, match='train.overlong_penalty_len'):
    config_check.check_config(config)
