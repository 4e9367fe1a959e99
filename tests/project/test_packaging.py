"""pyproject.toml: dependencies stay read from requirements.txt (CPU jax by default) and the
accelerator / GCS installs are one extra each."""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_extras_and_dynamic_dependencies():
  project = tomllib.loads((ROOT / 'pyproject.toml').read_text())
  assert project['project']['dynamic'] == ['dependencies']
  assert project['tool']['setuptools']['dynamic']['dependencies'] == {
      'file': ['requirements.txt']}
  extras = project['project']['optional-dependencies']
  assert extras['cuda'] == ['jax[cuda12]>=0.10']
  assert extras['tpu'] == ['jax[tpu]>=0.10']
  assert extras['gcs'] == ['gcsfs']
  # The extras pin the same jax floor as the CPU default.
  requirements = (ROOT / 'requirements.txt').read_text().split()
  assert 'jax>=0.10' in requirements


def test_console_script_is_main():
  project = tomllib.loads((ROOT / 'pyproject.toml').read_text())
  assert project['project']['scripts'] == {'sgpo-jax': 'sgpo_jax.main:console_main'}
  from sgpo_jax import main
  assert callable(main.console_main)


def test_configs_are_inside_the_package():
  """The shipped configs are a subpackage (packages.find ships them); nothing is left at the
  repository root that a wheel would lose."""
  from sgpo_jax import configs
  assert (ROOT / 'sgpo_jax' / 'configs' / '__init__.py').is_file()
  assert not (ROOT / 'configs').exists()
  assert {'default', 'regimes', 'sgpo_paper', 'qwen3_0_6b_gsm8k'} <= set(configs.names())
  assert '__init__' not in configs.names()


def test_config_names_resolve_to_the_shipped_files(tmp_path, monkeypatch):
  from sgpo_jax import configs
  default = str(ROOT / 'sgpo_jax' / 'configs' / 'default.py')
  assert configs.resolve('default') == default
  assert configs.resolve('default:method=grpo,runlocal=1') == default + ':method=grpo,runlocal=1'
  # A path stays a path, existing or not (a missing one gets main's no-such-file error).
  assert configs.resolve('my/x.py:runlocal=1') == 'my/x.py:runlocal=1'
  assert configs.resolve('x.py') == 'x.py'
  # A file in the working directory wins over a shipped name.
  monkeypatch.chdir(tmp_path)
  (tmp_path / 'default').write_text('')
  assert configs.resolve('default:runlocal=1') == 'default:runlocal=1'


def test_unknown_config_name_lists_the_shipped_ones():
  from sgpo_jax import configs
  with pytest.raises(ValueError, match=r'^--config defualt: no shipped config of that name '
                     r'and no such file; shipped: default, .*qwen3_0_6b_gsm8k.*regimes') as e:
    configs.resolve('defualt:runlocal=1')
  assert '\n' not in str(e.value)
  with pytest.raises(ValueError, match='no shipped config'):
    configs.resolve('__init__')


def test_main_rewrites_the_config_flag_only():
  from sgpo_jax import configs, main
  argv = ['prog', '--config', 'default:runlocal=1', '--config.seed=3', '--workdir', 'default']
  assert main.resolve_config_arg(argv) == [
      'prog', '--config', configs.path('default') + ':runlocal=1', '--config.seed=3',
      '--workdir', 'default']
  assert main.resolve_config_arg(['prog', '--config=sgpo_paper']) == [
      'prog', '--config=' + configs.path('sgpo_paper')]


TINY_RUN = ('--config.train.num_steps=2', '--config.eval.every_steps=2',
            '--config.checkpoint.every_steps=2', '--config.data.num_train=32',
            '--config.data.num_eval=16', '--config.train.rows_per_batch=8',
            '--config.method=grpo', '--config.grpo.group_size=4',
            '--config.warm_start.steps=2', '--config.model.n_layers=2',
            '--config.model.d_model=32', '--config.model.d_ff=64', '--config.model.head_dim=8')


@pytest.mark.slow
def test_wheel_runs_from_an_empty_directory(tmp_path):
  """The wheel alone is the package: built from a copy of the package's files, installed into
  a fresh venv (its heavy dependencies seen from this interpreter's site-packages), it runs
  the shipped `default` config by name from an empty directory to a summary.json."""
  src = tmp_path / 'src'
  shutil.copytree(ROOT / 'sgpo_jax', src / 'sgpo_jax',
                  ignore=shutil.ignore_patterns('__pycache__', '*.pyc'))
  for name in ('pyproject.toml', 'requirements.txt'):
    shutil.copy(ROOT / name, src / name)
  dist = tmp_path / 'dist'
  subprocess.run([sys.executable, '-m', 'pip', 'wheel', '--no-deps', '--no-build-isolation',
                  '-q', '-w', str(dist), str(src)], check=True, timeout=600)
  (wheel,) = dist.glob('sgpo_jax-*.whl')
  venv = tmp_path / 'venv'
  subprocess.run([sys.executable, '-m', 'venv', '--system-site-packages', str(venv)],
                 check=True, timeout=300)
  python = venv / 'bin' / 'python'
  subprocess.run([str(python), '-m', 'pip', 'install', '-q', '--no-deps', '--no-index',
                  str(wheel)], check=True, timeout=600)
  empty = tmp_path / 'empty'
  empty.mkdir()
  env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'VIRTUAL_ENV')}
  env['JAX_PLATFORMS'] = 'cpu'

  where = subprocess.run([str(python), '-c', 'import sgpo_jax; print(sgpo_jax.__file__)'],
                         cwd=empty, env=env, capture_output=True, text=True, check=True)
  assert pathlib.Path(where.stdout.strip()).is_relative_to(venv), where.stdout

  # The shipped warm starts (the README run's and every regime's initial policy) are in it.
  shipped = subprocess.run(
      [str(python), '-c', 'import os; from sgpo_jax.rl import warm_start as w; '
       'print(sorted(os.listdir(w.SHIPPED_DIR)))'],
      cwd=empty, env=env, capture_output=True, text=True, check=True)
  ours = sorted(p.name for p in (ROOT / 'sgpo_jax' / 'rl' / 'warm_starts').iterdir())
  assert shipped.stdout.strip() == str(ours) and any(n.endswith('.safetensors.xz') for n in ours)

  bad = subprocess.run([str(venv / 'bin' / 'sgpo-jax'), '--config', 'nosuch'], cwd=empty,
                       env=env, capture_output=True, text=True, timeout=300)
  assert bad.returncode == 2, bad.stderr[-2000:]
  assert bad.stderr.strip().startswith('error: --config nosuch: no shipped config'), bad.stderr

  run = subprocess.run([str(python), '-m', 'sgpo_jax.main', '--config', 'default:runlocal=1',
                        '--workdir', 'run', *TINY_RUN], cwd=empty, env=env,
                       capture_output=True, text=True, timeout=900)
  assert run.returncode == 0, run.stderr[-3000:]
  with open(empty / 'run' / 'summary.json') as f:
    summary = json.load(f)
  assert summary['steps'] == 2
  assert 'eval_accuracy_final' in summary
