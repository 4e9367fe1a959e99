"""The shipped configs, one `get_config(arg)` file each; they travel inside the wheel.

`--config NAME[:ARGS]` names one of them (`default`, `default:method=grpo,runlocal=1`,
`qwen3_0_6b_gsm8k:gpu=1`); a path to a config file (`my_sgpo_jax/configs/x.py:ARGS`) works as well.
Config files are loaded by path (ml_collections' config_flags), not imported as modules, so
each builds on a sibling with `config.args.load_sibling_config(__file__, NAME)`.
"""

from __future__ import annotations

import os

DIR = os.path.dirname(os.path.abspath(__file__))


def names() -> list[str]:
  """The shipped config names, sorted."""
  return sorted(f[:-3] for f in os.listdir(DIR) if f.endswith('.py') and f != '__init__.py')


def path(name: str) -> str:
  """The file of the shipped config `name`; ValueError listing the names if there is none."""
  file = os.path.join(DIR, f'{name}.py')
  if name == '__init__' or not os.path.isfile(file):
    raise ValueError(f'--config {name}: no shipped config of that name and no such file; '
                     f'shipped: {", ".join(names())} (or give a path to a config file)')
  return file


def resolve(arg: str) -> str:
  """`NAME[:ARGS]` -> `<package>/configs/NAME.py[:ARGS]`; anything that exists as a file, or
  looks like a path (a '/' or a '.py'), is returned unchanged."""
  file, sep, rest = arg.partition(':')
  if os.path.isfile(file) or os.sep in file or '/' in file or file.endswith('.py'):
    return arg
  return path(file) + sep + rest
