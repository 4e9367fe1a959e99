"""Resume compatibility: a rerun's config against the config its workdir was run with.

A workdir that holds results (checkpoints, metrics.jsonl, profile.jsonl) was computed under
its `config.json`. Before a rerun writes anything, `check_resume` compares the whole new
config with it, field by field:
- output-only fields (`OUTPUT_ONLY`, and the budget fields under `_budget_change_ok`) may
  change: they decide what is written and when, not what the run computes;
- `STRUCTURAL` fields can never change within a run: its checkpoints and allocator state
  are shaped by them; a new workdir is the fix;
- any other change is refused, with the list of differences, unless it is named in
  `allow` (the `--allow_config_change` flag).
Accepted changes go to `config_history.jsonl` (`record_changes`) before config.json is
rewritten, so the run's history says which values held from which step.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any

from sgpo_jax.config import defaults as defaults_lib
from sgpo_jax.errors import ConfigError
from sgpo_jax.outputs import metrics as metrics_lib

HISTORY_FILE = 'config_history.jsonl'
CONFIG_FILE = 'config.json'
# Files whose content was computed under config.json: with none of them the workdir holds
# nothing a changed config could contradict (e.g. a run that failed in setup), so no check.
RESULT_PATHS = ('checkpoints', 'metrics.jsonl', 'profile.jsonl')

# Output-only: evals read the policy and never feed training (unless an early stop reads
# them: see `_allowed`); a checkpoint holds the whole state whatever the cadence, and the
# RNG of step t is fold_in(seed, t), so checkpoint cadence, retention and async saving
# change no number; the reward workers' count changes where an answer is scored, not its
# verdict; W&B logging mirrors metrics.jsonl. (There is no separate logging cadence:
# metrics.jsonl has one row per step.)
OUTPUT_ONLY = ('eval.every_steps', 'eval.at_budget_fractions', 'eval.pass_k',
               'checkpoint.every_steps', 'checkpoint.keep', 'checkpoint.async_save',
               'data.math_workers', 'logging.wandb_project')
# Fields the early stopper reads (evals, the planned length): output-only only without it.
_EVAL_FIELDS = ('eval.every_steps', 'eval.at_budget_fractions', 'eval.pass_k')
# Never changed within a run, even when named in `allow`: the checkpoint's arrays (model),
# the token ids (tokenizer), the allocator's query table and RNG (method, seed, data).
STRUCTURAL = ('method', 'seed', 'model.', 'tokenizer.', 'data.')

_ABSENT = '<absent>'


def flatten(tree: dict, prefix: str = '') -> dict[str, Any]:
  """{'a': {'b': 1}} -> {'a.b': 1}."""
  out = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      out.update(flatten(value, f'{prefix}{key}.'))
    else:
      out[f'{prefix}{key}'] = value
  return out


def as_json(config) -> dict[str, Any]:
  """The config as config.json holds it (tuples as lists, non-finite floats as null)."""
  return json.loads(json.dumps(metrics_lib.to_jsonable(config.to_dict())))


def differences(old: dict[str, Any], new: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
  """field -> (old, new) over flattened configs. A field the old config lacks (added to the
  schema since) counts only when the new value is not the schema default; a field the new
  one lacks (removed from the schema) cannot act any more and is left out."""
  schema = flatten(as_json(defaults_lib.get_config()))
  diffs = {}
  for field, value in new.items():
    if field in old:
      if old[field] != value:
        diffs[field] = (old[field], value)
    elif field not in schema or schema[field] != value:
      diffs[field] = (_ABSENT, value)
  return diffs


def _structural(field: str) -> bool:
  return field != 'data.math_workers' and any(
      field == s or (s.endswith('.') and field.startswith(s)) for s in STRUCTURAL)


def _larger(old: Any, new: Any) -> bool:
  return (isinstance(old, (int, float)) and isinstance(new, (int, float)) and old > 0
          and new > old and math.isfinite(new))


def _allowed(field: str, old: Any, new: Any, new_flat: dict[str, Any]) -> bool:
  """Whether changing `field` from old to new leaves every computed number as it was."""
  early_stop = bool(new_flat.get('train.early_stop.enabled'))
  if field in OUTPUT_ONLY:
    return not (early_stop and field in _EVAL_FIELDS)
  if field == 'train.num_steps':
    # A larger step budget continues the same run; a cosine schedule decays over num_steps
    # and an early stop reads fractions of it, so then it is a different run.
    return _larger(old, new) and new_flat.get('train.schedule') == 'constant' and not early_stop
  if field == 'train.flops_budget':
    return _larger(old, new) and not early_stop  # 0 (no budget) -> X is a cut, not a raise
  return False


def _show(value: Any) -> str:
  return value if value == _ABSENT else json.dumps(value)


def check_resume(config, workdir: str, allow: tuple[str, ...] = ()) -> dict[str, dict]:
  """The accepted changes {field: {'old', 'new', 'allowed_by'}} of `config` against
  `workdir`'s config.json ({} for a fresh workdir); raises ConfigError listing the refused
  ones and the fix. Reads only: nothing is written here."""
  new_flat = flatten(as_json(config))
  unknown = sorted(f for f in allow if f not in new_flat)
  if unknown:
    raise ConfigError(f'--allow_config_change names {unknown}, not config fields; name fields '
                      'as in config.json, e.g. train.learning_rate.')
  path = os.path.join(workdir, CONFIG_FILE)
  if not os.path.exists(path) or not any(os.path.exists(os.path.join(workdir, p))
                                         for p in RESULT_PATHS):
    return {}
  try:
    with open(path) as f:
      old_flat = flatten(json.load(f))
  except (OSError, ValueError) as e:
    raise ConfigError(f'{path} cannot be read ({e}); the run in {workdir} has no usable '
                      'config: use a new --workdir.') from None
  accepted, refused, structural = {}, [], []
  for field, (old, new) in sorted(differences(old_flat, new_flat).items()):
    change = f'{field}: {_show(old)} -> {_show(new)}'
    if _structural(field):
      structural.append(change)
    elif _allowed(field, old, new, new_flat):
      accepted[field] = {'old': old, 'new': new, 'allowed_by': 'output-only'}
    elif field in allow:
      accepted[field] = {'old': old, 'new': new, 'allowed_by': '--allow_config_change'}
    else:
      refused.append((field, change))
  if structural:
    raise ConfigError(
        f'workdir {workdir} holds a run with another config: {"; ".join(structural)}. These '
        'define the run (its checkpoints and allocator state depend on them) and cannot '
        'change within it: rerun with the values in config.json, or use a new --workdir.')
  if refused:
    fields = ','.join(f for f, _ in refused)
    raise ConfigError(
        f'workdir {workdir} holds a run with another config: '
        f'{"; ".join(c for _, c in refused)}. Rerun with the values in config.json, use a new '
        f'--workdir, or pass --allow_config_change={fields} to change them from the last '
        f'checkpoint on (recorded in {HISTORY_FILE}).')
  return accepted


def record_changes(workdir: str, changes: dict[str, dict], resumed_from_step: int | None) -> None:
  """Appends one row to config_history.jsonl: when, from which checkpoint, what changed."""
  if not changes:
    return
  metrics_lib.append_jsonl(os.path.join(workdir, HISTORY_FILE), [{
      'time': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()),
      'resumed_from_step': resumed_from_step, 'changes': changes}])
