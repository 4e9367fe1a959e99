"""Errors a user can fix, and the one line the command prints for each.

`UserError` is raised where the problem is known (a config field, a path, a locked workdir,
a full disk, no restorable checkpoint); its message is one line naming the value and the
fix. `describe` maps it, and the standard errors a run meets at its edges (a missing file,
an OS error, a full disk, a NaN loss), to (exit code, line). Anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

import contextlib
import errno

USAGE = 2  # a usage or config mistake: nothing ran
FAILURE = 1  # the run started and stopped


class UserError(Exception):
  """A problem with a known cause and fix; the message is one line."""
  exit_code = FAILURE


class ConfigError(UserError, ValueError):
  """A config field is wrong (a ValueError, as the config check's errors always were)."""
  exit_code = USAGE


@contextlib.contextmanager
def config_errors():
  """A ValueError inside (a check of the config, or of the data files it names) is raised
  as ConfigError: the checks' messages already name the field and the fix."""
  try:
    yield
  except ConfigError:
    raise
  except ValueError as e:
    raise ConfigError(one_line(e)) from e


class DiskFullError(UserError):
  """A write failed for lack of space; the last intact checkpoint is where a rerun starts."""

  def __init__(self, path: str, resume_step: int | None):
    where = (f'the run resumes from step {resume_step}' if resume_step is not None
             else 'no checkpoint was written yet, so the run starts over')
    super().__init__(f'disk full at {path}: free space and rerun the same command; {where}.')
    self.filename, self.resume_step = path, resume_step


class Terminated(BaseException):
  """SIGTERM, raised by the command's handler so that finally blocks (the workdir lock)
  run. A BaseException like KeyboardInterrupt: no `except Exception` may take it for a
  failure of what it interrupted (a checkpoint restore would call the checkpoint broken)."""
  exit_code = 128 + 15

  def __init__(self):
    super().__init__('stopped by SIGTERM; rerun the same command to resume from the last '
                     'checkpoint.')


def _chain(exc: BaseException):
  """exc, then the exceptions it was raised from or during."""
  seen = set()
  while exc is not None and id(exc) not in seen:
    seen.add(id(exc))
    yield exc
    exc = exc.__cause__ or exc.__context__


def find_enospc(exc: BaseException) -> OSError | None:
  """The disk-full OSError behind `exc` (libraries often re-raise it wrapped), if any."""
  for e in _chain(exc):
    if isinstance(e, OSError) and e.errno == errno.ENOSPC:
      return e
  return None


def one_line(text: str) -> str:
  return ' '.join(part.strip() for part in str(text).splitlines() if part.strip())


def describe(exc: BaseException) -> tuple[int, str] | None:
  """(exit code, one line without the 'error: ' prefix) for a known failure, else None."""
  if isinstance(exc, (UserError, Terminated)):
    return exc.exit_code, one_line(exc)
  full = find_enospc(exc)
  if full is not None:
    return FAILURE, (f'disk full at {full.filename or "(unknown path)"}: free space and rerun '
                     'the same command; the run resumes from its last checkpoint.')
  if isinstance(exc, FileNotFoundError):
    return FAILURE, (f'no such file or directory: {exc.filename}; check the path given in the '
                     'config or flags.')
  if isinstance(exc, PermissionError):
    return FAILURE, f'permission denied: {exc.filename}; choose a path you can write.'
  if isinstance(exc, OSError):
    where = f': {exc.filename}' if exc.filename else ''
    return FAILURE, f'{exc.strerror or one_line(exc)}{where}.'
  if isinstance(exc, FloatingPointError):  # learner.NonFiniteError: names the step and fix
    return FAILURE, one_line(exc)
  return None
