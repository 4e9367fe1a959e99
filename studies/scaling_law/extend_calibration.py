"""The CLI's calibration set extended with scored fresh-seed runs, and the check of what a
larger calibration pool changes (the third fresh test's design evidence,
studies/scaling_law/results/scaling_law_fresh_seeds15-24/PLAN.md).

    python -m studies.scaling_law.extend_calibration \
        --trajectories A.json [B.json ...] [--base CAL] [--out CAL] [--pool-check OUT.md]

Extension: every run of the trajectories files (written by scaling_law_calibrate.py
--dump-trajectories or scaling_law_fresh.py) gives its prefix features at the calibration
fractions (`scaling_law_calibrate.run_features`, the call every record of the shipped set
came from), added to the records of --base (default: the shipped set) and written to --out
(default: the shipped set). A run already in --base is refused: it would be counted twice.

Pool check (--pool-check; with --out, in the same pass): forecasts from 30% (predictor
`pooled`, the run's config group, as the CLI runs it) of each trajectories file's runs from
--base alone, from --base and the other files, and every comparison run (the base's
`default` and `paper_like` ones and the files') with its seed left out of the pooled set:
mean |error|, ratio to flat and 90% coverage per metric.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from sgpo_jax.scaling_law.calibration import (
  CalibrationSet,
  PrefixFeatures,
  calibrated_forecast,
  read_json_text,
)
from studies.scaling_law import calibrate as cal

OBSERVE_FRACTION = 0.3
COMPARISON_REGIMES = ('default', 'paper_like')


def fresh_records(paths: Sequence[Path]) -> dict[Path, list[PrefixFeatures]]:
  """Each trajectories file's finished runs' features at the calibration fractions. A run an
  earlier file already gave (e.g. the sGPO runs of a test's two overlapping parts) is kept
  once, and refused if its features differ there."""
  out: dict[Path, list[PrefixFeatures]] = {}
  first: dict[tuple[str, str, float], tuple[Path, str]] = {}
  for path in paths:
    features = cal.run_features(cal.load_trajectories(path), cal.CALIBRATION_FRACTIONS)
    kept = []
    for record in features.values():
      if record.actual is None:
        continue
      key, text = (record.run, record.metric, record.observe_fraction), json.dumps(
          record.to_dict(), sort_keys=True)
      if key in first:
        if first[key][1] != text:
          raise ValueError(f'{record.run} is in {first[key][0]} and {path} with different '
                           f'{record.metric} readings; give each run once')
        continue
      first[key] = (path, text)
      kept.append(record)
    out[path] = kept
  return out


def extend(base: CalibrationSet, added: dict[Path, list[PrefixFeatures]],
           config_scores_min: int | None = None) -> CalibrationSet:
  """`base` plus the added records, with the interval rule `config_scores_min`
  (`CalibrationSet.config_scores_min`; None: base's); refuses a run `base` (or another file)
  already has."""
  seen = {record.run for record in base.records}
  records = list(base.records)
  for path, new in added.items():
    names = {record.run for record in new}
    twice = sorted(names & seen)
    if twice:
      raise ValueError(f'{path}: runs {twice[:5]} are already in the calibration set; a run '
                       'must calibrate once (extend with runs the set does not hold)')
    seen |= names
    records += new
  runs = len({record.run for recs in added.values() for record in recs})
  source = (f"{base.source}; and {runs} fresh-seed test runs "
            f"({', '.join(path.parent.name for path in added)})")
  rule = base.config_scores_min if config_scores_min is None else config_scores_min
  return CalibrationSet(records, source, config_scores_min=rule)


def seed_key(record: PrefixFeatures) -> str:
  """The run's regime and seed: the arms of one seed share their start and early curve."""
  seed = cal.seed_number(record.run)
  return f"{record.regime}/seed{'?' if seed is None else seed}"


def score(records: Sequence[PrefixFeatures], targets: Sequence[PrefixFeatures],
          leave_out_seed: bool = False, config_scores_min: int = 0
          ) -> dict[str, dict[str, float]]:
  """Per metric: n, mean |error| of the forecast and of flat, their ratio, 90% coverage
  (config_scores_min: see `calibration.calibrated_forecasts`)."""
  pooled = CalibrationSet(list(records), '')
  by_seed: dict[str, CalibrationSet] = {}
  rows: dict[str, list[tuple[float, float, bool]]] = {}
  for target in targets:
    if target.observe_fraction != OBSERVE_FRACTION or target.actual is None:
      continue
    calibration = pooled
    if leave_out_seed:
      key = seed_key(target)
      if key not in by_seed:
        by_seed[key] = CalibrationSet([r for r in records if seed_key(r) != key], '')
      calibration = by_seed[key]
    forecast = calibrated_forecast(target, calibration, config_scores_min=config_scores_min)
    low, high = forecast.interval
    rows.setdefault(target.metric, []).append(
        (abs(forecast.predicted_final - target.actual), abs(target.flat - target.actual),
         bool(low <= target.actual <= high)))
  out = {}
  for metric, values in sorted(rows.items()):
    err, flat, covered = (np.mean([v[i] for v in values]) for i in range(3))
    out[metric] = {'n': len(values), 'err': float(err), 'flat': float(flat),
                   'ratio': float(err / flat) if flat > 0 else float('inf'),
                   'coverage': float(covered)}
  return out


def pool_check(base: CalibrationSet, added: dict[Path, list[PrefixFeatures]],
               config_scores_min: int = 0) -> list[str]:
  """Markdown lines of the check (see the module docstring)."""
  def seeds(records: Sequence[PrefixFeatures]) -> str:
    return cal.seed_range(record.run for record in records)
  base_seeds = seeds([r for r in base.records if r.regime in COMPARISON_REGIMES])
  splits = []
  for path, records in added.items():
    splits.append((f'seeds {base_seeds} -> {seeds(records)}', list(base.records), records))
    others = [r for p, recs in added.items() if p != path for r in recs]
    if others:
      splits.append((f'seeds {base_seeds}, {seeds(others)} -> {seeds(records)}',
                     list(base.records) + others, records))
  everything = list(base.records) + [r for recs in added.values() for r in recs]
  metrics = ('eval_accuracy', 'reward_mean', 'reward_over_profile')
  lines = ['| calibration -> scored | ' + ' | '.join(f'{m} err / ratio / cover (n)'
                                                    for m in metrics) + ' |',
           '|---|' + '---|' * len(metrics)]

  def cells(result: dict[str, dict[str, float]]) -> str:
    return ' | '.join(
        f"{result[m]['err']:.3f} / {result[m]['ratio']:.2f}x / {result[m]['coverage']:.2f} "
        f"({result[m]['n']})" if m in result else '-' for m in metrics)
  for label, records, targets in splits:
    lines.append(f'| {label} | {cells(score(records, targets))} |')
  comparison = [r for r in everything if r.regime in COMPARISON_REGIMES]
  lines.append(f'| each seed of {seeds(comparison)} left out ({", ".join(COMPARISON_REGIMES)}) '
               f'| {cells(score(everything, comparison, leave_out_seed=True))} |')
  if config_scores_min:
    lines.append(f'| the same, intervals from the config\'s own runs when it has '
                 f'>= {config_scores_min} | ' + cells(score(
                     everything, comparison, leave_out_seed=True,
                     config_scores_min=config_scores_min)) + ' |')
  return lines


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--trajectories', nargs='+', type=Path, required=True, metavar='JSON')
  parser.add_argument('--base', type=Path, default=cal.CALIBRATION_PATH)
  parser.add_argument('--out', type=Path, default=None,
                      help='write the extended set here (default: --base, overwritten; '
                           'with --pool-check: not written unless given)')
  parser.add_argument('--pool-check', type=Path, default=None, metavar='MD',
                      help='write the pool check here (from the same features as --out)')
  parser.add_argument('--config-scores-min', type=int, default=None, metavar='K',
                      help="the written set's interval rule: from the config's own runs when "
                           'it has >= K (CalibrationSet.config_scores_min; 0: the whole pool; '
                           "default: --base's); with --pool-check also a leave-one-seed-out "
                           'row with that rule')
  args = parser.parse_args(argv)
  start = time.time()
  missing = [str(path) for path in args.trajectories if not path.is_file()]
  if missing:
    parser.error(f'--trajectories {missing}: no such file')
  if not args.base.is_file():
    parser.error(f'--base {args.base}: no such calibration file')
  base = CalibrationSet.from_json(read_json_text(args.base))  # keeps the file's own source line
  if args.config_scores_min is not None and args.config_scores_min < 0:
    parser.error(f'--config-scores-min {args.config_scores_min} must be >= 0 (0: intervals '
                 'from the whole pool)')
  try:
    added = fresh_records(args.trajectories)
    extended = extend(base, added, args.config_scores_min)
  except ValueError as error:
    parser.error(str(error))
  if args.pool_check is not None:
    command = ('python -m studies.scaling_law.extend_calibration --trajectories '
               + ' '.join(map(str, args.trajectories))
               + (f' --base {args.base}' if args.base != cal.CALIBRATION_PATH else '')
               + f' --pool-check {args.pool_check}'
               + (f' --config-scores-min {args.config_scores_min}'
                  if args.config_scores_min else ''))
    lines = [f'Generated by `{command}`.', '',
             *pool_check(base, added, args.config_scores_min or 0)]
    args.pool_check.write_text('\n'.join(lines) + '\n')
    print(f'wrote {args.pool_check} in {time.time() - start:.0f}s', file=sys.stderr)
    if args.out is None:  # a check only
      return 0
  out = args.out or args.base
  extended.save(out)
  print(f'wrote {out}: {len({r.run for r in extended.records})} runs, '
        f'{len(extended.records)} records ({time.time() - start:.0f}s)', file=sys.stderr)
  return 0


if __name__ == '__main__':
  sys.exit(main())
