"""outputs/checkpoint.py: the state checksum of a restore without a target (export's), whose
tree names differ from the saved ones. Resume, fallback and corruption are end to end in
tests/test_train.py and tests/test_run_safety.py."""

from __future__ import annotations

import numpy as np
import pytest

from sgpo_jax.outputs import checkpoint as checkpoint_lib


def test_a_targetless_restore_of_optimizer_state_passes_its_checksum(tmp_path):
  """A run's state holds optax namedtuples: keystr names their fields `.mu`, a restore without
  a target (as export does it) hands them back as dict keys `['mu']`; the checksum still matches."""
  import optax
  params = {'w': np.arange(6, dtype=np.float32).reshape(2, 3)}
  state = {'params': params, 'opt_state': optax.adamw(1e-3).init(params)}
  ckpt = checkpoint_lib.Checkpointer(str(tmp_path / 'checkpoints'))
  ckpt.save(4, state, {'step': 4})
  ckpt.wait()
  restored, meta = ckpt.restore(4, None)
  ckpt.verify(restored, meta)
  restored['params']['w'] = restored['params']['w'] + 1
  with pytest.raises(ValueError, match='checksum mismatch'):
    ckpt.verify(restored, meta)
  ckpt.close()


def test_checksum_paths_compare_in_dict_form_through_attribute_chains():
  """A QLoRA base's quantized leaf is `.array.qvalue` under keystr when saved and
  `['array']['qvalue']` when restored without a target: both links must convert."""
  saved = {"['params']['k']['kernel'].array.qvalue": 7, "['opt'][0].count": 1}
  restored = {"['params']['k']['kernel']['array']['qvalue']": 7, "['opt'][0]['count']": 1}
  assert checkpoint_lib._comparable_paths(saved) == checkpoint_lib._comparable_paths(restored)
