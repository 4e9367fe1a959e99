"""Building a calibration set from finished runs: what `python -m sgpo_jax.scaling_law
calibrate-set` writes, and how the shipped sets (calibration_runs.json.xz for the forecast
CLI, stop_calibration_runs.json.xz for the trainer's early stop) are made.

A run comes from a run folder (metrics.jsonl and summary.json) or from a trajectories file
(`dump_trajectories`: the runs' identity and metric readings, so a set can be rebuilt once
the run folders are gone). Each run gives its prefix features (`calibration.prefix_features`)
at the kind's fractions, tagged with its regime and config group (`regime_and_group`), so a
forecast can leave out its own run, its seed group or lean on its config's other seeds.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import warnings
from pathlib import Path
from typing import Any, Sequence

from sgpo_jax.scaling_law.calibration import (
  CalibrationSet,
  PrefixFeatures,
  prefix_features,
  read_json_text,
  write_json_text,
)
from sgpo_jax.scaling_law.runs import load_run, record_from_dict, record_to_dict, run_key
from sgpo_jax.scaling_law.trajectory import DEFAULT_FORMS

SHIPPED_DIR = Path(__file__).resolve().parent
# Version of the trajectories file (`dump_trajectories`); bump when its layout changes.
TRAJECTORIES_VERSION = 1


@dataclasses.dataclass(frozen=True)
class SetKind:
  """What one kind of calibration set holds: the fractions a forecast may start from, the
  metrics (eval accuracy alone, or the training reward too) and the trajectory forms fitted
  to each prefix (none: the set only serves the pooled predictor's offsets)."""
  fractions: tuple[float, ...]
  keys: tuple[str, ...]
  forms: tuple[str, ...]
  min_evals: int
  shipped: Path


KINDS = {
    # The forecast CLI's set: a CLI forecast uses the nearest fraction.
    'forecast': SetKind((0.2, 0.3, 0.5), ('eval', 'reward'), tuple(DEFAULT_FORMS), 0,
                        SHIPPED_DIR / 'calibration_runs.json.xz'),
    # The trainer's early-stop rule 'bound': a checkpoint every 0.05 of the run from 0.3 to 0.8.
    'stop': SetKind((0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8), ('eval',), (),
                    4, SHIPPED_DIR / 'stop_calibration_runs.json.xz'),
}


def regime_and_group(run_dir: Path) -> tuple[str, str, str]:
  """(regime, config group, seed group) of a run folder.

  Regime: the comparison sweep's folder (default, paper_like, small_pool), or for scaling-law
  runs sl_runs/<start>/<model size> (each start and size is its own initial policy). Config
  group: the folder without `_seed<k>` (its seeds). Seed group: the runs of one regime with
  one seed: the comparison's arms share their seed's warm start and RNG, and their curves are
  identical until the arms diverge, so they are held out together.
  """
  name = run_dir.name
  config = re.sub(r'_seed\d+$', '', name)
  seed = re.search(r'_seed(\d+)$', name)
  if run_dir.parent.name == 'sl_runs':
    start = re.match(r'(vweak|weak)_', name)
    size = re.search(r'(?:^|_)(tiny|xs|small|base)_', name)
    regime = (f'sl_runs/{start.group(1) if start else "standard"}/'
              f'{size.group(1) if size else "tiny"}')
  else:
    regime = run_dir.parent.name
  return (regime, f'{run_dir.parent.name}/{config}',
          f'{regime}/seed{seed.group(1) if seed else "?"}')


def reward_metric(run_dir: Path) -> str:
  """The training reward that means something for the run: above the profiled solve rate for
  curriculum sGPO (its metrics carry p_hat_mean), the plain reward mean otherwise."""
  with (run_dir / 'metrics.jsonl').open() as handle:
    for line in handle:
      if '"p_hat_mean"' in line:
        return 'reward_over_profile'
  return 'reward_mean'


def load_runs(run_dirs: Sequence[Path]) -> list[dict[str, Any]]:
  """Finished run folders as {dir, regime, group, seed_group, name, eval, reward}; an
  unfinished one (no summary.json) is reported and skipped."""
  runs = []
  for run_dir in map(Path, run_dirs):
    if not (run_dir / 'summary.json').exists() or not (run_dir / 'metrics.jsonl').exists():
      print(f'[calibrate] {run_dir}: no summary.json (unfinished), skipped', file=sys.stderr)
      continue
    regime, group, seed_group = regime_and_group(run_dir)
    entry = {'dir': run_dir, 'regime': regime, 'group': group, 'seed_group': seed_group,
             'name': run_key(run_dir)}
    for key, metric in (('eval', 'eval_accuracy'), ('reward', reward_metric(run_dir))):
      try:
        record = load_run(run_dir, metric)
        record.name = entry['name']
        entry[key] = record
      except ValueError as error:
        print(f'[calibrate] {run_dir}: {error}', file=sys.stderr)
    runs.append(entry)
  return runs


def dump_trajectories(runs: list[dict[str, Any]], path: Path) -> None:
  """Every loaded run's identity and metric trajectories, so that a set (or a study) can be
  rebuilt from them once the run folders are gone."""
  entries = [{'name': run['name'], 'dir': str(run['dir']), 'regime': run['regime'],
              'group': run['group'], 'seed_group': run['seed_group'],
              **{key: record_to_dict(run[key]) for key in ('eval', 'reward') if key in run}}
             for run in runs]
  path.parent.mkdir(parents=True, exist_ok=True)
  write_json_text(path, json.dumps({'version': TRAJECTORIES_VERSION, 'runs': entries}))


def load_trajectories(path: Path) -> list[dict[str, Any]]:
  """The runs `dump_trajectories` wrote, as `load_runs` returns them."""
  data = json.loads(read_json_text(path))
  if not isinstance(data, dict) or data.get('version') != TRAJECTORIES_VERSION:
    raise ValueError(f'{path}: not a trajectories file of version {TRAJECTORIES_VERSION} '
                     '(write one with dump_trajectories)')
  runs = []
  for entry in data['runs']:
    run = {key: entry[key] for key in ('name', 'regime', 'group', 'seed_group')}
    run['dir'] = Path(entry['dir'])
    for key in ('eval', 'reward'):
      if key in entry:
        run[key] = record_from_dict(entry[key])
    runs.append(run)
  return runs


def load_sources(sources: Sequence[Path]) -> list[dict[str, Any]]:
  """Runs from run folders and trajectories files. A run given twice with the same readings
  (two overlapping parts of one test) is kept once; with different readings it is refused."""
  runs: list[dict[str, Any]] = []
  first: dict[str, tuple[Path, str]] = {}
  for source in map(Path, sources):
    if source.is_file():
      loaded = load_trajectories(source)
    elif (source / 'metrics.jsonl').exists():
      loaded = load_runs([source])
    else:
      raise ValueError(f'{source}: neither a run folder (no metrics.jsonl) nor a trajectories '
                       'JSON file')
    for run in loaded:
      text = json.dumps({key: record_to_dict(run[key]) for key in ('eval', 'reward')
                         if key in run}, sort_keys=True)
      if run['name'] in first:
        if first[run['name']][1] != text:
          raise ValueError(f"{run['name']} is in {first[run['name']][0]} and {source} with "
                           'different readings; give each run once')
        continue
      first[run['name']] = (source, text)
      runs.append(run)
  return runs


def run_features(runs: list[dict[str, Any]], fractions: Sequence[float],
                 keys: Sequence[str] = ('eval', 'reward'), forms: Sequence[str] = DEFAULT_FORMS,
                 ) -> dict[tuple[str, str, float], PrefixFeatures]:
  """Every run's prefix features (per key: 'eval' and/or 'reward') at each fraction, keyed by
  (run, key, fraction), with its config group and regime. A prefix too short to forecast is
  reported and skipped."""
  features = {}
  for run in runs:
    for key in keys:
      if key not in run:
        continue
      for fraction in fractions:
        try:
          with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            features[(run['name'], key, fraction)] = prefix_features(
                run[key], fraction, forms=forms, group=run['group'], regime=run['regime'])
        except ValueError as error:
          print(f"[calibrate] {run['name']} {key} @{fraction}: {error}", file=sys.stderr)
  return features


def build_set(runs: list[dict[str, Any]], kind: str = 'forecast', *, source: str = '',
              base: CalibrationSet | None = None, carry_prefix: str | None = None,
              config_scores_min: int | None = None) -> CalibrationSet:
  """The calibration set of `runs` for `kind` ('forecast' or 'stop'), fraction-major.

  base: records kept next to the new ones (all of them, or with carry_prefix only those whose
  run name starts with it); a run both in `runs` and among the kept records is refused.
  config_scores_min: the set's interval rule (None: base's, else 0 = the whole pool).
  """
  if kind not in KINDS:
    raise ValueError(f'kind={kind!r}: use one of {sorted(KINDS)}')
  spec = KINDS[kind]
  if config_scores_min is not None and config_scores_min < 0:
    raise ValueError(f'config_scores_min={config_scores_min} must be >= 0 (0: intervals from '
                     'the whole pool)')
  runs = [run for run in runs
          if spec.min_evals == 0 or ('eval' in run and run['eval'].steps.size >= spec.min_evals)]
  features = run_features(runs, spec.fractions, spec.keys, spec.forms)
  if kind == 'stop':  # the checkpoint order the trainer's rule reads: fraction-major
    records = [features[key] for fraction in spec.fractions for run in runs
               if (key := (run['name'], 'eval', fraction)) in features]
  else:
    records = [record for record in features.values() if record.actual is not None]
  kept: list[PrefixFeatures] = []
  if base is not None:
    kept = [record for record in base.records
            if carry_prefix is None or record.run.startswith(carry_prefix)]
    clash = sorted({record.run for record in records} & {record.run for record in kept})
    if clash and carry_prefix is None:
      raise ValueError(f'runs already in the base set: {clash[:5]}; a run is counted once')
    kept = [record for record in kept if record.run not in clash]
  if config_scores_min is None:
    config_scores_min = base.config_scores_min if base is not None else 0
  return CalibrationSet(records + kept if carry_prefix is not None else kept + records,
                        source or f'{len(runs)} runs', config_scores_min=config_scores_min)
