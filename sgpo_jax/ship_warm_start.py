"""Writes the shipped copy of a config's warm start (sgpo_jax/rl/warm_starts/<cache key>.*).

    python -m sgpo_jax.ship_warm_start --config-arg '' --config-arg regime=paper_like \
        --cache-dir /work/cruns/warm_start

Each --config-arg is what follows `--config default:` ('' = the README run). The warm start
is restored from --cache-dir when it is there, else trained (never loaded from a shipped
copy), then exported with its build info (SFT final loss, the machine it was built on). Run it
on the reference machine only: a warm start trained on another CPU type is another policy.
"""

from __future__ import annotations

import argparse
import os

from sgpo_jax.config import defaults as default_config
from sgpo_jax.rl import warm_start


def ship(config, workdir: str, shipped_dir: str | None = None) -> str:
  config.warm_start.shipped = False  # what is exported is a trained (or cached) policy
  params, info = warm_start.policy_for_config(config, workdir)
  if info.get('source') != 'warm_start':
    raise SystemExit(f"this config's initial policy is {info.get('source')!r}, not an SFT "
                     'warm start: nothing to ship')
  return warm_start.export_shipped(params, info, warm_start.cache_key(config), shipped_dir)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--config-arg', action='append', default=[],
                      help="default_config argument, e.g. '' or 'regime=paper_like'")
  parser.add_argument('--cache-dir', required=True, help='warm-start cache to restore from')
  parser.add_argument('--out', default=None, help='default: sgpo_jax/rl/warm_starts/')
  args = parser.parse_args()
  for arg in args.config_arg or ['']:
    config = default_config.get_config(arg)
    config.warm_start.cache_dir = args.cache_dir
    path = ship(config, os.path.join(args.cache_dir, '_ship_workdir'), args.out)
    print(f'{arg or "(README run)"}: {path} ({os.path.getsize(path) / 1e6:.1f} MB)')


if __name__ == '__main__':
  main()
