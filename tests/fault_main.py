"""Test-only entry point: `sgpo_jax.main` with a fault injected (SIGTERM, full disk).

    python -m tests.fault_main --sigterm_after_step=5 <sgpo_jax.main flags>
    python -m tests.fault_main --enospc_at_checkpoint=6 <sgpo_jax.main flags>

--sigterm_after_step: the process sends itself SIGTERM once that step's metrics row is
written (before its checkpoint), as a scheduler's preemption would.
--enospc_at_checkpoint: writing that step's checkpoint fails half way through its meta file
with OSError(ENOSPC), inside orbax, as a full disk would.
"""

import errno
import os
import re
import signal

import orbax.checkpoint as ocp
from absl import app, flags

from sgpo_jax import main as main_lib
from sgpo_jax import train

flags.DEFINE_integer('sigterm_after_step', None, 'SIGTERM this process after this RL step.')
flags.DEFINE_integer('enospc_at_checkpoint', None, 'The checkpoint of this step fails with '
                     'ENOSPC mid-write.')


def _full_disk_at(step: int) -> None:
  real = ocp.JsonCheckpointHandler._save_fn

  async def save_fn(self, x, directory):
    match = re.match(r'(\d+)', os.path.basename(os.path.dirname(str(directory))))
    if match is None or int(match.group(1)) != step:
      return await real(self, x, directory)
    path = os.path.join(str(directory), self._filename)
    with open(path, 'w') as f:
      f.write('{"step": ')  # a torn write, then the disk is full
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

  ocp.JsonCheckpointHandler._save_fn = save_fn


def main(argv) -> None:
  term_step = flags.FLAGS.sigterm_after_step
  if flags.FLAGS.enospc_at_checkpoint is not None:
    _full_disk_at(flags.FLAGS.enospc_at_checkpoint)
  run = train.run

  def after_step(step: int) -> None:
    if step == term_step:
      os.kill(os.getpid(), signal.SIGTERM)

  train.run = lambda *args, **kwargs: run(*args, after_step=after_step, **kwargs)
  main_lib.main(argv)


if __name__ == '__main__':
  app.run(main, flags_parser=main_lib.parse_flags)
