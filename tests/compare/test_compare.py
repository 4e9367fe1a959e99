"""The comparison's moving parts: DAPO's FLOPs accounting against GRPO, the FLOPs budget
stop, the embedded default learning end to end, and the comparison runner's smoke mode."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from sgpo_jax import tasks, train
from sgpo_jax.compare import analysis, arms, report, runner
from sgpo_jax.config import defaults as default_config
from tests.test_train import coin_flip_reward, read_jsonl, tiny_run_config

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _step_rows(workdir):
  return [r for r in read_jsonl(os.path.join(workdir, 'metrics.jsonl')) if 'reward_mean' in r]


@pytest.fixture(scope='module')
def grpo_and_dapo(tmp_path_factory):
  out = {}
  for method in ('grpo', 'dapo'):
    config = tiny_run_config(method, num_steps=4)
    config.grpo.group_size = config.dapo.group_size = 8
    config.dapo.max_rounds = 3
    # The padded step: it charges one [R, T] rectangle per RL step whatever the rounds, which
    # the test below checks (the packed step's real-token ledger:
    # tests/rl/test_sequence_packing.py).
    config.train.packing = False
    workdir = str(tmp_path_factory.mktemp(method))
    out[method] = (workdir, train.run(config, workdir, show_progress=False))
  return out


@pytest.mark.slow
def test_dapo_counts_every_generation_round(grpo_and_dapo):
  grpo_dir, grpo = grpo_and_dapo['grpo']
  dapo_dir, dapo = grpo_and_dapo['dapo']
  assert grpo['steps'] == dapo['steps'] == 4
  rows = _step_rows(dapo_dir)
  rounds = [r['rounds'] for r in rows]
  assert all(1 <= k <= 3 for k in rounds)
  for r in rows:
    # Every valid generated row is either trained on or counted as discarded.
    assert r['dapo_discarded_rows'] + 16 * (1 - r['padding_fraction']) == \
        pytest.approx(16 * r['rounds'])
  # Same sampler, same rows per round: rollout FLOPs scale with the rounds run. The sampler
  # may stop decoding early when every row is done, so allow a little slack per round.
  per_round = grpo['flops']['rollout'] / grpo['steps']
  assert dapo['flops']['rollout'] == pytest.approx(per_round * sum(rounds), rel=0.3)
  if sum(rounds) > len(rounds):
    assert dapo['flops']['rollout'] > grpo['flops']['rollout']
  # Training FLOPs do not depend on the rounds: one [R, T] step per RL step.
  assert dapo['flops']['train'] == pytest.approx(grpo['flops']['train'])


@pytest.mark.slow
def test_flops_budget_stops_the_loop(tmp_path):
  config = tiny_run_config('grpo', num_steps=50)
  config.grpo.group_size = 4
  config.train.flops_budget = 2.5e8  # ~4.6 tiny steps of 5.5e7 FLOPs
  summary = train.run(config, str(tmp_path), show_progress=False)
  assert summary['steps'] < 50
  assert summary['stop_reason'].startswith('flops budget')
  rows = _step_rows(str(tmp_path))
  assert rows[-1]['flops_total'] >= 2.5e8 > rows[-2]['flops_total']
  assert 'eval_accuracy' in rows[-1]  # the stopping step is always evaluated
  assert summary['eval_accuracy_final'] == rows[-1]['eval_accuracy']
  # The overshoot is reported: the last step's FLOPs beyond the budget, less than one step.
  assert summary['flops_budget'] == 2.5e8
  assert summary['flops_over_budget'] == pytest.approx(summary['flops']['total'] - 2.5e8)
  assert 0 <= summary['flops_over_budget'] < rows[-1]['flops_total'] - rows[-2]['flops_total']
  # Rerun with twice the budget: the run goes on from its budget stop (it ran 0 steps).
  config.train.flops_budget = 5e8
  more = train.run(config, str(tmp_path), show_progress=False)
  assert summary['steps'] < more['steps'] < 50
  assert more['stop_reason'].startswith('flops budget 5e+08')
  assert _step_rows(str(tmp_path))[-1]['flops_total'] >= 5e8


def test_eval_due_at_every_steps_and_at_each_budget_fraction_crossed():
  def due(step, before, after):
    return train.eval_due(step, 5, (0.1, 0.2, 0.25, 1.0), 100.0, before, after)

  assert due(5, 0.0, 1.0)  # every_steps
  assert not due(1, 0.0, 9.9)
  assert due(2, 9.9, 10.0)  # reaches 10% exactly
  assert not due(3, 10.0, 19.0)  # 10% was crossed by the step before
  assert due(4, 19.0, 26.0)  # crosses 20% and 25% in one step: one eval
  assert not due(6, 26.0, 99.0)
  assert due(7, 99.0, 100.5)
  assert not train.eval_due(3, 5, (0.5,), 0.0, 0.0, 1e9)  # no budget: no fractions
  # Profiling (counted before step 1) already passed 10%: step 1 takes that eval; a later
  # step never looks back.
  assert due(1, 12.0, 15.0) and not due(2, 12.0, 15.0)


@pytest.mark.slow
def test_a_budgeted_run_evaluates_where_it_crosses_each_fraction(tmp_path, monkeypatch):
  # A coin-flip reward: every step trains (a tiny policy scores all-zero groups, whose steps
  # are skipped and charge rollout FLOPs only).
  monkeypatch.setattr(tasks, 'get_reward_fn', coin_flip_reward)
  config = tiny_run_config('grpo', num_steps=50)
  config.grpo.group_size = 4
  config.train.flops_budget = 5.5e8  # ~10 tiny steps
  config.eval.every_steps = 1000
  config.eval.at_budget_fractions = (0.05, 0.3, 0.35, 0.6, 1.0)
  summary = train.run(config, str(tmp_path), show_progress=False)
  rows = _step_rows(str(tmp_path))
  flops = [0.0] + [r['flops_total'] for r in rows]
  want = [i + 1 for i in range(len(rows))
          if any(flops[i] < f * 5.5e8 <= flops[i + 1] for f in config.eval.at_budget_fractions)]
  got = [r['step'] for r in rows if 'eval_accuracy' in r]
  assert got == want and len(got) >= 3 and got[-1] == summary['steps']
  assert rows[0]['step'] in got  # the first step crosses 5%


def default_learning_config(cache_dir: str):
  """The embedded default with its own warm start (cached: ~2 CPU minutes once), RL on a
  1024-query prefix of the pool for 40 steps: a few CPU minutes, and still learning."""
  c = default_config.get_config()
  c.warm_start.cache_dir = cache_dir
  c.data.rl_pool_size = 1024
  c.train.num_steps = 40
  c.eval.every_steps = 20
  c.checkpoint.every_steps = 100
  return c


@pytest.mark.slow
def test_default_config_learns_end_to_end(tmp_path):
  cache = os.path.join(os.environ.get('SGPO_TEST_CACHE', '/tmp'), 'sgpo_test_default_ws')
  summary = train.run(default_learning_config(cache), str(tmp_path), show_progress=False)
  assert summary['steps'] == 40
  # sgpo_bayes profiles adaptively inside the RL loop: at most the pool, at least one batch.
  assert 0 < summary['allocator']['profiled_queries'] <= 1024
  assert summary['allocator']['train_groups'] > 0
  assert summary['padding_fraction'] < 0.05
  assert summary['eval_accuracy_final'] > summary['eval_accuracy_initial'] + 0.02, summary


@pytest.mark.slow
def test_compare_smoke_writes_every_field(tmp_path):
  cmd = [sys.executable, '-m', 'sgpo_jax.compare', 'run', '--smoke', '--bootstrap', '50',
         '--results-dir', str(tmp_path / 'results'), '--runs-dir', str(tmp_path / 'runs'),
         '--cache-dir', os.path.join(os.environ.get('SGPO_TEST_CACHE', '/tmp'),
                                     'sgpo_test_warm_start')]
  proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1500,
                        env=dict(os.environ, PYTHONPATH=REPO))
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  results = tmp_path / 'results'
  with open(results / 'compare.json') as f:
    out = json.load(f)
  for key in ('flops_ratio_vs_grpo', 'flops_ratio_vs_dapo', 'final_accuracy', 'regimes',
              'command'):
    assert key in out, key
  block = out['regimes']['smoke']
  assert set(block['arms']) == set(arms.ARMS)
  assert block['seeds_planned'] == [0]
  assert block['head_to_head']['verdict'] in ('ahead', 'behind', 'does not separate')
  for arm in block['arms'].values():
    for key in ('flops_to_target', 'ratio_vs_grpo', 'ratio_vs_dapo', 'final_accuracy', 'auc',
                'seeds', 'trivial_fraction', 'unsolved_fraction', 'epochs_grpo'):
      assert key in arm, key
    assert set(arm['final_accuracy']) >= {'mean', 'std'}
    assert arm['seeds'] == [0]
    assert arm['flops_total_mean'] >= block['flops_budget']  # every run spent the budget
  assert block['arms']['sgpo']['flops_profile_mean'] > 0
  assert (results / 'compare.md').exists()
  assert (results / 'plots' / 'compare_smoke.png').exists()
  # A second call finds every run finished: nothing reruns.
  again = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, PYTHONPATH=REPO))
  assert again.returncode == 0 and '[compare] smoke/' not in again.stdout


# ----------------------------------------------------------------------------------------
# The protocol's statistics on hand-made curves


def test_first_reach_is_where_the_curve_reaches_and_holds_the_target():
  grid = np.arange(6.0)
  # Crosses 0.5 between 2 (0.4) and 3 (0.6): at 2.5; the bump at 1 fell back, so it does not count.
  assert analysis.first_reach(grid, np.array([0, .6, .4, .6, .7, .8]), 0.5) == pytest.approx(2.5)
  # Reached at the last point only: 4 + 0.5 / 0.9 of the way to 5.
  assert analysis.first_reach(grid, np.array([0, 0, 0, 0, 0, .9]), 0.5) == pytest.approx(4 + 5 / 9)
  assert analysis.first_reach(grid, np.zeros(6), 0.5) == float('inf')
  # Ends below the target: never, however long it was above before.
  assert analysis.first_reach(grid, np.array([0, .6, .6, .6, .6, .4]), 0.5) == float('inf')
  # Nothing defined before: no interpolation, the grid point itself.
  assert analysis.first_reach(grid, np.array([0, np.nan, .6, .6, .6, .6]), 0.5) == 2.0
  assert analysis.first_reach(grid, np.full(6, .7), 0.5) == 0.0
  # A late dip moves the crossing past it: 7 + 0.1 / 0.2.
  curve = np.array([0, .6, .6, .6, .6, .6, .6, .4, .6, .6, .6])
  assert analysis.first_reach(np.arange(11.0), curve, 0.5) == pytest.approx(7.5)


def test_grid_is_log_spaced_from_a_fraction_of_the_budget_to_the_budget():
  grid = analysis.make_grid(1.5e12)
  assert grid[0] == 0.0 and grid[-1] == pytest.approx(1.5e12)
  assert grid[1] == pytest.approx(1.5e12 / analysis.GRID_SPAN)
  steps = grid[2:] / grid[1:-1]
  assert np.allclose(steps, steps[0]) and steps[0] < 1.02  # ratios resolved to ~2%


def test_ratio_conventions():
  assert analysis.ratio(6.0, 3.0) == 2.0
  assert analysis.ratio(float('inf'), 3.0) == float('inf')  # only the arm reaches
  assert analysis.ratio(3.0, float('inf')) == 0.0
  assert np.isnan(analysis.ratio(float('inf'), float('inf')))


def _linear_curves(slopes, grid):
  return np.asarray([np.clip(s * grid, 0, 1) for s in slopes])


def test_bootstrap_recovers_a_known_ratio_with_a_tight_interval():
  # The arm learns exactly twice as fast as GRPO on every seed: every resample gives 2x.
  grid = np.linspace(0, 10, 51)
  grpo = _linear_curves([0.08, 0.08, 0.08], grid)  # reaches 0.8 at the budget
  fast = _linear_curves([0.16, 0.16, 0.16], grid)
  curves = {'grpo': grpo, 'fast': fast}
  finals = {'grpo': grpo[:, -1], 'fast': fast[:, -1]}
  boot = analysis.bootstrap_flops(grid, curves, finals, num=200)
  ratios = [analysis.ratio(g, f) for g, f in zip(boot['flops']['grpo'], boot['flops']['fast'])]
  assert analysis.interval(np.array(ratios)) == pytest.approx([2.0, 2.0])
  assert analysis.interval(boot['target']) == pytest.approx([0.8, 0.8])


def test_bootstrap_interval_widens_with_seed_spread_and_covers_the_point():
  grid = np.linspace(0, 10, 101)
  grpo = _linear_curves([0.08, 0.08, 0.08, 0.08, 0.08], grid)
  arm = _linear_curves([0.10, 0.13, 0.16, 0.20, 0.25], grid)
  curves = {'grpo': grpo, 'arm': arm}
  finals = {a: c[:, -1] for a, c in curves.items()}
  boot = analysis.bootstrap_flops(grid, curves, finals, num=400, seed=1)
  ci = analysis.interval(np.array([analysis.ratio(g, f) for g, f in
                                  zip(boot['flops']['grpo'], boot['flops']['arm'])]))
  point = analysis.ratio(analysis.first_reach(grid, grpo.mean(0), 0.8),
                        analysis.first_reach(grid, analysis.seed_mean(arm), 0.8))
  assert ci[0] < point < ci[1]
  # The slowest seed alone reaches 0.8 at 8.0 (ratio 1.25), the fastest at 3.2 (3.125).
  assert 1.25 <= ci[0] and ci[1] <= 3.125 + 1e-9


def test_interval_is_infinite_when_the_arm_often_misses():
  samples = np.array([1.0] * 90 + [np.inf] * 10)
  assert analysis.interval(samples) == [1.0, float('inf')]
  assert analysis.interval(np.array([np.nan, np.nan])) is None


def test_interval_ends_are_replicates_and_undefined_replicates_are_dropped():
  # Why the resampler is not scipy.stats.bootstrap (bootstrap_flops's docstring): its linear
  # quantile would put this upper end at 2.525, and one NaN replicate would make it NaN.
  samples = np.array([1.0] * 96 + [2.0, 3.0, np.inf, np.inf])
  assert analysis.interval(samples) == [1.0, 3.0]
  assert analysis.interval(np.append(samples, [np.nan] * 5)) == [1.0, 3.0]


def test_auc_is_mean_accuracy_over_the_budget():
  grid = np.linspace(0, 4, 5)
  assert analysis.auc(grid, np.array([0.0, .25, .5, .75, 1.0])) == pytest.approx(0.5)
  assert analysis.auc(grid, np.full(5, 0.7)) == pytest.approx(0.7)


def _fake_run(path, seed, xs, ys, method='grpo', wall=10.0):
  os.makedirs(path, exist_ok=True)
  with open(os.path.join(path, 'metrics.jsonl'), 'w') as f:
    for x, y in zip(xs, ys):
      f.write(json.dumps({'flops_total': x, 'eval_accuracy': y}) + '\n')
  summary = {'seed': seed, 'method': method, 'eval_accuracy_initial': ys[0], 'steps': 10,
             'flops': {'total': xs[-1], 'profile': 0.0}, 'padding_fraction': 0.0,
             'wall_seconds': wall}
  with open(os.path.join(path, 'summary.json'), 'w') as f:
    json.dump(summary, f)



def _fake_regime(folder, slopes, seeds, config):
  """Seeds 0..seeds-1 of each arm: a straight eval curve 0.2 + slope x FLOPs over a 100-FLOPs
  budget, and the regime's config.json."""
  xs = np.linspace(0, 100, 11)
  for arm, slope in slopes.items():
    for s in range(seeds):
      path = folder / f'{arm}_seed{s}'
      _fake_run(str(path), s, xs, 0.2 + slope * xs, method=arm)
      (path / 'config.json').write_text(json.dumps(config))

def test_analyse_regime_on_hand_made_runs(tmp_path):
  xs = np.linspace(0, 100, 11)
  runs = {'grpo': [], 'dapo': [], 'fast': []}
  for s in range(3):
    for arm, slope in (('grpo', 0.005), ('dapo', 0.0075), ('fast', 0.01)):
      path = str(tmp_path / f'{arm}_seed{s}')
      _fake_run(path, s, xs, 0.2 + slope * xs, wall=20.0 if arm == 'fast' else 10.0)
      runs[arm].append(path)
  out = analysis.analyse_regime(runs, 100.0, num_bootstrap=100)
  assert out['target_accuracy'] == pytest.approx(0.7)
  a = out['arms']
  assert a['grpo']['flops_to_target']['mean'] == pytest.approx(100.0)
  assert a['fast']['flops_to_target']['mean'] == pytest.approx(50.0)
  assert a['fast']['ratio_vs_grpo']['point'] == pytest.approx(2.0)
  # DAPO crosses 0.7 at 66.7 FLOPs, interpolated between two grid points of a straight line.
  assert a['fast']['ratio_vs_dapo']['point'] == pytest.approx((0.5 / 0.0075) / 50.0)
  assert a['fast']['ratio_vs_grpo']['ci95'] == pytest.approx([2.0, 2.0])
  assert a['fast']['final_accuracy']['mean'] == pytest.approx(1.2)
  assert a['fast']['wall_ratio_vs_grpo'] == pytest.approx(2.0)
  assert a['grpo']['auc'] == pytest.approx(0.45)
  # At DAPO's final accuracy (0.95): DAPO reaches it at the budget, 'fast' at 75 FLOPs.
  bar = a['fast']['at_dapo_final']
  assert bar['target_accuracy'] == pytest.approx(0.95)
  assert bar['flops_to_target']['mean'] == pytest.approx(75.0)
  assert bar['ratio_vs_dapo']['point'] == pytest.approx(100.0 / 75.0)
  assert a['grpo']['at_dapo_final']['flops_to_target']['mean'] is None  # never gets there



def test_a_regime_without_grpo_is_measured_against_dapo(tmp_path):
  """The real regime runs no GRPO (too costly): DAPO's final accuracy is the target, the
  ratios are vs DAPO, 'vs GRPO' is n/a, and the report says so."""
  config = {'data': {'num_eval': 512, 'rl_pool_size': 1024, 'num_train': 2048}, 'model': {},
            'warm_start': {'steps': 0}, 'eval': {'every_steps': 0},
            'train': {'flops_budget': 100.0, 'rows_per_batch': 32}, 'grpo': {'group_size': 8}}
  _fake_regime(tmp_path / 'real', {'dapo': 0.005, 'dapo_g4': 0.01}, 3, config)
  results = analysis.analyse(str(tmp_path), ['real'], ['dapo', 'dapo_g4'], [0, 1, 2], 'cmd',
                             100, headline=('real', 'dapo_g4'), pair=('dapo_g4', 'dapo'))
  block = results['regimes']['real']
  assert block['reference'] == 'dapo' and block['target_accuracy'] == pytest.approx(0.7)
  fast = block['arms']['dapo_g4']
  assert fast['flops_to_target']['mean'] == pytest.approx(50.0)  # 0.7 at half the budget
  assert fast['ratio_vs_dapo']['point'] == pytest.approx(2.0)
  assert fast['ratio_vs_grpo']['point'] is None and fast['wall_ratio_vs_grpo'] is None
  assert block['epochs_grpo'] is None and block['head_to_head']['verdict'] == 'ahead'
  text = report.render(results)
  assert ("**The target is DAPO's mean final accuracy** (no GRPO run in this regime" in text
          and '("vs GRPO" is n/a)' in text)
  assert 'GRPO did not improve' not in text


def test_no_grpo_runs_only_the_named_arms_and_needs_dapo(capsys):
  from sgpo_jax.compare import __main__ as cli
  parser = argparse.ArgumentParser()
  cli._add_protocol_args(parser)
  args = parser.parse_args(['--arms', 'dapo,dapo_g4', '--no-grpo'])
  assert list(cli._selected_arms(parser, args)) == ['dapo', 'dapo_g4']
  args = parser.parse_args(['--arms', 'dapo,dapo_g4'])
  assert list(cli._selected_arms(parser, args)) == ['grpo', 'dapo', 'dapo_g4']
  args = parser.parse_args(['--arms', 'dapo_g4', '--no-grpo'])
  with pytest.raises(SystemExit):
    cli._selected_arms(parser, args)
  assert '--no-grpo: the report then needs dapo among --arms' in capsys.readouterr().err

def test_arms_and_seed_parsing():
  assert arms.parse_seeds('0-2,5') == [0, 1, 2, 5]
  name, (method, over) = arms.parse_arm('x=sgpo,sgpo.group_sizes=(4,8),profile.num_samples=2')
  assert (name, method, over) == ('x', 'sgpo', {'sgpo.group_sizes': '(4,8)',
                                                'profile.num_samples': 2})
  entries = arms.run_entries(['a', 'b'], {'grpo': ('grpo', {}), 'dapo': ('dapo', {})},
                                [0, 1], {})
  assert [(e['seed'], e['regime'], e['arm']) for e in entries][:4] == [
      (0, 'a', 'grpo'), (0, 'a', 'dapo'), (0, 'b', 'grpo'), (0, 'b', 'dapo')]


def test_bucket_settled_only_when_no_remaining_sample_can_change_the_bucket():
  from sgpo_jax.allocators.sgpo import allocation as allocation_lib
  cfg = default_config.get_config().sgpo
  for n in range(1, 9):
    for c in range(n + 1):
      finals = {allocation_lib.profile_bucket(c + extra, 8, cfg) for extra in range(8 - n + 1)}
      expected = len(finals) == 1 and finals == {allocation_lib.profile_bucket(c, n, cfg)}
      assert allocation_lib.bucket_settled(c, n, 8, cfg) == expected, (c, n)
  assert not allocation_lib.bucket_settled(0, 7, 8, cfg)  # one more sample may still solve it
  assert allocation_lib.bucket_settled(3, 5, 8, cfg)  # 3..6 of 8 are all G=2
  assert allocation_lib.bucket_settled(7, 7, 8, cfg)  # 7/8 and 8/8 are both trivial


@pytest.mark.slow
def test_profile_early_stop_keeps_every_bucket_and_saves_flops(tmp_path):
  from sgpo_jax.allocators.sgpo import allocation as allocation_lib
  out = {}
  for early in (False, True):
    config = tiny_run_config('sgpo')
    config.profile.early_stop = early
    config.sgpo.trivial_threshold = 0.75
    workdir = str(tmp_path / str(early))
    summary = train.run(config, workdir, stop_after='profile', show_progress=False)
    rows = {r['id']: r for r in read_jsonl(os.path.join(workdir, 'profile.jsonl'))}
    out[early] = rows
  assert out[True].keys() == out[False].keys()
  saved = 0
  for qi, full in out[False].items():
    part = out[True][qi]
    assert full['n_samples'] == 8 and 1 <= part['n_samples'] <= 8
    assert allocation_lib.profile_bucket(part['n_correct'], part['n_samples'], config.sgpo) == \
        allocation_lib.profile_bucket(full['n_correct'], 8, config.sgpo)
    saved += 8 - part['n_samples']
  del summary
  assert saved >= 0


def test_fill_phase_tail_tops_up_the_last_batch_of_a_phase():
  from sgpo_jax import allocators
  from sgpo_jax.allocators.sgpo import allocation as allocation_lib
  profile = {'n_correct': [4] * 10 + [2] * 6 + [1] * 3, 'n_samples': [8] * 19}
  out = {}
  for fill in (False, True):
    cfg = {'fill_phase_tail': fill, 'unsolved_keep_fraction': 0.0}
    alloc = allocators.SGPOAllocator(allocation_lib.allocate(profile, cfg, 0), cfg, 16, 0, 19)
    plans = [alloc.next_plan() for _ in range(6)]
    out[fill] = [p.rows(16).padding_fraction for p in plans]
    if fill:  # a cycle is 10 x G2 + 6 x G4 + 3 x G8 = 68 rows: all 19 queries in 6 batches
      assert len({int(q) for p in plans for q in p.query_index}) == 19
  assert max(out[False]) > 0  # the G2 phase's 20 rows leave a half-empty second batch
  assert sum(out[True]) < sum(out[False])


def test_runs_of_another_regime_definition_are_left_out(tmp_path):
  base = {'data': {'num_eval': 2048}, 'model': {}, 'warm_start': {'steps': 1500, 'cache_dir': 'a'},
          'train': {'flops_budget': 1e12, 'rows_per_batch': 64}, 'eval': {'every_steps': 12}}
  moved = json.loads(json.dumps(base))
  moved['data']['num_eval'] = 512  # an older definition of the same regime
  for name, config in (('grpo_seed0', base), ('dapo_seed0', dict(base, warm_start={
      'steps': 1500, 'cache_dir': 'b'})), ('dapo_seed1', moved)):
    path = tmp_path / 'r' / name
    _fake_run(str(path), 0, [0.0, 1e12], [0.2, 0.3])
    (path / 'config.json').write_text(json.dumps(config))
  runs = analysis.finished_runs(str(tmp_path), 'r', ['grpo', 'dapo'], [0, 1], log=lambda m: None)
  assert [os.path.basename(w) for w in runs['dapo']] == ['dapo_seed0']  # cache_dir may differ


def test_a_model_field_added_later_at_its_default_keeps_the_regime():
  old = {'data': {'num_eval': 2048}, 'model': {'d_model': 128},
         'warm_start': {'steps': 1500}, 'train': {'flops_budget': 1e12, 'rows_per_batch': 64},
         'eval': {'every_steps': 12}}
  new = json.loads(json.dumps(old))
  new['model']['qk_norm'] = False  # the default: older runs behaved the same
  assert analysis.regime_signature(old) == analysis.regime_signature(new)
  new['model']['qk_norm'] = True
  assert analysis.regime_signature(old) != analysis.regime_signature(new)


def test_bayes_diagnostics_on_a_hand_made_run(tmp_path):
  from sgpo_jax.compare import __main__ as cli
  from sgpo_jax.compare import diagnostics as diagnostics_lib
  path = tmp_path / 'default' / 'sgpo_bayes_seed0'
  os.makedirs(path)
  rows = [{'step': 1, 'reward_mean': 0.5, 'padding_fraction': 0.0, 'rounds': 3,
           'train_rounds': 2, 'frac_zero_std': 0.0, 'dapo_dropped_groups': 6,
           'dapo_kept_groups': 10},
          {'step': 2, 'reward_mean': 0.5, 'padding_fraction': 0.25, 'rounds': 2,
           'train_rounds': 2, 'frac_zero_std': 0.0, 'dapo_dropped_groups': 2,
           'dapo_kept_groups': 6}]
  (path / 'metrics.jsonl').write_text(
      '\n'.join(json.dumps(r) for r in [{'step': 0, 'eval_accuracy': 0.6}] + rows) + '\n')
  (path / 'summary.json').write_text(json.dumps({
      'eval_accuracy_final': 0.7, 'wall_seconds': 30.0, 'initial_policy': {'cached': True},
      'flops': {'total': 100.0, 'profile': 10.0, 'rollout': 30.0, 'train': 60.0, 'eval': 80.0},
      'allocator': {'overflow_groups': 3, 'refills_skipped': 1, 'revisits': 10,
                    'revisits_back': 4}}))
  d = diagnostics_lib.run_diagnostics(str(path))
  assert d['final_acc'] == pytest.approx(70.0)
  # Shares of the budgeted total (eval is outside it).
  assert (d['profile_share'], d['rollout_share'], d['train_share']) == (0.1, 0.3, 0.6)
  assert d['calls_per_step'] == 2.5 and d['train_rounds_per_step'] == 2.0
  assert d['rolled_all_equal'] == pytest.approx(8 / 24) and d['padding'] == 0.125
  assert d['overflow_per_step'] == 1.5 and d['refills_skipped_per_step'] == 0.5
  assert d['revisit_back_share'] == 0.4 and d['wall_s'] == 30.0
  assert d['sparse_steps'] == 0.0 and 'epoch_cuts' not in d
  assert diagnostics_lib.sparse_share([0.0, 0.75, 0.9, 0.5]) == 0.5
  out = tmp_path / 'diag.md'
  assert cli.main(['diagnose', '--runs-dir', str(tmp_path), '--regime', 'default', '--arms',
                   'sgpo_bayes', '--seeds', '0', '--out', str(out)]) == 0
  assert '| sgpo_bayes | 1 | 70.0 | 10.0% | 30.0% | 60.0% | 2.50 | 2.00 | 33.3% |' \
      in out.read_text()
  # Archived before pool coverage and filled_share: n/a, and 1 - padding for the latter.
  assert np.isnan(d['never_sampled_share']) and d['filled_share'] == 0.875
  assert '| 12.5% | n/a | 87.5% | n/a | n/a | 0.0% |' in out.read_text()
  # Recorded: the share of the pool trained on and the top tenth's share of those groups.
  summary = json.loads((path / 'summary.json').read_text())
  summary['pool_coverage'] = {'pool_size': 10, 'sampled': 8, 'never_sampled_share': 0.2,
                              'trained_groups': 12, 'trained_prompts_share': 0.6,
                              'top_decile_trained_share': 0.25}
  (path / 'summary.json').write_text(json.dumps(summary))
  assert cli.main(['diagnose', '--runs-dir', str(tmp_path), '--regime', 'default', '--arms',
                   'sgpo_bayes', '--seeds', '0', '--out', str(out)]) == 0
  assert '| 12.5% | 20.0% | 87.5% | 60.0% | 25.0% | 0.0% |' in out.read_text()


def test_accuracy_by_optimizer_step_on_hand_made_runs(tmp_path):
  """The step table: accuracy linear between evals on the step axis, FLOPs per step, and a
  seed that stopped before a mark left out of that mark's mean (counted in brackets)."""
  from sgpo_jax.compare import diagnostics as diagnostics_lib

  def write(name, evals, steps, total):
    path = tmp_path / name
    os.makedirs(path)
    rows = [{'step': s, 'reward_mean': 0.5} for s in range(1, steps + 1)]
    rows += [{'step': s, 'eval_accuracy': a} for s, a in evals]
    (path / 'metrics.jsonl').write_text('\n'.join(json.dumps(r) for r in rows) + '\n')
    (path / 'summary.json').write_text(json.dumps({'flops': {'total': total}}))
    return str(path)
  a = write('a', [(0, 0.5), (16, 0.6), (48, 0.8)], 48, 4.8e6)
  b = write('b', [(0, 0.5), (30, 0.8)], 30, 6e6)
  at = diagnostics_lib.accuracy_at_steps(a)
  assert at[10] == pytest.approx(50 + 10 * 10 / 16) and at[20] == pytest.approx(62.5)
  assert at[40] == pytest.approx(75.0) and np.isnan(at[80])
  table = diagnostics_lib.step_table({'x': [a, b]}).splitlines()
  # FLOPs per step (1e5, 2e5) -> 1.5e5; step 10: (56.25 + 60) / 2; step 40: seed a only.
  assert table[2] == '| x | 2 | 1.5e+05 | 58.1 | 66.2 | 75.0 (1) |  |'


def test_calibration_table_pools_the_seeds_by_their_group_counts(tmp_path):
  """Shares weighted by each seed's groups (not a mean of per-seed shares); kinds without
  a group left out; arms whose summary has no calibration (every arm but sgpo_select, and
  runs from before it was kept) give no table."""
  from sgpo_jax.compare import diagnostics as diagnostics_lib

  def write(name, calibration):
    path = tmp_path / name
    os.makedirs(path)
    (path / 'metrics.jsonl').write_text('')
    (path / 'summary.json').write_text(json.dumps({'allocator': {'calibration': calibration}}))
    return str(path)
  none = {'groups': 0, 'expected_informative_share': None, 'informative_share': None}
  a = write('a', {'unseen': {'groups': 30, 'expected_informative_share': 0.5,
                             'informative_share': 0.2},
                  'trained_since': {'groups': 10, 'expected_informative_share': 0.9,
                                    'informative_share': 0.5},
                  'untrained_since': none})
  b = write('b', {'unseen': {'groups': 10, 'expected_informative_share': 0.1,
                             'informative_share': 0.6},
                  'trained_since': none, 'untrained_since': none})
  old = write('old', None)
  lines = diagnostics_lib.calibration_table({'sel': [a, b], 'dapo': [old]}).splitlines()
  # unseen: 40 of 50 groups; expected (15 + 1) / 40 = 40%; informative (6 + 6) / 40 = 30%.
  assert lines[-2:] == ['| sel | 2 | unseen | 40 (80.0%) | 40.0% | 30.0% |',
                        '| sel | 2 | trained_since | 10 (20.0%) | 90.0% | 50.0% |']
  assert diagnostics_lib.calibration_table({'dapo': [old]}) == ''


def test_where_the_flops_go_on_hand_made_runs_and_old_runs_read_n_a(tmp_path):
  """Issue 53: wasted (all-equal) groups, pool never sampled, rounds per step and filled
  share, per run and as seed means in compare.json; runs from before the trainer kept pool
  coverage and filled_share give n/a (or 1 - padding), never an error."""
  from sgpo_jax.compare import diagnostics as diagnostics_lib
  from sgpo_jax.compare import report
  new = {'pool_coverage': {'pool_size': 10, 'sampled': 4, 'never_sampled_share': 0.6}}
  new_rows = [{'reward_mean': 0.5, 'rounds': 1, 'frac_zero_std': 0.25, 'filled_share': 1.0},
              {'reward_mean': 0.5, 'rounds': 3, 'train_rounds': 2, 'frac_zero_std': 0.75,
               'filled_share': 0.5},
              # A skipped step: no group had reward spread, so all of them were wasted.
              {'reward_mean': 0.0, 'rounds': 2, 'skipped_step': 1, 'filled_share': 0.75}]
  d = diagnostics_lib.flops_breakdown(new, new_rows)
  assert d == {'all_equal_share': pytest.approx(2 / 3), 'never_sampled_share': 0.6,
               'rounds_per_step': 2.0, 'train_rounds_per_step': pytest.approx(5 / 3),
               'filled_share': 0.75}
  # An allocator's own count of its rolled-out groups wins (sgpo_bayes, sgpo_select).
  select = dict(new, allocator={'informative_group_share': 0.8,
                                'expected_informative_share': 0.7})
  assert diagnostics_lib.flops_breakdown(select, new_rows)['all_equal_share'] == \
      pytest.approx(0.2)
  # Before filled_share: 1 - padding; before padding_fraction too, or no pool_coverage: NaN.
  old_rows = [{'reward_mean': 0.5, 'padding_fraction': 0.25, 'frac_zero_std': 0.5}]
  old = diagnostics_lib.flops_breakdown({}, old_rows)
  assert old['filled_share'] == 0.75 and np.isnan(old['never_sampled_share'])
  assert old['rounds_per_step'] == 1.0 and old['all_equal_share'] == 0.5
  assert np.isnan(diagnostics_lib.flops_breakdown({}, [{'reward_mean': 0.5}])['filled_share'])
  # compare.json's block: seed means over the seeds that recorded each number.
  xs = np.linspace(0, 100, 11)
  runs = {'grpo': [], 'dapo': []}
  for arm in runs:
    for s in range(2):
      path = str(tmp_path / f'{arm}_seed{s}')
      _fake_run(path, s, xs, 0.2 + 0.005 * xs, method=arm)
      runs[arm].append(path)
  with open(os.path.join(runs['grpo'][0], 'metrics.jsonl'), 'a') as f:
    f.write(''.join(json.dumps(r) + '\n' for r in new_rows))
  with open(os.path.join(runs['grpo'][0], 'summary.json')) as f:
    summary = json.load(f)
  with open(os.path.join(runs['grpo'][0], 'summary.json'), 'w') as f:
    json.dump(dict(summary, **new), f)
  with open(os.path.join(runs['grpo'][1], 'metrics.jsonl'), 'a') as f:
    f.write(''.join(json.dumps(r) + '\n' for r in old_rows))
  out = analysis.analyse_regime(runs, 100.0, num_bootstrap=20)
  grpo, dapo = out['arms']['grpo']['where_flops_go'], out['arms']['dapo']['where_flops_go']
  assert grpo == {'all_equal_share': pytest.approx((2 / 3 + 0.5) / 2),
                  'never_sampled_share': 0.6, 'rounds_per_step': 1.5,
                  'train_rounds_per_step': pytest.approx((5 / 3 + 1) / 2),
                  'filled_share': 0.75}
  assert dapo == dict.fromkeys(grpo)  # no step rows at all: every number n/a
  assert 'zero_variance_share' in out['arms']['grpo']  # the existing fields stay
  json.dumps(out)
  lines = report.where_flops_table(out['arms'])
  assert '| grpo | 58.3 | 60.0 | 1.50 (1.33) | 75.0 |' in lines
  assert '| dapo | n/a | n/a | n/a | n/a |' in lines


def test_a_run_locked_by_another_sweep_process_is_skipped_not_rerun(tmp_path):
  """Two sweep processes over one runs dir: the second skips a run the first is running."""
  import fcntl
  entry = {'regime': 'paper_like', 'name': 'grpo_seed0', 'overrides': {'method': 'grpo'}}
  workdir = tmp_path / 'paper_like' / 'grpo_seed0'
  workdir.mkdir(parents=True)
  logs = []
  with open(workdir / runner.RUN_LOCK, 'w') as held:
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    # A lock held through another open file description blocks, as another process's would.
    assert runner.run_one(entry, str(tmp_path), '/nonexistent-code-dir', logs.append) is None
  assert 'another sweep process is running it' in logs[-1]
  assert not (workdir / 'stdout.log').exists()  # nothing was started
  (workdir / 'summary.json').write_text('{}')  # finished: reported done, not rerun
  assert runner.run_one(entry, str(tmp_path), '/nonexistent-code-dir', logs.append) is True


def test_runs_from_another_initial_policy_are_left_out_and_the_machine_is_reported(tmp_path):
  # Same config, but dapo_seed1's warm start was built elsewhere: another SFT final loss
  # and initial accuracy (as measured across two machines: 0.249 vs 0.312).
  config = {'data': {'num_eval': 2048}, 'model': {}, 'warm_start': {'steps': 1500},
            'train': {'flops_budget': 1e12, 'rows_per_batch': 64}, 'eval': {'every_steps': 12}}
  env = {'cpu': {'model': 'Xeon', 'features': ['avx2', 'avx512f']},
         'packages': {'jax': '0.10.2', 'jaxlib': '0.10.2', 'flax': '0.12.8'}}
  for name, loss, initial in (('grpo_seed0', 0.249, 0.2), ('dapo_seed0', 0.249, 0.2),
                              ('dapo_seed1', 0.312, 0.25)):
    path = tmp_path / 'r' / name
    _fake_run(str(path), 0, [0.0, 1e12], [initial, 0.3])
    (path / 'config.json').write_text(json.dumps(config))
    summary = json.loads((path / 'summary.json').read_text())
    summary['initial_policy'] = {'final_loss': loss}
    if name != 'dapo_seed0':
      summary['environment'] = env
    (path / 'summary.json').write_text(json.dumps(summary))
  logs = []
  runs = analysis.finished_runs(str(tmp_path), 'r', ['grpo', 'dapo'], [0, 1], log=logs.append)
  assert [os.path.basename(w) for w in runs['dapo']] == ['dapo_seed0']
  assert any('dapo_seed1: another initial policy' in m and '(0.312, 0.25) vs (0.249, 0.2)' in m
             for m in logs)
  line = analysis.machine_line(runs['grpo'] + runs['dapo'])
  assert line == 'Xeon (avx2, avx512f), jax 0.10.2, jaxlib 0.10.2, flax 0.12.8 (1 runs without a record)'
  assert analysis.machine_line([str(tmp_path / 'r' / 'dapo_seed0')]).startswith('machine not recorded')


def test_environment_describes_versions_and_cpu(tmp_path):
  from sgpo_jax.outputs import environment
  cpuinfo = tmp_path / 'cpuinfo'
  cpuinfo.write_text('processor : 0\nmodel name : Test CPU 9000\nflags : fpu sse avx2 fma amx_tile\n')
  assert environment.cpu_info(str(cpuinfo)) == {'model': 'Test CPU 9000',
                                                'features': ['amx_tile', 'avx2', 'fma']}
  d = environment.describe()
  assert d['packages']['jax'] and d['backend'] == 'cpu' and json.dumps(d)


def test_cli_report_writes_the_compare_files_from_finished_runs_and_names_bad_arms(tmp_path,
                                                                                    capsys):
  from sgpo_jax.compare import __main__ as cli
  config = {'data': {'num_eval': 2048, 'rl_pool_size': 0, 'num_train': 640}, 'model': {},
            'warm_start': {'steps': 1500}, 'eval': {'every_steps': 12},
            'train': {'flops_budget': 100.0, 'rows_per_batch': 64}, 'grpo': {'group_size': 8}}
  _fake_regime(tmp_path / 'runs' / 'paper_like', {'grpo': 0.005, 'dapo': 0.0075}, 2, config)
  out = tmp_path / 'results'
  args = ['--regimes', 'paper_like', '--arms', 'grpo,dapo', '--seeds', '0-1', '--runs-dir',
          str(tmp_path / 'runs'), '--results-dir', str(out), '--bootstrap', '50']
  assert cli.main(['report'] + args) == 0
  text = (out / 'compare.json').read_text()
  results = json.loads(text)
  # Compact: one line, curves to 4 decimals; compare.md is rendered from what it holds.
  assert text.count('\n') == 1 and text.endswith('}\n')
  assert all(v is None or round(v, 4) == v for v in
             results['regimes']['paper_like']['arms']['dapo']['mean_curve'])
  assert (out / 'compare.md').read_text() == report.render(results)
  assert results['command'] == 'python -m sgpo_jax.compare report ' + ' '.join(args)
  block = results['regimes']['paper_like']
  assert set(block['arms']) == {'grpo', 'dapo'} and block['epochs_grpo'] == 10 * 8 / 640
  # GRPO ends at 0.7; DAPO's line reaches it at 2/3 of the budget: 1.5x fewer FLOPs.
  assert block['arms']['dapo']['ratio_vs_grpo']['point'] == pytest.approx(1.5, rel=0.03)
  assert (out / 'compare.md').exists() and (out / 'plots' / 'compare_paper_like.png').exists()
  with pytest.raises(SystemExit):
    cli.main(['run', '--arms', 'grpo,nope', '--runs-dir', str(tmp_path / 'x')])
  assert "--arms: unknown ['nope']" in capsys.readouterr().err
  # No finished GRPO run: no report, a non-zero exit and the reason.
  assert cli.main(['report', '--regimes', 'default', '--runs-dir', str(tmp_path / 'runs'),
                   '--results-dir', str(tmp_path / 'none')]) == 1
  assert 'no finished GRPO or DAPO run' in capsys.readouterr().err


def test_compact_results_rounds_the_curves_and_the_grid_only():
  arm = {'mean_curve': [0.123456, None], 'band_curve': {'lo': [0.11116], 'hi': [0.99999]},
         'auc': 0.123456789, 'final_accuracy': {'mean': 0.123456789, 'per_seed': [0.1234567]},
         'ratio_vs_dapo': {'point': 1.23456789, 'ci95': [0.123456789, None]}}
  results = {'command': 'x', 'regimes': {'r': {
      'grid_flops': [0.0, 123456789.0], 'target_accuracy': 0.123456789, 'arms': {'a': arm},
      'head_to_head': {'lo': 0.123456789}}}}
  out = report.compact_results(results)
  block = out['regimes']['r']
  assert block['grid_flops'] == [0.0, 123500000.0]
  assert block['arms']['a']['mean_curve'] == [0.1235, None]
  assert block['arms']['a']['band_curve'] == {'lo': [0.1112], 'hi': [1.0]}
  # Every number compare.md prints is left as it was ('lo' outside band_curve included).
  for key in ('auc', 'final_accuracy', 'ratio_vs_dapo'):
    assert block['arms']['a'][key] == arm[key]
  assert block['target_accuracy'] == 0.123456789 and block['head_to_head'] == {'lo': 0.123456789}
  assert report.compact_results(out) == out and results['regimes']['r']['arms']['a'] is arm
  assert arm['mean_curve'] == [0.123456, None]  # the input is not changed


def test_head_to_head_on_hand_made_finals_and_curves():
  grid = np.linspace(0, 100, 101)
  # Arm finals 0.80/0.82, control 0.70/0.72: +10 points, every resample agrees.
  curves = {'arm': np.stack([np.minimum(grid / 50, 1) * f for f in (0.80, 0.82)]),
            'ctl': np.stack([np.minimum(grid / 100, 1) * f for f in (0.70, 0.72)]),
            'dapo': np.stack([np.minimum(grid / 100, 1) * f for f in (0.70, 0.72)])}
  finals = {a: c[:, -1] for a, c in curves.items()}
  boot = analysis.bootstrap_flops(grid, curves, finals, 'dapo', num=200, seed=1)
  out = analysis.head_to_head(grid, curves, finals, 'arm', 'ctl', 0.71, boot, num=200)
  assert out['final_accuracy_diff']['point'] == pytest.approx(0.10)
  lo, hi = out['final_accuracy_diff']['ci95']
  assert 0.08 - 1e-9 <= lo <= hi <= 0.12 + 1e-9
  # 0.71 is reached by the arm's mean line (slope 0.81/50) at 43.8, by the control at 100.
  assert out['flops_ratio_at_dapo_final']['point'] == pytest.approx(100 / (0.71 / 0.81 * 50),
                                                                    rel=0.02)
  assert out['verdict'] == 'ahead'
  # Swapped: the same numbers from the other side.
  back = analysis.head_to_head(grid, curves, finals, 'ctl', 'arm', 0.71, boot, num=200)
  assert back['final_accuracy_diff']['point'] == pytest.approx(-0.10)
  assert back['verdict'] == 'behind'
  # Overlapping finals (0.70/0.80 vs 0.72/0.78) and no DAPO bar: no separation.
  finals2 = {'arm': np.array([0.70, 0.80]), 'ctl': np.array([0.72, 0.78])}
  tie = analysis.head_to_head(grid, curves, finals2, 'arm', 'ctl', None, None, num=200)
  assert tie['final_accuracy_diff']['point'] == pytest.approx(0.0)
  assert tie['flops_ratio_at_dapo_final']['point'] is None
  assert tie['verdict'] == 'does not separate'


def test_head_to_head_verdict_mirrors_and_needs_a_defined_flops_interval():
  grid = np.linspace(0, 100, 101)
  finals = {'arm': np.array([0.70, 0.80]), 'ctl': np.array([0.72, 0.78])}  # diff spans 0
  # The arm reaches 0.71 at 50 FLOPs on both seeds, the control never does: every resample's
  # ratio is +inf, an interval [inf, inf] that lies above 1 (its JSON form reads [None, None]).
  curves = {'arm': np.stack([np.minimum(grid / 50, 1) * 0.71] * 2),
            'ctl': np.stack([np.full(grid.size, 0.5)] * 2),
            'dapo': np.stack([np.minimum(grid / 100, 1) * 0.71] * 2)}
  boot = analysis.bootstrap_flops(grid, curves, finals | {'dapo': curves['dapo'][:, -1]},
                                  'dapo', num=200, seed=1)
  ahead = analysis.head_to_head(grid, curves, finals, 'arm', 'ctl', 0.71, boot, num=200)
  behind = analysis.head_to_head(grid, curves, finals, 'ctl', 'arm', 0.71, boot, num=200)
  assert ahead['flops_ratio_at_dapo_final']['ci95'] == [None, None]
  assert behind['flops_ratio_at_dapo_final']['ci95'] == [0.0, 0.0]
  assert (ahead['verdict'], behind['verdict']) == ('ahead', 'behind')
  # Neither reaches in most resamples (the control never, the arm on one seed of two): the
  # defined replicates are a subset, so the FLOPs leg decides nothing either way.
  curves['arm'] = np.stack([np.minimum(grid / 50, 1) * 0.9, np.full(grid.size, 0.3)])
  boot = analysis.bootstrap_flops(grid, curves, finals | {'dapo': curves['dapo'][:, -1]},
                                  'dapo', num=200, seed=1)
  for a, c in (('arm', 'ctl'), ('ctl', 'arm')):
    out = analysis.head_to_head(grid, curves, finals, a, c, 0.71, boot, num=200)
    assert out['flops_ratio_at_dapo_final']['undefined_fraction'] > analysis.MAX_UNDEFINED
    assert out['verdict'] == 'does not separate'


def test_an_explicit_reference_and_required_arms_decide_target_and_completeness(tmp_path):
  """The real regime's rule: DAPO's final accuracy is the target even where GRPO ran (as a
  reference arm), and the regime is complete only when every required arm has every planned
  seed; an arm with no finished run at all counts as missing."""
  config = {'data': {'num_eval': 512, 'rl_pool_size': 1024, 'num_train': 2048}, 'model': {},
            'warm_start': {'steps': 0}, 'eval': {'every_steps': 0},
            'train': {'flops_budget': 100.0, 'rows_per_batch': 32}, 'grpo': {'group_size': 8}}
  _fake_regime(tmp_path / 'real', {'grpo': 0.004, 'dapo': 0.005, 'dapo_g4': 0.01}, 3, config)
  kw = dict(headline=('real', 'dapo_g4'), pair=('dapo_g4', 'dapo'))
  auto = analysis.analyse(str(tmp_path), ['real'], ['grpo', 'dapo', 'dapo_g4', 'sgpo_bayes_g24'],
                          [0, 1, 2], 'cmd', 100, **kw)['regimes']['real']
  assert auto['reference'] == 'grpo' and auto['target_accuracy'] == pytest.approx(0.6)
  assert not auto['complete'] and auto['seeds_missing'] == {'sgpo_bayes_g24': [0, 1, 2]}
  told = analysis.analyse(str(tmp_path), ['real'], ['grpo', 'dapo', 'dapo_g4'], [0, 1, 2],
                          'cmd', 100, reference='dapo', required=['dapo', 'dapo_g4'],
                          **kw)['regimes']['real']
  assert told['reference'] == 'dapo' and told['target_accuracy'] == pytest.approx(0.7)
  assert told['complete'] and told['seeds_missing'] == {}
  assert told['arms']['dapo_g4']['ratio_vs_dapo']['point'] == pytest.approx(2.0)
  text = report.render({'command': 'cmd', 'regimes': {'real': told}, 'headline': 'real/dapo_g4',
                        'flops_ratio_vs_grpo': None, 'flops_ratio_vs_dapo': None,
                        'final_accuracy': None})
  assert "**The target is DAPO's mean final accuracy** (GRPO ran here as a reference only" in text
  assert 'Partial' not in text
  # 3 seeds: C(5, 3) = 10 distinct resamples at most (seeds drawn with replacement, unordered)
  assert '**Few seeds:** an arm with 3 seeds has at most 10 distinct bootstrap resamples' in text


def test_regime_seeds_plan_seed_major_runs_and_a_partial_report(tmp_path):
  entries = arms.run_entries(['a', 'b'], {'grpo': ('grpo', {})}, [0, 1], {}, {'a': [0, 1, 2]})
  assert [(e['seed'], e['regime']) for e in entries] == [(0, 'a'), (0, 'b'), (1, 'a'),
                                                         (1, 'b'), (2, 'a')]
  from sgpo_jax.compare import __main__ as cli
  config = {'data': {'num_eval': 100, 'rl_pool_size': 0, 'num_train': 640}, 'model': {},
            'warm_start': {'steps': 1500}, 'eval': {'every_steps': 12},
            'train': {'flops_budget': 100.0, 'rows_per_batch': 64}, 'grpo': {'group_size': 8}}
  xs = np.linspace(0, 100, 11)
  for regime, seeds in (('paper_like', range(3)), ('default', range(2))):
    for arm, slope in (('grpo', 0.005), ('dapo', 0.0075), ('dapo_g4', 0.007),
                       ('sgpo_bayes_g24', 0.0075)):
      for s in seeds:
        if (regime, arm, s) == ('paper_like', 'dapo_g4', 2):
          continue  # one planned run missing: the table says partial
        path = tmp_path / 'runs' / regime / f'{arm}_seed{s}'
        _fake_run(str(path), s, xs, 0.2 + (slope + 1e-4 * s) * xs, method=arm)
        (path / 'config.json').write_text(json.dumps(config))
  out = tmp_path / 'results'
  assert cli.main(['report', '--regimes', 'paper_like,default', '--arms',
                   'grpo,dapo,dapo_g4,sgpo_bayes_g24', '--seeds', '0-1', '--regime-seeds',
                   'paper_like=0-2', '--runs-dir', str(tmp_path / 'runs'), '--results-dir',
                   str(out), '--bootstrap', '50']) == 0
  results = json.loads((out / 'compare.json').read_text())
  pl, de = results['regimes']['paper_like'], results['regimes']['default']
  assert pl['seeds_planned'] == [0, 1, 2] and de['seeds_planned'] == [0, 1]
  assert pl['arms']['sgpo_bayes_g24']['seeds'] == [0, 1, 2]
  assert pl['arms']['dapo_g4']['seeds'] == [0, 1]
  assert results['headline'] == 'paper_like/sgpo_bayes_g24'
  assert results['final_accuracy']['mean'] == pytest.approx(0.2 + 0.75 + 0.01)
  h2h = de['head_to_head']
  assert (h2h['arm'], h2h['control']) == ('sgpo_bayes_g24', 'dapo_g4')
  assert h2h['final_accuracy_diff']['point'] == pytest.approx(0.05)
  md = (out / 'compare.md').read_text()
  assert '**Partial:** required arms without all 3 planned seeds (missing): dapo_g4 (2)' in md
  assert 'Head-to-head, `sgpo_bayes_g24` vs `dapo_g4`' in md
  with pytest.raises(SystemExit):
    cli.main(['report', '--regimes', 'default', '--regime-seeds', 'nope=0-2'])


def test_report_flags_arms_with_few_seeds_and_only_those(tmp_path):
  """Below 5 seeds in an arm the report says its bootstrap intervals are coarse, with the
  count of distinct resamples (4 seeds: C(7, 4) = 35); with 5 in every arm it says nothing."""
  config = {'data': {'num_eval': 512, 'rl_pool_size': 1024, 'num_train': 2048}, 'model': {},
            'warm_start': {'steps': 0}, 'eval': {'every_steps': 0},
            'train': {'flops_budget': 100.0, 'rows_per_batch': 32}, 'grpo': {'group_size': 8}}
  _fake_regime(tmp_path / 'r', {'grpo': 0.004, 'dapo': 0.005}, 5, config)

  def render():
    return report.render(analysis.analyse(str(tmp_path), ['r'], ['grpo', 'dapo'],
                                          [0, 1, 2, 3, 4], 'cmd', 50))
  assert 'Few seeds' not in render()
  shutil.rmtree(tmp_path / 'r' / 'dapo_seed4')
  assert '**Few seeds:** an arm with 4 seeds has at most 35 distinct' in render()
