"""A tiny random Qwen2 checkpoint and its tokenizer, built in a folder with no downloads.

Owns the offline stand-in for a real Hugging Face checkpoint (notebooks, tests):
`save_bpe_tokenizer` trains a byte-level BPE tokenizer (like Qwen's) on a text corpus and saves
it with Qwen's ChatML chat template (`<|im_end|>` ends a turn, so it is the EOS the sampler
stops on); `save_random_qwen2` saves a `transformers.Qwen2ForCausalLM` with random weights of
Qwen2.5's architecture (grouped-query attention, QKV bias, tied embeddings, RoPE theta 1e6),
shrunk, as safetensors next to it; `build_tiny_qwen2` does both. The folder then loads like
a real checkpoint (`model.hf_path`, `tokenizer.kind='hf'`). Needs transformers, tokenizers
and torch (CPU is enough).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SPECIAL_TOKENS = ('<|endoftext|>', '<|im_start|>', '<|im_end|>')
# Qwen2.5-0.5B's architecture at toy size: 4 query heads share 2 KV heads of 16 dims.
TINY_QWEN2 = {'hidden_size': 64, 'intermediate_size': 128, 'num_hidden_layers': 2,
              'num_attention_heads': 4, 'num_key_value_heads': 2, 'rope_theta': 1e6,
              'rms_norm_eps': 1e-6, 'max_position_embeddings': 1024,
              'tie_word_embeddings': True}


def save_bpe_tokenizer(out_dir: str, corpus: Iterable[str], vocab_size: int = 384):
  """A byte-level BPE tokenizer trained on `corpus`, saved to `out_dir`; returns it.

  The chat template's words ('system', 'user', 'assistant') join the corpus, so the
  template tokenizes compactly whatever the corpus.
  """
  # deferred: heavy (transformers); only tests and offline notebooks build fixtures
  import transformers
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
  if vocab_size <= 256 + len(SPECIAL_TOKENS):
    raise ValueError(f'vocab_size={vocab_size}: a byte-level BPE needs more than '
                     f'{256 + len(SPECIAL_TOKENS)} (256 bytes + the special tokens).')
  bpe = Tokenizer(models.BPE())
  bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  bpe.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=vocab_size,
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                special_tokens=list(SPECIAL_TOKENS))
  bpe.train_from_iterator(list(corpus) + ['system user assistant'] * 4, trainer)
  tokenizer = transformers.PreTrainedTokenizerFast(
      tokenizer_object=bpe, eos_token='<|im_end|>', pad_token='<|endoftext|>',
      chat_template=CHAT_TEMPLATE)
  tokenizer.save_pretrained(out_dir)
  return tokenizer


def save_random_qwen2(out_dir: str, tokenizer, seed: int = 0, **fields: Any):
  """A random `Qwen2ForCausalLM` (TINY_QWEN2 updated by `fields`) saved to `out_dir`.

  The vocabulary is the tokenizer's padded to a multiple of 64, as real checkpoints pad it.
  Returns the `transformers.Qwen2Config`.
  """
  # deferred: heavy (torch, transformers); only tests and offline notebooks build fixtures
  import torch
  import transformers
  unknown = sorted(set(fields) - set(TINY_QWEN2))
  if unknown:
    raise ValueError(f'save_random_qwen2 fields {unknown}: set only {sorted(TINY_QWEN2)}.')
  torch.manual_seed(seed)
  hf_config = transformers.Qwen2Config(
      vocab_size=-(-len(tokenizer) // 64) * 64, eos_token_id=tokenizer.eos_token_id,
      pad_token_id=tokenizer.pad_token_id, **{**TINY_QWEN2, **fields})
  transformers.Qwen2ForCausalLM(hf_config).save_pretrained(out_dir, safe_serialization=True)
  return hf_config


def build_tiny_qwen2(out_dir: str, corpus: Iterable[str], vocab_size: int = 384,
                     seed: int = 0, **fields: Any) -> str:
  """Tokenizer trained on `corpus` + random Qwen2 weights in `out_dir`; returns `out_dir`."""
  tokenizer = save_bpe_tokenizer(out_dir, corpus, vocab_size)
  save_random_qwen2(out_dir, tokenizer, seed, **fields)
  return out_dir
