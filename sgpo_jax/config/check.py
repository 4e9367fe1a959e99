"""Config validation: every mistake a config can hold fails here, before any compute.

The schema is `configs/default.py`: a field it does not have is unknown (a typo), and a
value whose type differs from the default's is wrong (ints are accepted where floats are
expected). Cross-field checks name the field and the fix.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import ml_collections

from sgpo_jax.allocators.sgpo_bayes import posterior as bayes
from sgpo_jax.config import defaults as default_lib

ROUNDINGS = ('down', 'up', 'nearest')


def default_config() -> ml_collections.ConfigDict:
  """The schema: the embedded default, `sgpo_jax/config/defaults.py`."""
  return default_lib.get_config()


# ----------------------------------------------------------------------------------------
# Allocator sections: range checks on plain mappings (a config section or a settings
# dataclass as a dict), so the typed settings and check_config share them.


def _require(ok: bool, message: str) -> None:
  if not ok:
    raise ValueError(message)


def check_group_sizes(section: str, group_sizes: Any) -> None:
  sizes = tuple(group_sizes)
  _require(len(sizes) > 0 and all(isinstance(g, int) and not isinstance(g, bool) and g >= 1
                                  for g in sizes),
           f'{section}.group_sizes={sizes} must be a non-empty tuple of positive ints.')


def check_sgpo(s: Mapping[str, Any]) -> None:
  _require(0.0 <= s['trivial_threshold'] <= 1.0,
           f"sgpo.trivial_threshold={s['trivial_threshold']} must be in [0, 1].")
  _require(0.0 <= s['unsolved_keep_fraction'] <= 1.0,
           f"sgpo.unsolved_keep_fraction={s['unsolved_keep_fraction']} must be in [0, 1].")
  check_group_sizes('sgpo', s['group_sizes'])
  _require(s['rounding'] in ROUNDINGS,
           f"sgpo.rounding={s['rounding']!r} is not one of {ROUNDINGS}.")
  _require(s['phase_epochs'] > 0, f"sgpo.phase_epochs={s['phase_epochs']} must be > 0.")
  _require(s['phase_plateau_window'] >= 0,
           f"sgpo.phase_plateau_window={s['phase_plateau_window']} must be >= 0 (0 = off).")
  _require(0.0 <= s['trivial_replay_fraction'] < 1.0,
           f"sgpo.trivial_replay_fraction={s['trivial_replay_fraction']} must be in [0, 1).")
  _require(s['prior_strength'] >= 0,
           f"sgpo.prior_strength={s['prior_strength']} must be >= 0.")
  _require(s['prior_eps'] > 0, f"sgpo.prior_eps={s['prior_eps']} must be > 0.")


def check_grpo(s: Mapping[str, Any]) -> None:
  _require(s['group_size'] >= 1, f"grpo.group_size={s['group_size']} must be >= 1.")


def check_dapo(s: Mapping[str, Any]) -> None:
  _require(s['group_size'] >= 1, f"dapo.group_size={s['group_size']} must be >= 1.")
  _require(s['max_rounds'] >= 1, f"dapo.max_rounds={s['max_rounds']} must be >= 1.")


def check_greso(s: Mapping[str, Any]) -> None:
  from sgpo_jax.allocators.greso import rule as greso
  greso.GRESOSettings(**s)  # its __post_init__ names the bad field and the fix


def check_knapsack(s: Mapping[str, Any]) -> None:
  from sgpo_jax.allocators.knapsack import solver as knapsack
  knapsack.KnapsackSettings(**s)


def check_sgpo_bayes(s: Mapping[str, Any]) -> None:
  _require(s['prior_alpha'] > 0 and s['prior_beta'] > 0,
           f"sgpo_bayes.prior_alpha={s['prior_alpha']} and prior_beta={s['prior_beta']} must "
           'be > 0.')
  _require(len(s['group_sizes']) > 0 and min(s['group_sizes']) >= 2,
           f"sgpo_bayes.group_sizes={tuple(s['group_sizes'])} must be sizes >= 2 (a group of "
           '1 never has both a success and a failure).')
  _require(1 <= s['profile_min_samples'] <= s['profile_max_samples'],
           f"need 1 <= sgpo_bayes.profile_min_samples ({s['profile_min_samples']}) <= "
           f"sgpo_bayes.profile_max_samples ({s['profile_max_samples']}).")
  _require(0.0 <= s['settle_low'] <= s['settle_high'] <= 1.0,
           f"need 0 <= sgpo_bayes.settle_low ({s['settle_low']}) <= sgpo_bayes.settle_high "
           f"({s['settle_high']}) <= 1.")
  _require(0.0 <= s['evidence_decay'] <= 1.0,
           f"sgpo_bayes.evidence_decay={s['evidence_decay']} must be in [0, 1].")
  _require(s['window'] >= 1, f"sgpo_bayes.window={s['window']} must be >= 1.")
  _require(0.0 <= s['informative_floor'] <= 1.0,
           f"sgpo_bayes.informative_floor={s['informative_floor']} must be in [0, 1].")
  # An unseen prompt must start above the floor, or one all-equal group deprioritises almost
  # every prompt and the candidates starve (group_sizes (2, 4, 8) with floor 0.25 ended runs
  # with ~30 of 1024 prompts left and the accuracy falling).
  min_g = min(s['group_sizes'])
  prior_inf = float(bayes.informative_probability(s['prior_alpha'], s['prior_beta'], min_g))
  _require(s['informative_floor'] < prior_inf,
           f"sgpo_bayes.informative_floor={s['informative_floor']} must be below "
           f"{prior_inf:.3f}, the informative probability of an unseen prompt (prior "
           f"Beta({s['prior_alpha']}, {s['prior_beta']})) at the smallest group size {min_g}; "
           'else one all-equal group deprioritises nearly every prompt. Lower it (e.g. '
           f'{prior_inf * 0.8:.2f}) or drop the smallest group size.')
  _require(0.0 <= s['revisit_floor'] <= s['revisit_base'] <= 1.0,
           f"need 0 <= sgpo_bayes.revisit_floor ({s['revisit_floor']}) <= "
           f"sgpo_bayes.revisit_base ({s['revisit_base']}) <= 1.")
  _require(s['skip_side'] in ('both', 'easy'),
           f"sgpo_bayes.skip_side={s['skip_side']!r} must be 'both' (deprioritise confidently "
           "trivial and unsolved prompts) or 'easy' (trivial ones only).")
  _require(s['pooled_prior'] in ('none', 'difficulty', 'pool'),
           f"sgpo_bayes.pooled_prior={s['pooled_prior']!r} must be 'none' (every prompt starts "
           "at the prior), 'difficulty' (an empirical-Bayes prior per difficulty level of the "
           "queries) or 'pool' (one over the whole pool).")
  _require(s['pooled_prior_strength'] >= 0,
           f"sgpo_bayes.pooled_prior_strength={s['pooled_prior_strength']} must be >= 0 (the "
           'base prior counts as this many seen prompts in a stratum).')
  _require(s['pooled_max_concentration'] >= 0.5,
           f"sgpo_bayes.pooled_max_concentration={s['pooled_max_concentration']} must be >= "
           '0.5 (how many samples a stratum prior may be worth at most, e.g. 8).')
  for flag in ('post_filter', 'profile', 'reshuffle', 'decay_by_passes', 'top_up_revisits',
               'prioritise'):
    _require(isinstance(s[flag], bool),
             f'sgpo_bayes.{flag}={s[flag]!r} must be True or False.')
  _require(0.0 <= s['epoch_cut'] < prior_inf,
           f"sgpo_bayes.epoch_cut={s['epoch_cut']} must be in [0, {prior_inf:.3f}): 0 (off) "
           'or below the informative probability of an unseen prompt, else an epoch of '
           'unseen prompts ends before it starts. E.g. 0.3.')
  _require(s['epoch_cut'] == 0.0 or s['prioritise'],
           f"sgpo_bayes.epoch_cut={s['epoch_cut']} needs sgpo_bayes.prioritise=True (it "
           'cuts the tail of an epoch served most promising first); set prioritise=True or '
           'epoch_cut=0.')
  _require(isinstance(s['max_rounds'], int) and not isinstance(s['max_rounds'], bool)
           and s['max_rounds'] >= 1,
           f"sgpo_bayes.max_rounds={s['max_rounds']!r} must be an integer >= 1 (training "
           'rollout rounds per batch; 1 = no refill).')
  _require(s['train_cost_per_row'] >= 0,
           f"sgpo_bayes.train_cost_per_row={s['train_cost_per_row']} must be >= 0 (0: always "
           'refill up to max_rounds).')


# Every allocator's config section and its range checks; config.method must name one.
SECTION_CHECKS = {'sgpo': check_sgpo, 'grpo': check_grpo, 'dapo': check_dapo,
                  'greso': check_greso, 'knapsack': check_knapsack,
                  'sgpo_bayes': check_sgpo_bayes}
METHODS = tuple(SECTION_CHECKS)


@functools.cache
def _section_defaults_cached(name: str) -> tuple[tuple[str, Any], ...]:
  return tuple(default_config()[name].to_dict().items())


def _section_defaults(name: str) -> dict[str, Any]:
  return dict(_section_defaults_cached(name))


def section_values(name: str, section: Any = None) -> dict[str, Any]:
  """config.<name> (a ConfigDict, a partial dict, or None) over the defaults, checked.

  The defaults come from `default_config.py` only; a key that section does not have is
  an error naming the known ones; tuples stay tuples.
  """
  defaults = _section_defaults(name)
  if section is None:
    given: dict[str, Any] = {}
  elif isinstance(section, ml_collections.ConfigDict):
    given = section.to_dict()
  elif isinstance(section, Mapping):
    given = dict(section)
  else:
    if not dataclasses.is_dataclass(section):
      raise TypeError(f'config.{name}: expected a config section, a mapping or a settings '
                      f'dataclass; got {type(section).__name__}')
    given = {f.name: getattr(section, f.name) for f in dataclasses.fields(section)}
  unknown = sorted(set(given) - set(defaults))
  _require(not unknown, f'unknown {name} settings {unknown}; known: {sorted(defaults)}.')
  values = {**defaults, **given}
  for key, value in values.items():
    if isinstance(defaults[key], tuple):
      values[key] = tuple(value)
  SECTION_CHECKS[name](values)
  return values


def check_rows_per_batch(rows_per_batch: int, group_sizes: tuple[int, ...], method: str) -> None:
  for g in group_sizes:
    _require(g >= 1 and rows_per_batch % g == 0,
             f'train.rows_per_batch={rows_per_batch} is not a multiple of the group size {g} '
             f'({method}); choose a multiple of {max(group_sizes)}.')


def _type_ok(value: Any, default: Any) -> bool:
  if default is None or value is None:
    return True
  if isinstance(default, bool):
    return isinstance(value, bool)
  if isinstance(default, float):
    return isinstance(value, (int, float)) and not isinstance(value, bool)
  if isinstance(default, int):
    return isinstance(value, int) and not isinstance(value, bool)
  if isinstance(default, (tuple, list)):
    return isinstance(value, (tuple, list))
  return isinstance(value, type(default))


def check_schema(config: ml_collections.ConfigDict, schema: ml_collections.ConfigDict,
                 prefix: str = '') -> None:
  for key, value in config.items():
    name = f'{prefix}{key}'
    if key not in schema:
      known = ', '.join(sorted(schema.keys()))
      raise ValueError(f'Unknown config field {name!r}. Known fields here: {known}. '
                       'Fix the spelling or remove it.')
    default = schema[key]
    if isinstance(default, ml_collections.ConfigDict):
      if not isinstance(value, ml_collections.ConfigDict):
        raise ValueError(f'config.{name} must be a section (ConfigDict), got {value!r}.')
      check_schema(value, default, name + '.')
    elif not _type_ok(value, default):
      raise ValueError(f'config.{name}={value!r} has type {type(value).__name__}; expected '
                       f'{type(default).__name__} like the default {default!r}.')


def _check_eval_fractions(fractions: tuple, budget: float) -> None:
  """eval.at_budget_fractions: increasing fractions in (0, 1] of a positive FLOPs budget."""
  if not fractions:
    return
  _require(budget > 0,
           f'eval.at_budget_fractions={fractions} needs train.flops_budget > 0 (got {budget}): '
           'the fractions are of the budget. Set a budget or use eval.every_steps alone.')
  _require(all(isinstance(f, (int, float)) and not isinstance(f, bool) and 0 < f <= 1
               for f in fractions),
           f'eval.at_budget_fractions={fractions} must be numbers in (0, 1] (fractions of '
           'train.flops_budget).')
  _require(all(a < b for a, b in zip(fractions, fractions[1:])),
           f'eval.at_budget_fractions={fractions} must be strictly increasing.')


def _choice(name: str, value: Any, choices: Any) -> None:
  _require(value in choices, f'{name}={value!r} is not one of {tuple(choices)}.')


def check_ranges(config: ml_collections.ConfigDict) -> None:
  """Value ranges and choices of the non-allocator sections."""
  from sgpo_jax import tasks  # the registries of names (no cycle: none imports us)
  from sgpo_jax.data import loading as data
  from sgpo_jax.rl import losses as grpo
  d, s, t, es = config.data, config.sampling, config.train, config.train.early_stop
  _choice('data.source', d.source, data.SOURCES)
  _choice('data.reward', d.reward, tasks.REWARDS)
  _choice('data.bad_rows', d.bad_rows, ('error', 'skip'))
  _choice('tokenizer.kind', config.tokenizer.kind, ('char', 'hf'))
  from sgpo_jax.model import devices
  _choice('dry_run_device', config.dry_run_device, ('',) + tuple(sorted(devices.DEVICES)))
  _choice('train.schedule', t.schedule, ('constant', 'cosine'))
  _choice('train.advantage', t.advantage, sorted(grpo.ADVANTAGE_ESTIMATORS))
  _choice('train.loss_agg', t.loss_agg, sorted(grpo.LOSS_AGGREGATIONS))
  _choice('train.kl_form', t.kl_form, sorted(grpo.KL_FORMS))
  _choice('train.policy_loss', t.policy_loss, sorted(grpo.POLICY_LOSSES))
  _choice('train.importance_level', t.importance_level, sorted(grpo.IMPORTANCE_RATIOS))
  for name, value, low in (
      ('sampling.max_prompt_len', s.max_prompt_len, 1),
      ('sampling.max_new_tokens', s.max_new_tokens, 1),
      ('sampling.top_k', s.top_k, 0),
      ('train.num_steps', t.num_steps, 1), ('train.rows_per_batch', t.rows_per_batch, 1),
      ('train.mu', t.mu, 1), ('train.warmup_steps', t.warmup_steps, 0),
      ('train.logprob_chunk', t.logprob_chunk, 0),
      ('profile.num_samples', config.profile.num_samples, 1),
      ('eval.every_steps', config.eval.every_steps, 1), ('eval.pass_k', config.eval.pass_k, 0),
      ('checkpoint.every_steps', config.checkpoint.every_steps, 1),
      ('checkpoint.keep', config.checkpoint.keep, 1),
      ('data.math_workers', d.math_workers, 0), ('data.rl_pool_size', d.rl_pool_size, 0),
      ('train.flops_budget', t.flops_budget, 0), ('train.kl_coef', t.kl_coef, 0),
      ('train.grad_clip', t.grad_clip, 0), ('train.weight_decay', t.weight_decay, 0),
      ('train.std_eps', t.std_eps, 0), ('train.clip_eps_high', t.clip_eps_high, 0)):
    _require(value >= low, f'{name}={value} must be >= {low}.')
  _require(t.learning_rate > 0, f'train.learning_rate={t.learning_rate} must be > 0.')
  _require(0 <= t.clip_eps_low <= 1,
           f'train.clip_eps_low={t.clip_eps_low} must be in [0, 1] (1.0 = no lower ratio '
           'bound, as CISPO in MiniMax-M1).')
  # A length-normalised sequence ratio moves ~1e-3 per update; token-sized bounds (0.2 /
  # 0.28) would never clip it, silently turning GSPO into unclipped policy gradient.
  _require(t.importance_level != 'sequence' or t.clip_eps_high <= 0.05,
           f'train.importance_level=sequence with train.clip_eps_high={t.clip_eps_high}: the '
           'sequence ratio s_i = exp(mean log ratio) moves ~1e-3 per update, so token-sized '
           'bounds never clip. Use GSPO-sized bounds (the paper: clip_eps_low=3e-4, '
           'clip_eps_high=4e-4), or importance_level=token.')
  _require(0 <= t.overlong_penalty_len <= s.max_new_tokens,
           f'train.overlong_penalty_len={t.overlong_penalty_len} must be in [0, '
           f'sampling.max_new_tokens={s.max_new_tokens}] (0 = no soft overlong penalty; DAPO '
           'uses 4096 of 20480).')
  _check_eval_fractions(tuple(config.eval.at_budget_fractions), t.flops_budget)
  _require(0 < s.top_p <= 1, f'sampling.top_p={s.top_p} must be in (0, 1].')
  _require(s.temperature >= 0, f'sampling.temperature={s.temperature} must be >= 0 (0 = greedy).')
  _require(es.epsilon > 0, f'train.early_stop.epsilon={es.epsilon} must be > 0.')
  _require(0 <= es.min_fraction <= 1,
           f'train.early_stop.min_fraction={es.min_fraction} must be in [0, 1].')
  _require(0 < es.confidence < 1,
           f'train.early_stop.confidence={es.confidence} must be in (0, 1).')
  _choice('train.early_stop.rule', es.rule, ('bound', 'forecast', 'trend'))
  if es.enabled and es.rule == 'bound':
    from sgpo_jax.scaling_law import early_stop  # not at import: it pulls in the fitters
    early_stop.check_bound_options(tuple(es.bound_fractions), es.bound_confidence,
                                   es.bound_delta)
    early_stop.stop_calibration_path(es.calibration)  # a missing file fails before compute
  _require(0 < es.window_fraction <= 1,
           f'train.early_stop.window_fraction={es.window_fraction} must be in (0, 1].')
  _require(es.confirm_evals >= 1,
           f'train.early_stop.confirm_evals={es.confirm_evals} must be >= 1 (1 = stop at the '
           'first flat eval).')
  _require(es.peak_tolerance >= 0,
           f'train.early_stop.peak_tolerance={es.peak_tolerance} must be >= 0 (inf = off).')
  fractions = tuple(config.warm_start.level_fractions)
  levels = d.max_digits - d.min_digits + 1
  _require(not fractions or d.source == 'arithmetic',
           f'warm_start.level_fractions={fractions} needs data.source=arithmetic (only its '
           f'queries carry a difficulty level), not {d.source!r}; set it to ().')
  _require(not fractions or (len(fractions) == levels and all(0 <= f <= 1 for f in fractions)
                             and any(f > 0 for f in fractions)),
           f'warm_start.level_fractions={fractions} must be {levels} fractions in [0, 1] (one '
           f'per level {d.min_digits}..{d.max_digits} digits), not all 0, or () for the whole '
           'pool.')


def check_config(config: ml_collections.ConfigDict, num_devices: int | None = None) -> None:
  """Raises ValueError naming the field and the fix; call before building anything."""
  check_schema(config, default_config())
  if config.method not in METHODS:
    raise ValueError(f'config.method={config.method!r}: choose one of {METHODS}.')
  m, s, t = config.model, config.sampling, config.train
  total_len = s.max_prompt_len + s.max_new_tokens
  if total_len > m.max_len:
    raise ValueError(
        f'sampling.max_prompt_len + sampling.max_new_tokens = {s.max_prompt_len} + '
        f'{s.max_new_tokens} = {total_len} exceeds model.max_len={m.max_len}; shorten '
        'the sampling lengths or raise model.max_len.')
  for name in ('max_prompt_len', 'max_new_tokens', 'decode_slots', 'prefill_step'):
    if s[name] < 1:
      raise ValueError(f'sampling.{name}={s[name]} must be >= 1.')
  if s.engine not in ('static', 'continuous'):
    raise ValueError(f"sampling.engine={s.engine!r}: choose 'static' or 'continuous'.")
  if t.pack_rows < 1:
    raise ValueError(f'train.pack_rows={t.pack_rows} must be >= 1.')
  if t.pack_len and t.pack_len < total_len:
    raise ValueError(f'train.pack_len={t.pack_len} is shorter than a padded row '
                     f'(max_prompt_len + max_new_tokens = {total_len}); set it >= {total_len} '
                     'or 0.')
  if t.packing and t.importance_level == 'sequence':
    # A packed row holds several sequences; GSPO's ratio is a mean over one sequence.
    raise ValueError('train.packing=True with train.importance_level=sequence: the packed '
                     'step has no per-sequence ratio yet; set train.packing=False or '
                     'importance_level=token.')
  for name, check in SECTION_CHECKS.items():
    check(config[name])
  check_ranges(config)
  section = config[config.method]
  check_rows_per_batch(t.rows_per_batch, _group_sizes(section), config.method)
  if config.method == 'knapsack' and config.knapsack.max_group_size > t.rows_per_batch:
    raise ValueError(f'knapsack.max_group_size={config.knapsack.max_group_size} exceeds '
                     f'train.rows_per_batch={t.rows_per_batch}; lower it.')
  if t.micro_batches < 1 or t.rows_per_batch % t.micro_batches:
    raise ValueError(f'train.micro_batches={t.micro_batches} must divide train.rows_per_batch='
                     f'{t.rows_per_batch}.')
  if num_devices is not None:
    from sgpo_jax.model import sharding  # jax-heavy: only when a device count is checked
    shape = sharding.resolve_mesh_shape(config.mesh.shape, config.mesh.axes, num_devices)
    batch = 1
    for axis, size in zip(config.mesh.axes, shape):
      if axis in sharding.BATCH_AXES:
        batch *= size
    rows_mb = t.rows_per_batch // t.micro_batches
    if rows_mb % batch:
      raise ValueError(f'train.rows_per_batch / train.micro_batches = {rows_mb} rows are not '
                       f'divisible by the mesh batch axes size {batch} (mesh.shape={shape}); '
                       f'use a multiple of {batch}.')


def _group_sizes(section: Any) -> tuple[int, ...]:
  """The group sizes an allocator section asks for: `group_sizes`, or one `group_size`."""
  if 'group_sizes' in section:
    return tuple(int(g) for g in section.group_sizes)
  return (int(section.group_size),)
