"""A config's dry run, kept as a results file: both of its memory views, labelled.

    python benchmarks/dry_run_record.py qwen2_5_0_5b_gsm8k_lora --device t4   # ~1 min, CPU

Writes `benchmarks/results/dry_run/<config>[_<arg>]_<device>.json` (or `--out`). The dry run
(`sgpo_jax/planning/dry_run.py`) has two views of memory per device, and they differ by
design, so the file keeps them apart:

- `compiled` (the verdict): each of the run's jitted programs (sampler, train step, log-prob
  pass) lowered and compiled at the config's shapes on this machine's backend, XLA's memory
  analysis read back: arguments, outputs, temp, aliased, resident (AdamW moments or the
  reference policy alive beside it) and their peak, with whether it fits `usable_bytes`.
  Compiled by XLA:CPU here when the device is a GPU or TPU: the device's own compiler
  fuses differently, so its figures are the CPU compiler's, as labelled (`backend`).
- `analytic` (the breakdown): parameters, gradients, AdamW state, KV cache and an
  activation estimate from formulas, no compiler; peak_train / peak_sample are their sums.

Also the model's parameter counts, the device budget, the commit, the load average before
and after and the seconds it took. The notebook figures of docs/real_models.md are quoted
from the T4 file (tests/project/test_readme_numbers.py checks them).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import provenance  # noqa: E402

RESULTS = os.path.join(HERE, 'results', 'dry_run')
GIB = 1024 ** 3


def record(config_name: str, config_arg: str, device: str) -> dict[str, Any]:
  from sgpo_jax import configs
  from sgpo_jax.config.args import load_config_module
  from sgpo_jax.planning import dry_run

  module = load_config_module(configs.path(config_name))
  config = module.get_config(config_arg or None).copy_and_resolve_references()
  config.dry_run_device = device
  result = dry_run.dry_run(config, print_table=False)
  if result.get('compile_skipped'):
    raise SystemExit(f"dry run compiled nothing: {result['compile_skipped']}")
  compiled = {name: {**{k: m[k] for k in ('argument', 'output', 'temp', 'alias', 'resident',
                                          'peak')},
                     'peak_gib': m['peak'] / GIB, 'fits': m['fits'], 'note': m['note']}
              for name, m in result['compiled'].items()}
  analytic = {k: v for k, v in result['bytes_per_device'].items()}
  return {'config': config_name, 'config_arg': config_arg, 'device': result['device']['name'],
          'usable_bytes': result['device']['usable_bytes'],
          'usable_gib': result['device']['usable_bytes'] / GIB,
          'backend': result['device']['backend'], 'device_note': result['device']['note'],
          'model': result['model'], 'shapes': result['shapes'],
          'compiled': compiled,
          'analytic': {**analytic, **{f'{k}_gib': v / GIB for k, v in analytic.items()}},
          'views': {'compiled': 'the verdict: XLA memory analysis of the compiled programs '
                                f"on {result['device']['backend']}",
                    'analytic': 'the breakdown: formulas, no compiler (activations estimated)'}}


def main(argv: list[str] | None = None) -> dict[str, Any]:
  p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  p.add_argument('config', help='a shipped config name, e.g. qwen2_5_0_5b_gsm8k_lora')
  p.add_argument('--arg', default='', help="the config's arg string, e.g. 'rank=0'")
  p.add_argument('--device', default='t4', help='config.dry_run_device (devices.py)')
  p.add_argument('--out', default='')
  args = p.parse_args(argv)
  result = provenance.measured(lambda: record(args.config, args.arg, args.device))
  tag = '_'.join(x for x in (args.config, args.arg.replace('=', '').replace(',', '_'),
                             args.device) if x)
  out = args.out or os.path.join(RESULTS, f'{tag}.json')
  os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
  with open(out, 'w') as f:
    json.dump(result, f, indent=1)
    f.write('\n')
  print(json.dumps({k: result[k] for k in ('device', 'usable_gib', 'backend')}
                   | {n: round(m['peak_gib'], 2) for n, m in result['compiled'].items()}))
  return result


if __name__ == '__main__':
  main()
