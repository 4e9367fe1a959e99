"""Strict parsing of config arg strings (`default:method=grpo,runlocal=1`).

One parser for every config file (big_vision `parse_arg` style): each config declares its
keys with typed defaults; a value is converted to the default's type; for bools '', '0',
'false', 'no' and 'off' are False and '1', 'true', 'yes', 'on' are True (any other string
is an error, never "truthy"); a key the config does not declare is an error that lists
the known keys.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

_FALSE = ('', '0', 'false', 'no', 'off')
_TRUE = ('1', 'true', 'yes', 'on')


def _convert(key: str, text: str, default: Any) -> Any:
  if isinstance(default, bool):
    lowered = text.strip().lower()
    if lowered in _FALSE:
      return False
    if lowered in _TRUE:
      return True
    raise ValueError(f'config arg {key}={text!r} is not a bool; use one of '
                     f'{_TRUE + _FALSE[1:]} (or an empty value for False)')
  if isinstance(default, int):
    try:
      return int(text)
    except ValueError:
      raise ValueError(f'config arg {key}={text!r} is not an int') from None
  if isinstance(default, float):
    try:
      return float(text)
    except ValueError:
      raise ValueError(f'config arg {key}={text!r} is not a float') from None
  return text


def parse_arg(arg: str | None, **spec: Any) -> dict[str, Any]:
  """`'a=1,b=x'` -> {'a': 1, 'b': 'x'} typed like `spec`'s defaults, which fill the rest.

  A bare key (`runlocal`) means True for a bool key. Unknown keys raise ValueError naming
  the known ones.
  """
  out = dict(spec)
  for item in (arg or '').split(','):
    if not item.strip():
      continue
    key, sep, text = item.partition('=')
    key = key.strip()
    if key not in spec:
      raise ValueError(f'unknown config arg {key!r} in {arg!r}; known: {sorted(spec)}')
    if not sep:
      if not isinstance(spec[key], bool):
        raise ValueError(f'config arg {key!r} needs a value ({key}=...)')
      out[key] = True
      continue
    out[key] = _convert(key, text, spec[key])
  return out


def load_config_module(path: str) -> Any:
  """The config file at `path` as a module (config files are loaded by path, as
  ml_collections' config_flags does, not imported as a package): e.g. `sgpo_jax/configs/regimes.py`
  for its REGIMES and get_config."""
  name = os.path.splitext(os.path.basename(path))[0]
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def load_sibling_config(config_file: str, name: str) -> Any:
  """The module `name`.py from the directory of `config_file` (a config file's `__file__`),
  for a config that builds on another one."""
  return load_config_module(os.path.join(os.path.dirname(os.path.abspath(config_file)),
                                         f'{name}.py'))
