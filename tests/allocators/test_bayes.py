"""Tests for sgpo_jax/allocators/sgpo_bayes/posterior.py: hand-computed Beta moments, decisions, G choice, revisits."""

import numpy as np
import pytest

from sgpo_jax.allocators import beta as beta_lib
from sgpo_jax.allocators.sgpo_bayes import posterior as posterior_lib


def test_expected_power_is_the_beta_function_ratio():
  # Beta(1, 1) = uniform: E[p^G] = 1 / (G + 1).
  assert posterior_lib.expected_power(1.0, 1.0, 4) == pytest.approx(1 / 5)
  # Beta(2, 1): E[p^2] = 2*3 / (3*4) = 1/2; E[(1-p)^2] = E[q^2], q ~ Beta(1, 2) = 1*2/(3*4).
  assert posterior_lib.expected_power(2.0, 1.0, 2) == pytest.approx(1 / 2)
  assert posterior_lib.expected_power(1.0, 2.0, 2) == pytest.approx(1 / 6)
  assert posterior_lib.expected_power(3.0, 7.0, 0) == 1.0
  with pytest.raises(ValueError, match='power=2.5'):
    posterior_lib.expected_power(1.0, 1.0, 2.5)


def test_informative_probability_counts_both_tails():
  assert posterior_lib.informative_probability(1.0, 1.0, 2) == pytest.approx(1 / 3)
  assert posterior_lib.informative_probability(1.0, 1.0, 4) == pytest.approx(3 / 5)
  assert posterior_lib.informative_probability(2.0, 1.0, 2) == pytest.approx(1 - 1 / 2 - 1 / 6)
  # Jeffreys prior after one success and one failure: Beta(1.5, 1.5), G = 4:
  # E[p^4] = 1.5*2.5*3.5*4.5 / (3*4*5*6) = 59.0625 / 360 on each side.
  assert posterior_lib.informative_probability(1.5, 1.5, 4) == pytest.approx(1 - 2 * 59.0625 / 360)
  # A sharp posterior at p = 0.6 approaches the point value 1 - 0.6^2 - 0.4^2 = 0.48 for a
  # pair: the success-side-only 1/p_hat rule would give this prompt G = 2.
  assert posterior_lib.informative_probability(6e5, 4e5, 2) == pytest.approx(0.48, abs=1e-5)
  # Vectorised over prompts.
  np.testing.assert_allclose(posterior_lib.informative_probability([1.0, 2.0], [1.0, 1.0], 2),
                             [1 / 3, 1 / 3])
  with pytest.raises(ValueError, match='> 0'):
    posterior_lib.informative_probability(0.0, 1.0, 4)


def test_update_posterior_decays_evidence_not_prior():
  a, b = posterior_lib.update_posterior(5.0, 2.0, 3, 1, prior_alpha=0.5, prior_beta=0.5, decay=0.5)
  # 0.5 + 0.5 * (5 - 0.5) + 3 and 0.5 + 0.5 * (2 - 0.5) + 1
  assert (float(a), float(b)) == pytest.approx((5.75, 2.25))
  a, b = posterior_lib.update_posterior(5.0, 2.0, 3, 1, prior_alpha=0.5, prior_beta=0.5)
  assert (float(a), float(b)) == (8.0, 3.0)
  with pytest.raises(ValueError, match='evidence_decay=1.5'):
    posterior_lib.update_posterior(1.0, 1.0, 0, 0, 0.5, 0.5, decay=1.5)


PROFILE = {'prior_alpha': 0.5, 'prior_beta': 0.5, 'group_size': 4, 'settle_high': 0.6,
           'settle_low': 0.35, 'min_samples': 1, 'max_samples': 4}


@pytest.mark.parametrize('n_correct,n_drawn,expected', [
    (1, 1, 'sample'),  # Beta(1.5, 0.5): P_inf(4) = 1 - 59.0625/120 - 6.5625/120 = 0.453
    (0, 1, 'sample'),
    (1, 2, 'learnable'),  # Beta(1.5, 1.5): 0.672 >= 0.6
    (2, 2, 'sample'),  # Beta(2.5, 0.5): 1 - 216.5625/360 - 6.5625/360 = 0.380
    (3, 3, 'skip'),  # Beta(3.5, 0.5): 1 - 563.0625/840 - 6.5625/840 = 0.322 <= 0.35
    (0, 3, 'skip'),
    (2, 3, 'learnable'),
])
def test_profile_decision_on_hand_made_counts(n_correct, n_drawn, expected):
  assert posterior_lib.profile_decision(n_correct, n_drawn, **PROFILE) == expected


def test_profile_decision_stops_at_max_samples_undecided():
  # settle_low below every reachable value: three equal outcomes stay undecided at max 3.
  kw = {**PROFILE, 'settle_low': 0.1, 'max_samples': 3}
  assert posterior_lib.profile_decision(3, 3, **kw) == 'undecided'
  assert posterior_lib.profile_decision(1, 2, **{**kw, 'min_samples': 3}) == 'sample'
  with pytest.raises(ValueError, match='profile_min_samples'):
    posterior_lib.profile_decision(0, 1, **{**PROFILE, 'min_samples': 5})


def test_choose_group_sizes_greedy_by_value_per_row():
  uniform = (1.0, 1.0)  # P_inf(4) = 3/5 (0.15 per row), P_inf(8) = 7/9 (grow: 0.044 per row)
  trivialish = (3.5, 0.5)  # P_inf(4) = 0.322 (0.080 per row)
  a = [uniform[0], uniform[0], trivialish[0]]
  b = [uniform[1], uniform[1], trivialish[1]]
  # 16 rows: add both uniform prompts, then the trivial-ish one (0.080 > 0.044), then grow the
  # first uniform prompt (earlier wins the tie with the second).
  assert posterior_lib.choose_group_sizes(a, b, (4, 8), 16).tolist() == [8, 4, 4]
  # A per-row floor of 0.1 keeps the trivial-ish prompt and every growth out.
  sizes = posterior_lib.choose_group_sizes(a, b, (4, 8), 16, min_value_per_row=0.1)
  assert sizes.tolist() == [4, 4, 0]
  # Counting rows with signal (exponent 1): growing to 8 (7/9*8 - 2.4)/4 = 0.956 beats adding
  # a new prompt (0.6), so both uniform prompts get 8 and nothing else fits.
  sizes = posterior_lib.choose_group_sizes(a, b, (4, 8), 16, signal_exponent=1.0)
  assert sizes.tolist() == [8, 8, 0]
  # Never over the row budget; an empty candidate list is fine.
  assert posterior_lib.choose_group_sizes(a, b, (4, 8), 7).tolist() == [4, 0, 0]
  assert posterior_lib.choose_group_sizes([], [], (4, 8), 16).tolist() == []


def test_revisit_probability_and_adaptation():
  np.testing.assert_allclose(posterior_lib.revisit_probability([1, 2, 3], base=0.25, floor=0.02),
                             [0.25, 0.0625, 0.02])
  assert posterior_lib.adapt_revisit_base(0.25, 0.6, target=0.3, step=0.05, floor=0.02) == \
      pytest.approx(0.30)
  assert posterior_lib.adapt_revisit_base(0.04, 0.1, target=0.3, step=0.05, floor=0.02) == \
      pytest.approx(0.02)
  with pytest.raises(ValueError, match='revisit_floor'):
    posterior_lib.revisit_probability(1, base=0.1, floor=0.2)


def test_revisit_probability_scales_with_pool_passes():
  # Per pass p = 0.25; half a pass: 1 - 0.75 ** 0.5; no training since the last draw: 0.
  np.testing.assert_allclose(posterior_lib.revisit_probability(1, 0.25, 0.02, pool_passes=0.5),
                             1 - 0.75 ** 0.5)
  assert posterior_lib.revisit_probability(1, 0.25, 0.02, pool_passes=0.0) == 0.0


def test_refill_lowers_cost_on_hand_computed_batches():
  # R = 64, train = 3 x generation. Half full after one round: cost (1 + 3) * 64 = 256 for
  # 32 rows (8.0 each); a round expected to add 30 rows: 320 / 62 = 5.16 < 8 -> refill.
  assert posterior_lib.refill_lowers_cost(32, 30.0, 1, 64, 3.0)
  # 60 rows after two rounds: 320 / 60 = 5.33 each; the round can add at most the 4 free
  # rows: 384 / 64 = 6.0 > 5.33 -> pad instead.
  assert not posterior_lib.refill_lowers_cost(60, 30.0, 2, 64, 3.0)
  # Break-even: 48 rows after one round (256 / 48 = 5.33); 16 more -> 320 / 64 = 5.0 pays,
  # 12 more -> 320 / 60 = 5.33 does not (strictly lower needed).
  assert posterior_lib.refill_lowers_cost(48, 16.0, 1, 64, 3.0)
  assert not posterior_lib.refill_lowers_cost(48, 12.0, 1, 64, 3.0)
  # Off (0) or an empty batch: always refill (DAPO's rule).
  assert posterior_lib.refill_lowers_cost(60, 0.0, 2, 64, 0.0)
  assert posterior_lib.refill_lowers_cost(0, 0.0, 3, 64, 3.0)
  with pytest.raises(ValueError, match='train_cost_per_row=-1'):
    posterior_lib.refill_lowers_cost(1, 1.0, 1, 64, -1.0)


def test_pooled_prior_of_an_unseen_stratum_is_the_base_prior_exactly():
  a_S, b_S = posterior_lib.pooled_prior([0.0, 3.0], [0.0, 1.0], [0, 1], 0.5, 0.5, 1.0, 8.0)
  assert a_S[0] == 0.5 and b_S[0] == 0.5


def test_pooled_prior_hand_computed():
  # Two prompts at 3/4 each, no pseudo-prompt: mu = (6 + 0.5) / (8 + 1); their rates agree
  # (spread 2 * 4 * (0.75 - mu)^2 < binomial noise 2 * mu (1 - mu)), so the between-prompt
  # variance is clipped to the largest concentration: Beta(8 mu, 8 (1 - mu)).
  mu = 6.5 / 9
  a_S, b_S = posterior_lib.pooled_prior([3, 3], [1, 1], [0, 0], 0.5, 0.5, 0.0, 8.0)
  np.testing.assert_allclose([a_S[0], b_S[0]], [8 * mu, 8 * (1 - mu)], rtol=1e-12)
  # One solved, one unsolved prompt: mu = 4.5 / 9 = 0.5, spread 4 * 0.25 * 2 = 2, noise
  # 2 * 0.25 = 0.5, tau2 = 1.5 / 8 = 0.1875 > 0.25 / 1.5: clipped to concentration 0.5,
  # a U-shaped Beta(0.25, 0.25).
  a_S, b_S = posterior_lib.pooled_prior([4, 0], [0, 4], [0, 0], 0.5, 0.5, 0.0, 8.0)
  np.testing.assert_allclose([a_S[0], b_S[0]], [0.25, 0.25], rtol=1e-12)
  # The first stratum again with one pseudo-prompt of Jeffreys (weights 2/3, 1/3): first
  # moment 2/3 mu + 1/3 * 0.5; second 2/3 * mu (8 mu + 1) / 9 + 1/3 * 0.375.
  m1 = 2 / 3 * mu + 1 / 3 * 0.5
  m2 = 2 / 3 * mu * (8 * mu + 1) / 9 + 1 / 3 * 0.375
  conc = m1 * (1 - m1) / (m2 - m1 ** 2) - 1
  a_S, b_S = posterior_lib.pooled_prior([3, 3], [1, 1], [0, 0], 0.5, 0.5, 1.0, 8.0)
  np.testing.assert_allclose([a_S[0], b_S[0]], [conc * m1, conc * (1 - m1)], rtol=1e-12)
  assert conc == pytest.approx(2.3785, abs=1e-4)


def test_pooled_prior_ranks_a_level_with_informative_prompts_above_a_solved_one():
  # Level 0: 20 prompts 4/4 and 2 at 2/4 (mostly trivial); level 1: 14 at 0/4 and 6 at 2/4
  # (mostly unsolved, a few learnable). An unseen prompt of level 1 is the better bet.
  s = np.r_[[4] * 20, [2] * 2, [0] * 14, [2] * 6]
  f = np.r_[[0] * 20, [2] * 2, [4] * 14, [2] * 6]
  a_S, b_S = posterior_lib.pooled_prior(s, f, np.r_[[0] * 22, [1] * 20], 0.5, 0.5, 1.0, 8.0)
  p_inf = posterior_lib.informative_probability(a_S, b_S, 4)
  assert a_S[0] / (a_S[0] + b_S[0]) > 0.9 and a_S[1] / (a_S[1] + b_S[1]) < 0.25
  assert p_inf[1] > p_inf[0] + 0.2


def test_pooled_prior_rejects_bad_input():
  with pytest.raises(ValueError, match='one entry per prompt'):
    posterior_lib.pooled_prior([1, 2], [0], [0, 0], 0.5, 0.5, 1.0, 8.0)
  with pytest.raises(ValueError, match='pooled_max_concentration'):
    posterior_lib.pooled_prior([1], [0], [0], 0.5, 0.5, 1.0, 0.1)
  with pytest.raises(ValueError, match='stratum ids'):
    posterior_lib.pooled_prior([1], [0], [-1], 0.5, 0.5, 1.0, 8.0)


def test_noise_factor_is_the_weighted_rate_noise_per_unit_of_evidence():
  # Weights (1, 1, 1, 1) -> 4/4; all scaled by 0.5 -> (4 * 0.25) / 2 = 0.5; unseen -> 1.
  w = np.array([4.0, 2.0, 0.0])
  w2 = np.array([4.0, beta_lib.decay_sq(4.0, 0.5), 0.0])
  np.testing.assert_allclose(beta_lib.noise_factor(w, w2), [1.0, 0.5, 1.0])


def test_pooled_prior_does_not_drift_as_uniformly_decayed_evidence_shrinks():
  """A level of 40 prompts seen 4 times each, half always solved, half never: its prompts are
  never informative, and the prior for an unseen one stays U-shaped (P_inf(G=4) 0.31) however
  far the evidence has decayed. Subtracting undecayed noise from the decayed spread instead
  drove it to Beta(27.6, 27.6) after 15 steps at 0.9 (P_inf 0.86: the most promising level)."""
  succ = np.r_[np.full(20, 4.0), np.zeros(20)]
  fail, strata = 4.0 - succ, np.zeros(40, int)
  p_inf = {}
  for steps in (0, 15):
    c = 0.9 ** steps
    noise = beta_lib.noise_factor(4.0 * c * np.ones(40),
                                       beta_lib.decay_sq(np.full(40, 4.0), c))
    a, b = posterior_lib.pooled_prior(succ * c, fail * c, strata, 1.0, 1.0, 1.0, 100.0, noise)
    p_inf[steps] = float(posterior_lib.informative_probability(a, b, 4)[0])
  assert p_inf[0] == pytest.approx(0.311, abs=1e-3)
  assert p_inf[15] == pytest.approx(p_inf[0], abs=1e-9)
  a, b = posterior_lib.pooled_prior(succ * 0.9 ** 15, fail * 0.9 ** 15, strata, 1.0, 1.0, 1.0,
                                    100.0)  # the counts read as undecayed samples
  assert float(posterior_lib.informative_probability(a, b, 4)[0]) > 0.8
