"""Tests for sgpo_jax.rl.losses: advantages by group id, chunked log-probs, policy loss.

Expected numbers are literals worked out by hand (or with numpy in float64), never by
calling the code under test.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sgpo_jax.rl import losses as losses_lib

# --------------------------------------------------------------------------- advantages

# Groups of sizes 1, 2, 3, 8 plus an all-equal pair; ids deliberately not 0..4.
GROUP_REWARDS = {
    5: [1.0],
    0: [1.0, 0.0],
    2: [0.0, 1.0, 1.0],
    7: [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5],
    3: [1.0, 1.0],
}
# Hand numbers. grpo: population std (ddof=0), eps=1e-6. g0: mean .5, std .5 -> +-.5/.500001.
# g2: mean 2/3, std sqrt(2/9). g7: mean .1875, std sqrt(.12109375) = .34798527.
# rloo: r - (sum - r)/(n - 1), e.g. g7 row 0: 1 - .5/7.
EXPECTED = {
    'grpo': {
        5: [0.0],
        0: [0.999998, -0.999998],
        2: [-1.41421056, 0.70710528, 0.70710528],
        7: [2.33486222] + [-0.53881436] * 6 + [0.89802393],
        3: [0.0, 0.0],
    },
    'dr_grpo': {
        5: [0.0],
        0: [0.5, -0.5],
        2: [-2 / 3, 1 / 3, 1 / 3],
        7: [0.8125] + [-0.1875] * 6 + [0.3125],
        3: [0.0, 0.0],
    },
    'rloo': {
        5: [0.0],
        0: [1.0, -1.0],
        2: [-1.0, 0.5, 0.5],
        7: [0.92857143] + [-0.21428571] * 6 + [0.35714286],
        3: [0.0, 0.0],
    },
}


def _interleaved_batch(group_rewards, seed=0):
  """Flattens {gid: rewards} into rows in a shuffled order; returns arrays + the order."""
  rows = [(gid, i, r) for gid, rs in group_rewards.items() for i, r in enumerate(rs)]
  order = np.random.default_rng(seed).permutation(len(rows))
  rows = [rows[k] for k in order]
  rewards_R = np.array([r for _, _, r in rows], np.float32)
  group_id_R = np.array([g for g, _, _ in rows], np.int32)
  return rewards_R, group_id_R, [(g, i) for g, i, _ in rows]


@pytest.mark.parametrize('estimator', ['grpo', 'dr_grpo', 'rloo'])
def test_advantages_uneven_groups_hand_numbers(estimator):
  rewards_R, group_id_R, keys = _interleaved_batch(GROUP_REWARDS)
  valid_R = np.ones_like(rewards_R, bool)
  adv_R, _ = losses_lib.compute_advantages(rewards_R, group_id_R, valid_R, 16, estimator)
  expected_R = np.array([EXPECTED[estimator][g][i] for g, i in keys])
  np.testing.assert_allclose(np.asarray(adv_R), expected_R, rtol=1e-5, atol=1e-6)
  all_equal_rows = [k for k, (g, _) in enumerate(keys) if g in (5, 3)]
  assert np.all(np.asarray(adv_R)[all_equal_rows] == 0.0)


def test_advantage_stats_hand_numbers():
  rewards_R, group_id_R, _ = _interleaved_batch(GROUP_REWARDS)
  pad = 4
  rewards_R = np.concatenate([rewards_R, np.full(pad, 9.0, np.float32)])
  group_id_R = np.concatenate([group_id_R, np.array([0, 2, 11, 15], np.int32)])
  valid_R = np.arange(len(rewards_R)) < 16
  _, stats = losses_lib.compute_advantages(rewards_R, group_id_R, valid_R, 20, 'dr_grpo')
  # 5 groups exist (ids 11, 15 hold only padding); 1-row group and [1, 1] are all-equal.
  assert float(stats['num_valid_groups']) == 5.0
  assert float(stats['num_valid_rows']) == 16.0
  np.testing.assert_allclose(float(stats['frac_zero_std']), 0.4, rtol=1e-6)
  np.testing.assert_allclose(float(stats['reward_mean']), 7.5 / 16, rtol=1e-6)
  np.testing.assert_allclose(float(stats['advantage_mean']), 0.0, atol=1e-7)
  # sqrt((.5 + 6/9 + .96875) / 16)
  np.testing.assert_allclose(float(stats['advantage_std']), 0.36532662, rtol=1e-5)
  np.testing.assert_allclose(float(stats['advantage_min']), -2 / 3, rtol=1e-6)
  np.testing.assert_allclose(float(stats['advantage_max']), 0.8125, rtol=1e-6)

  _, stats = losses_lib.compute_advantages(rewards_R, group_id_R, valid_R, 20, 'grpo')
  # Each non-constant group's squared grpo advantages sum to ~n: sqrt(13/16) less the eps.
  np.testing.assert_allclose(float(stats['advantage_std']), 0.90138551, rtol=1e-5)


@pytest.mark.parametrize('estimator', ['grpo', 'dr_grpo', 'rloo'])
def test_mixed_group_batch_equals_groups_one_by_one(estimator):
  rng = np.random.default_rng(1)
  sizes = {0: 1, 1: 2, 2: 3, 3: 8, 4: 5, 5: 4}
  group_rewards = {g: list(rng.normal(size=n)) for g, n in sizes.items()}
  group_rewards[6] = [0.0, 1.0, 0.0, 1.0]  # binary, like verifier rewards
  rewards_R, group_id_R, keys = _interleaved_batch(group_rewards, seed=2)
  adv_R, _ = losses_lib.compute_advantages(
      rewards_R, group_id_R, np.ones_like(rewards_R, bool), len(rewards_R), estimator)
  for g, rs in group_rewards.items():
    alone_G, _ = losses_lib.compute_advantages(
        np.array(rs, np.float32), np.zeros(len(rs), np.int32), np.ones(len(rs), bool), 1,
        estimator)
    in_batch_G = [float(adv_R[keys.index((g, i))]) for i in range(len(rs))]
    np.testing.assert_allclose(in_batch_G, np.asarray(alone_G), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize('estimator', ['grpo', 'dr_grpo', 'rloo'])
def test_padding_rows_change_nothing(estimator):
  rewards_R, group_id_R, _ = _interleaved_batch(GROUP_REWARDS)
  R = len(rewards_R)
  base_R, base_stats = losses_lib.compute_advantages(
      rewards_R, group_id_R, np.ones(R, bool), 24, estimator)
  rng = np.random.default_rng(3)
  pad = 8
  pad_rewards = rng.normal(size=pad).astype(np.float32) * 100
  pad_rewards[0] = np.nan  # padding may hold garbage
  padded_rewards = np.concatenate([rewards_R, pad_rewards])
  # Padding ids hit real groups (0, 2, 7) and empty ones.
  padded_ids = np.concatenate([group_id_R, np.array([0, 2, 7, 7, 5, 20, 23, 1], np.int32)])
  valid = np.arange(R + pad) < R
  perm = rng.permutation(R + pad)  # padding anywhere, not only at the end
  adv_R, stats = losses_lib.compute_advantages(
      padded_rewards[perm], padded_ids[perm], valid[perm], 24, estimator)
  adv_R = np.asarray(adv_R)
  unperm_R = np.empty_like(adv_R)
  unperm_R[perm] = adv_R
  np.testing.assert_allclose(unperm_R[:R], np.asarray(base_R), rtol=1e-6, atol=1e-7)
  assert np.all(unperm_R[R:] == 0.0)
  for key, value in base_stats.items():
    np.testing.assert_allclose(float(stats[key]), float(value), rtol=1e-6, atol=1e-7,
                               err_msg=key)


@pytest.mark.parametrize('estimator', ['grpo', 'dr_grpo', 'rloo'])
def test_all_equal_groups_give_exact_zero(estimator):
  noisy_point_three = 0.1 + 0.2  # 0.30000000000000004 in float64; float32 rounds to 0.3f
  assert np.float32(noisy_point_three) == np.float32(0.3)
  one_ulp_above = float(np.nextafter(np.float32(0.3), np.float32(1.0)))
  group_rewards = {
      0: [0.1, 0.1, 0.1],  # sum/3 in float32 need not equal 0.1f exactly
      1: [noisy_point_three, 0.3],
      2: [0.7] * 8,
      3: [0.3, one_ulp_above],  # NOT all-equal: bitwise different
  }
  rewards_R, group_id_R, keys = _interleaved_batch(group_rewards, seed=4)
  adv_R, stats = losses_lib.compute_advantages(
      rewards_R, group_id_R, np.ones_like(rewards_R, bool), 4, estimator)
  adv_R = np.asarray(adv_R)
  equal_rows = [k for k, (g, _) in enumerate(keys) if g != 3]
  assert np.all(adv_R[equal_rows] == 0.0)
  assert not np.isnan(adv_R).any()
  assert np.any(adv_R[[k for k, (g, _) in enumerate(keys) if g == 3]] != 0.0)
  assert float(stats['frac_zero_std']) == 0.75


def test_size_one_groups_give_zero_not_nan():
  adv_R, stats = losses_lib.compute_advantages(
      np.array([1.0, 0.0, 0.5], np.float32), np.array([0, 1, 2]), np.ones(3, bool), 3, 'grpo')
  assert np.all(np.asarray(adv_R) == 0.0)
  assert float(stats['frac_zero_std']) == 1.0


def test_all_padding_batch_is_finite():
  for estimator in losses_lib.ADVANTAGE_ESTIMATORS:
    adv_R, stats = losses_lib.compute_advantages(
        np.array([1.0, 0.0]), np.array([0, 0]), np.zeros(2, bool), 2, estimator)
    assert np.all(np.asarray(adv_R) == 0.0)
    assert all(float(v) == 0.0 for v in stats.values())


def test_advantages_errors_name_the_bad_value():
  args = (np.zeros(2), np.zeros(2, np.int32), np.ones(2, bool))
  with pytest.raises(ValueError, match="estimator='ppo'"):
    losses_lib.compute_advantages(*args, 2, 'ppo')
  with pytest.raises(ValueError, match='num_groups=0'):
    losses_lib.compute_advantages(*args, 0)
  with pytest.raises(ValueError, match=r'group_id_R \(3,\)'):
    losses_lib.compute_advantages(np.zeros(2), np.zeros(3, np.int32), np.ones(2, bool), 2)


def test_advantages_jit_one_trace_for_any_group_layout():
  traces = []

  @functools.partial(jax.jit, static_argnames=('num_groups', 'estimator'))
  def jitted(rewards_R, group_id_R, valid_R, num_groups, estimator):
    traces.append(1)
    return losses_lib.compute_advantages(rewards_R, group_id_R, valid_R, num_groups, estimator)

  rng = np.random.default_rng(5)
  rewards_R = rng.normal(size=8).astype(np.float32)
  layouts = [
      (np.array([0, 0, 1, 1, 2, 2, 2, 2]), np.ones(8, bool)),  # G = 2, 2, 4
      (np.array([0, 1, 2, 2, 2, 3, 3, 3]), np.ones(8, bool)),  # G = 1, 1, 3, 3
      (np.array([0, 0, 0, 0, 0, 0, 7, 7]), np.arange(8) < 6),  # G = 6 + padding
  ]
  for group_id_R, valid_R in layouts:
    adv_R, stats = jitted(rewards_R, group_id_R.astype(np.int32), valid_R, 8, 'grpo')
    eager_R, eager_stats = losses_lib.compute_advantages(rewards_R, group_id_R, valid_R, 8, 'grpo')
    np.testing.assert_allclose(np.asarray(adv_R), np.asarray(eager_R), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(float(stats['frac_zero_std']),
                               float(eager_stats['frac_zero_std']))
  assert len(traces) == 1


# --------------------------------------------------------------------------- log-probs


def _numpy_logprobs(hidden_BxTxD, head_DxV, targets_BxT):
  logits = np.einsum('btd,dv->btv', hidden_BxTxD.astype(np.float64), head_DxV.astype(np.float64))
  logits -= logits.max(-1, keepdims=True)
  logp_all = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  logp = np.take_along_axis(logp_all, targets_BxT[..., None], -1)[..., 0]
  entropy = -(np.exp(logp_all) * logp_all).sum(-1)
  return logp, entropy


@pytest.mark.parametrize('chunk_size', [0, 1, 3, 4, 7, 10])
def test_token_logprobs_matches_log_softmax_gather(chunk_size):
  rng = np.random.default_rng(6)
  B, T, D, V = 2, 7, 5, 11
  hidden = rng.normal(size=(B, T, D)).astype(np.float32)
  head = rng.normal(size=(D, V)).astype(np.float32)
  targets = rng.integers(0, V, size=(B, T)).astype(np.int32)
  logp, entropy = losses_lib.token_logprobs(hidden, head, targets, chunk_size)
  assert logp.shape == (B, T) and entropy.shape == (B, T) and logp.dtype == jnp.float32
  ref_logp, ref_entropy = _numpy_logprobs(hidden, head, targets)
  np.testing.assert_allclose(np.asarray(logp), ref_logp, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(entropy), ref_entropy, rtol=1e-5, atol=1e-5)
  # Uniform logits: entropy is exactly log V.
  _, flat_entropy = losses_lib.token_logprobs(hidden, np.zeros_like(head), targets, chunk_size)
  np.testing.assert_allclose(np.asarray(flat_entropy), np.log(V), rtol=1e-6)


def test_token_logprobs_chunked_equals_unchunked_values_and_grads():
  rng = np.random.default_rng(7)
  B, T, D, V = 3, 10, 4, 13
  hidden = jnp.asarray(rng.normal(size=(B, T, D)), jnp.float32)
  head = jnp.asarray(rng.normal(size=(D, V)), jnp.float32)
  targets = jnp.asarray(rng.integers(0, V, size=(B, T)), jnp.int32)
  weights = jnp.asarray(rng.normal(size=(B, T)), jnp.float32)

  def objective(hidden, head, chunk_size):
    logp, entropy = losses_lib.token_logprobs(hidden, head, targets, chunk_size)
    return jnp.sum(weights * logp) + 0.1 * jnp.sum(entropy)

  full = jax.grad(objective, argnums=(0, 1))(hidden, head, 0)
  for chunk_size in (3, 4, 5):
    np.testing.assert_allclose(
        objective(hidden, head, chunk_size), objective(hidden, head, 0), rtol=1e-6)
    chunked = jax.jit(jax.grad(objective, argnums=(0, 1)), static_argnums=2)(
        hidden, head, chunk_size)
    for a, b in zip(chunked, full, strict=True):
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_token_logprobs_bf16_inputs_and_custom_logits_fn():
  rng = np.random.default_rng(8)
  B, T, D, V = 2, 5, 4, 9
  hidden = rng.normal(size=(B, T, D)).astype(np.float32)
  embed_VxD = rng.normal(size=(V, D)).astype(np.float32) * 10
  targets = rng.integers(0, V, size=(B, T)).astype(np.int32)

  def softcapped(hidden_BxCxD, table_VxD):
    return 2.0 * jnp.tanh(jnp.einsum('bcd,vd->bcv', hidden_BxCxD, table_VxD) / 2.0)

  logp, _ = losses_lib.token_logprobs(hidden, embed_VxD, targets, 2, logits_fn=softcapped)
  logits = 2.0 * np.tanh(np.einsum('btd,vd->btv', hidden, embed_VxD) / 2.0)
  ref = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  ref = np.take_along_axis(ref, targets[..., None], -1)[..., 0]
  np.testing.assert_allclose(np.asarray(logp), ref, rtol=1e-5, atol=1e-5)

  logp16, entropy16 = losses_lib.token_logprobs(
      jnp.asarray(hidden, jnp.bfloat16), jnp.asarray(embed_VxD.T / 10, jnp.bfloat16), targets, 2)
  assert logp16.dtype == jnp.float32 and entropy16.dtype == jnp.float32
  assert np.all(np.isfinite(np.asarray(logp16)))


def test_token_logprobs_rejects_negative_chunk():
  with pytest.raises(ValueError, match='chunk_size=-1'):
    losses_lib.token_logprobs(np.zeros((1, 2, 3)), np.zeros((3, 4)), np.zeros((1, 2), np.int32), -1)


# --------------------------------------------------------------------------- policy loss

LOSS_KW = {'clip_eps_low': 0.2, 'clip_eps_high': 0.2, 'logratio_clamp': 10.0,
           'max_new_tokens': 4}


def _tiny_loss_example():
  """Row 0: A=1, ratios [1, 1.1, (masked)]; row 1: A=-.5, ratios [1, .9, 1.3]; row 2 padding."""
  logp = np.array([[-1.0, -2.0, -0.5], [-0.3, -1.2, -0.7], [-1.0, -1.0, -1.0]], np.float32)
  log_ratio = np.log(np.array([[1.0, 1.1, 2.0], [1.0, 0.9, 1.3], [5.0, 5.0, 5.0]]))
  old_logp = (logp - log_ratio).astype(np.float32)
  advantages = np.array([1.0, -0.5, 3.0], np.float32)
  mask = np.array([[1, 1, 0], [1, 1, 1], [1, 1, 1]], np.float32)
  valid = np.array([True, True, False])
  return logp, old_logp, advantages, mask, valid


# Per token: row 0: -1, -1.1 (sum -2.1, mean -1.05); row 1: .5, .45, and the ratio 1.3 > 1.2
# with A < 0 keeps the unclipped (larger) loss .65 (sum 1.6, mean .533333).
@pytest.mark.parametrize('loss_agg, expected_sum, expected_denom', [
    ('token_mean', -0.5, 5.0),
    ('seq_mean_token_mean', -1.05 + 1.6 / 3, 2.0),
    ('seq_mean_token_sum_norm', -2.1 / 4 + 1.6 / 4, 2.0),
])
def test_policy_loss_hand_numbers(loss_agg, expected_sum, expected_denom):
  logp, old_logp, advantages, mask, valid = _tiny_loss_example()
  entropy = np.full_like(logp, 0.25)
  entropy[2] = 99.0  # padding row: must not count
  loss_sum, denom, metrics = losses_lib.policy_loss(
      logp, old_logp, advantages, mask, valid, loss_agg=loss_agg, entropy_RxT=entropy,
      **LOSS_KW)
  np.testing.assert_allclose(float(loss_sum), expected_sum, rtol=1e-5)
  assert float(denom) == expected_denom
  assert float(losses_lib.loss_denominator(mask, valid, loss_agg, 4)) == expected_denom
  means = losses_lib.finalize_loss_metrics(metrics)
  assert float(means['token_count']) == 5.0 and float(means['seq_count']) == 2.0
  np.testing.assert_allclose(float(means['ratio_mean']), 5.3 / 5, rtol=1e-5)
  np.testing.assert_allclose(float(means['ratio_max']), 1.3, rtol=1e-5)
  np.testing.assert_allclose(float(means['ratio_min']), 0.9, rtol=1e-5)
  # 0.5 * (ln 1.1^2 + ln .9^2 + ln 1.3^2) / 5
  np.testing.assert_allclose(float(means['approx_kl']), 0.04450994 / 5, rtol=1e-4)
  np.testing.assert_allclose(float(means['entropy_mean']), 0.25, rtol=1e-6)
  np.testing.assert_allclose(float(means['pg_loss_token_mean']), -0.5 / 5, rtol=1e-5)
  assert float(means['clip_frac_low']) == 0.0 and float(means['clip_frac_high']) == 0.0
  assert 'kl_mean' not in means


def _one_token_grad(log_ratio, advantage, logratio_clamp=10.0):
  def loss(logp):
    s, d, _ = losses_lib.policy_loss(
        logp, jnp.array([[-1.0 - log_ratio]]), jnp.array([advantage]), jnp.ones((1, 1)),
        jnp.array([True]), clip_eps_low=0.2, clip_eps_high=0.28, logratio_clamp=logratio_clamp,
        loss_agg='token_mean', max_new_tokens=1)
    return s / d
  return float(jax.grad(loss)(jnp.array([[-1.0]]))[0, 0])


def test_clip_edges_zero_gradient():
  # Above 1 + eps_high with A > 0, below 1 - eps_low with A < 0: clipped, no gradient.
  assert _one_token_grad(np.log(1.5), 1.0) == 0.0
  assert _one_token_grad(np.log(0.5), -1.0) == 0.0
  # The other sides are not clipped (pessimistic bound): d(-ratio * A)/dlogp = -ratio * A.
  np.testing.assert_allclose(_one_token_grad(np.log(1.5), -1.0), 1.5, rtol=1e-6)
  np.testing.assert_allclose(_one_token_grad(np.log(0.5), 1.0), -0.5, rtol=1e-6)
  # Inside the band: -ratio * A.
  np.testing.assert_allclose(_one_token_grad(np.log(1.1), 2.0), -2.2, rtol=1e-6)
  # Beyond the log-ratio clamp the token gets no gradient, and the ratio stays finite.
  assert _one_token_grad(200.0, -1.0, logratio_clamp=2.0) == 0.0
  # Between the two bounds (eps_low 0.2, eps_high 0.28): 1.25 with A > 0 is inside the high
  # bound 1.28, so it still learns (a symmetric 0.2 would clip it); 0.75 with A < 0 is below
  # the low bound 0.8, clipped. Swapping the bounds fails both.
  np.testing.assert_allclose(_one_token_grad(np.log(1.25), 1.0), -1.25, rtol=1e-6)
  assert _one_token_grad(np.log(0.75), -1.0) == 0.0


def test_clip_fractions():
  ratios = np.array([1.5, 0.5, 1.5, 0.5, 1.1])
  advantages = np.array([1.0, -1.0, -1.0, 1.0, 1.0], np.float32)
  _, _, metrics = losses_lib.policy_loss(
      np.zeros((5, 1), np.float32), -np.log(ratios)[:, None].astype(np.float32), advantages,
      np.ones((5, 1)), np.ones(5, bool), clip_eps_low=0.2, clip_eps_high=0.28,
      logratio_clamp=10.0, loss_agg='token_mean', max_new_tokens=1)
  means = losses_lib.finalize_loss_metrics(metrics)
  assert float(means['clip_frac_high']) == pytest.approx(0.2)
  assert float(means['clip_frac_low']) == pytest.approx(0.2)


@pytest.mark.parametrize('kl_form, expected_kl, expected_grad', [
    ('k1', 0.5, 1.0),  # logp - ref = -1 - (-1.5); d/dlogp = 1
    ('k3', 0.10653066, 0.39346934),  # e^-.5 + .5 - 1; d/dlogp = 1 - e^-.5
])
def test_kl_forms(kl_form, expected_kl, expected_grad):
  def loss(logp):
    s, d, metrics = losses_lib.policy_loss(
        logp, jnp.array([[-1.0]]), jnp.array([0.0]), jnp.ones((1, 1)), jnp.array([True]),
        kl_coef=0.1, ref_logp_RxT=jnp.array([[-1.5]]), kl_form=kl_form, loss_agg='token_mean',
        **{**LOSS_KW, 'max_new_tokens': 1})
    return s / d, metrics

  (value, metrics), grad = jax.value_and_grad(loss, has_aux=True)(jnp.array([[-1.0]]))
  np.testing.assert_allclose(float(value), 0.1 * expected_kl, rtol=1e-5)
  np.testing.assert_allclose(float(grad[0, 0]), 0.1 * expected_grad, rtol=1e-5)
  np.testing.assert_allclose(
      float(losses_lib.finalize_loss_metrics(metrics)['kl_mean']), expected_kl, rtol=1e-5)


def test_kl_argument_errors():
  args = (np.zeros((1, 1)), np.zeros((1, 1)), np.zeros(1), np.ones((1, 1)), np.ones(1, bool))
  with pytest.raises(ValueError, match='kl_coef=0.1 needs ref_logp_RxT'):
    losses_lib.policy_loss(*args, kl_coef=0.1, loss_agg='token_mean', **LOSS_KW)
  with pytest.raises(ValueError, match="kl_form='k2'"):
    losses_lib.policy_loss(*args, kl_coef=0.1, ref_logp_RxT=np.zeros((1, 1)), kl_form='k2',
                     loss_agg='token_mean', **LOSS_KW)
  with pytest.raises(ValueError, match="loss_agg='mean'"):
    losses_lib.policy_loss(*args, loss_agg='mean', **LOSS_KW)


# --------------------------------------------------------------------------- GSPO and CISPO


# GSPO on `_tiny_loss_example` (eps 0.2): row 0 counts ratios [1, 1.1] -> s_0 = 1.1^(1/2) =
# 1.0488088, A = 1, loss -s_0 on each of 2 tokens; row 1 counts [1, .9, 1.3] -> s_1 =
# 1.17^(1/3) = 1.0537281 (inside [.8, 1.2], though token 1.3 alone is outside), A = -.5,
# loss .5 s_1 = .5268641 on each of 3 tokens.
@pytest.mark.parametrize('loss_agg, expected_sum, expected_denom', [
    ('token_mean', -2 * 1.0488088 + 3 * 0.5268641, 5.0),
    ('seq_mean_token_mean', -1.0488088 + 0.5268641, 2.0),
])
def test_gspo_hand_numbers(loss_agg, expected_sum, expected_denom):
  logp, old_logp, advantages, mask, valid = _tiny_loss_example()

  def loss(logp):
    s, d, metrics = losses_lib.policy_loss(logp, old_logp, advantages, mask, valid,
                                           loss_agg=loss_agg,
                                     importance_level='sequence', **LOSS_KW)
    return s, (d, metrics)

  (loss_sum, (denom, metrics)), grad = jax.value_and_grad(loss, has_aux=True)(jnp.asarray(logp))
  np.testing.assert_allclose(float(loss_sum), expected_sum, rtol=1e-5)
  assert float(denom) == expected_denom
  means = losses_lib.finalize_loss_metrics(metrics)
  np.testing.assert_allclose(float(means['ratio_max']), 1.17 ** (1 / 3), rtol=1e-5)
  np.testing.assert_allclose(float(means['ratio_min']), 1.1 ** 0.5, rtol=1e-5)
  assert float(means['clip_frac_high']) == 0.0  # sequence-level: no sequence is clipped
  # d/dlogp_t of -s_i A_i (per-row weight w): -s_i A_i w, the same on every counted token.
  w0, w1 = (1.0, 1.0) if loss_agg == 'token_mean' else (1 / 2, 1 / 3)
  np.testing.assert_allclose(np.asarray(grad), [
      [-1.0488088 * w0, -1.0488088 * w0, 0.0],
      [0.5268641 * w1, 0.5268641 * w1, 0.5268641 * w1],
      [0.0, 0.0, 0.0]], rtol=1e-5, atol=1e-7)


def test_gspo_token_form_equals_plain_gspo_value_and_gradient():
  """GSPO-token (ours) == plain GSPO: mean over rows of -min(s_i A_i, clip(s_i) A_i) with
  s_i = exp(mean_t log ratio) differentiated directly, with the paper's tiny eps (3e-4 /
  4e-4) so some sequences are clipped and some are not."""
  rng = np.random.default_rng(3)
  R, T = 6, 5
  logp = jnp.asarray(-rng.uniform(0.1, 3.0, size=(R, T)), jnp.float32)
  old_logp = logp + jnp.asarray(rng.normal(scale=1e-3, size=(R, T)), jnp.float32)
  advantages = jnp.asarray(rng.normal(size=R), jnp.float32)
  mask = jnp.asarray(np.arange(T)[None] < np.array([5, 1, 3, 4, 2, 5])[:, None], jnp.float32)
  valid = jnp.array([True, True, True, False, True, True])
  eps = {'clip_eps_low': 3e-4, 'clip_eps_high': 4e-4}

  def ours(logp):
    s, d, _ = losses_lib.policy_loss(logp, old_logp, advantages, mask, valid,
                               loss_agg='seq_mean_token_mean', importance_level='sequence',
                               logratio_clamp=10.0, max_new_tokens=T, **eps)
    return s / d

  def plain(logp):
    s_R = jnp.exp(jnp.sum((logp - old_logp) * mask, -1) / jnp.sum(mask, -1))
    clipped_R = jnp.clip(s_R, 1 - eps['clip_eps_low'], 1 + eps['clip_eps_high'])
    per_row = -jnp.minimum(s_R * advantages, clipped_R * advantages)
    return jnp.sum(jnp.where(valid, per_row, 0.0)) / jnp.sum(valid)

  s_R = np.exp(np.sum((np.asarray(logp) - np.asarray(old_logp)) * mask, -1) / np.sum(mask, -1))
  outside = (s_R > 1 + 4e-4) | (s_R < 1 - 3e-4)
  assert outside[np.asarray(valid)].any() and (~outside[np.asarray(valid)]).any()
  np.testing.assert_allclose(float(ours(logp)), float(plain(logp)), rtol=1e-5)
  np.testing.assert_allclose(np.asarray(jax.grad(ours)(logp)), np.asarray(jax.grad(plain)(logp)),
                             rtol=1e-4, atol=1e-7)


def test_sequence_clipping_is_all_or_nothing_per_sequence():
  """Token ratios [2, .5] average to s = 1 in log space: GSPO keeps both tokens' gradient
  (-A s / 2 each under seq_mean_token_mean); token-level PPO drops the ratio-2 token."""
  logp = jnp.array([[-1.0, -1.0]])
  old_logp = logp - jnp.log(jnp.array([[2.0, 0.5]]))

  def grad(level):
    def loss(logp):
      s, d, _ = losses_lib.policy_loss(logp, old_logp, jnp.array([1.0]), jnp.ones((1, 2)),
                                 jnp.array([True]), loss_agg='seq_mean_token_mean',
                                 importance_level=level, **LOSS_KW)
      return s / d
    return np.asarray(jax.grad(loss)(logp))[0]

  np.testing.assert_allclose(grad('sequence'), [-0.5, -0.5], rtol=1e-6)
  np.testing.assert_allclose(grad('token'), [0.0, -0.25], rtol=1e-6)


def test_cispo_hand_numbers():
  """IS weights clip(r, .8, 1.2): row 0 [1, 1.1], A = 1, logp [-1, -2] -> losses 1, 2.2;
  row 1 [1, .9, 1.2 (from 1.3)], A = -.5, logp [-.3, -1.2, -.7] -> -.15, -.54, -.42."""
  logp, old_logp, advantages, mask, valid = _tiny_loss_example()

  def loss(logp):
    s, d, metrics = losses_lib.policy_loss(logp, old_logp, advantages, mask, valid,
                                     loss_agg='token_mean', pg_loss='cispo', **LOSS_KW)
    return s / d, (s, metrics)

  (_, (loss_sum, metrics)), grad = jax.value_and_grad(loss, has_aux=True)(jnp.asarray(logp))
  np.testing.assert_allclose(float(loss_sum), 1.0 + 2.2 - 0.15 - 0.54 - 0.42, rtol=1e-5)
  # Gradient -sg(w) A / 5 on every counted token: the weight is not differentiated.
  np.testing.assert_allclose(np.asarray(grad), np.array([
      [-1.0, -1.1, 0.0], [0.5, 0.45, 0.6], [0.0, 0.0, 0.0]]) / 5, rtol=1e-5, atol=1e-7)
  means = losses_lib.finalize_loss_metrics(metrics)
  assert float(means['clip_frac_high']) == pytest.approx(0.2)  # the 1.3 token, any A sign
  assert float(means['clip_frac_low']) == 0.0


def test_cispo_keeps_the_gradient_ppo_clips_away():
  def grad(pg_loss):
    def loss(logp):
      s, d, _ = losses_lib.policy_loss(logp, jnp.array([[-1.0 - np.log(1.5)]]), jnp.array([1.0]),
                                 jnp.ones((1, 1)), jnp.array([True]), loss_agg='token_mean',
                                 pg_loss=pg_loss, **{**LOSS_KW, 'max_new_tokens': 1})
      return s / d
    return float(jax.grad(loss)(jnp.array([[-1.0]]))[0, 0])

  assert grad('ppo') == 0.0  # ratio 1.5 > 1.2 with A > 0: PPO drops the token
  np.testing.assert_allclose(grad('cispo'), -1.2, rtol=1e-6)  # weight capped at 1 + eps_high


def test_unknown_loss_names_are_named():
  args = (np.zeros((1, 1)), np.zeros((1, 1)), np.zeros(1), np.ones((1, 1)), np.ones(1, bool))
  with pytest.raises(ValueError, match="pg_loss='reinforce'.*cispo"):
    losses_lib.policy_loss(*args, loss_agg='token_mean', pg_loss='reinforce', **LOSS_KW)
  with pytest.raises(ValueError, match="importance_level='row'.*sequence"):
    losses_lib.policy_loss(*args, loss_agg='token_mean', importance_level='row', **LOSS_KW)


_LOSS_VARIANTS = [(agg, 'ppo', 'token') for agg in sorted(losses_lib.LOSS_AGGREGATIONS)] + [
    ('seq_mean_token_mean', 'ppo', 'sequence'), ('token_mean', 'ppo', 'sequence'),
    ('token_mean', 'cispo', 'token'), ('seq_mean_token_sum_norm', 'cispo', 'sequence')]


@pytest.mark.slow
@pytest.mark.parametrize('loss_agg, pg_loss, importance_level', _LOSS_VARIANTS)
def test_micro_batched_gradient_equals_full_batch(loss_agg, pg_loss, importance_level):
  rng = np.random.default_rng(9)
  R, T = 6, 5
  logp = jnp.asarray(-rng.uniform(0.1, 3.0, size=(R, T)), jnp.float32)
  old_logp = logp + jnp.asarray(rng.normal(scale=0.3, size=(R, T)), jnp.float32)
  ref_logp = logp + jnp.asarray(rng.normal(scale=0.3, size=(R, T)), jnp.float32)
  advantages = jnp.asarray(rng.normal(size=R), jnp.float32)
  lengths = np.array([5, 1, 3, 4, 2, 5])
  mask = jnp.asarray(np.arange(T)[None] < lengths[:, None], jnp.float32)
  valid = jnp.array([True, True, True, False, True, True])
  kw = {'loss_agg': loss_agg, 'kl_coef': 0.05, 'kl_form': 'k3', 'pg_loss': pg_loss,
        'importance_level': importance_level, **LOSS_KW}

  def rows_loss(logp_rows, rows, denom):
    s, _, metrics = losses_lib.policy_loss(
        logp_rows, old_logp[rows], advantages[rows], mask[rows], valid[rows],
        ref_logp_RxT=ref_logp[rows], **kw)
    return s / jnp.maximum(denom, 1.0), metrics

  all_rows = slice(0, R)
  global_denom = losses_lib.loss_denominator(mask, valid, loss_agg, LOSS_KW['max_new_tokens'])
  (full_loss, full_metrics), full_grad = jax.value_and_grad(rows_loss, has_aux=True)(
      logp, all_rows, global_denom)

  micro_loss, micro_grads, micro_metrics = 0.0, [], None
  for rows in (slice(0, 2), slice(2, 6)):  # uneven split, padding row in the second
    (loss_i, metrics_i), grad_i = jax.value_and_grad(rows_loss, has_aux=True)(
        logp[rows], rows, global_denom)
    micro_loss += loss_i
    micro_grads.append(grad_i)
    micro_metrics = metrics_i if micro_metrics is None else losses_lib.merge_loss_metrics(
        micro_metrics, metrics_i)
  np.testing.assert_allclose(float(micro_loss), float(full_loss), rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(np.concatenate(micro_grads), np.asarray(full_grad), rtol=1e-5,
                             atol=1e-7)
  assert np.all(np.asarray(full_grad)[3] == 0.0)  # padding row gets no gradient
  for key, value in full_metrics.items():
    np.testing.assert_allclose(float(micro_metrics[key]), float(value), rtol=1e-5, err_msg=key)


def test_policy_loss_under_jit_matches_eager():
  logp, old_logp, advantages, mask, valid = _tiny_loss_example()
  for loss_agg in losses_lib.LOSS_AGGREGATIONS:
    jitted = jax.jit(functools.partial(losses_lib.policy_loss, loss_agg=loss_agg, **LOSS_KW))
    eager = losses_lib.policy_loss(logp, old_logp, advantages, mask, valid, loss_agg=loss_agg,
                             **LOSS_KW)
    jit_out = jitted(logp, old_logp, advantages, mask, valid)
    np.testing.assert_allclose(float(jit_out[0]), float(eager[0]), rtol=1e-6)
    np.testing.assert_allclose(float(jit_out[1]), float(eager[1]))
  # kl_coef traced: a runtime value, not a recompile.
  traced_kl = jax.jit(lambda coef: losses_lib.policy_loss(
      logp, old_logp, advantages, mask, valid, kl_coef=coef, ref_logp_RxT=logp - 0.1,
      loss_agg='token_mean', **LOSS_KW)[0])
  assert float(traced_kl(0.0)) == pytest.approx(-0.5, rel=1e-5)
  assert float(traced_kl(1.0)) > float(traced_kl(0.0))


def test_policy_gradient_step_moves_logprobs_by_advantage_sign():
  """A logits table as params (one-hot positions @ head); one SGD step on policy_loss."""
  V, T = 5, 3
  targets = jnp.array([[0, 1, 2], [3, 4, 3], [1, 1, 1]], jnp.int32)
  rewards = jnp.array([1.0, 0.0, 0.0])  # one group of 3: row 0 solved
  group_id = jnp.zeros(3, jnp.int32)
  valid = jnp.ones(3, bool)
  advantages, _ = losses_lib.compute_advantages(rewards, group_id, valid, 1, 'grpo')
  assert float(advantages[0]) > 0 and float(advantages[1]) < 0
  hidden = jnp.broadcast_to(jnp.eye(T), (3, T, T))  # position t -> row t of the table
  mask = jnp.ones((3, T))
  head = jnp.asarray(np.random.default_rng(10).normal(scale=0.1, size=(T, V)), jnp.float32)

  @jax.jit
  def seq_logp(head):
    logp, _ = losses_lib.token_logprobs(hidden, head, targets, chunk_size=2)
    return logp

  old_logp = seq_logp(head)

  def loss(head):
    s, d, _ = losses_lib.policy_loss(seq_logp(head), old_logp, advantages, mask, valid,
                               loss_agg='seq_mean_token_mean', **LOSS_KW)
    return s / d

  new_head = head - 0.5 * jax.grad(loss)(head)
  before = np.asarray(old_logp.sum(-1))
  after = np.asarray(seq_logp(new_head).sum(-1))
  assert after[0] > before[0]
  assert after[1] < before[1]


# --------------------------------------------------------------------------- numerical safety


@pytest.mark.parametrize('jit', [False, True])
def test_gspo_sequence_near_a_clip_bound_is_clipped_whole(jit):
  """log s_i within 1e-6 of log(1 + eps_high): every token of the row carries the same ratio
  bit for bit, so the row is clipped whole. Large |logp| (30) makes the left-to-right form
  (log s + logp) - logp round at logp's scale (ulp ~2e-6) and split the row."""
  eps_high = 4e-4
  bound = np.log1p(eps_high)
  logp = np.array([-30.123457, -0.0012345, -7.654321, -19.87654, -3.0, -25.5], np.float32)
  rows_logp, rows_old = [], []
  for offset in np.linspace(-1e-6, 1e-6, 21):  # 21 rows straddling the bound
    old = logp.astype(np.float64) - (bound + offset)  # mean log ratio = bound + offset
    rows_logp.append(logp)
    rows_old.append(old.astype(np.float32))
  logp_RxT, old_RxT = jnp.asarray(np.stack(rows_logp)), jnp.asarray(np.stack(rows_old))
  R, T = logp_RxT.shape
  mask_RxT = jnp.ones((R, T))
  ratio_fn = losses_lib.IMPORTANCE_RATIOS['sequence']
  loss_fn = functools.partial(losses_lib.policy_loss, clip_eps_low=3e-4, clip_eps_high=eps_high,
                              logratio_clamp=10.0, loss_agg='seq_mean_token_mean',
                              max_new_tokens=T, importance_level='sequence')
  if jit:
    ratio_fn, loss_fn = jax.jit(ratio_fn, static_argnums=3), jax.jit(loss_fn)
  log_ratio_RxT = np.asarray(ratio_fn(logp_RxT, old_RxT, mask_RxT, 10.0))
  assert np.all(log_ratio_RxT == log_ratio_RxT[:, :1])  # one forward value per sequence
  _, _, metrics = loss_fn(logp_RxT, old_RxT, jnp.ones(R), mask_RxT, jnp.ones(R, bool))
  clipped = float(metrics['clip_high_sum'])
  assert clipped % T == 0 and 0 < clipped < R * T  # whole rows only, on both sides
  # The gradient is unchanged by the parentheses: s_i * d logp_t / |y_i| inside the band.
  grad = jax.grad(lambda lp: loss_fn(lp, old_RxT, jnp.ones(R), mask_RxT,
                                     jnp.ones(R, bool))[0])(logp_RxT)
  s_R = np.exp(log_ratio_RxT[:, 0])
  inside = s_R <= 1 + eps_high
  np.testing.assert_allclose(np.asarray(grad)[inside], np.broadcast_to(
      -s_R[inside, None] / T, (inside.sum(), T)), rtol=1e-6)
  assert np.all(np.asarray(grad)[~inside] == 0.0)


def test_k3_kl_is_finite_far_from_the_reference():
  """ref - logp = 100 would overflow exp in float32 (inf loss, NaN gradient); the log-ratio
  is clamped to [-20, 20] first: KL = e^20 - 20 - 1, and no gradient beyond the clamp."""
  def loss(logp, ref):
    s, d, metrics = losses_lib.policy_loss(
        logp, logp, jnp.array([0.0]), jnp.ones((1, 2)), jnp.array([True]), kl_coef=0.1,
        ref_logp_RxT=ref, kl_form='k3', loss_agg='token_mean', **LOSS_KW)
    return s / d, metrics

  logp = jnp.array([[-100.5, -1.0]])
  ref = jnp.array([[-0.5, -1.5]])  # ref - logp = 100 and -0.5
  (value, metrics), grad = jax.value_and_grad(loss, has_aux=True)(logp, ref)
  k3_far = np.exp(20.0) - 20.0 - 1.0
  k3_near = np.exp(-0.5) + 0.5 - 1.0
  np.testing.assert_allclose(float(value), 0.1 * (k3_far + k3_near) / 2, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(grad), [[0.0, 0.1 * (1 - np.exp(-0.5)) / 2]], rtol=1e-5)
  assert np.isfinite(float(metrics['kl_sum']))
  # Reference far below: -100 clamps to -20: e^-20 + 20 - 1.
  (value, _), grad = jax.value_and_grad(loss, has_aux=True)(logp, jnp.array([[-200.5, -1.5]]))
  np.testing.assert_allclose(float(value), 0.1 * (np.exp(-20.0) + 19.0 + k3_near) / 2,
                             rtol=1e-6)
  assert np.all(np.isfinite(np.asarray(grad)))


@pytest.mark.parametrize('pg_loss, importance_level, packed', [
    ('ppo', 'token', False), ('ppo', 'sequence', False), ('cispo', 'token', False),
    ('ppo', 'token', True)])
@pytest.mark.parametrize('filler', [np.nan, np.inf, -np.inf])
def test_non_finite_fillers_in_masked_positions_leave_gradients_unchanged(
    pg_loss, importance_level, packed, filler):
  """NaN / inf in masked positions (logp, old_logp, ref_logp, entropy, a padding row's
  advantage, packed advantages and token weights) give the clean case's loss, metrics and
  gradient, bit for bit."""
  logp, old_logp, advantages, mask, valid = _tiny_loss_example()
  ref_logp = logp - 0.25
  entropy = np.full_like(logp, 0.5)
  off = (mask == 0) | ~valid[:, None]
  if packed:
    advantages = np.broadcast_to(advantages[:, None], logp.shape).copy()
  weight = np.full_like(logp, 0.5)

  def dirty(x):
    x = np.array(x, np.float32)
    if x.ndim == 2:
      x[off] = filler
    else:
      x[~valid] = filler
    return x

  def run(logp, old_logp, ref_logp, entropy, advantages, weight):
    def loss(logp):
      s, d, metrics = losses_lib.policy_loss(
          logp, old_logp, advantages, mask, valid, kl_coef=0.1, ref_logp_RxT=ref_logp,
          entropy_RxT=entropy, loss_agg='token_mean', pg_loss=pg_loss,
          importance_level=importance_level, token_weight_RxT=weight if packed else None,
          **LOSS_KW)
      return s / d, metrics
    return jax.value_and_grad(loss, has_aux=True)(jnp.asarray(logp))

  (clean_value, clean_metrics), clean_grad = run(logp, old_logp, ref_logp, entropy, advantages,
                                                 weight)
  (value, metrics), grad = run(*map(dirty, (logp, old_logp, ref_logp, entropy, advantages,
                                             weight)))
  assert np.all(np.isfinite(np.asarray(grad)))
  np.testing.assert_array_equal(np.asarray(grad), np.asarray(clean_grad))
  assert float(value) == float(clean_value)
  for key, clean in clean_metrics.items():
    assert float(metrics[key]) == float(clean), key


@pytest.mark.parametrize('policy_loss, importance_level, expected', [
    ('ppo', 'token', (0.2, 0.28)),  # DAPO's clip-higher
    ('ppo', 'sequence', (3e-4, 4e-4)),  # the GSPO paper
    ('cispo', 'token', (1.0, 0.28)),  # MiniMax-M1: no lower bound on the IS weight
    ('cispo', 'sequence', (1.0, 4e-4)),
])
def test_unset_clip_bounds_take_the_losses_defaults(policy_loss, importance_level, expected):
  assert losses_lib.resolve_clip_bounds(policy_loss, importance_level) == expected
  # A bound that is set wins, each independently (0.0 is a value, not "unset").
  assert losses_lib.resolve_clip_bounds(policy_loss, importance_level, 0.0, None) == (0.0,
                                                                                      expected[1])
  assert losses_lib.resolve_clip_bounds(policy_loss, importance_level, None, 0.5) == (expected[0],
                                                                                      0.5)
  with pytest.raises(ValueError, match="policy_loss='reinforce'"):
    losses_lib.resolve_clip_bounds('reinforce', importance_level)
