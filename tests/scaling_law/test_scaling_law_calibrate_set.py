"""`python -m sgpo_jax.scaling_law calibrate-set`: the calibration sets the package ships, built
from run folders or trajectories files (sgpo_jax/scaling_law/calibration_set.py)."""

import json
import lzma
from pathlib import Path

import pytest

from sgpo_jax.scaling_law import __main__ as cli
from sgpo_jax.scaling_law.calibration import CalibrationSet, read_json_text
from sgpo_jax.scaling_law.early_stop import STOP_CALIBRATION_PATH
from sgpo_jax.scaling_law.runs import write_synthetic_run

FIXTURES = Path(__file__).resolve().parents[1] / 'fixtures'


def _runs(root, seeds=(0, 1), arms=('grpo', 'dapo')):
  dirs = []
  for seed in seeds:
    for k, arm in enumerate(arms):
      run = write_synthetic_run(root / 'default' / f'{arm}_seed{seed}', 'exponential',
                                {'r0': 0.5, 'r_inf': 0.6 + 0.02 * k + 0.01 * seed,
                                 'tau': 0.2}, 60, eval_every=3, seed=seed)
      (run / 'config.json').write_text(json.dumps({'method': arm, 'regime': 'default'}))
      dirs.append(str(run))
  return dirs


@pytest.mark.slow
def test_a_set_from_run_folders_equals_the_set_from_their_dumped_trajectories(tmp_path):
  dirs = _runs(tmp_path)
  folders, dumped, replayed = (tmp_path / n for n in ('a.json', 'runs.json', 'b.json'))
  assert cli.main(['calibrate-set', *dirs, '--out', str(folders), '--source', 's',
                   '--dump-trajectories', str(dumped)]) == 0
  assert cli.main(['calibrate-set', str(dumped), '--out', str(replayed), '--source', 's']) == 0
  assert folders.read_text() == replayed.read_text()
  records = CalibrationSet.load(folders).records
  # 4 runs x (eval_accuracy, reward_mean) x fractions 0.2, 0.3, 0.5, each tagged for leave-out.
  assert len(records) == 4 * 2 * 3
  assert {r.metric for r in records} == {'eval_accuracy', 'reward_mean'}
  assert sorted({r.observe_fraction for r in records}) == [0.2, 0.3, 0.5]
  assert {r.group for r in records} == {'default/grpo', 'default/dapo'}
  assert {r.run for r in records} == {f'default/{a}_seed{s}' for a in ('grpo', 'dapo')
                                      for s in (0, 1)}
  assert all(r.regime == 'default' and r.actual is not None for r in records)


def test_a_stop_set_holds_eval_checkpoints_every_005_from_03_to_08_fraction_major(tmp_path):
  dirs = _runs(tmp_path)
  out = tmp_path / 'stop.json'
  assert cli.main(['calibrate-set', *dirs, '--kind', 'stop', '--out', str(out)]) == 0
  records = CalibrationSet.load(out).records
  fractions = [0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8]
  assert [r.observe_fraction for r in records] == [f for f in fractions for _ in range(4)]
  assert {r.metric for r in records} == {'eval_accuracy'}
  assert all(r.curve is None and r.form is None for r in records)  # no forms fitted


def test_a_set_or_trajectories_file_named_xz_is_written_and_read_compressed(tmp_path):
  dirs = _runs(tmp_path, seeds=(0,))
  plain, packed, dumped = (tmp_path / n for n in ('set.json', 'set.json.xz', 'runs.json.xz'))
  assert cli.main(['calibrate-set', *dirs, '--out', str(plain), '--source', 's']) == 0
  assert cli.main(['calibrate-set', *dirs, '--out', str(packed), '--source', 's',
                   '--dump-trajectories', str(dumped)]) == 0
  assert lzma.decompress(packed.read_bytes()).decode() == plain.read_text()
  # A set is named by the JSON it holds, compressed or not.
  assert CalibrationSet.load(packed).source == CalibrationSet.load(plain).source == 'set.json'
  replayed = tmp_path / 'replayed.json'
  assert cli.main(['calibrate-set', str(dumped), '--out', str(replayed), '--source', 's']) == 0
  assert replayed.read_text() == plain.read_text()


def test_extending_a_base_keeps_its_rule_and_refuses_a_run_it_already_holds(tmp_path, capsys):
  first, second = _runs(tmp_path, seeds=(0,)), _runs(tmp_path, seeds=(1,))
  base = tmp_path / 'base.json'
  assert cli.main(['calibrate-set', *first, '--out', str(base),
                   '--config-scores-min', '9']) == 0
  out = tmp_path / 'extended.json'
  assert cli.main(['calibrate-set', *second, '--base', str(base), '--out', str(out)]) == 0
  extended = CalibrationSet.load(out)
  assert extended.config_scores_min == 9  # the rule a set was tested with travels with it
  base_records = [r.to_dict() for r in CalibrationSet.load(base).records]
  assert [r.to_dict() for r in extended.records][:len(base_records)] == base_records
  assert len({r.run for r in extended.records}) == 4
  assert cli.main(['calibrate-set', first[0], '--base', str(base), '--out',
                   str(tmp_path / 'twice.json')]) == 2
  assert 'already in the base set' in capsys.readouterr().err
  assert not (tmp_path / 'twice.json').exists()
  # --carry-records: only the base's runs with the prefix stay; the new runs replace the rest.
  carried = tmp_path / 'carried.json'
  assert cli.main(['calibrate-set', first[1], '--base', str(out), '--carry-records',
                   'default/grpo_seed1', '--out', str(carried)]) == 0
  assert {r.run for r in CalibrationSet.load(carried).records} == {
      'default/dapo_seed0', 'default/grpo_seed1'}


def test_bad_inputs_are_named_before_anything_is_written(tmp_path, capsys):
  out = tmp_path / 'x.json'
  assert cli.main(['calibrate-set', str(tmp_path), '--out', str(out)]) == 2
  assert 'neither a run folder' in capsys.readouterr().err
  dirs = _runs(tmp_path)
  assert cli.main(['calibrate-set', *dirs, '--carry-records', 'sl_runs/', '--out',
                   str(out)]) == 2
  assert '--carry-records needs --base' in capsys.readouterr().err
  assert not out.exists()


def test_the_shipped_stop_set_is_rebuilt_byte_for_byte_from_its_80_design_runs(tmp_path):
  # The design runs' trajectories (seeds 5-9 of the comparison arms) are kept as a fixture;
  # both files are stored xz-compressed: the JSON they hold is compared.
  shipped = read_json_text(STOP_CALIBRATION_PATH)
  out = tmp_path / 'stop.json'
  assert cli.main(['calibrate-set', str(FIXTURES / 'stop_design_trajectories.json.xz'),
                   '--kind', 'stop', '--out', str(out),
                   '--source', json.loads(shipped)['source']]) == 0
  assert out.read_text() == shipped
