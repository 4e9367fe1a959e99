"""Entry point: flags -> `train.run(config, workdir)`.

The logic lives in importable modules (train.py sequences the stages) so notebooks and
sweeps call exactly the same functions as this command:

    python -m sgpo_jax.main --config default --workdir /tmp/run \
        --config.method=grpo --config.train.num_steps=100

`--config` names a shipped config (`default`, `qwen3_0_6b_gsm8k:gpu=1`: the files of
`sgpo_jax/configs/`, inside the wheel) or a config file's path (`my/x.py:method=grpo`).

Several processes (one per host, or `python -m sgpo_jax.launch` on one machine) run this same
command; `jax.distributed` starts when the launcher's environment asks for it.

A known failure (a bad flag or config field, a missing file, a locked workdir, a changed
config on resume, a full disk, SIGTERM) ends with one line on stderr, `error: ...`, naming
the value and the fix, and exit code 2 (usage / config) or 1 (the run stopped; SIGTERM:
143). `--verbose` or SGPO_VERBOSE=1 shows the traceback instead. Other exceptions are bugs
and keep their traceback.
"""

import logging
import os
import signal
import sys

from absl import app, flags
from absl import logging as absl_logging
from ml_collections import config_flags

from sgpo_jax import configs, errors

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file(
    'config', None, 'A shipped config name or a config file, optionally with an arg string: '
    'default:method=grpo, my/x.py:runlocal=1',
    lock_config=True)
flags.DEFINE_string('workdir', None, 'Output directory; rerunning with the same one resumes. '
                    'Default: runs/<method>_seed<seed>.')
flags.DEFINE_enum('stage', 'all', ['all', 'profile'],
                  "'profile' stops after the sGPO profiling pass (profile.jsonl + p_hat plot).")
flags.DEFINE_list('allow_config_change', [],
                  'Resuming: config fields that may differ from the run\'s config.json, e.g. '
                  'train.learning_rate (the change is recorded in config_history.jsonl).')
flags.DEFINE_bool('verbose', False, 'Errors show their traceback (also: SGPO_VERBOSE=1).')
flags.mark_flags_as_required(['config'])


def _on_sigterm(signum, frame) -> None:
  # An exception instead of dying: finally blocks run (the workdir lock is released).
  signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM kills at once
  raise errors.Terminated()


def _verbose(argv=()) -> bool:
  if os.environ.get('SGPO_VERBOSE', '').lower() in ('1', 'true', 'yes'):
    return True
  try:
    return bool(FLAGS.verbose)
  except flags.Error:  # flags not parsed (yet): read the command line
    return '--verbose' in argv or '--verbose=true' in argv


def _fail(line: str, code: int) -> None:
  print(f'error: {errors.one_line(line)}', file=sys.stderr)
  sys.exit(code)


def _last_lines(text: str) -> str:
  """A flag or config-loading error's first and last lines (the middle is a traceback)."""
  lines = [line.strip() for line in str(text).splitlines() if line.strip()]
  if not lines:
    return str(text)
  return lines[0] if len(lines) == 1 else f'{lines[0].rstrip(":")}: {lines[-1]}'


def _unrepr(text: str) -> str:
  """ml_collections wraps its did-you-mean KeyError message in repr(): undo it."""
  if len(text) > 1 and text[0] == text[-1] and text[0] in '\'"':
    text = text[1:-1].replace('\\n', ' ').replace("\\'", "'")
  return text


def parse_flags(argv):
  """absl's flag parsing, with a parse error as one line (exit 2)."""
  try:
    argv = resolve_config_arg(argv)
  except ValueError as e:  # a name that is neither a shipped config nor a file
    if _verbose(argv):
      raise
    _fail(str(e), errors.USAGE)
  try:
    return FLAGS(argv)
  except flags.Error as e:
    if _verbose(argv):
      raise
    _fail(f'{_last_lines(e)} (see --helpshort)', errors.USAGE)
  except (AttributeError, KeyError, OSError) as e:  # a --config.<field> override failed
    if _verbose(argv):
      raise
    given = _config_arg(argv)
    if given is not None and not os.path.isfile(given.split(':')[0]):
      _fail(_no_config_file(given), errors.USAGE)  # the override had no config to go into
    _fail(f'a --config.* override names no config field: {_unrepr(str(e))}', errors.USAGE)


def _config_arg(argv) -> str | None:
  """The value of the last --config flag on the command line."""
  value = None
  for i, arg in enumerate(argv):
    if arg.startswith('--config='):
      value = arg.split('=', 1)[1]
    elif arg == '--config' and i + 1 < len(argv):
      value = argv[i + 1]
  return value


def resolve_config_arg(argv: list[str]) -> list[str]:
  """argv with every --config NAME[:ARGS] (a shipped config) replaced by its file's path."""
  out = list(argv)
  for i, arg in enumerate(out):
    if arg.startswith('--config='):
      out[i] = '--config=' + configs.resolve(arg.split('=', 1)[1])
    elif arg == '--config' and i + 1 < len(out):
      out[i + 1] = configs.resolve(out[i + 1])
  return out


def _no_config_file(path: str) -> str:
  return (f'--config {path}: no such file; give a shipped config name such as default, '
          'or a config file\'s path.')


def load_config():
  """FLAGS.config, loaded: a missing file or a bad override as a ConfigError."""
  path = config_flags.get_config_filename(FLAGS['config'])
  if not os.path.isfile(path.split(':')[0]):
    raise errors.ConfigError(_no_config_file(path))
  try:
    config = FLAGS.config
    config.method  # noqa: B018  a config that failed to load raises on first access
  except (AttributeError, KeyError, TypeError, ValueError, OSError) as e:
    raise errors.ConfigError(f'--config: {_last_lines(_unrepr(str(e)))}') from e
  return config


def run(argv) -> None:
  if len(argv) > 1:
    raise errors.ConfigError(f'unexpected arguments {argv[1:]}; flags need a leading --.')
  config = load_config()
  # deferred: jax and the trainer (seconds to import) load once the flags and the config
  # are read, so --help and a usage error answer at once.
  from sgpo_jax.parallel import processes
  # Before anything creates a jax backend: one controller per host (see README, multi-host).
  processes.initialize_distributed()
  from sgpo_jax import train  # deferred: as above
  from sgpo_jax.outputs import report  # deferred: as above (matplotlib)
  workdir = FLAGS.workdir or f'runs/{config.method}_seed{config.seed}'
  summary = train.run(config, workdir, stop_after=None if FLAGS.stage == 'all' else FLAGS.stage,
                      show_progress=processes.is_writer(),
                      allow_config_change=tuple(FLAGS.allow_config_change))
  if processes.is_writer() and isinstance(summary, dict) and 'eval_accuracy_final' in summary:
    print(report.result_line(workdir, summary), flush=True)


class _LibraryInfo(logging.Filter):
  """Drops the INFO records of orbax and jax's internals (hundreds per run: every checkpoint
  save, backend probing); the package's own records and every warning stay. --verbose keeps
  them all."""

  def filter(self, record: logging.LogRecord) -> bool:
    path = record.pathname.replace(os.sep, '/')
    return record.levelno >= logging.WARNING or not ('/orbax/' in path or '/jax/_src/' in path)


def quiet_library_logs() -> None:
  absl_logging.get_absl_handler().addFilter(_LibraryInfo())


def main(argv) -> None:
  """`run`, with a known failure as one line on stderr (`errors.describe`)."""
  signal.signal(signal.SIGTERM, _on_sigterm)
  if not _verbose():
    quiet_library_logs()
  try:
    run(argv)
  except (Exception, errors.Terminated) as e:  # noqa: BLE001  SystemExit, ^C pass through
    described = errors.describe(e)
    if described is None or _verbose():
      raise
    _fail(described[1], described[0])


def console_main() -> None:
  """The `sgpo-jax` console script: the same as `python -m sgpo_jax.main`."""
  app.run(main, flags_parser=parse_flags)


if __name__ == '__main__':
  console_main()
