"""Every pre-registered fresh-seed test of issue 18 pooled: the shipped forecaster (the CLI)
and the trainer's early stop, each scored on every committed fresh run that it was neither
chosen nor calibrated on.

    python -m studies.scaling_law.pooled \
        [--out studies/scaling_law/results/scaling_law_pooled] [--seed 0]

Why: each test scores 80-100 runs, so one test's coverage moves by 1.25 points a run and its
worst early-stop loss is one run's. The shipped sets have not changed since they were
shipped, so the runs of every later test are held out from them alike; pooled, they give the
best estimate this project has of what a user gets. Nothing is chosen here: the rows are
the shipped code's, recomputed from the committed trajectories of TESTS.

- Which runs: a seed with any run in the calibration set is left out whole (a seed's runs
  share their warm start and early curve). For the CLI that is `calibration_runs.json.xz`
  (seeds 0-24), for the stop `stop_calibration_runs.json.xz` (seeds 5-9). Where a test kept the
  dense final evals (seeds 35-49) its dense trajectories are used (thinned ones are not
  listed). One run in two files is kept once, refused if its readings differ.
- CLI: `runs.evaluate_run` from the first 30% with the run's config group (the CLI default),
  as `python -m sgpo_jax.scaling_law fit RUN` runs it (`scaling_law_fresh.forecast_rows`).
- Stop: `early_stop.BoundStopper` with the trainer's current setting and shipped set, fed each
  run's rows as the trainer logs them (`scaling_law_stop_transfer.trainer_outcome`), and
  rule 'trend' with its default; loss = final accuracy minus the reading at the stop.
- Intervals: bootstrap 95% resampling seeds. The share of runs losing > 3 points also gets a
  one-sided 95% Clopper-Pearson upper bound (runs as independent; they are not quite: a
  seed's runs share their start).
- Check: every recomputed row is compared with the row its test stored, where the test's
  results hold rows of the same set and setting (`stored_checks`); a difference is reported,
  never hidden.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from sgpo_jax.scaling_law.calibration import CalibrationSet
from studies.scaling_law import calibrate as cal
from studies.scaling_law import fresh as fresh
from studies.scaling_law import stop_trainer as stop_trainer
from studies.scaling_law import stop_transfer as transfer

REPO = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).resolve().parent / 'results'
DEFAULT_OUT = RESULTS / 'scaling_law_pooled'
STOP_CALIBRATION_PATH = REPO / 'sgpo_jax' / 'scaling_law' / 'stop_calibration_runs.json.xz'
CLI_VARIANT = {'group': None}  # evaluate_run's group=None: the run's config group if known


@dataclass(frozen=True)
class Test:
  """One pre-registered test: its folder, trajectories and stored rows to check against."""
  label: str
  folder: str
  trajectories: tuple[str, ...]
  # Stored CLI rows scored with the shipped set (results.json files, relative to folder).
  cli_rows: tuple[str, ...] = ()
  # Stored per-run rows of the trainer's current stop setting and set (stop_results.json).
  stop_rows: str = ''


TESTS = (
    Test('first (seeds 5-9)', 'scaling_law_fresh', ('trajectories.json',)),
    Test('second (seeds 10-14)', 'scaling_law_fresh_seeds10-14', ('trajectories.json',)),
    Test('third (seeds 15-24)', 'scaling_law_fresh_seeds15-24',
         ('all_seeds15-19_extended/trajectories.json',
          'sgpo_grpo_seeds15-24_extended/trajectories.json')),
    # The fourth test's candidate set is the shipped one (05dcedc shipped it).
    Test('fourth (seeds 25-34)', 'scaling_law_fresh_seeds25-34',
         ('all_seeds25-29_candidate/trajectories.json',
          'sgpo_grpo_seeds25-34_candidate/trajectories.json'),
         cli_rows=('all_seeds25-29_candidate/results.json',
                   'sgpo_grpo_seeds25-34_candidate/results.json')),
    Test('fifth (seeds 35-39, dense final)', 'scaling_law_fresh_seeds35-39',
         ('dense/trajectories.json',), cli_rows=('dense/results.json',),
         stop_rows='stop_dense/stop_results.json'),
    Test('sixth (seeds 40-44, dense final)', 'scaling_law_fresh_seeds40-44',
         ('dense/trajectories.json',), cli_rows=('dense/results.json',),
         stop_rows='stop_dense/stop_results.json'),
    Test('seventh (seeds 45-54, dense final)', 'scaling_law_fresh_seeds45-49',
         ('all_seeds45-49_candidate/trajectories.json',
          'sgpo_grpo_seeds45-54_candidate/trajectories.json'),
         cli_rows=('all_seeds45-49_previous/results.json',
                   'sgpo_grpo_seeds45-54_previous/results.json'),
         stop_rows='stop/stop_results.json'),
)


def load_tests(tests: tuple[Test, ...] = TESTS, root: Path = RESULTS
               ) -> list[dict[str, Any]]:
  """Every run of `tests`, tagged with its test's label (a run in two files kept once)."""
  runs: list[dict[str, Any]] = []
  for test in tests:
    for run in stop_trainer.load([root / test.folder / path for path in test.trajectories]):
      run['test'] = test.label
      runs.append(run)
  by_name: dict[str, dict[str, Any]] = {}
  for run in runs:
    if run['name'] in by_name:
      raise ValueError(f"{run['name']} is in two tests ({by_name[run['name']]['test']}, "
                       f"{run['test']}): a seed is tested once")
    by_name[run['name']] = run
  return runs


def held_out(runs: list[dict[str, Any]], calibration: CalibrationSet
             ) -> tuple[list[dict[str, Any]], list[str]]:
  """The runs of seeds with no run in `calibration`, and the seeds left out."""
  seen = {cal.seed_number(record.run) for record in calibration.records}
  left_out = sorted({stop_trainer._seed(r) for r in runs
                     if cal.seed_number(r['name']) in seen}, key=_seed_key)
  return [r for r in runs if cal.seed_number(r['name']) not in seen], left_out


def complete_seeds(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
  """The runs of seeds that have every config of the set (the tests' balanced part)."""
  return fresh.complete_seeds(runs)[0]


def _seed_key(seed: str) -> int:
  return int(seed.removeprefix('seed'))


def seed_span(seeds: Iterable[str]) -> str:
  """'25-29, 35' for seed labels `seed<k>` (the form `transfer._seeds` returns)."""
  return cal.seed_range(f'run_{seed}' for seed in seeds)


def upper_share(k: int, n: int, confidence: float = 0.95) -> float:
  """One-sided Clopper-Pearson upper bound on a share seen k times in n."""
  return 1.0 if k >= n else float(stats.beta.ppf(confidence, k + 1, n - k))


def cli_summaries(rows: list[dict[str, Any]], rng: np.random.Generator,
                  balanced: set[str]) -> list[dict[str, Any]]:
  """Per metric: all runs, the balanced seeds, per regime, method and test."""
  out = []
  for metric in sorted({r['metric'] for r in rows}, key=lambda m: (m != 'eval_accuracy', m)):
    of_metric = [r for r in rows if r['metric'] == metric]
    groups = [('all', of_metric),
              ('balanced seeds', [r for r in of_metric if r['run'] in balanced])]
    groups += [(regime, [r for r in of_metric if r['regime'] == regime])
               for regime in sorted({r['regime'] for r in of_metric})]
    groups += [(f'method {m}', [r for r in of_metric if r['method'] == m])
               for m in sorted({str(r['method']) for r in of_metric})]
    groups += [(f"test {t}", [r for r in of_metric if r['test'] == t])
               for t in [test.label for test in TESTS] if any(r['test'] == t for r in of_metric)]
    for label, members in groups:
      if members:
        out.append({'metric': metric, 'label': label,
                    **fresh.summarise(members, rng, variants=CLI_VARIANT)})
  return out


def stop_summaries(runs: list[dict[str, Any]], outcomes: list[dict[str, Any]],
                   rng: np.random.Generator) -> dict[str, Any]:
  """`scaling_law_stop_transfer.scored` plus runs over 3 points with its upper bound and the
  share's bootstrap interval, over all runs and per test."""
  def one(members: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    summary = transfer.scored([r for r, _ in members], [o for _, o in members], rng)
    over = sum(o['loss'] > cal.TARGET_MAX_LOSS + 1e-12 for _, o in members)
    summary['over_3'] = int(over)
    summary['over_3_upper95'] = upper_share(over, len(members))
    return summary
  pairs = list(zip(runs, outcomes))
  return {'all': one(pairs),
          'per_test': {t.label: one([p for p in pairs if p[0]['test'] == t.label])
                       for t in TESTS if any(p[0]['test'] == t.label for p in pairs)}}


def stored_checks(cli_rows: list[dict[str, Any]], stop_rows: list[dict[str, Any]],
                  root: Path = RESULTS) -> list[dict[str, Any]]:
  """Per stored file: how many recomputed rows it holds and how many differ (predicted value,
  interval or coverage for the CLI; stop step and loss for the stop)."""
  cli = {(r['run'], r['metric']): r for r in cli_rows}
  stop = {r['run']: r for r in stop_rows}
  checks = []
  for test in TESTS:
    for path in test.cli_rows:
      stored = json.loads((root / test.folder / path).read_text())['rows']
      pairs = [(s, cli[(s['run'], s['metric'])]) for s in stored if (s['run'], s['metric']) in cli]
      differ = [s['run'] for s, r in pairs
                if abs(s['group']['predicted'] - r['group']['predicted']) > 1e-9
                or np.max(np.abs(np.subtract(s['group']['interval'], r['group']['interval'])))
                > 1e-9 or s['group']['covered'] != r['group']['covered']]
      checks.append({'file': f'{test.folder}/{path}', 'kind': 'cli', 'compared': len(pairs),
                     'stored': len(stored), 'differ': differ})
    if test.stop_rows:
      stored = json.loads((root / test.folder / test.stop_rows).read_text())['test'][
          'current_rows']
      pairs = [(s, stop[s['run']]) for s in stored if s['run'] in stop]
      differ = [s['run'] for s, r in pairs
                if s['stop_step'] != r['stop_step'] or abs(s['loss'] - r['loss']) > 1e-9]
      checks.append({'file': f'{test.folder}/{test.stop_rows}', 'kind': 'stop',
                     'compared': len(pairs), 'stored': len(stored), 'differ': differ})
  return checks


def _pct(x: float, digits: int = 1) -> str:
  return f'{100 * x:.{digits}f}'


def _cli_line(s: dict[str, Any]) -> str:
  ci = s['ci95']
  return (f"| {s['metric']} | {s['label']} | {s['n']} | {s['seeds']} | {fresh._f(s['flat_err'])} "
          f"| **{fresh._f(s['group_err'])}** {fresh._ci(ci['group_err'])} | "
          f"{fresh._f(s['group_ratio'], 2)}x {fresh._ci(ci['group_ratio'], 2)} | "
          f"**{_pct(s['group_coverage'])}%** [{_pct(ci['group_coverage'][0])}, "
          f"{_pct(ci['group_coverage'][1])}] |")


def _stop_line(label: str, s: dict[str, Any]) -> str:
  ci = s['ci95']
  worst = ', '.join(f"{r['run']} {100 * r['loss']:.2f}" for r in s['worst_runs'] if r['loss'] > 0)
  return (f"| {label} | {s['n']} | {_pct(s['saved_mean'])}% [{_pct(ci['saved_mean'][0])}, "
          f"{_pct(ci['saved_mean'][1])}] | {100 * s['loss_mean']:.2f} | "
          f"{100 * s['loss_max']:.2f} | {s['over_3']} ({_pct(s['over_3'] / s['n'])}%) | "
          f"{_pct(s['over_3_upper95'])}% | {worst} |")


def write_report(result: dict[str, Any], out: Path) -> Path:
  cli, stop = result['cli'], result['stop']
  lines = [
      '# Issue 18: every fresh-seed test pooled', '',
      f"Generated by `{result['command']}`. Nothing is chosen here: the shipped forecaster and "
      "the trainer's early stop, recomputed from the committed trajectories of the seven "
      'pre-registered tests, on every run of a seed that their calibration sets do not hold. '
      'Targets: forecast mean |error| <= 0.03 and <= 0.5x flat, 90% intervals covering 85-95%; '
      'early stop >= 30% of steps saved, mean loss <= 1 point, worst <= 3. [bootstrap 95% over '
      'seeds]', '',
      '## The CLI from the first 30% (shipped calibration set)', '',
      f"Calibration set `{cli['calibration']}` (seeds {cli['calibration_seeds']}); seeds left "
      f"out: {seed_span(cli['left_out_seeds'])}. {cli['n_runs']} runs of seeds "
      f"{seed_span(cli['seeds'])}; balanced seeds (every config run): "
      f"{seed_span(cli['balanced_seeds'])}.", '',
      '| metric | runs | n | seeds | flat | error | ratio | coverage |',
      '|---|---|---|---|---|---|---|---|']
  lines += [_cli_line(s) for s in cli['summaries']]
  lines += [
      '', "## Early stop as the trainer runs it (current setting and shipped set)", '',
      f"Setting `{stop['setting']}`, calibration `{stop['calibration']}` (seeds "
      f"{stop['calibration_seeds']}); seeds left out: {seed_span(stop['left_out_seeds'])}. "
      f"Balanced: the {stop['n_balanced']} runs of seeds {seed_span(stop['balanced_seeds'])} "
      f"(every config run, as each test scored); all: {stop['n_runs']} runs with the sGPO and "
      'GRPO extra seeds. Upper 95%: one-sided Clopper-Pearson bound on the share of runs '
      'losing > 3 points.', '',
      '| rule, runs | n | steps saved | mean loss (points) | worst | runs over 3 | upper 95% | '
      'worst runs |', '|---|---|---|---|---|---|---|---|',
      _stop_line("`bound`, current, balanced", stop['bound_balanced']['all']),
      _stop_line("`bound`, current, all", stop['bound_all']['all']),
      _stop_line("`trend`, default, balanced", stop['trend_balanced']['all'])]
  lines += [_stop_line(f"`bound`, {label}", s)
            for label, s in stop['bound_balanced']['per_test'].items()]
  lines += ['', '## Checks against the stored rows of each test', '',
            '| file | kind | rows compared / stored | differ |', '|---|---|---|---|']
  for c in result['checks']:
    lines.append(f"| `{c['file']}` | {c['kind']} | {c['compared']} / {c['stored']} | "
                 f"{len(c['differ'])}{': ' + ', '.join(c['differ'][:5]) if c['differ'] else ''} |")
  path = out / 'results.md'
  path.write_text('\n'.join(lines) + '\n')
  return path


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--out', type=Path, default=DEFAULT_OUT)
  parser.add_argument('--seed', type=int, default=0, help='bootstrap seed')
  args = parser.parse_args(argv)
  start = time.time()
  runs = load_tests()
  rng = np.random.default_rng(args.seed)

  calibration = CalibrationSet.load(cal.CALIBRATION_PATH)
  cli_runs, cli_left_out = held_out(runs, calibration)
  balanced_cli = complete_seeds(cli_runs)
  rows = fresh.forecast_rows(cli_runs, calibration, variants=CLI_VARIANT)
  tests = {r['name']: r['test'] for r in cli_runs}
  for row in rows:
    row['test'] = tests[row['run']]

  stop_calibration = CalibrationSet.load(STOP_CALIBRATION_PATH)
  stop_runs, stop_left_out = held_out(runs, stop_calibration)
  setting = stop_trainer.default_setting()
  bound = [transfer.trainer_outcome(r, stop_calibration, setting) for r in stop_runs]
  trend = [cal.stop_outcome(r['eval'], cal.DEFAULT_TREND) for r in stop_runs]
  balanced_names = {r['name'] for r in complete_seeds(stop_runs)}
  keep = [i for i, r in enumerate(stop_runs) if r['name'] in balanced_names]
  balanced_runs = [stop_runs[i] for i in keep]
  stop_rows = [dict(o, run=r['name'], total_steps=int(r['eval'].total_steps))
               for r, o in zip(stop_runs, bound)]

  result = {
      'command': 'python -m studies.scaling_law.pooled'
                 + ('' if args.out.resolve() == DEFAULT_OUT.resolve() else f' --out {args.out}')
                 + (f' --seed {args.seed}' if args.seed else ''),
      'tests': [t.label for t in TESTS],
      'cli': {'calibration': str(cal.CALIBRATION_PATH.relative_to(REPO)),
              'calibration_seeds': cal.seed_range(r.run for r in calibration.records),
              'left_out_seeds': cli_left_out, 'n_runs': len(cli_runs),
              'seeds': transfer._seeds(cli_runs),
              'balanced_seeds': transfer._seeds(balanced_cli),
              'summaries': cli_summaries(rows, rng, {r['name'] for r in balanced_cli}),
              'rows': rows},
      'stop': {'setting': transfer._jsonable(setting),
               'calibration': str(STOP_CALIBRATION_PATH.relative_to(REPO)),
               'calibration_seeds': cal.seed_range(r.run for r in stop_calibration.records),
               'left_out_seeds': stop_left_out, 'n_runs': len(stop_runs),
               'n_balanced': len(balanced_runs), 'balanced_seeds': transfer._seeds(balanced_runs),
               'trend_setting': cal.DEFAULT_TREND,
               'bound_balanced': stop_summaries(balanced_runs, [bound[i] for i in keep], rng),
               'bound_all': stop_summaries(stop_runs, bound, rng),
               'trend_balanced': stop_summaries(balanced_runs, [trend[i] for i in keep], rng),
               'bound_rows': stop_rows},
      'checks': stored_checks(rows, stop_rows)}
  args.out.mkdir(parents=True, exist_ok=True)
  path = write_report(result, args.out)
  (args.out / 'results.json').write_text(json.dumps(result, indent=1, default=str))
  print(f'wrote {path} in {time.time() - start:.0f}s', file=sys.stderr)
  return 0


if __name__ == '__main__':
  sys.exit(main())
