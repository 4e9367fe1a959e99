"""The base of every allocator's settings: a frozen dataclass that owns one config section.

An allocator's settings class is the single place its config section is defined: the field
defaults are the section's defaults (`config/defaults.py` builds `config.<section>` from
them through the registry), and `check()` holds its range checks (run on construction, so
a settings object is always valid, and by `config/check.py` through the registry).

    @dataclasses.dataclass(frozen=True)
    class FooSettings(AllocatorSettings):
      section: ClassVar[str] = 'foo'
      group_size: int = 8

      def check(self) -> None:
        require(self.group_size >= 1, f'foo.group_size={self.group_size} must be >= 1.')

`FooSettings.from_config(config.foo)` takes a ConfigDict, a partial mapping, a settings
dataclass or None; missing fields take the defaults, an unknown one is an error naming the
known ones. `check_rows_per_batch(R)` says whether train.rows_per_batch holds its groups
(default: a multiple of `group_sizes`, or of `group_size`). Imports nothing from `sgpo_jax.config`, so the config modules can import the
allocator registry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from sgpo_jax.allocators import rows as rows_lib

_S = TypeVar('_S', bound='AllocatorSettings')


def require(ok: bool, message: str) -> None:
  """Raises ValueError(message) unless ok (message names the field and the fix)."""
  if not ok:
    raise ValueError(message)


class AllocatorSettings:
  """Base of the settings dataclasses (subclasses are frozen dataclasses with defaults)."""
  section: ClassVar[str] = ''  # the config section, = the allocator's registered name

  def __post_init__(self) -> None:
    self.check()

  def check(self) -> None:
    """Range checks; raise ValueError naming `<section>.<field>` and the fix."""

  def check_rows_per_batch(self, rows_per_batch: int) -> None:
    """Whether train.rows_per_batch can hold this allocator's groups: by default a multiple
    of every size in `group_sizes` (or of `group_size`)."""
    sizes = getattr(self, 'group_sizes', None) or (getattr(self, 'group_size'),)
    rows_lib.check_rows_per_batch(rows_per_batch, sizes, 'train.rows_per_batch')

  @classmethod
  def defaults(cls) -> dict[str, Any]:
    """The section's default values, field by field (what `config.<section>` starts as)."""
    return dataclasses.asdict(cls())

  @classmethod
  def from_config(cls: type[_S], section: Any = None) -> _S:
    """Settings from a config section over the defaults (see the module docstring)."""
    if isinstance(section, cls):
      return section
    defaults = cls.defaults()
    if section is None:
      given: dict[str, Any] = {}
    elif hasattr(section, 'to_dict'):  # an ml_collections.ConfigDict
      given = section.to_dict()
    elif isinstance(section, Mapping):
      given = dict(section)
    elif dataclasses.is_dataclass(section):
      given = {f.name: getattr(section, f.name) for f in dataclasses.fields(section)}
    else:
      raise TypeError(f'config.{cls.section}: expected a config section, a mapping or a '
                      f'settings dataclass; got {type(section).__name__}')
    unknown = sorted(set(given) - set(defaults))
    require(not unknown, f'unknown {cls.section} settings {unknown}; known: '
                         f'{sorted(defaults)}.')
    values = {**defaults, **given}
    for key, value in values.items():
      if isinstance(defaults[key], tuple):
        values[key] = tuple(value)
    return cls(**values)
