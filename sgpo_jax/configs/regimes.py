"""Comparison regimes: the embedded default's task, set up so methods compare at equal FLOPs.

    python -m sgpo_jax.main --config regimes:regime=paper_like,method=grpo ...
    python -m sgpo_jax.main --config default:regime=paper_like,method=grpo ...

(the same config). Args: `regime=default|paper_like|small_pool|real` (default: default),
`method=` any allocator, `runlocal=1` to shrink everything for a smoke run.

Every run of a regime, whatever its method and seed, starts from the same cached warm start
(same model, data and warm_start fields) and is scored on the same held-out problems;
`train.flops_budget` (profiling included) ends it, and evals fall at fixed fractions of it.
- default: the embedded default's pool and initial policy (the README run's warm-start
  cache is reused), RL on a prefix of the pool.
- paper_like: the regime the sGPO paper targets (>= 50% of the pool trivial, >= 15%
  unsolved, GRPO sees every prompt at least twice): a pool and eval set mixed toward easy
  levels, and a longer warm start that sees only a tenth of the hardest level
  (`warm_start.level_fractions`), so most of it is beyond the initial policy.
- small_pool: a few hundred prompts revisited for many epochs.
- real: a real pretrained model, SmolLM2-135M-Instruct (the `smollm2_135m_arith` job's model,
  task, reward and LoRA), warm start = the pretrained weights; a budget of about 30 GRPO
  steps and four evals of 512 held-out problems, so one run fits a CPU hour.
"""

import ml_collections

from sgpo_jax.config import defaults
from sgpo_jax.config.args import load_sibling_config, parse_arg

REGIMES = ('default', 'paper_like', 'small_pool', 'real')
REAL_EVAL_FRACTIONS = (0.25, 0.5, 0.75, 1.0)

# 0.01 * 20**(i/13), i = 0..13 (rounded to 4 digits), then 0.25, 0.30, ..., 1.0.
REGIME_EVAL_FRACTIONS = (tuple(round(0.01 * 20.0 ** (i / 13), 4) for i in range(14))
                         + tuple(round(0.05 * k, 2) for k in range(5, 21)))


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  args = parse_arg(arg, regime='default', method='sgpo_bayes', runlocal=False)
  if args['regime'] == 'real':
    c = load_sibling_config(__file__, 'smollm2_135m_arith').get_config(
        f"method={args['method']}")
  else:
    c = defaults.get_config(f"method={args['method']}")
  apply_regime(c, args['regime'])
  if args['runlocal']:
    defaults.shrink_for_local_run(c)
  return c


def apply_regime(c: ml_collections.ConfigDict, regime: str) -> None:
  """Sets the fields that define `regime` (see the module docstring) on `c` in place."""
  if regime not in REGIMES:
    raise ValueError(f'regime={regime!r} is not one of {REGIMES}')
  c.regime = regime
  # Shared by every regime: a comparison run is short and its budget, not its step count,
  # ends it; the eval is large enough for a standard error under one point.
  c.train.num_steps = 100_000
  c.train.rows_per_batch = 64
  c.checkpoint.every_steps = 100_000
  # Every arm is read at the same compute: evals at fixed fractions of the budget, 14
  # log-spaced (1.26x apart) from 1% to 20%, where strong arms cross GRPO's final accuracy
  # (a FLOPs ratio needs the same relative resolution wherever it falls), then every 5% (two
  # readings in the last 5% of a run). 2560 problems: a standard error <= 0.99 points.
  c.eval.every_steps = 100_000
  c.eval.at_budget_fractions = REGIME_EVAL_FRACTIONS
  c.data.num_eval = 2560
  if regime == 'default':
    c.data.rl_pool_size = 1024
    c.train.flops_budget = 1.5e12
  elif regime == 'paper_like':
    # Its own pool, eval set (one difficulty mix) and warm start: SFT sees all of levels
    # 1-3 but only a tenth of level 4 (none of the RL pool's), long enough that levels 1-3
    # are mastered and level 4 is mostly beyond the policy, as in LLM RLVR on a dataset of
    # mostly solved problems.
    c.data.difficulty_weights = (0.01, 0.39, 0.35, 0.25)
    c.warm_start.level_fractions = (1.0, 1.0, 1.0, 0.1)
    c.warm_start.steps = 2250
    c.data.rl_pool_size = 512
    c.train.flops_budget = 1.5e12
  elif regime == 'small_pool':
    c.data.rl_pool_size = 256
    c.train.flops_budget = 1.5e12
  elif regime == 'real':
    # One run = ~30 GRPO steps of 32 rows (3.3e12 FLOPs each, measured) on the CPU; four
    # evals of 512 problems (SE <= 2.2 points): the eval is a real model's greedy decode, so
    # the dense schedule of the small-policy regimes would cost more than the training.
    c.train.rows_per_batch = 32
    c.data.rl_pool_size = 1024  # ~30 steps see at most ~500 prompts: every arm sees fresh ones
    c.train.flops_budget = 1e14
    # A run is ~40 CPU minutes: checkpoint every 5 steps (~8 min) so a sitting that ends
    # mid-run loses at most that (output only: the resumed run is the same run).
    c.checkpoint.every_steps = 5
    c.eval.at_budget_fractions = REAL_EVAL_FRACTIONS
    c.data.num_eval = 512
