"""Entry point: flags -> `train.run(config, workdir)`.

The logic lives in importable modules (train.py sequences the stages) so notebooks and
sweeps call exactly the same functions as this command:

    python -m sgpo_jax.main --config configs/default.py --workdir /tmp/run \
        --config.method=grpo --config.train.num_steps=100

Several processes (one per host, or `python -m sgpo_jax.launch` on one machine) run this same
command; `jax.distributed` starts when the launcher's environment asks for it.
"""

from absl import app, flags
from ml_collections import config_flags

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file(
    'config', None, 'Config file, optionally with an arg string: configs/default.py:method=grpo',
    lock_config=True)
flags.DEFINE_string('workdir', None, 'Output directory; rerunning with the same one resumes. '
                    'Default: runs/<method>_seed<seed>.')
flags.DEFINE_enum('stage', 'all', ['all', 'profile'],
                  "'profile' stops after the sGPO profiling pass (profile.jsonl + p_hat plot).")
flags.mark_flags_as_required(['config'])


def main(argv) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  from sgpo_jax.model import sharding
  # Before anything creates a jax backend: one controller per host (see README, multi-host).
  sharding.initialize_distributed()
  from sgpo_jax import train
  config = FLAGS.config
  workdir = FLAGS.workdir or f'runs/{config.method}_seed{config.seed}'
  train.run(config, workdir, stop_after=None if FLAGS.stage == 'all' else FLAGS.stage,
            show_progress=sharding.is_writer())


if __name__ == '__main__':
  app.run(main)
