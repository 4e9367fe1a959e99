"""Tests for sgpo_jax/model/flops.py: hand-computed parameter counts and FLOPs, the ledger, XLA."""

import json

import jax
import jax.numpy as jnp
import pytest

from sgpo_jax.model import flops

# V=10, D=4, L=2, H=2, K=1, hd=2, F=8, qkv bias, untied lm head.
SMALL = dict(vocab_size=10, d_model=4, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=2,
             d_ff=8, qkv_bias=True, tie_embeddings=False)
# Per layer, by hand:
#   q 4*(2*2)=16, k 4*(1*2)=8, v 8, o (2*2)*4=16, gate/up/down 3*4*8=96 -> matmul 144
#   biases q 4 + k 2 + v 2 = 8; norms 4 + 4 = 8                         -> layer 160
# nonembed = 2*160 + final norm 4 = 324; embedding 10*4 = 40; lm_head 40; total 404.
# matmul_nonembed = 2*144 = 288.
# forward per token at context c: 2*288 + 2*4*10 + 4*2*2*2*c = 656 + 32c
#   c=3 -> 752, c=5 -> 816; train at c=5 -> 3*816 = 2448.


def test_param_counts_by_hand():
  assert flops.param_counts(SMALL) == {'total': 404, 'embedding': 40, 'nonembed': 324,
                                       'lm_head': 40, 'matmul_nonembed': 288}
  tied = dict(SMALL, qkv_bias=False, tie_embeddings=True)
  # nonembed = 2*(144 + 8) + 4 = 308; total = 308 + 40 = 348
  assert flops.param_counts(tied) == {'total': 348, 'embedding': 40, 'nonembed': 308,
                                      'lm_head': 0, 'matmul_nonembed': 288}


def test_default_config_param_count_by_hand():
  import ml_collections
  cfg = ml_collections.ConfigDict(dict(vocab_size=16, d_model=128, n_layers=4, n_heads=4,
                                       n_kv_heads=4, head_dim=32, d_ff=512, qkv_bias=False,
                                       tie_embeddings=True))
  # layer: 4 * 128*128 + 3 * 128*512 = 65536 + 196608 = 262144 (+ norms 256)
  # nonembed = 4 * 262400 + 128 = 1049728; total = + 16*128 = 1051776
  assert flops.param_counts(cfg)['nonembed'] == 1049728
  assert flops.param_counts(cfg)['total'] == 1051776


def test_flops_per_token_by_hand():
  assert flops.forward_flops_per_token(SMALL, 3) == 752
  assert flops.forward_flops_per_token(SMALL, 5) == 816
  assert flops.train_flops_per_token(SMALL, 5) == 2448


def test_lora_flops_by_hand():
  # r=2 on q and down: q fans 4 + 4 = 8, down 8 + 4 = 12 -> 2 layers * 2 * 20 = 80 adapter
  # params. forward at c=5: 816 + 2*80 = 976. Train, the base frozen (no weight gradients):
  # 4*288 + 4*4*10 + 3*(4*2*2*2*5) + 6*80 = 1152 + 160 + 480 + 480 = 2272, vs 3*976 = 2928.
  lora = dict(SMALL, lora_rank=2, lora_targets='q,down')
  assert flops.lora_params(lora) == 80 and flops.lora_params(SMALL) == 0
  assert flops.forward_flops_per_token(lora, 5) == 976
  assert flops.train_flops_per_token(lora, 5) == 2272
  assert flops.train_flops_per_token(dict(lora, lora_rank=0), 5) == 2448


def test_ledger_parts_add_up():
  ledger = flops.FlopsLedger(SMALL)
  # generation: per row a prefill of 3 prompt tokens into the 5-slot cache (attention over
  #   5, logits at the last position only: 3*(816 - 80) + 80 = 2288) + 2 decode steps at c=5
  #   (2*816 = 1632) = 3920; 4 rows -> 15680 computed, 3 valid -> 11760
  assert flops.prefill_flops(SMALL, 3, 5) == 2288 and flops.prefill_flops(SMALL, 0, 5) == 0
  assert ledger.add_generation('rollout', rows=4, prompt_len=3, new_tokens=2, valid_rows=3,
                               cache_len=5) == 15680
  ledger.add_generation('profile', rows=1, prompt_len=3, new_tokens=2, valid_rows=1,
                        cache_len=5)  # 3920
  # reference forward: 2 rows x 5 tokens x 816 = 8160
  ledger.add_forward('reference', rows=2, seq_len=5, valid_rows=2)
  # old-log-prob recompute (train.mu > 1): its own category, 1 row x 5 x 816 = 4080
  ledger.add_forward('old_logprob', rows=1, seq_len=5, valid_rows=1)
  # train: 2 passes x 5 tokens x 2448 = 24480 per row; 2 rows -> 48960, 1 valid -> 24480
  ledger.add_train(rows=2, seq_len=5, valid_rows=1, passes=2)
  ledger.add_forward('eval', rows=1, seq_len=5, valid_rows=1)  # 4080, not in total
  # total = 3920 + 15680 + 8160 + 4080 + 48960; useful = 3920 + 11760 + 8160 + 4080 + 24480
  assert ledger.as_dict() == {'profile': 3920, 'rollout': 15680, 'reference': 8160,
                              'old_logprob': 4080, 'train': 48960, 'total': 80800,
                              'useful_total': 52400, 'eval': 4080}
  assert ledger.useful('rollout') == 11760 and ledger.useful('train') == 24480
  parts = ledger.as_dict()
  assert parts['total'] == sum(parts[c] for c in ('profile', 'rollout', 'reference',
                                                  'old_logprob', 'train'))


def test_ledger_monotone_and_resumable():
  ledger = flops.FlopsLedger(SMALL)
  totals = []
  for step in range(5):
    ledger.add_generation('rollout', 8, 3, 2, valid_rows=step, cache_len=5)
    ledger.add_train(8, 5, valid_rows=step)
    totals.append((ledger.total, ledger.useful_total))
  assert totals == sorted(totals) and totals[0][0] > 0 and totals[0][1] == 0
  state = json.loads(json.dumps(ledger.state_dict()))
  resumed = flops.FlopsLedger(SMALL)
  resumed.load_state_dict(state)
  assert resumed.as_dict() == ledger.as_dict()
  with pytest.raises(ValueError, match="'warmup' is not one of"):
    ledger.add('warmup', 1.0, 1.0)
  with pytest.raises(ValueError, match='valid_rows=9'):
    ledger.add_train(8, 5, valid_rows=9)


def test_xla_flops_of_a_matmul():
  m, k, n = 8, 16, 4
  a = jnp.ones((m, k), jnp.float32)
  b = jnp.ones((k, n), jnp.float32)
  assert flops.xla_flops(jax.jit(jnp.matmul), a, b) == pytest.approx(2 * m * n * k)


def test_param_counts_match_the_model():
  model = pytest.importorskip('sgpo_jax.model.transformer')
  if not hasattr(model, 'abstract_params'):
    pytest.skip('model.abstract_params not available')
  import flax
  import numpy as np
  for fields in (SMALL, dict(SMALL, qkv_bias=False, tie_embeddings=True)):
    boxed = model.abstract_params(model.ModelConfig(**fields))
    leaves = jax.tree_util.tree_leaves(flax.linen.meta.unbox(boxed))
    assert sum(int(np.prod(x.shape)) for x in leaves) == flops.param_counts(fields)['total']
