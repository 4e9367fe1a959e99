"""Test-only entry point: `sgpo_jax.main` that SIGKILLs itself after a given step.

Fault injection for the resume tests lives here, not in the training loop: this wraps
`train.run` with an `after_step` hook, so the step's metrics row is written and its
checkpoint (if due) is not.

    python -m tests.sigkill_main --kill_after_step=3 [--kill_process=1] <sgpo_jax.main flags>
"""

import os
import signal

import jax
from absl import app, flags

from sgpo_jax import main as main_lib
from sgpo_jax import train

flags.DEFINE_integer('kill_after_step', None, 'SIGKILL this process after this RL step.')
flags.DEFINE_integer('kill_process', None, 'Only the process with this jax.process_index '
                     'dies (default: every process).')


def main(argv) -> None:
  kill_step, kill_process = flags.FLAGS.kill_after_step, flags.FLAGS.kill_process
  run = train.run

  def after_step(step: int) -> None:
    if step == kill_step and kill_process in (None, jax.process_index()):
      os.kill(os.getpid(), signal.SIGKILL)

  train.run = lambda *args, **kwargs: run(*args, after_step=after_step, **kwargs)
  main_lib.main(argv)


if __name__ == '__main__':
  app.run(main, flags_parser=main_lib.parse_flags)
