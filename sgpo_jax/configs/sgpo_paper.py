"""The sGPO paper's own settings on the embedded default task: one config away from the default.

    python -m sgpo_jax.main --config sgpo_paper --workdir /tmp/sgpo_paper

Profile every training query once with k=8 samples under the initial policy; G in {2, 4, 8}
from each query's success rate; drop trivial queries (p_hat > 0.75), sub-sample unsolved
ones; phases in increasing G (easy -> hard curriculum). Everything else (model, task, warm
start, packed train step, sampler, budget) is the default config's, so the two runs differ
only in the allocator. The default (`default.py`) runs `sgpo_bayes` with G in {2, 4},
the allocator the comparison recommends (README, "Allocators").

Args as `sgpo_jax/configs/default.py`: `runlocal=1` shrinks everything for a smoke run.
"""

import ml_collections

from sgpo_jax.config import defaults
from sgpo_jax.config.args import parse_arg

# The paper's settings, as the comparison's `sgpo` arm pins them (sgpo_jax/compare/arms.py).
PAPER_SETTINGS = {'group_sizes': (2, 4, 8), 'trivial_threshold': 0.75, 'curriculum': True}
PAPER_PROFILE_SAMPLES = 8


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  args = parse_arg(arg, runlocal=False)
  c = defaults.get_config(f"method=sgpo,runlocal={int(args['runlocal'])}")
  c.sgpo.update(PAPER_SETTINGS)
  c.profile.num_samples = PAPER_PROFILE_SAMPLES
  return c
