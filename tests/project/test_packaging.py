"""pyproject.toml: dependencies stay read from requirements.txt (CPU jax by default) and the
accelerator / GCS installs are one extra each."""

import pathlib
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
