"""A run's input paths, checked before any compute or any write to the workdir.

`path_problems(config)` lists, per config field, a path that is a placeholder (the shipped
configs' `/path/to/...`), missing, or not what the field needs: `model.hf_path` (a checkpoint
directory with config.json), `tokenizer.path` (a directory, for tokenizer.kind='hf'),
`data.path` / `data.eval_path` (file sources; a Hub dataset id for source='hf' is left to
the loader). `check_paths` raises one ValueError naming
every bad field and the flag that sets it; `train.setup` calls it first, the dry run prints
the same lines as warnings (it may run on a laptop without the inputs).

`prompt_length_report` is the histogram of templated prompt lengths over the sampler's
prompt buckets, logged once the data and tokenizer parsed.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from sgpo_jax.data import loading

PLACEHOLDER_PREFIX = '/path/to'
FILE_SOURCES_NEEDING_PATH = ('jsonl', 'parquet', 'tfds', 'hf')


def is_placeholder(path: str) -> bool:
  return path.startswith(PLACEHOLDER_PREFIX) or f'{PLACEHOLDER_PREFIX}/' in path


def _problem(field: str, path: str, need: str, kind: str) -> str | None:
  """None when `path` is fine for `field`, else a one-line problem with the fix."""
  flag = f'--config.{field}=/local/dir'
  if is_placeholder(path):
    return f'{field}={path!r} is the shipped placeholder; set {flag} to {need}.'
  if loading.is_remote(path) and kind != 'any':  # transformers reads local directories
    return (f'{field}={path!r} is not on local disk; copy it to every host first (gcloud '
            f'storage cp -r {path} /tmp/) and set {flag} to that copy.')
  target = loading.input_path(path)
  if not target.exists():
    return f'{field}={path!r} does not exist; set {flag} to {need}.'
  if kind == 'dir' and not target.is_dir():
    return f'{field}={path!r} is not a directory; set {flag} to {need}.'
  if kind == 'hf_checkpoint' and not (target / 'config.json').is_file():
    return f'{field}={path!r} has no config.json; set {flag} to {need}.'
  return None


def path_problems(config: Any) -> list[str]:
  """Every input path of `config` that will not load (module docstring), one line each."""
  problems = []
  hf_path = config.model.get('hf_path', '')
  if hf_path:
    problems.append(_problem('model.hf_path', hf_path, 'a local Hugging Face checkpoint '
                             'directory (config.json + *.safetensors)', 'hf_checkpoint'))
  tok = config.tokenizer
  if tok.kind == 'hf':
    if not tok.path:
      problems.append("tokenizer.path is empty but tokenizer.kind='hf'; set "
                      '--config.tokenizer.path to a local tokenizer directory.')
    else:
      problems.append(_problem('tokenizer.path', tok.path, 'a local tokenizer directory '
                               '(tokenizer.json / tokenizer_config.json)', 'dir'))
  d = config.data
  if d.source in FILE_SOURCES_NEEDING_PATH:
    if not d.path and not d.eval_path:
      problems.append(f'data.path is empty but data.source={d.source!r} reads files; set '
                      '--config.data.path.')
    for field in ('path', 'eval_path'):
      if d.source == 'hf' and d.get(field) and loading.is_hub_id(d[field]):
        continue  # read from the Hub when loaded; offline, the loader's one-line error
      if d.get(field):
        problems.append(_problem(f'data.{field}', d[field], f'the {d.source} file or '
                                 'directory of the split', 'any'))
  return [p for p in problems if p]


def check_paths(config: Any) -> None:
  """Raises ValueError listing every problem of `path_problems` (nothing when all load)."""
  problems = path_problems(config)
  if problems:
    raise ValueError('the run\'s inputs are not there (nothing was computed or written):\n  '
                     + '\n  '.join(problems))


def prompt_length_report(lengths: Sequence[int], buckets: Sequence[int],
                         max_prompt_len: int) -> tuple[dict[int, int], str]:
  """({bucket: prompts whose length falls in it}, a printable histogram)."""
  lengths = np.asarray(lengths, np.int64)
  edges = [0] + list(buckets)
  counts = {int(b): int(np.sum((lengths > lo) & (lengths <= b)))
            for lo, b in zip(edges[:-1], edges[1:])}
  over = int(np.sum(lengths > max_prompt_len))
  n = max(len(lengths), 1)
  lines = [f'prompt lengths (templated tokens) of {len(lengths)} prompts: '
           f'min {lengths.min() if len(lengths) else 0}, median '
           f'{int(np.median(lengths)) if len(lengths) else 0}, max '
           f'{lengths.max() if len(lengths) else 0}; sampling.max_prompt_len={max_prompt_len}']
  for bucket, count in counts.items():
    lines.append(f'  <= {bucket:6d} {count:7d} {"#" * round(40 * count / n)}')
  if over:
    lines.append(f'  > {max_prompt_len:6d} {over:7d} (longer than sampling.max_prompt_len)')
  return counts, '\n'.join(lines)


def check_token_cap(queries: Sequence[Any], tokenizer: Any, max_new_tokens: int) -> None:
  """Raises ValueError when `max_new_tokens` is below the shortest gold completion (the
  answer's tokens plus the stop token): no sample could ever be right, so every group would
  come back all-zero and the run would spend its compute learning nothing."""
  if not queries:
    return
  shortest = min(queries, key=lambda q: len(tokenizer.encode(q.answer)))
  need = len(tokenizer.encode(shortest.answer)) + 1
  if max_new_tokens < need:
    raise ValueError(f'sampling.max_new_tokens={max_new_tokens} is below the shortest gold '
                     f'completion ({need} tokens: answer {shortest.answer!r} + the stop token); '
                     f'set --config.sampling.max_new_tokens >= {need}.')
