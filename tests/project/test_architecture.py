"""docs/architecture.md's worked example ("Adding an allocator") really is one file plus one
registry line: its code block, run as `sgpo_jax.allocators.in_order`, registers the
allocator, its section joins the default config, its checks fire, and it plans and resumes."""

from __future__ import annotations

import json
import pathlib
import re
import sys
import types

import numpy as np
import pytest

from sgpo_jax import allocators
from sgpo_jax.allocators import base
from sgpo_jax.config import check as config_check
from sgpo_jax.config import defaults as default_config

DOC = pathlib.Path(__file__).resolve().parents[2] / 'docs' / 'architecture.md'
MODULE = 'sgpo_jax.allocators.in_order'


def _python_blocks(text):
  return re.findall(r'```python\n(.*?)```', text, flags=re.DOTALL)


@pytest.fixture
def in_order(monkeypatch):
  """The doc's allocator file, run as its module, registered into a copy of the registry
  (so the other tests never see it)."""
  text = DOC.read_text()
  blocks = _python_blocks(text)
  source = next(b for b in blocks if "@register_allocator('in_order')" in b)
  # The registry line the doc shows is the import of exactly this module and class.
  assert f'from {MODULE} import InOrderAllocator\n' in blocks
  monkeypatch.setattr(base, '_REGISTRY', dict(base._REGISTRY))
  module = types.ModuleType(MODULE)
  monkeypatch.setitem(sys.modules, MODULE, module)
  exec(compile(source, str(DOC), 'exec'), module.__dict__)  # noqa: S102
  return module


class _Rollouts:
  """A RolloutFn stand-in: reward 1 on every valid row, and a record of the layouts."""

  def __init__(self):
    self.layouts = []

  def __call__(self, layout, round_index=None, category='rollout'):
    self.layouts.append(layout)
    rows = layout.rows_per_batch
    return allocators.Rollout(np.zeros((rows, 2), np.int32), np.ones((rows, 2), np.int32),
                              np.zeros((rows, 2), np.float32),
                              layout.valid_R.astype(np.float32), layout.row_query_index_R)


def test_worked_example_registers_its_allocator_and_config_section(in_order):
  assert 'in_order' in allocators.registered()
  assert allocators.allocator_class('in_order') is in_order.InOrderAllocator
  assert dict(allocators.registered_settings())['in_order'] is in_order.InOrderSettings
  c = default_config.get_config('method=in_order')
  assert c.in_order.to_dict() == {'group_size': 4}
  config_check.check_config(c, num_devices=1)


def test_worked_example_checks_fire_on_a_bad_value(in_order):
  c = default_config.get_config('method=grpo')  # fails even when method is another one
  c.in_order.group_size = 1
  with pytest.raises(ValueError, match=r'in_order.group_size=1 must be >= 2'):
    config_check.check_config(c)
  with pytest.raises(ValueError, match=r"unknown in_order settings \['group_sise'\]"):
    in_order.InOrderSettings.from_config({'group_sise': 8})
  c = default_config.get_config('method=in_order')
  c.train.rows_per_batch = 6
  with pytest.raises(ValueError, match='train.rows_per_batch=6 is not a multiple'):
    config_check.check_config(c)


def test_worked_example_plans_in_pool_order_and_resumes(in_order):
  c = default_config.get_config('method=in_order')
  c.train.rows_per_batch = 8  # two prompts at G=4
  alloc = allocators.make_allocator(c, num_queries=3)
  rollouts = _Rollouts()
  first = alloc.fill_batch(rollouts)
  assert first.phase == 'in_order'
  assert first.layout.row_query_index_R.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
  state = json.loads(json.dumps(alloc.state_dict()))
  assert state == {'kind': 'in_order', 'num_queries': 3, 'seed': 0, 'cursor': 2}
  resumed = allocators.make_allocator(c, num_queries=3)
  resumed.load_state_dict(state)
  expected = [2, 2, 2, 2, 0, 0, 0, 0]  # wraps around the pool
  assert alloc.fill_batch(rollouts).layout.row_query_index_R.tolist() == expected
  assert resumed.fill_batch(rollouts).layout.row_query_index_R.tolist() == expected


def _room_table():
  """[(rooms of a row, rooms it may import)] from the doc's table, top row first; None for
  'every room'."""
  rows = []
  for line in DOC.read_text().split('## The rooms', 1)[1].split('\n## ', 1)[0].splitlines():
    cells = [c.strip() for c in line.strip().strip('|').split('|')]
    if len(cells) != 3 or cells[0] in ('Room', '---'):
      continue
    rooms = [r.rstrip('/') for r in re.findall(r'`([^`]+)`', cells[0])]
    rows.append((rooms, None if 'every room' in cells[2] else re.findall(r'`([^`]+)`', cells[2])))
  return rows


def _room_of(module: str) -> str:
  """'model' for sgpo_jax.model.lora, 'train.py' for sgpo_jax.train."""
  part = module.split('.')[1]
  return part if (DOC.parents[1] / 'sgpo_jax' / part).is_dir() else part + '.py'


def test_the_room_table_is_the_import_graph_floor_by_floor():
  """Every room of the package stands in docs/architecture.md's table; what it imports is
  what its row allows (the 'May import' column names rooms below it only), so no import runs
  back up the table and no two rooms import each other."""
  from tests.project.test_imports import imported, module_names
  rows = _room_table()
  floor = {room: i for i, (rooms, _) in enumerate(rows) for room in rooms}
  names = module_names()
  rooms = {_room_of(m) for m in names if m != 'sgpo_jax'}
  assert rooms - {'__init__.py'} <= set(floor), sorted(rooms - set(floor))
  allowed = {}
  for i, (row_rooms, may) in enumerate(rows):
    below = {r for r, f in floor.items() if f > i}
    if may is None:  # the entry points: every room, each other included
      allowed.update({r: set(floor) for r in row_rooms})
      continue
    named = {r for m in may for r in (m.rstrip('/'), m + '.py') if r in floor}
    assert named <= below, f'{row_rooms} may import {sorted(named - below)}, not below it'
    allowed.update({r: named for r in row_rooms})
  offenders = []
  for module, path in names.items():
    if module == 'sgpo_jax':
      continue
    room = _room_of(module)
    for target in imported(module, path, set(names)) - {'sgpo_jax'}:
      other = _room_of(target)
      if other != room and other not in allowed[room]:
        offenders.append(f'{module} imports {target} ({room} -> {other})')
  assert not offenders, offenders
