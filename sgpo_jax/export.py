"""A finished (or running) run's policy back out: load its latest checkpoint, write HF format.

    python -m sgpo_jax.export --workdir runs/default --out exported/ [--step N] [--peft_out DIR]

The run's `config.json` gives the model; the checkpoint's `state.params` are the trained
weights, from the newest checkpoint that restores and matches its checksum (the fallback a
resume uses; a broken one is skipped, never moved); an HF tokenizer saved with the run is copied next to them (the embedded char
tokenizer has no HF form, so only weights and config are written for it).

A LoRA run (model.lora_rank > 0) exports merged weights, W + (alpha / r) A B with a QLoRA
base dequantized first; `--peft_out` also writes the adapters alone in the PEFT layout
(adapter_model.safetensors + adapter_config.json; model/lora.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import ml_collections

from sgpo_jax import errors
from sgpo_jax.model import hf as hf_lib
from sgpo_jax.model import lora as lora_lib
from sgpo_jax.model import transformer as model_lib
from sgpo_jax.outputs import checkpoint as checkpoint_lib
from sgpo_jax.outputs import paths as paths_lib


def run_model_config(workdir: str) -> model_lib.ModelConfig:
  path = paths_lib.join(workdir, 'config.json')
  if not paths_lib.exists(path):
    raise errors.ConfigError(f'{workdir!r} has no config.json: pass the --workdir of a '
                             'sgpo_jax run.')
  config = ml_collections.ConfigDict(json.loads(paths_lib.read_text(path)))
  return model_lib.ModelConfig.from_config(config.model)


def check_request(workdir: str, step: int | None = None, peft_out: str | None = None,
                  dtype: str | None = None) -> model_lib.ModelConfig:
  """The run's ModelConfig once the request fits the run: a dtype the writer knows, adapters
  to write only from a LoRA run, a --step that was saved. Each mistake raises ConfigError
  (one line) before any checkpoint is read."""
  cfg = run_model_config(workdir)
  if dtype is not None and dtype not in hf_lib.EXPORT_DTYPES:
    raise errors.ConfigError(f'--dtype={dtype!r}: use one of {list(hf_lib.EXPORT_DTYPES)}.')
  if peft_out and not lora_lib.enabled(cfg):
    raise errors.ConfigError(f'--peft_out={peft_out!r}: the run in {workdir!r} has no LoRA '
                             'adapters (model.lora_rank=0).')
  if step is not None:
    ckpt = checkpoint_lib.Checkpointer(paths_lib.join(workdir, 'checkpoints'))
    try:
      saved = ckpt.all_steps()
    finally:
      ckpt.close()
    if step not in saved:
      raise errors.ConfigError(f'--step={step}: {workdir!r} has checkpoints at steps {saved}; '
                               'pass one of them or leave --step out for the newest.')
  return cfg


def load_policy(workdir: str, step: int | None = None,
                cfg: model_lib.ModelConfig | None = None):
  """(params, ModelConfig, step) of the run's checkpoint `step` (default: the latest); `cfg`:
  the run's ModelConfig when the caller has checked the request already (export_run)."""
  cfg = cfg or check_request(workdir, step)
  ckpt = checkpoint_lib.Checkpointer(paths_lib.join(workdir, 'checkpoints'))
  try:
    if step is None:  # the newest intact checkpoint, as a resume would pick it
      restored = ckpt.restore_latest(None, move_aside=False)
      if restored is None:
        raise ValueError(f'{workdir!r} has no checkpoint yet; run longer than '
                         'checkpoint.every_steps or pass a workdir with checkpoints/.')
      step, state, _ = restored
    else:
      state, meta = ckpt.restore(step, None)
      ckpt.verify(state, meta)
  finally:
    ckpt.close()
  return lora_lib.restore_structure(cfg, state['params']), cfg, step


def special_token_ids(tokenizer_dir: str) -> dict[str, int]:
  """bos / eos / pad ids of the run's HF tokenizer (those it has), for config.json and
  generation_config.json: without them transformers' `generate` never stops at the chat
  model's end-of-turn token."""
  from transformers import AutoTokenizer  # deferred: heavy; only an HF tokenizer needs it
  tok = AutoTokenizer.from_pretrained(tokenizer_dir)
  ids = {f'{name}_token_id': getattr(tok, f'{name}_token_id')
         for name in ('bos', 'eos', 'pad')}
  if ids['pad_token_id'] is None:
    ids['pad_token_id'] = ids['eos_token_id']
  return {k: int(v) for k, v in ids.items() if v is not None}


def export_run(workdir: str, out_dir: str, step: int | None = None, peft_out: str | None = None,
               **kwargs) -> list[str]:
  cfg = check_request(workdir, step, peft_out, kwargs.get('dtype'))
  params, cfg, _ = load_policy(workdir, step, cfg)
  if lora_lib.enabled(cfg):
    if peft_out:
      lora_lib.save_peft(cfg, params, peft_out)
    params = lora_lib.merged_params(cfg, params)
  # A gs:// workdir's tokenizer is downloaded first: transformers reads local folders only.
  with paths_lib.local_copy(paths_lib.join(workdir, 'tokenizer')) as tokenizer_dir:
    has_hf_tokenizer = os.path.exists(os.path.join(tokenizer_dir, 'tokenizer_config.json'))
    token_ids = special_token_ids(tokenizer_dir) if has_hf_tokenizer else {}
    files = hf_lib.save_hf_checkpoint(params, cfg, out_dir,
                                      tokenizer_dir=tokenizer_dir if has_hf_tokenizer else None,
                                      config_overrides=token_ids, **kwargs)
  if token_ids:
    path = os.path.join(out_dir, 'generation_config.json')
    with open(path, 'w') as f:
      json.dump(token_ids, f, indent=2)
    files.append(path)
  return files


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog='python -m sgpo_jax.export',
                                   description=__doc__.splitlines()[0])
  parser.add_argument('--workdir', required=True)
  parser.add_argument('--out', required=True)
  parser.add_argument('--step', type=int, default=None)
  parser.add_argument('--dtype', default=None,
                      help=f'one of {list(hf_lib.EXPORT_DTYPES)} (default: the param dtype)')
  parser.add_argument('--peft_out', default=None,
                      help='LoRA runs: also write the adapters alone (PEFT layout) here')
  args = parser.parse_args(argv)
  try:
    files = export_run(args.workdir, args.out, args.step, peft_out=args.peft_out,
                       dtype=args.dtype)
  except Exception as e:  # a known failure is one line; anything else keeps its traceback
    known = errors.describe(e)
    if known is None and isinstance(e, ValueError):  # a checkpoint that fails its checks
      known = (errors.FAILURE, errors.one_line(e))
    if known is None:
      raise
    print(f'error: {known[1]}', file=sys.stderr)
    return known[0]
  print(f'wrote {len(files)} files to {args.out}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
