"""A finished (or running) run's policy back out: load its latest checkpoint, write HF format.

    python -m sgpo_jax.export --workdir runs/default --out exported/ [--step N]

The run's `config.json` gives the model; the checkpoint's `state.params` are the trained
weights; an HF tokenizer saved with the run is copied next to them (the embedded char
tokenizer has no HF form, so only weights and config are written for it).
"""

from __future__ import annotations

import json
import os

import ml_collections
import orbax.checkpoint as ocp

from sgpo_jax.outputs import checkpoint as checkpoint_lib
from sgpo_jax.model import transformer as model_lib


def run_model_config(workdir: str) -> model_lib.ModelConfig:
  path = os.path.join(workdir, 'config.json')
  if not os.path.exists(path):
    raise ValueError(f'{workdir!r} has no config.json: pass the --workdir of a sgpo_jax run.')
  with open(path) as f:
    config = ml_collections.ConfigDict(json.load(f))
  return model_lib.ModelConfig.from_config(config.model)


def load_policy(workdir: str, step: int | None = None):
  """(params, ModelConfig, step) of the run's checkpoint `step` (default: the latest)."""
  cfg = run_model_config(workdir)
  ckpt = checkpoint_lib.Checkpointer(os.path.join(workdir, 'checkpoints'))
  step = ckpt.latest_step() if step is None else step
  if step is None:
    raise ValueError(f'{workdir!r} has no checkpoint yet; run longer than '
                     'checkpoint.every_steps or pass a workdir with checkpoints/.')
  restored = ckpt.manager.restore(step, args=ocp.args.Composite(
      state=ocp.args.StandardRestore()))
  ckpt.close()
  return restored['state']['params'], cfg, step


def export_run(workdir: str, out_dir: str, step: int | None = None, **kwargs) -> list[str]:
  from sgpo_jax.model import hf
  params, cfg, _ = load_policy(workdir, step)
  tokenizer_dir = os.path.join(workdir, 'tokenizer')
  has_hf_tokenizer = os.path.exists(os.path.join(tokenizer_dir, 'tokenizer_config.json'))
  return hf.save_hf_checkpoint(params, cfg, out_dir,
                               tokenizer_dir=tokenizer_dir if has_hf_tokenizer else None,
                               **kwargs)


def main() -> None:
  import argparse
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--workdir', required=True)
  parser.add_argument('--out', required=True)
  parser.add_argument('--step', type=int, default=None)
  parser.add_argument('--dtype', default=None, help='float32 | bfloat16 (default: param dtype)')
  args = parser.parse_args()
  files = export_run(args.workdir, args.out, args.step, dtype=args.dtype)
  print(f'wrote {len(files)} files to {args.out}')


if __name__ == '__main__':
  main()
