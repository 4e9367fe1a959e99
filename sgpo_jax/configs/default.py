"""Embedded default: a ~0.8M-parameter policy on the package's own arithmetic task.

    python -m sgpo_jax.main --config default --workdir /tmp/sgpo_default

The fields, their meaning and the `method` / `runlocal` args live in
`sgpo_jax/config/defaults.py` (inside the package, so an installed copy and notebooks see
the same defaults). `regime=NAME` gives the comparison regime NAME (`sgpo_jax/configs/regimes.py`):
`default:regime=paper_like,method=grpo`.
"""

import ml_collections

from sgpo_jax.config import defaults
from sgpo_jax.config.args import load_sibling_config, parse_arg


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  args = parse_arg(arg, method='sgpo_bayes', regime='', runlocal=False)
  if args['regime']:
    return load_sibling_config(__file__, 'regimes').get_config(arg)
  return defaults.get_config(f"method={args['method']},runlocal={int(args['runlocal'])}")
