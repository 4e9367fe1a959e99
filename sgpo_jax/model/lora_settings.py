"""LoRA settings: which projections may get adapters, which base dtypes qwix quantizes to, and
the one-line checks of `model.lora_*`. Kept apart from `lora.py` (qwix, the wrapped model) so
that ModelConfig can validate its fields without importing the model it configures."""

from __future__ import annotations

from typing import Any

# config target name -> the module path under the scanned layers
TARGETS = {'q': 'attn/q', 'k': 'attn/k', 'v': 'attn/v', 'o': 'attn/o',
           'gate': 'mlp/gate', 'up': 'mlp/up', 'down': 'mlp/down'}
BASE_DTYPES = (None, 'int8', 'nf4')


def parse_targets(value) -> tuple[str, ...]:
  """'q,v' or ['q', 'v'] -> ('q', 'v'); unknown names raise."""
  names = tuple(t.strip() for t in value.split(',')) if isinstance(value, str) else tuple(value)
  names = tuple(n for n in names if n)
  unknown = [n for n in names if n not in TARGETS]
  if unknown:
    raise ValueError(f'model.lora_targets has unknown projection(s) {unknown}; use a subset of '
                     f'{tuple(TARGETS)}.')
  return names


def check(cfg: Any) -> None:
  """Validates the LoRA fields of `cfg` (one-line ValueErrors naming the value)."""
  if cfg.lora_rank < 0:
    raise ValueError(f'model.lora_rank={cfg.lora_rank} must be >= 0 (0 = full fine-tuning).')
  if cfg.lora_rank == 0:
    if cfg.lora_base_dtype is not None:
      raise ValueError(f'model.lora_base_dtype={cfg.lora_base_dtype!r} needs model.lora_rank > 0 '
                       '(a quantized base is frozen: only adapters can train on it).')
    return
  parse_targets(cfg.lora_targets)
  if not cfg.lora_targets:
    raise ValueError('model.lora_targets is empty; name at least one of '
                     f'{tuple(TARGETS)} (or set model.lora_rank=0).')
  if cfg.lora_alpha <= 0:
    raise ValueError(f'model.lora_alpha={cfg.lora_alpha} must be > 0 (the adapter scale is '
                     'lora_alpha / lora_rank).')
  if cfg.lora_base_dtype not in BASE_DTYPES:
    raise ValueError(f'model.lora_base_dtype={cfg.lora_base_dtype!r} is not supported by qwix '
                     f'LoRA here; use one of {BASE_DTYPES}.')


def check_family(family: str) -> None:
  """LoRA wraps this package's Transformer (Qwen2/Qwen3/Llama); other HF families cannot be
  loaded at all, so this only guards callers that name a family explicitly."""
  if family not in ('qwen2', 'qwen3', 'llama'):
    raise ValueError(f'LoRA cannot wrap model family {family!r}; qwix LoRA here supports the '
                     "package's Transformer: qwen2, qwen3, llama.")


def enabled(cfg: Any) -> bool:
  return cfg.lora_rank > 0
