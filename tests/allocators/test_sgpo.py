"""Tests for sgpo_jax/allocators/sgpo/allocation.py: 1/p_hat buckets, allocation, fixed-shape row packing."""

import importlib.util
from fractions import Fraction

import numpy as np
import pytest

from sgpo_jax import configs
from sgpo_jax.allocators.sgpo import allocation as allocation_lib


def default_config():
  spec = importlib.util.spec_from_file_location('default_config', configs.path('default'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


def sgpo_cfg(**overrides):
  cfg = {'trivial_threshold': 0.75, 'unsolved_keep_fraction': 0.0, 'group_sizes': (2, 4, 8),
         'rounding': 'down', 'clip': True, 'curriculum': True}
  cfg.update(overrides)
  return cfg


# -- group sizes -----------------------------------------------------------------------

# the sGPO paper (arXiv 2606.08854) with N = 8: 1/8 -> 8, 2/8 -> 4, 3/8..6/8 -> 2 (7/8, 8/8 are trivial, filtered
# by allocate; the bucket rule alone gives them 2).
PAPER_TABLE = {1: 8, 2: 4, 3: 2, 4: 2, 5: 2, 6: 2, 7: 2, 8: 2}


@pytest.mark.parametrize('k,expected', sorted(PAPER_TABLE.items()))
def test_paper_table_exact_from_counts_and_floats(k, expected):
  assert allocation_lib.group_size_for(Fraction(k, 8)) == expected
  assert allocation_lib.group_size_for(k / 8) == expected


def test_paper_boundaries():
  assert allocation_lib.group_size_for(0.25) == 4  # 1/8 < p <= 1/4 -> 4
  assert allocation_lib.group_size_for(0.2500001) == 2  # p > 1/4 -> 2
  assert allocation_lib.group_size_for(0.125) == 8  # p <= 1/8 -> 8
  assert allocation_lib.group_size_for(0.1250001) == 4
  assert allocation_lib.group_size_for(1 / 3) == 2
  assert allocation_lib.group_size_for(0.01) == 8  # clipped to the largest size
  assert allocation_lib.group_size_for(0.0) == 8  # unsolved: largest size with clip


def test_rounding_up_and_nearest():
  up = [allocation_lib.group_size_for(Fraction(k, 8), rounding='up') for k in range(1, 9)]
  # 1/p = 8, 4, 2.67, 2, 1.6, 1.33, 1.14, 1 -> ceil pow2 8, 4, 4, 2, 2, 2, 2, 1 -> clip 2
  assert up == [8, 4, 4, 2, 2, 2, 2, 2]
  # nearest in log space: 1/0.3 = 3.33, log2 = 1.74 -> 4; 1/(3/8) = 2.67, log2 = 1.42 -> 2
  assert allocation_lib.group_size_for(0.3, rounding='nearest') == 4
  assert allocation_lib.group_size_for(Fraction(3, 8), rounding='nearest') == 2
  assert allocation_lib.group_size_for(0.1, rounding='nearest') == 8


def test_other_bucket_sets():
  sizes16 = (2, 4, 8, 16)
  assert allocation_lib.group_size_for(Fraction(1, 16), sizes16) == 16
  assert allocation_lib.group_size_for(Fraction(1, 10), sizes16) == 8
  assert allocation_lib.group_size_for(Fraction(1, 10), sizes16, rounding='up') == 16
  assert allocation_lib.group_size_for(Fraction(1, 100), sizes16) == 16
  gapped = (4, 16)
  assert allocation_lib.group_size_for(Fraction(1, 8), gapped) == 4  # down: largest member <= 8
  assert allocation_lib.group_size_for(Fraction(1, 8), gapped, rounding='up') == 16
  assert allocation_lib.group_size_for(Fraction(1, 8), gapped,
                                       rounding='nearest') == 16  # tie: larger
  assert allocation_lib.group_size_for(Fraction(1, 7), gapped, rounding='nearest') == 4  # 49 < 64
  assert allocation_lib.group_size_for(0.5, gapped) == 4  # clipped up to the smallest
  assert allocation_lib.group_size_for(Fraction(1, 16), gapped) == 16


def test_no_clip_gives_any_power_of_two():
  assert allocation_lib.group_size_for(1.0, clip=False) == 1
  assert allocation_lib.group_size_for(Fraction(1, 32), clip=False) == 32
  assert allocation_lib.group_size_for(Fraction(1, 20), clip=False) == 16
  assert allocation_lib.group_size_for(Fraction(1, 20), clip=False, rounding='up') == 32
  assert allocation_lib.group_size_for(0.3, clip=False, rounding='nearest') == 4
  with pytest.raises(ValueError, match='clip=False'):
    allocation_lib.group_size_for(0.0, clip=False)


def test_bad_inputs_raise():
  with pytest.raises(ValueError, match='outside'):
    allocation_lib.group_size_for(1.5)
  with pytest.raises(ValueError, match='rounding'):
    allocation_lib.group_size_for(0.5, rounding='floor')
  with pytest.raises(ValueError, match='group_sizes'):
    allocation_lib.group_size_for(0.5, group_sizes=())


def test_group_size_for_counts_equals_floats():
  """k/8 as exact counts (what a profile's QueryProfile holds) and as floats bucket alike."""
  k = np.arange(1, 9)
  profile = allocation_lib.QueryProfile.from_counts(k, 8)
  from_counts = [allocation_lib.group_size_for(p) for p in profile.fractions()]
  from_floats = [allocation_lib.group_size_for(p) for p in k / 8]
  expected = [PAPER_TABLE[int(i)] for i in k]
  assert from_counts == expected == from_floats
  with pytest.raises(ValueError, match='n_correct=9'):
    allocation_lib.QueryProfile.from_counts([9], [8])


# -- allocate --------------------------------------------------------------------------

# query:     0  1  2  3  4  5  6  7  8  9 10 11
N_CORRECT = [0, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 0]


def test_allocate_paper_defaults():
  alloc = allocation_lib.allocate(allocation_lib.QueryProfile.from_counts(N_CORRECT, 8),
                                  sgpo_cfg(), seed=0)
  assert [p.name for p in alloc.phases] == ['G2', 'G4', 'G8']
  members = {p.name: sorted(p.query_index.tolist()) for p in alloc.phases}
  assert members == {'G2': [3, 4, 5, 6], 'G4': [2, 10], 'G8': [1, 9]}
  for phase in alloc.phases:
    assert set(phase.group_size.tolist()) == {int(phase.name[1:])}
  np.testing.assert_array_equal(alloc.group_size, [0, 8, 4, 2, 2, 2, 2, 0, 0, 8, 4, 0])
  assert list(alloc.category) == ['unsolved', 'learnable', 'learnable', 'learnable',
                                  'learnable', 'learnable', 'learnable', 'trivial', 'trivial',
                                  'learnable', 'learnable', 'unsolved']
  assert (alloc.n_queries, alloc.n_trivial, alloc.n_unsolved, alloc.n_unsolved_kept) == (
      12, 2, 2, 0)
  assert alloc.group_size_histogram == {2: 4, 4: 2, 8: 2}
  np.testing.assert_array_equal(alloc.trivial_query_index, [7, 8])
  records = alloc.profile_records()
  assert records[2] == {'id': 2, 'n_samples': 8, 'n_correct': 2, 'p_hat': 0.25,
                        'group_size': 4, 'phase': 'G4', 'category': 'learnable'}
  assert records[7]['group_size'] == 0 and records[7]['phase'] == ''
  assert alloc.summary()['group_size_histogram'] == {'2': 4, '4': 2, '8': 2}


def test_allocate_accepts_default_config_and_p_hat_array():
  cfg = default_config().sgpo
  cfg.curriculum = True  # the default is the shuffled mix; the paper's phases on request
  alloc = allocation_lib.allocate(np.array(N_CORRECT) / 8, cfg, seed=0)
  assert [p.name for p in alloc.phases] == ['G2', 'G4', 'G8']
  assert sorted(alloc.phases[0].query_index[:4].tolist()) == [3, 4, 5, 6]


def test_allocate_keep_all_unsolved_joins_every_phase_at_its_g():
  alloc = allocation_lib.allocate({'n_correct': N_CORRECT, 'n_samples': 8},
                        sgpo_cfg(unsolved_keep_fraction=1.0), seed=0)
  for phase in alloc.phases:
    assert phase.n_unsolved == 2
    assert sorted(phase.query_index[-2:].tolist()) == [0, 11]
  assert alloc.n_unsolved_kept == 2
  assert alloc.group_size[0] == 2 and alloc.phase[0] == 'G2+G4+G8'
  assert alloc.group_size_histogram == {2: 6, 4: 4, 8: 4}


def test_allocate_alternative_rules():
  up = allocation_lib.allocate(allocation_lib.QueryProfile.from_counts(N_CORRECT, 8),
                               sgpo_cfg(rounding='up'))
  members = {p.name: sorted(p.query_index.tolist()) for p in up.phases}
  assert members == {'G2': [4, 5, 6], 'G4': [2, 3, 10], 'G8': [1, 9]}
  wide = allocation_lib.allocate(allocation_lib.QueryProfile.from_counts([1, 1, 3], [16, 8, 8]),
                       sgpo_cfg(group_sizes=(2, 4, 8, 16)))
  assert [p.name for p in wide.phases] == ['G2', 'G8', 'G16']
  strict = allocation_lib.allocate(allocation_lib.QueryProfile.from_counts([4, 5, 6], 8),
                         sgpo_cfg(trivial_threshold=0.5))
  assert strict.n_trivial == 2 and strict.phases[0].query_index.tolist() == [0]


def test_unsolved_subset_reproducible_and_differs_across_phases_and_seeds():
  n_correct = [0] * 400 + [1, 2, 3]
  cfg = sgpo_cfg(unsolved_keep_fraction=0.25)
  a = allocation_lib.allocate(allocation_lib.QueryProfile.from_counts(n_correct, 8), cfg, seed=7)
  b = allocation_lib.allocate(allocation_lib.QueryProfile.from_counts(n_correct, 8), cfg, seed=7)
  c = allocation_lib.allocate(allocation_lib.QueryProfile.from_counts(n_correct, 8), cfg, seed=8)
  subsets_a = [set(p.query_index[-p.n_unsolved:].tolist()) for p in a.phases]
  subsets_b = [set(p.query_index[-p.n_unsolved:].tolist()) for p in b.phases]
  subsets_c = [set(p.query_index[-p.n_unsolved:].tolist()) for p in c.phases]
  assert subsets_a == subsets_b
  assert subsets_a != subsets_c
  assert subsets_a[0] != subsets_a[1] != subsets_a[2]
  for subset in subsets_a:
    assert subset <= set(range(400))
    assert 60 <= len(subset) <= 140  # Binomial(400, 0.25): mean 100, sd ~8.7
  assert a.n_unsolved_kept == len(set().union(*subsets_a))


def test_mix_phase_each_query_at_own_g():
  cfg = sgpo_cfg(curriculum=False, unsolved_keep_fraction=1.0)
  alloc = allocation_lib.allocate(allocation_lib.QueryProfile.from_counts(N_CORRECT, 8), cfg,
                                  seed=3)
  assert [p.name for p in alloc.phases] == ['mix']
  phase = alloc.phases[0]
  sizes = dict(zip(phase.query_index.tolist(), phase.group_size.tolist()))
  assert sizes == {1: 8, 2: 4, 3: 2, 4: 2, 5: 2, 6: 2, 9: 8, 10: 4, 0: 8, 11: 8}
  assert phase.n_unsolved == 2
  other = allocation_lib.allocate(allocation_lib.QueryProfile.from_counts(N_CORRECT, 8), cfg,
                                  seed=4)
  assert phase.query_index.tolist() != other.phases[0].query_index.tolist()


def test_degenerate_inputs():
  with pytest.raises(ValueError, match='empty'):
    allocation_lib.allocate(allocation_lib.QueryProfile.from_counts([], 8), sgpo_cfg())
  with pytest.raises(ValueError, match='nothing to train on.*3 are trivial'):
    allocation_lib.allocate(allocation_lib.QueryProfile.from_counts([7, 8, 8], 8), sgpo_cfg())
  with pytest.raises(ValueError, match='unsolved_keep_fraction=0.0'):
    allocation_lib.allocate(allocation_lib.QueryProfile.from_counts([0, 0], 8), sgpo_cfg())
  all_unsolved = allocation_lib.allocate(allocation_lib.QueryProfile.from_counts([0, 0, 0], 8),
                               sgpo_cfg(unsolved_keep_fraction=1.0))
  assert [p.name for p in all_unsolved.phases] == ['G8']
  assert all_unsolved.phases[0].num_prompts == 3
  single = allocation_lib.allocate(allocation_lib.QueryProfile.from_counts([2], 8), sgpo_cfg())
  assert [(p.name, p.query_index.tolist()) for p in single.phases] == [('G4', [0])]
  with pytest.raises(ValueError, match='duplicates'):
    allocation_lib.allocate(allocation_lib.QueryProfile.from_counts([1, 2], 8, query_index=[5, 5]),
                            sgpo_cfg())

