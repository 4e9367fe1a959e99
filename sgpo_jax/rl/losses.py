"""GRPO math: group advantages by group id, chunked token log-probs, policy losses.

This module owns the pure, jit-compatible numerics of the RL update:

- `compute_advantages`: per-row advantages from rewards grouped by `group_id_R` with
  segment sums (never a reshape by G), so uneven groups, mixed-G batches and padding rows
  share one code path and one compilation. Estimators live in `ADVANTAGE_ESTIMATORS`.
- `token_logprobs`: log-prob of target tokens and predictive entropy, computed over chunks
  of T so a float32 [B, T, V] never materialises (forward or backward).
- `policy_loss`: a policy-gradient loss from `POLICY_LOSSES` ('ppo': clipped surrogate with
  separate low/high epsilon; 'cispo': stop-gradient clipped IS weight times log-prob) on an
  importance ratio from `IMPORTANCE_RATIOS` ('token'; 'sequence' = GSPO), optional KL to a
  reference, aggregated by a mode from `LOSS_AGGREGATIONS`, returned as (sum, denominator).
  Masked positions are set to 0 on the inputs before any arithmetic, so any filler there
  (NaN, inf) changes neither the loss nor its gradient. k3's log-ratio is clamped to +-20.
- `resolve_clip_bounds`: the clip bounds a config leaves unset (None) come from
  `DEFAULT_CLIP_BOUNDS`, keyed by (policy loss, importance level): GSPO and CISPO get their
  papers' bounds when chosen, a bound set by the user always wins.

Micro-batching contract (rows split across micro-batches, never tokens of one row):

    denom = loss_denominator(completion_mask_RxT, valid_R, loss_agg, max_new_tokens)  # full batch
    for each micro-batch i:
      loss_sum_i, _, metrics_i = policy_loss(..micro-batch i..)
      loss_i = loss_sum_i / jnp.maximum(denom, 1.0)        # global denominator, not the local one
      grads += grad(loss_i)                                 # sum, do not average
    metrics = merge_loss_metrics(metrics_0, metrics_1, ...); finalize_loss_metrics(metrics)

Sum over i of loss_sum_i / denom equals the full-batch loss_sum / denom exactly (up to float
summation order), for every aggregation mode, because every mode's sum is a sum over rows.
The train step itself lives elsewhere; this module holds only the math it calls.
"""

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

Array = jax.Array


# --------------------------------------------------------------------------- advantages


class GroupStats(NamedTuple):
  """Per-row view of the statistics of the row's group (valid rows only count)."""

  count_R: Array  # float32, number of valid rows in the row's group
  sum_R: Array  # float32, sum of the group's valid rewards
  mean_R: Array  # float32, mean of the group's valid rewards
  sq_dev_sum_R: Array  # float32, sum over the group of (r - mean)^2


def _grpo_advantages(rewards_R: Array, g: GroupStats, std_eps: float) -> Array:
  # Population std (ddof=0): a binary-reward group with success rate p gets advantages
  # (r - p) / sqrt(p (1 - p)), e.g. exactly +-1 for a G=2 group with one success; and it is
  # defined for every group size (ddof=1 would divide by zero at size 1).
  std_R = jnp.sqrt(g.sq_dev_sum_R / jnp.maximum(g.count_R, 1.0))
  return (rewards_R - g.mean_R) / (std_R + std_eps)


def _dr_grpo_advantages(rewards_R: Array, g: GroupStats, std_eps: float) -> Array:
  del std_eps
  return rewards_R - g.mean_R


def _rloo_advantages(rewards_R: Array, g: GroupStats, std_eps: float) -> Array:
  del std_eps
  others_R = jnp.maximum(g.count_R - 1.0, 1.0)
  leave_one_out_mean_R = (g.sum_R - rewards_R) / others_R
  return jnp.where(g.count_R > 1.0, rewards_R - leave_one_out_mean_R, 0.0)


AdvantageEstimator = Callable[[Array, GroupStats, float], Array]

# name -> fn(rewards_R, group_stats, std_eps) -> advantages_R. All-equal groups and padding
# rows are zeroed by `compute_advantages`, so estimators need not handle them.
ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {
    'grpo': _grpo_advantages,  # (r - mean) / (std_ddof0 + eps)
    'dr_grpo': _dr_grpo_advantages,  # r - mean
    'rloo': _rloo_advantages,  # r - mean of the other group members
}


def compute_advantages(
    rewards_R: Array,
    group_id_R: Array,
    valid_R: Array,
    num_groups: int,
    estimator: str = 'grpo',
    std_eps: float = 1e-6,
) -> tuple[Array, dict[str, Array]]:
  """Group-relative advantages for a batch of R rows.

  Args:
    rewards_R: float rewards, one per row (cast to float32).
    group_id_R: int group index per row in [0, num_groups). Rows of one group need not be
      contiguous; padding rows may carry any id. An out-of-range id on a valid row is a
      caller bug that this function cannot see under jit.
    valid_R: bool; False marks a padding row (advantage 0, counts nowhere).
    num_groups: static upper bound on the number of groups (e.g. R).
    estimator: a key of `ADVANTAGE_ESTIMATORS`: 'grpo' | 'dr_grpo' | 'rloo'.
    std_eps: added to the group std by 'grpo'.

  Returns:
    advantages_R (float32; exactly 0.0 for padding rows, size-1 groups and groups whose
    valid rewards are bitwise equal) and a dict of float32 scalars: frac_zero_std,
    num_valid_groups, num_valid_rows, reward_mean, advantage_{mean,std,min,max} (all over
    valid rows / groups with at least one valid row; 0 when there are none).
  """
  if estimator not in ADVANTAGE_ESTIMATORS:
    raise ValueError(
        f'estimator={estimator!r} is unknown; use one of {sorted(ADVANTAGE_ESTIMATORS)}.')
  if not isinstance(num_groups, int) or num_groups < 1:
    raise ValueError(
        f'num_groups={num_groups!r} must be a static Python int >= 1 (e.g. the row count R).')
  rewards_R = jnp.asarray(rewards_R, jnp.float32)
  group_id_R = jnp.asarray(group_id_R)
  valid_R = jnp.asarray(valid_R, bool)
  if rewards_R.ndim != 1 or group_id_R.shape != rewards_R.shape or (
      valid_R.shape != rewards_R.shape):
    raise ValueError(
        f'rewards_R {rewards_R.shape}, group_id_R {group_id_R.shape} and valid_R '
        f'{valid_R.shape} must all be the same 1-D shape [R].')

  valid_f_R = valid_R.astype(jnp.float32)
  # Padding rows go to an extra dump segment `num_groups`, so they touch no real group.
  seg_R = jnp.where(valid_R, group_id_R.astype(jnp.int32), num_groups)
  num_segments = num_groups + 1

  def seg_sum(x_R):
    return jax.ops.segment_sum(x_R, seg_R, num_segments)

  # where(), not multiply: a padding row's reward may be NaN garbage.
  rewards_R = jnp.where(valid_R, rewards_R, 0.0)
  count_S = seg_sum(valid_f_R)
  sum_S = seg_sum(rewards_R)
  mean_S = sum_S / jnp.maximum(count_S, 1.0)
  dev_R = rewards_R - mean_S[seg_R]
  sq_dev_sum_S = seg_sum(dev_R * dev_R)
  # Exact equality, not std > 0: float noise in the mean must not turn an all-equal group
  # into a tiny nonzero signal.
  max_S = jax.ops.segment_max(rewards_R, seg_R, num_segments)
  min_S = jax.ops.segment_min(rewards_R, seg_R, num_segments)
  exists_S = count_S > 0
  all_equal_S = exists_S & (max_S == min_S)

  group = GroupStats(
      count_R=count_S[seg_R], sum_R=sum_S[seg_R], mean_R=mean_S[seg_R],
      sq_dev_sum_R=sq_dev_sum_S[seg_R])
  raw_R = ADVANTAGE_ESTIMATORS[estimator](rewards_R, group, std_eps)
  advantages_R = jnp.where(valid_R & ~all_equal_S[seg_R], raw_R, 0.0)

  real_S = jnp.arange(num_segments) < num_groups
  num_valid_groups = jnp.sum(exists_S & real_S).astype(jnp.float32)
  num_zero_std = jnp.sum(all_equal_S & real_S).astype(jnp.float32)
  num_rows = jnp.sum(valid_f_R)
  safe_rows = jnp.maximum(num_rows, 1.0)
  adv_mean = jnp.sum(advantages_R) / safe_rows
  adv_var = jnp.sum(((advantages_R - adv_mean) * valid_f_R) ** 2) / safe_rows
  any_row = num_rows > 0
  stats = {
      'frac_zero_std': num_zero_std / jnp.maximum(num_valid_groups, 1.0),
      'num_valid_groups': num_valid_groups,
      'num_valid_rows': num_rows,
      'reward_mean': jnp.sum(rewards_R) / safe_rows,
      'advantage_mean': adv_mean,
      'advantage_std': jnp.sqrt(adv_var),
      'advantage_min': jnp.where(any_row, jnp.min(jnp.where(valid_R, advantages_R, jnp.inf)), 0.0),
      'advantage_max': jnp.where(any_row, jnp.max(jnp.where(valid_R, advantages_R, -jnp.inf)), 0.0),
  }
  return advantages_R, stats


# --------------------------------------------------------------------------- log-probs


LogitsFn = Callable[[Array, Array], Array]


def _default_logits(hidden_BxCxD: Array, head_DxV: Array) -> Array:
  return jnp.einsum('bcd,dv->bcv', hidden_BxCxD, head_DxV, preferred_element_type=jnp.float32)


def token_logprobs(
    hidden_BxTxD: Array,
    embed_or_head_DxV: Array,
    targets_BxT: Array,
    chunk_size: int = 0,
    logits_fn: LogitsFn | None = None,
) -> tuple[Array, Array]:
  """Log-prob of each target token and entropy of each predictive distribution.

  Args:
    hidden_BxTxD: final hidden states; position t predicts targets_BxT[:, t].
    embed_or_head_DxV: output projection [D, V] (for tied embeddings pass embed_VxD.T, or
      pass the [V, D] table with a `logits_fn` that contracts it).
    targets_BxT: int token ids.
    chunk_size: static; positions per chunk (0 = one chunk of all T). T need not be a
      multiple: the last chunk is padded internally and the padding dropped.
    logits_fn: optional fn(hidden_BxCxD, embed_or_head) -> logits_BxCxV, e.g. for logit
      soft-capping or a [V, D] table; the default is hidden @ head.

  Returns:
    (logp_BxT, entropy_BxT), both float32. The softmax runs in float32; with chunking
    only a [B, chunk, V] block of logits exists at a time, and each chunk is rematerialised
    in the backward pass so gradients do not store [B, T, V] either.
  """
  if not isinstance(chunk_size, int) or chunk_size < 0:
    raise ValueError(f'chunk_size={chunk_size!r} must be a static int >= 0 (0 = no chunking).')
  if hidden_BxTxD.ndim != 3 or targets_BxT.shape != hidden_BxTxD.shape[:2]:
    raise ValueError(
        f'hidden_BxTxD {hidden_BxTxD.shape} and targets_BxT {targets_BxT.shape} must be '
        f'[B, T, D] and [B, T].')
  logits_fn = logits_fn or _default_logits

  def chunk_stats(hidden_BxCxD, targets_BxC):
    logits_BxCxV = logits_fn(hidden_BxCxD, embed_or_head_DxV).astype(jnp.float32)
    logp_BxCxV = jax.nn.log_softmax(logits_BxCxV, axis=-1)
    logp_BxC = jnp.take_along_axis(logp_BxCxV, targets_BxC[..., None], axis=-1)[..., 0]
    p_BxCxV = jnp.exp(logp_BxCxV)
    # where(): a masked vocab entry (logit -inf) has p = 0 and must add 0, not 0 * -inf.
    entropy_BxC = -jnp.sum(p_BxCxV * jnp.where(p_BxCxV > 0, logp_BxCxV, 0.0), axis=-1)
    return logp_BxC, entropy_BxC

  B, T, D = hidden_BxTxD.shape
  if chunk_size == 0 or chunk_size >= T:
    return chunk_stats(hidden_BxTxD, targets_BxT)

  n = -(-T // chunk_size)
  pad = n * chunk_size - T
  hidden_BxPxD = jnp.pad(hidden_BxTxD, ((0, 0), (0, pad), (0, 0)))
  targets_BxP = jnp.pad(targets_BxT, ((0, 0), (0, pad)))
  hidden_NxBxCxD = hidden_BxPxD.reshape(B, n, chunk_size, D).transpose(1, 0, 2, 3)
  targets_NxBxC = targets_BxP.reshape(B, n, chunk_size).transpose(1, 0, 2)
  logp_NxBxC, entropy_NxBxC = jax.lax.map(
      jax.checkpoint(lambda xs: chunk_stats(*xs)), (hidden_NxBxCxD, targets_NxBxC))

  def unchunk(x_NxBxC):
    return x_NxBxC.transpose(1, 0, 2).reshape(B, n * chunk_size)[:, :T]

  return unchunk(logp_NxBxC), unchunk(entropy_NxBxC)


# --------------------------------------------------------------------------- policy loss


def _kl_k1(logp_RxT: Array, ref_logp_RxT: Array) -> Array:
  return logp_RxT - ref_logp_RxT


# k3's log-ratio ref - logp is clamped to [-K3_LOG_RATIO_CLAMP, K3_LOG_RATIO_CLAMP] before
# exp (as verl's low_var_kl): unclamped, exp overflows float32 once ref - logp > ~88 and the
# loss is inf. Beyond the clamp the token's KL term is constant (exp(20) - 21 = 4.85e8 at the
# top) and passes no gradient.
K3_LOG_RATIO_CLAMP = 20.0


def _kl_k3(logp_RxT: Array, ref_logp_RxT: Array) -> Array:
  # Schulman's k3: unbiased for KL(pi || ref) under samples from pi, and always >= 0.
  log_r_RxT = jnp.clip(ref_logp_RxT - logp_RxT, -K3_LOG_RATIO_CLAMP, K3_LOG_RATIO_CLAMP)
  return jnp.exp(log_r_RxT) - log_r_RxT - 1.0


KL_FORMS: dict[str, Callable[[Array, Array], Array]] = {'k1': _kl_k1, 'k3': _kl_k3}


class Sequences(NamedTuple):
  """Which sequence each token belongs to when a row holds several (packed rows):
  `seq_id_RxT` in [0, num_seqs), e.g. the padded row a packed token came from."""

  seq_id_RxT: Array
  num_seqs: int


def _token_log_ratio(logp_RxT: Array, old_logp_RxT: Array, mask_RxT: Array,
                     clamp: float, sequences: Sequences | None = None) -> Array:
  del mask_RxT, sequences
  return jnp.clip(logp_RxT - old_logp_RxT, -clamp, clamp)


def _sequence_log_ratio(logp_RxT: Array, old_logp_RxT: Array, mask_RxT: Array,
                        clamp: float, sequences: Sequences | None = None) -> Array:
  # GSPO (arXiv 2507.18071), in its GSPO-token form: every token of row i carries
  # log s_i = mean_t (logp - old_logp) over the row's counted tokens as its value, and
  # d logp_t as its gradient (sg(log s_i) + logp_t - sg(logp_t)). With one advantage per
  # row (ours) and 'seq_mean_token_mean' aggregation this is plain GSPO, value and gradient:
  # d/dθ s_i = s_i * mean_t d logp_t. Clipping then acts on s_i: a whole sequence is in or out.
  # The parentheses matter: (logp - sg(logp)) is exactly 0.0 in the forward pass, so every
  # token of row i carries log s_i bit for bit. Left to right, (log s_i + logp_t) - logp_t
  # rounds at logp_t's scale (ulp ~2e-6 at |logp| = 30 in float32), and tokens of a sequence
  # near a clip bound would land on different sides of it.
  # Packed rows (`sequences` given): the mean runs over each sequence's tokens by segment
  # sums over its id, wherever in the buffer its tokens lie, as compute_advantages does.
  on_RxT = mask_RxT > 0
  diff_RxT = jnp.where(on_RxT, logp_RxT - old_logp_RxT, 0.0)
  sg = jax.lax.stop_gradient
  if sequences is None:
    count_R = jnp.maximum(jnp.sum(mask_RxT, axis=-1), 1.0)
    log_s_R = jnp.clip(jnp.sum(diff_RxT, axis=-1) / count_R, -clamp, clamp)
    return sg(log_s_R)[:, None] + (logp_RxT - sg(logp_RxT))
  seq_id, num_seqs = sequences.seq_id_RxT.reshape(-1), sequences.num_seqs
  count_S = jnp.maximum(jax.ops.segment_sum(mask_RxT.reshape(-1), seq_id, num_seqs), 1.0)
  sum_S = jax.ops.segment_sum(diff_RxT.reshape(-1), seq_id, num_seqs)
  log_s_S = jnp.clip(sum_S / count_S, -clamp, clamp)
  return sg(log_s_S)[sequences.seq_id_RxT] + (logp_RxT - sg(logp_RxT))


# name -> fn(logp_RxT, old_logp_RxT, mask_RxT, logratio_clamp, sequences=None) -> log-ratio_RxT
# whose exp is the importance ratio each token's loss sees (gradient included).
IMPORTANCE_RATIOS: dict[str, Callable[..., Array]] = {
    'token': _token_log_ratio,  # r_t = pi(y_t) / pi_old(y_t)  (PPO / GRPO / DAPO)
    'sequence': _sequence_log_ratio,  # s_i = (pi(y) / pi_old(y))^(1/|y|)  (GSPO)
}


class PGTerms(NamedTuple):
  """A policy loss's per-token value and where its clipping was active (for metrics)."""

  loss_RxT: Array
  clipped_low_RxT: Array  # bool
  clipped_high_RxT: Array  # bool


def _ppo_loss(ratio_RxT: Array, logp_RxT: Array, adv_Rx1: Array, eps_low: float,
              eps_high: float) -> PGTerms:
  del logp_RxT
  clipped_RxT = jnp.clip(ratio_RxT, 1.0 - eps_low, 1.0 + eps_high)
  return PGTerms(
      loss_RxT=-jnp.minimum(ratio_RxT * adv_Rx1, clipped_RxT * adv_Rx1),
      clipped_low_RxT=(ratio_RxT < 1.0 - eps_low) & (adv_Rx1 < 0),
      clipped_high_RxT=(ratio_RxT > 1.0 + eps_high) & (adv_Rx1 > 0))


def _cispo_loss(ratio_RxT: Array, logp_RxT: Array, adv_Rx1: Array, eps_low: float,
                eps_high: float) -> PGTerms:
  # MiniMax-M1 (arXiv 2506.13585): -sg(clip(r, 1 - eps_low, 1 + eps_high)) * A * log pi.
  # Every token keeps a gradient (no token is dropped as in PPO); only its weight is capped.
  # The paper sets no lower bound (eps_low large, e.g. 1.0 -> bound 0) and tunes eps_high.
  weight_RxT = jax.lax.stop_gradient(jnp.clip(ratio_RxT, 1.0 - eps_low, 1.0 + eps_high))
  return PGTerms(
      loss_RxT=-weight_RxT * adv_Rx1 * logp_RxT,
      clipped_low_RxT=ratio_RxT < 1.0 - eps_low,
      clipped_high_RxT=ratio_RxT > 1.0 + eps_high)


PolicyLoss = Callable[[Array, Array, Array, float, float], PGTerms]

# name -> fn(ratio_RxT, logp_RxT, adv_Rx1, clip_eps_low, clip_eps_high) -> PGTerms.
POLICY_LOSSES: dict[str, PolicyLoss] = {
    'ppo': _ppo_loss,  # -min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)
    'cispo': _cispo_loss,  # -sg(clip(r, 1 - eps_low, 1 + eps_high)) A log pi
}


# (policy_loss, importance_level) -> (clip_eps_low, clip_eps_high) used when the config leaves
# a bound unset (None). One table, so choosing GSPO or CISPO brings its paper's bounds:
DEFAULT_CLIP_BOUNDS: dict[tuple[str, str], tuple[float, float]] = {
    # PPO ratio clip with DAPO's clip-higher (arXiv 2503.14476).
    ('ppo', 'token'): (0.2, 0.28),
    # GSPO (arXiv 2507.18071): the sequence ratio moves ~1e-3 per update; the paper clips it
    # at 3e-4 / 4e-4.
    ('ppo', 'sequence'): (3e-4, 4e-4),
    # CISPO (MiniMax-M1, arXiv 2506.13585): no lower bound on the IS weight (eps_low = 1.0 ->
    # bound 0); the paper tunes only the upper bound and publishes no value, so 0.28 (the
    # project's presets, Trinity-RFT's default) caps the weight at 1.28.
    ('cispo', 'token'): (1.0, 0.28),
    # CISPO on GSPO's sequence ratio: no lower bound, GSPO's sequence-sized upper bound.
    ('cispo', 'sequence'): (1.0, 4e-4),
}


def resolve_clip_bounds(policy_loss: str, importance_level: str,
                        clip_eps_low: float | None = None,
                        clip_eps_high: float | None = None) -> tuple[float, float]:
  """(clip_eps_low, clip_eps_high): each bound as set, or DEFAULT_CLIP_BOUNDS' when None."""
  key = (policy_loss, importance_level)
  if key not in DEFAULT_CLIP_BOUNDS:
    raise ValueError(f'policy_loss={policy_loss!r} with importance_level={importance_level!r} '
                     f'has no default clip bounds; use one of {sorted(DEFAULT_CLIP_BOUNDS)}.')
  default_low, default_high = DEFAULT_CLIP_BOUNDS[key]
  return (float(default_low if clip_eps_low is None else clip_eps_low),
          float(default_high if clip_eps_high is None else clip_eps_high))


class LossAggregation(NamedTuple):
  """How per-token losses become (sum, denominator); every sum is a sum over rows.

  `token_weight` is the same aggregation as each token's share of its row, for layouts where
  a row's tokens are not one array row (packed buffers): sum(loss * weight) / denominator.
  Both take count_R, the row's counted tokens (whole numbers, so every layout's denominator
  is the same float exactly).
  """

  row_sum: Callable[[Array, Array, int], Array]  # (loss_RxT*mask, mask_RxT, max_new) -> [R]
  token_weight: Callable[[Array, Array, int], Array]  # (count_R, valid_f_R, max_new) -> [R]
  denominator: Callable[[Array, Array], Array]  # (count_R, valid_f_R) -> scalar


LOSS_AGGREGATIONS: dict[str, LossAggregation] = {
    # DAPO: mean over all valid completion tokens in the (global) batch.
    'token_mean': LossAggregation(
        row_sum=lambda l_RxT, m_RxT, max_new: jnp.sum(l_RxT, axis=-1),
        token_weight=lambda c_R, v_R, max_new: v_R,
        denominator=lambda c_R, v_R: jnp.sum(c_R * v_R)),
    # GRPO: mean over valid sequences of each sequence's token mean.
    'seq_mean_token_mean': LossAggregation(
        row_sum=lambda l_RxT, m_RxT, max_new: (
            jnp.sum(l_RxT, axis=-1) / jnp.maximum(jnp.sum(m_RxT, axis=-1), 1.0)),
        token_weight=lambda c_R, v_R, max_new: v_R / jnp.maximum(c_R, 1.0),
        denominator=lambda c_R, v_R: jnp.sum(v_R)),
    # Dr. GRPO: each sequence's token sum over the constant max_new_tokens, mean over sequences.
    'seq_mean_token_sum_norm': LossAggregation(
        row_sum=lambda l_RxT, m_RxT, max_new: jnp.sum(l_RxT, axis=-1) / max_new,
        token_weight=lambda c_R, v_R, max_new: v_R / max_new,
        denominator=lambda c_R, v_R: jnp.sum(v_R)),
}


def _check_loss_agg(loss_agg: str, max_new_tokens: int) -> LossAggregation:
  if loss_agg not in LOSS_AGGREGATIONS:
    raise ValueError(f'loss_agg={loss_agg!r} is unknown; use one of {sorted(LOSS_AGGREGATIONS)}.')
  if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
    raise ValueError(
        f'max_new_tokens={max_new_tokens!r} must be a static int >= 1 (the sampler length).')
  return LOSS_AGGREGATIONS[loss_agg]


def _token_mask(completion_mask_RxT: Array, valid_R: Array) -> Array:
  return jnp.asarray(completion_mask_RxT, jnp.float32) * jnp.asarray(valid_R, jnp.float32)[:, None]


def _masked_finite(on_RxT: Array, x_RxT: Array) -> Array:
  """float32 x where a token counts, 0.0 elsewhere (whatever the filler: NaN, inf)."""
  return jnp.where(on_RxT, jnp.asarray(x_RxT, jnp.float32), 0.0)


def loss_denominator(
    completion_mask_RxT: Array, valid_R: Array, loss_agg: str, max_new_tokens: int = 1,
) -> Array:
  """The denominator of `loss_agg`; compute it once on the FULL batch for micro-batching.

  token_mean: number of valid completion tokens; the sequence modes: number of valid rows
  (a valid row with an empty completion mask still counts, contributing 0 to the sum).
  Divide by jnp.maximum(denominator, 1.0) so an all-padding batch gives loss 0, not NaN.
  """
  agg = _check_loss_agg(loss_agg, max_new_tokens)
  mask_RxT = _token_mask(completion_mask_RxT, valid_R)
  return agg.denominator(jnp.sum(mask_RxT, axis=-1), jnp.asarray(valid_R, jnp.float32))


def token_weights(completion_len_R: Array, valid_R: Array, loss_agg: str,
                  max_new_tokens: int = 1) -> tuple[Array, Array]:
  """(weight_R, denominator): `loss_agg` as each token's share of its row's aggregation, from
  the rows' completion lengths; the denominator equals `loss_denominator`'s (whole numbers)."""
  agg = _check_loss_agg(loss_agg, max_new_tokens)
  valid_f_R = jnp.asarray(valid_R, jnp.float32)
  count_R = jnp.asarray(completion_len_R, jnp.float32)
  return (agg.token_weight(count_R, valid_f_R, max_new_tokens),
          agg.denominator(count_R, valid_f_R))


def policy_loss(
    logp_RxT: Array,
    old_logp_RxT: Array,
    advantages_R: Array,
    completion_mask_RxT: Array,
    valid_R: Array,
    *,
    clip_eps_low: float,
    clip_eps_high: float,
    logratio_clamp: float,
    loss_agg: str,
    max_new_tokens: int,
    kl_coef: float = 0.0,
    ref_logp_RxT: Array | None = None,
    kl_form: str = 'k3',
    entropy_RxT: Array | None = None,
    pg_loss: str = 'ppo',
    importance_level: str = 'token',
    token_weight_RxT: Array | None = None,
    sequences: Sequences | None = None,
) -> tuple[Array, Array, dict[str, Array]]:
  """Policy-gradient loss (+ optional KL to a reference) as (sum, denominator).

  Per token: ratio = exp(IMPORTANCE_RATIOS[importance_level]) -- 'token': exp(clip(logp -
  old_logp, -logratio_clamp, logratio_clamp)) (the clamp keeps exp finite; beyond it the
  token gets no gradient); 'sequence' (GSPO): the row's length-normalised ratio s_i =
  exp(clip(mean_t(logp - old_logp))) on every token, with gradient s_i * d logp_t.
  Then loss = POLICY_LOSSES[pg_loss] + kl_coef * kl(logp, ref_logp): 'ppo': -min(ratio * A,
  clip(ratio, 1 - clip_eps_low, 1 + clip_eps_high) * A); 'cispo': -sg(clip(ratio, 1 -
  clip_eps_low, 1 + clip_eps_high)) * A * logp. Tokens count where completion_mask_RxT and
  valid_R are both true. Both ratios and both losses are per row, so micro-batching by rows
  stays exact.

  Packed rows (several sequences per row): pass per-token advantages [R, T] and
  `token_weight_RxT` (each token's share of its sequence's aggregation, e.g. 1 / its
  sequence's token count for seq_mean_token_mean) with loss_agg='token_mean'; the loss sum
  is then the same as the padded layout's. Pass `sequences` (each token's sequence id) so the
  'sequence' importance ratio averages over a sequence rather than over a packed row.

  KL is added when ref_logp_RxT is given (kl_coef may then be traced); kl_coef == 0.0 as a
  Python number skips it. kl_form: 'k1' = logp - ref, 'k3' = exp(ref - logp) - (ref - logp) - 1.

  Returns:
    loss_sum: sum over rows of the `loss_agg` numerator; final loss = loss_sum / denom.
    loss_denom: this batch's denominator (= `loss_denominator` of these rows). Under
      micro-batching, divide each micro-batch's loss_sum by the full batch's denominator.
    metrics: sums, counts, max and min (gradient-stopped) that combine exactly across
      micro-batches with `merge_loss_metrics`; `finalize_loss_metrics` turns them into means.
  """
  agg = _check_loss_agg(loss_agg, max_new_tokens)
  if pg_loss not in POLICY_LOSSES:
    raise ValueError(f'pg_loss={pg_loss!r} is unknown; use one of {sorted(POLICY_LOSSES)}.')
  if importance_level not in IMPORTANCE_RATIOS:
    raise ValueError(f'importance_level={importance_level!r} is unknown; use one of '
                     f'{sorted(IMPORTANCE_RATIOS)}.')
  if kl_form not in KL_FORMS:
    raise ValueError(f'kl_form={kl_form!r} is unknown; use one of {sorted(KL_FORMS)}.')
  kl_is_zero = isinstance(kl_coef, (int, float)) and kl_coef == 0.0
  if ref_logp_RxT is None and not kl_is_zero:
    raise ValueError(f'kl_coef={kl_coef!r} needs ref_logp_RxT; pass it or set kl_coef=0.0.')
  use_kl = ref_logp_RxT is not None and not kl_is_zero

  valid_f_R = jnp.asarray(valid_R, jnp.float32)
  mask_RxT = _token_mask(completion_mask_RxT, valid_R)
  on_RxT = mask_RxT > 0
  # Masked positions may hold any filler (inf log-probs of padding, NaN advantages of padding
  # rows). They are replaced by 0 with where() on the INPUTS, before any arithmetic: masking
  # only the output (where(mask, loss, 0)) gives the right value but a NaN gradient, because
  # the backward pass multiplies the zero cotangent by the filler's NaN/inf derivative.
  finite = functools.partial(_masked_finite, on_RxT)
  logp_RxT = finite(logp_RxT)
  old_logp_RxT = finite(old_logp_RxT)
  adv_Rx1 = jnp.asarray(advantages_R, jnp.float32)
  if adv_Rx1.ndim == 2:  # [R, T] when packed
    adv_Rx1 = finite(adv_Rx1)
  else:
    adv_Rx1 = jnp.where(valid_f_R > 0, adv_Rx1, 0.0)[:, None]
  if token_weight_RxT is not None:
    token_weight_RxT = finite(token_weight_RxT)

  log_ratio_RxT = logp_RxT - old_logp_RxT
  ratio_RxT = jnp.exp(IMPORTANCE_RATIOS[importance_level](logp_RxT, old_logp_RxT, mask_RxT,
                                                          logratio_clamp, sequences))
  terms = POLICY_LOSSES[pg_loss](ratio_RxT, logp_RxT, adv_Rx1, clip_eps_low, clip_eps_high)
  pg_RxT = terms.loss_RxT
  token_loss_RxT = pg_RxT
  if use_kl:
    kl_RxT = KL_FORMS[kl_form](logp_RxT, finite(ref_logp_RxT))
    token_loss_RxT = token_loss_RxT + kl_coef * kl_RxT

  # where(), not multiply: a padding token holding inf/NaN garbage must not leak into sums.
  masked_loss_RxT = jnp.where(mask_RxT > 0, token_loss_RxT, 0.0)
  if token_weight_RxT is not None:
    masked_loss_RxT = masked_loss_RxT * token_weight_RxT
  loss_sum = jnp.sum(jnp.where(valid_f_R > 0, agg.row_sum(masked_loss_RxT, mask_RxT,
                                                           max_new_tokens), 0.0))
  loss_denom = agg.denominator(jnp.sum(mask_RxT, axis=-1), valid_f_R)

  sg = jax.lax.stop_gradient

  def masked_sum(x_RxT):
    return jnp.sum(jnp.where(on_RxT, sg(x_RxT), 0.0))

  metrics = {
      'token_count': jnp.sum(mask_RxT),
      'seq_count': jnp.sum(valid_f_R),
      'clip_low_sum': masked_sum(terms.clipped_low_RxT.astype(jnp.float32)),
      'clip_high_sum': masked_sum(terms.clipped_high_RxT.astype(jnp.float32)),
      # k2 = 0.5 (log new - log old)^2 on the unclamped log-ratio: finite for any ratio.
      'approx_kl_sum': masked_sum(0.5 * log_ratio_RxT ** 2),
      'ratio_sum': masked_sum(ratio_RxT),
      'ratio_max': jnp.max(jnp.where(on_RxT, sg(ratio_RxT), -jnp.inf)),
      'ratio_min': jnp.min(jnp.where(on_RxT, sg(ratio_RxT), jnp.inf)),
      'pg_loss_sum': masked_sum(pg_RxT),
  }
  if use_kl:
    metrics['kl_sum'] = masked_sum(kl_RxT)
  if entropy_RxT is not None:
    metrics['entropy_sum'] = masked_sum(finite(entropy_RxT))
  return loss_sum, loss_denom, metrics


def merge_loss_metrics(a: dict[str, Array], b: dict[str, Array]) -> dict[str, Array]:
  """Combines two micro-batches' `policy_loss` metrics: *_max by max, *_min by min, else add."""
  if a.keys() != b.keys():
    raise ValueError(f'metric keys differ: {sorted(a)} vs {sorted(b)}; use the same KL/entropy '
                     f'arguments for every micro-batch.')
  merged = {}
  for key, value in a.items():
    if key.endswith('_max'):
      merged[key] = jnp.maximum(value, b[key])
    elif key.endswith('_min'):
      merged[key] = jnp.minimum(value, b[key])
    else:
      merged[key] = value + b[key]
  return merged


def finalize_loss_metrics(metrics: dict[str, Array]) -> dict[str, Array]:
  """Token means from (merged) `policy_loss` metrics: clip_frac_low/high, approx_kl,
  ratio_mean/max/min, pg_loss_token_mean, and kl_mean / entropy_mean when present."""
  tokens = metrics['token_count']
  safe_tokens = jnp.maximum(tokens, 1.0)
  any_token = tokens > 0
  out = {
      'clip_frac_low': metrics['clip_low_sum'] / safe_tokens,
      'clip_frac_high': metrics['clip_high_sum'] / safe_tokens,
      'approx_kl': metrics['approx_kl_sum'] / safe_tokens,
      'ratio_mean': metrics['ratio_sum'] / safe_tokens,
      'ratio_max': jnp.where(any_token, metrics['ratio_max'], 0.0),
      'ratio_min': jnp.where(any_token, metrics['ratio_min'], 0.0),
      'pg_loss_token_mean': metrics['pg_loss_sum'] / safe_tokens,
      'token_count': tokens,
      'seq_count': metrics['seq_count'],
  }
  if 'kl_sum' in metrics:
    out['kl_mean'] = metrics['kl_sum'] / safe_tokens
  if 'entropy_sum' in metrics:
    out['entropy_mean'] = metrics['entropy_sum'] / safe_tokens
  return out
