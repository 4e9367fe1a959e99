"""Analytic FLOPs ledger for the Llama/Qwen2 decoder in transformer.py.

sGPO (arXiv 2606.08854) compares total training compute, profiling included; the
conventions below are this project's.

Owns the FLOPs accounting of a run:
- `param_counts`: total / embedding / non-embedding / matmul parameter counts.
- `forward_flops_per_token`, `train_flops_per_token`: per-token FLOPs with the attention
  term over the FULL static context (our attention computes over the whole static length:
  pass T for a full [B, T] forward, the KV-cache size for a decode step); `prefill_flops`: a
  sampler's prompt prefill, whose LM head runs at the last position only.
- `FlopsLedger`: cumulative FLOPs per category, both 'computed' (every row, padding
  included: what the hardware does) and 'useful' (valid rows only for the static layouts,
  real tokens only for the continuous sampler and the packed train step), plus token
  counts per category (token slots computed vs real tokens in them): the useful-token share.
- `xla_flops`: XLA's own cost analysis of a jitted function, for cross-checks.

Per token: forward = 2 * P_matmul_nonembed + 2 * D * V (lm-head logits) +
4 * L * H * hd * context (QK^T and AV) + 2 * A (LoRA adapters, A = their parameters);
training = 3 * forward (forward + backward). With LoRA (model.lora_rank > 0) the frozen base
gets no weight gradient, so training = forward + backward through the activations (the
forward again, attention twice) + the adapters' weight gradients (2 * A):
4 * P_matmul_nonembed + 4 * D * V + 3 * attention + 6 * A.
Norms, biases, softmax, rotary and the embedding gather are not counted (O(D) per token).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sgpo_jax.model import lora_settings

# 'old_logprob': the behaviour policy's log-probs recomputed once per batch when train.mu > 1
# (a forward pass over [R, T]); 'reference': the KL reference model's forward pass.
CATEGORIES = ('profile', 'rollout', 'reference', 'old_logprob', 'train', 'eval')
# Eval is reported on its own and left out of `total`: the claim is about the compute to
# *train* to an accuracy, and eval frequency is a measurement choice that differs by run.
GENERATION_CATEGORIES = ('profile', 'rollout', 'eval')  # the sampler's work
TOTAL_CATEGORIES = ('profile', 'rollout', 'reference', 'old_logprob', 'train')


def _field(model_cfg: Any, name: str) -> Any:
  if isinstance(model_cfg, Mapping):
    return model_cfg[name]
  return getattr(model_cfg, name)


def _dims(model_cfg: Any) -> dict[str, Any]:
  dims = {name: _field(model_cfg, name) for name in (
      'vocab_size', 'd_model', 'n_layers', 'n_heads', 'n_kv_heads', 'head_dim', 'd_ff',
      'qkv_bias', 'tie_embeddings')}
  # Optional: mappings written before QK-norm existed lack the field (it then is off).
  has_qk_norm = (model_cfg.get('qk_norm', False) if isinstance(model_cfg, Mapping)
                 else getattr(model_cfg, 'qk_norm', False))
  dims['qk_norm'] = bool(has_qk_norm)
  get = (model_cfg.get if isinstance(model_cfg, Mapping)
         else lambda k, d: getattr(model_cfg, k, d))
  dims['lora_rank'] = int(get('lora_rank', 0) or 0)
  dims['lora_targets'] = lora_settings.parse_targets(get('lora_targets', ()) or ())
  return dims


def lora_params(model_cfg: Any) -> int:
  """Adapter parameters: r * (fan_in + fan_out) per target projection per layer (0 without
  LoRA). Each is also its per-token matmul count: x A then (x A) B."""
  d = _dims(model_cfg)
  if d['lora_rank'] == 0:
    return 0
  dm, ff = int(d['d_model']), int(d['d_ff'])
  q, kv = int(d['n_heads']) * int(d['head_dim']), int(d['n_kv_heads']) * int(d['head_dim'])
  fans = {'q': dm + q, 'k': dm + kv, 'v': dm + kv, 'o': q + dm, 'gate': dm + ff,
          'up': dm + ff, 'down': ff + dm}
  return int(d['n_layers']) * d['lora_rank'] * sum(fans[t] for t in d['lora_targets'])


def param_counts(model_cfg: Any) -> dict[str, int]:
  """Parameter counts of the decoder.

  Returns total, embedding (the [V, D] table), nonembed (everything except the embedding
  and an untied lm_head), lm_head (0 when tied) and matmul_nonembed (the per-layer weight
  matrices only: what the per-token matmul FLOPs are made of).
  """
  d = _dims(model_cfg)
  v, dm, layers = int(d['vocab_size']), int(d['d_model']), int(d['n_layers'])
  q_width = int(d['n_heads']) * int(d['head_dim'])
  kv_width = int(d['n_kv_heads']) * int(d['head_dim'])
  ff = int(d['d_ff'])
  matmul_per_layer = dm * q_width + 2 * dm * kv_width + q_width * dm + 3 * dm * ff
  bias_per_layer = (q_width + 2 * kv_width) if d['qkv_bias'] else 0
  norms_per_layer = 2 * dm + (2 * int(d['head_dim']) if d['qk_norm'] else 0)
  nonembed = layers * (matmul_per_layer + bias_per_layer + norms_per_layer) + dm
  embedding = v * dm
  lm_head = 0 if d['tie_embeddings'] else dm * v
  return {
      'total': nonembed + embedding + lm_head,
      'embedding': embedding,
      'nonembed': nonembed,
      'lm_head': lm_head,
      'matmul_nonembed': layers * matmul_per_layer,
  }


def _attention_flops(d: dict[str, Any], context_len: int) -> int:
  """QK^T and AV of one query over context_len keys, every layer and head."""
  return 4 * int(d['n_layers']) * int(d['n_heads']) * int(d['head_dim']) * int(context_len)


def forward_flops_per_token(model_cfg: Any, context_len: int) -> int:
  """FLOPs of one token's forward pass attending over context_len positions."""
  d = _dims(model_cfg)
  attention = _attention_flops(d, context_len)
  logits = 2 * int(d['d_model']) * int(d['vocab_size'])
  return (2 * param_counts(model_cfg)['matmul_nonembed'] + logits + attention
          + 2 * lora_params(model_cfg))


def prefill_flops(model_cfg: Any, tokens: int, context_len: int) -> int:
  """FLOPs of a sampler's prefill of `tokens` prompt positions attending over context_len
  slots: the forward of every position, but the LM head's logits for the last one only (the
  samplers read the next token from it alone)."""
  if tokens <= 0:
    return 0
  logits = 2 * int(_dims(model_cfg)['d_model']) * int(_dims(model_cfg)['vocab_size'])
  return tokens * (forward_flops_per_token(model_cfg, context_len) - logits) + logits


def train_flops_per_token(model_cfg: Any, context_len: int) -> int:
  """Forward + backward of one token: 3x forward; with LoRA the frozen base's weight
  gradients are not computed (see the module docstring)."""
  forward = forward_flops_per_token(model_cfg, context_len)
  d = _dims(model_cfg)
  if d['lora_rank'] == 0:
    return 3 * forward
  return 2 * forward + _attention_flops(d, context_len) + 2 * lora_params(model_cfg)


def _check_rows(rows: int, valid_rows: int) -> None:
  if rows < 0 or not 0 <= valid_rows <= rows:
    raise ValueError(f'valid_rows={valid_rows} must lie in [0, rows={rows}]')


class FlopsLedger:
  """Cumulative FLOPs per category (`CATEGORIES`).

  Each category holds 'computed' (all rows, padding included) and 'useful' (the valid
  rows' share). `total` = profile + rollout + reference + old_logprob + train (computed);
  eval is kept apart and not in total. Useful scales by valid_rows / rows: padded tokens
  inside a valid row (left-padded prompts, tokens after EOS) count as computed and useful
  alike, because the static-shape code does compute them.
  """

  def __init__(self, model_cfg: Any, sampling_dtype: str | None = None):
    self.model_cfg = model_cfg
    # The dtype each category ran in: generation (profile, rollout, eval) reads the weights
    # in `sampling_dtype` (sampling.param_dtype), forward/train passes in the model's.
    model_dtype = getattr(model_cfg, 'dtype', None) or dict(model_cfg).get('dtype', 'float32')
    self.dtypes = {c: (sampling_dtype or model_dtype) if c in GENERATION_CATEGORIES
                   else model_dtype for c in CATEGORIES}
    self._computed = {c: 0.0 for c in CATEGORIES}
    self._useful = {c: 0.0 for c in CATEGORIES}
    self._tokens_computed = {c: 0 for c in CATEGORIES}
    self._tokens_useful = {c: 0 for c in CATEGORIES}

  def add_tokens(self, category: str, computed: int, useful: int) -> None:
    """Token slots the hardware ran (prefill bucket slots, decode slots, train rectangle)
    and the real tokens among them (prompt tokens, fed-back completion tokens)."""
    if category not in CATEGORIES:
      raise ValueError(f'FLOPs category {category!r} is not one of {CATEGORIES}')
    if computed < 0 or not 0 <= useful <= computed:
      raise ValueError(f'need 0 <= useful tokens ({useful}) <= computed tokens ({computed})')
    self._tokens_computed[category] += int(computed)
    self._tokens_useful[category] += int(useful)

  def tokens(self, category: str) -> tuple[int, int]:
    """(computed token slots, useful tokens) of a category so far."""
    return self._tokens_computed[category], self._tokens_useful[category]

  def useful_token_share(self, category: str) -> float:
    computed, useful = self.tokens(category)
    return useful / computed if computed else 0.0

  def add(self, category: str, computed: float, useful: float) -> None:
    if category not in CATEGORIES:
      raise ValueError(f'FLOPs category {category!r} is not one of {CATEGORIES}')
    if computed < 0 or not 0 <= useful <= computed * (1 + 1e-12):
      raise ValueError(f'need 0 <= useful ({useful}) <= computed ({computed})')
    self._computed[category] += float(computed)
    self._useful[category] += float(useful)

  def add_generation(self, category: str, rows: int, prompt_len: int, new_tokens: int,
                     valid_rows: int, cache_len: int) -> float:
    """The static sampler's work for `rows` rows: a prefill of prompt_len tokens into the
    cache_len-slot KV cache (its attention runs over every slot, logits at the last
    position only) plus new_tokens decode steps attending over the cache. Returns computed."""
    _check_rows(rows, valid_rows)
    per_row = (prefill_flops(self.model_cfg, prompt_len, cache_len)
               + new_tokens * forward_flops_per_token(self.model_cfg, cache_len))
    self.add(category, rows * per_row, valid_rows * per_row)
    return float(rows * per_row)

  def add_forward(self, category: str, rows: int, seq_len: int, valid_rows: int) -> float:
    """A full forward over [rows, seq_len] (e.g. old / reference log-probs)."""
    _check_rows(rows, valid_rows)
    per_row = seq_len * forward_flops_per_token(self.model_cfg, seq_len)
    self.add(category, rows * per_row, valid_rows * per_row)
    return float(rows * per_row)

  def add_train(self, rows: int, seq_len: int, valid_rows: int, passes: int = 1) -> float:
    """`passes` forward+backward passes over [rows, seq_len] (e.g. train.mu iterations)."""
    _check_rows(rows, valid_rows)
    per_row = passes * seq_len * train_flops_per_token(self.model_cfg, seq_len)
    self.add('train', rows * per_row, valid_rows * per_row)
    return float(rows * per_row)

  def computed(self, category: str) -> float:
    return self._computed[category]

  def useful(self, category: str) -> float:
    return self._useful[category]

  @property
  def total(self) -> float:
    return sum(self._computed[c] for c in TOTAL_CATEGORIES)

  @property
  def useful_total(self) -> float:
    return sum(self._useful[c] for c in TOTAL_CATEGORIES)

  def as_dict(self) -> dict[str, float]:
    """Computed FLOPs of each TOTAL_CATEGORIES entry, 'total', 'useful_total' and 'eval'."""
    out = {c: self._computed[c] for c in TOTAL_CATEGORIES}
    out.update(total=self.total, useful_total=self.useful_total, eval=self._computed['eval'])
    return out

  def state_dict(self) -> dict[str, dict[str, float]]:
    return {'computed': dict(self._computed), 'useful': dict(self._useful),
            'tokens_computed': dict(self._tokens_computed),
            'tokens_useful': dict(self._tokens_useful), 'dtypes': dict(self.dtypes)}

  def load_state_dict(self, state: Mapping[str, Mapping[str, float]]) -> None:
    for part in ('computed', 'useful'):
      missing = set(CATEGORIES) - set(state[part])
      if missing:
        raise ValueError(f'FLOPs state {part!r} lacks categories {sorted(missing)}')
    self._computed = {c: float(state['computed'][c]) for c in CATEGORIES}
    self._useful = {c: float(state['useful'][c]) for c in CATEGORIES}
    # Checkpoints written before token counts existed resume with zero counts.
    self._tokens_computed = {c: int(state.get('tokens_computed', {}).get(c, 0))
                             for c in CATEGORIES}
    self._tokens_useful = {c: int(state.get('tokens_useful', {}).get(c, 0)) for c in CATEGORIES}


def xla_flops(jitted_fn: Any, *args: Any) -> float:
  """FLOPs XLA's cost analysis reports for `jitted_fn(*args)` (compiles it once)."""
  analysis = jitted_fn.lower(*args).compile().cost_analysis()
  if analysis is None:
    raise ValueError('this backend reports no cost analysis; cross-check on CPU or GPU')
  if isinstance(analysis, Mapping):
    analysis = [analysis]
  return float(sum(float(entry.get('flops', 0.0)) for entry in analysis))


def rl_step_flops_bound(model_cfg: Any, rows: int, max_prompt_len: int, max_new_tokens: int,
                        mu: int = 1) -> float:
  """Upper bound on the FLOPs of one RL step of `rows` rows (the bound a regime's budget is
  sized with): a rollout that decodes all max_new_tokens (the sampler stops earlier once
  every row has hit EOS) from the largest prompt bucket, plus `mu` train passes over the
  fixed [rows, max_prompt_len + max_new_tokens - 1] layout."""
  ledger = FlopsLedger(model_cfg)
  ledger.add_generation('rollout', rows=rows, prompt_len=max_prompt_len,
                        new_tokens=max_new_tokens - 1, valid_rows=rows,
                        cache_len=max_prompt_len + max_new_tokens)
  ledger.add_train(rows, max_prompt_len + max_new_tokens - 1, rows, passes=mu)
  return float(ledger.total)
