"""The workdir lock: one run at a time writes a workdir.

`<workdir>/run.lock` holds an exclusive `flock` for as long as the run lives, and a JSON
record of its holder (pid, host, start time) for the message a second run prints. The
kernel drops a flock when its process dies however it dies, so on one host a lock that can
be taken is never held: a record left by a killed run is stale and is taken over (logged).
Taking it is one atomic `flock`, so of several runs racing for a stale lock exactly one
wins. The file is never removed (releasing empties it): removing it would let a run that
opened the old file and a run that created a new one both hold "the" lock.

The descriptor is not inherited (Python opens it close-on-exec and subprocess closes the
rest), so a worker process outliving a killed run does not keep its lock.

Across hosts a flock reaches only as far as the filesystem passes it on (NFS with lockd
does, some network filesystems do not), and another host's pid cannot be checked from
here; so a record from another host that was not released is refused, with the fix
(delete the file once that run has ended).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time

from absl import logging

from sgpo_jax.errors import UserError

LOCK_FILE = 'run.lock'


class WorkdirLocked(UserError):
  """Another run holds the workdir."""


def _holder_text(record: dict) -> str:
  return (f"pid {record.get('pid', '?')} on host {record.get('host', '?')} since "
          f"{record.get('started', '?')}")


class WorkdirLock:
  """`with WorkdirLock(workdir):` or acquire() / release(); one per process and workdir."""

  def __init__(self, workdir: str):
    self.workdir = workdir
    self.path = os.path.join(workdir, LOCK_FILE)
    self._fd: int | None = None

  def _read(self, fd: int) -> dict:
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 65536).decode(errors='replace').strip()
    if not text:
      return {}
    try:
      record = json.loads(text)
    except json.JSONDecodeError:
      return {'pid': '?', 'host': '?', 'started': f'? (unreadable record {text[:40]!r})'}
    return record if isinstance(record, dict) else {}

  def acquire(self) -> None:
    os.makedirs(self.workdir, exist_ok=True)
    fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
      try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
      except OSError as e:
        if e.errno not in (errno.EWOULDBLOCK, errno.EACCES):
          raise
        raise WorkdirLocked(
            f'workdir {self.workdir} is in use by {_holder_text(self._read(fd))} '
            f'(lock {self.path}); wait for that run to end, or use another --workdir.'
        ) from None
      previous, host = self._read(fd), socket.gethostname()
      if previous and previous.get('host') != host:
        raise WorkdirLocked(
            f'workdir {self.workdir} was locked by {_holder_text(previous)}, another host '
            'whose process cannot be checked from here (a lock on another host cannot be '
            f'judged stale by its pid); if that run has ended, delete {self.path} and rerun.')
      if previous:
        logging.warning('workdir %s: taking over the stale lock of %s (that process is gone)',
                        self.workdir, _holder_text(previous))
      record = {'pid': os.getpid(), 'host': host,
                'started': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}
      os.ftruncate(fd, 0)
      os.pwrite(fd, (json.dumps(record) + '\n').encode(), 0)
      os.fsync(fd)
    except BaseException:
      os.close(fd)
      raise
    self._fd = fd

  def release(self) -> None:
    """Empties the record and drops the lock (idempotent)."""
    if self._fd is None:
      return
    fd, self._fd = self._fd, None
    try:
      os.ftruncate(fd, 0)
    except OSError:
      pass  # a full or read-only disk: the dead-process rule frees it for the next run
    finally:
      os.close(fd)

  def __enter__(self) -> WorkdirLock:
    self.acquire()
    return self

  def __exit__(self, *exc) -> None:
    self.release()
