"""Where a run's outputs go: local folders or object stores (gs://, as on TPU VMs).

Every file a run writes (config.json, metrics.jsonl, profile.jsonl, summary.json, report.md,
plots, tokenizer, TensorBoard events, checkpoints) goes through these helpers, which use
`etils.epath` (what orbax uses for checkpoints): one code path for `/tmp/run` and
`gs://bucket/run`. A remote workdir needs epath's backend for its scheme (gcsfs, or
tensorflow's gfile, for gs://); `check_workdir` stops a run at startup with one line naming
what to install, before anything is computed.

Object stores have no append and no atomic rename: `append_text` rewrites the object, and
`replace` is a copy + delete there (local files keep their atomic os.replace).
"""

from __future__ import annotations

import contextlib
import fnmatch
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

from etils import epath

# Scheme -> (modules any one of which gives epath a backend, the install line).
BACKENDS = {
    'gs': (('gcsfs', 'tensorflow'), 'pip install -e .[gcs]  (gcsfs; or install tensorflow)'),
    's3': (('s3fs', 'tensorflow'), 'pip install s3fs'),
}


def scheme(path: str) -> str:
  """'gs' for gs://bucket/x, '' for a local path."""
  head, sep, _ = str(path).partition('://')
  return head if sep else ''


def is_remote(path: str) -> bool:
  return bool(scheme(path))


def _module_available(name: str) -> bool:
  try:
    return importlib.util.find_spec(name) is not None
  except (ImportError, ValueError):
    return False


def check_workdir(workdir: str, config: Any = None) -> None:
  """Raises ValueError (one line) when `workdir`'s storage cannot be written from here."""
  kind = scheme(workdir)
  if not kind:
    return
  if kind not in BACKENDS:
    raise ValueError(f'workdir={workdir!r}: scheme {kind}:// is not supported; use a local '
                     f'folder or one of {sorted(f"{k}://" for k in BACKENDS)}.')
  modules, install = BACKENDS[kind]
  if not any(_module_available(m) for m in modules):
    raise ValueError(f'workdir={workdir!r} needs a {kind}:// backend for etils.epath, and none '
                     f'of {modules} is installed: {install}')
  if kind == 'gs' and not _module_available('google.cloud.storage'):
    raise ValueError(f'workdir={workdir!r}: TensorBoard events to gs:// need '
                     'google-cloud-storage: pip install -e .[gcs]')
  if (config is not None and not config.model.get('hf_path', '')
      and config.warm_start.steps > 0 and not config.warm_start.cache_dir):
    raise ValueError(f'workdir={workdir!r} is remote, but the warm-start cache is built under '
                     'the workdir with a local file lock; set --config.warm_start.cache_dir to a '
                     'local folder.')


def join(*parts: str) -> str:
  if is_remote(parts[0]):
    return str(epath.Path(parts[0]).joinpath(*parts[1:]))
  return os.path.join(*parts)


def absolute(path: str) -> str:
  """An absolute local path; a remote URL as it is (os.path.abspath would mangle gs://)."""
  return str(path) if is_remote(path) else os.path.abspath(path)


def makedirs(path: str) -> None:
  epath.Path(path).mkdir(parents=True, exist_ok=True)


def exists(path: str) -> bool:
  return epath.Path(path).exists()


def remove(path: str) -> None:
  epath.Path(path).unlink()


def glob(directory: str, pattern: str) -> list[str]:
  """The paths in `directory` (not below it) matching `pattern` ('*' wildcards), sorted;
  [] when the folder does not exist."""
  folder = epath.Path(directory)
  if not folder.exists():
    return []
  # Names matched here and joined to `directory` as given: object-store backends differ in
  # how they spell the paths their own glob returns.
  return sorted(join(directory, p.name) for p in folder.iterdir()
                if fnmatch.fnmatchcase(p.name, pattern))


def open_file(path: str, mode: str = 'r'):
  return epath.Path(path).open(mode)


def read_text(path: str) -> str:
  return epath.Path(path).read_text()


def write_text(path: str, text: str) -> None:
  epath.Path(path).write_text(text)


def append_text(path: str, text: str) -> None:
  """Appends to a local file; rewrites the object on a remote store (no append there)."""
  if not is_remote(path):
    with open(path, 'a') as f:
      f.write(text)
      f.flush()
    return
  p = epath.Path(path)
  p.write_text((p.read_text() if p.exists() else '') + text)


def replace(src: str, dst: str) -> None:
  """Moves `src` over `dst` (atomic locally)."""
  if not is_remote(dst):
    os.replace(src, dst)
    return
  epath.Path(src).replace(epath.Path(dst))


def save_tokenizer(tokenizer: Any, directory: str) -> None:
  """`tokenizer.save(directory)`; for a remote directory, saved locally and copied up."""
  if not is_remote(directory):
    tokenizer.save(directory)
    return
  with tempfile.TemporaryDirectory() as local:
    tokenizer.save(local)
    copy_tree(local, directory)


def copy_tree(local_dir: str, directory: str) -> None:
  """Copies a local folder's files (recursively) to `directory` (local or remote)."""
  dst = epath.Path(directory)
  for root, _, files in os.walk(local_dir):
    rel = os.path.relpath(root, local_dir)
    target = dst if rel == '.' else dst.joinpath(rel)
    target.mkdir(parents=True, exist_ok=True)
    for name in files:
      if is_remote(directory):
        target.joinpath(name).write_bytes(epath.Path(os.path.join(root, name)).read_bytes())
      else:
        shutil.copy2(os.path.join(root, name), os.fspath(target.joinpath(name)))


@contextlib.contextmanager
def local_copy(directory: str) -> Iterator[str]:
  """A local folder holding `directory`'s files (recursively): the folder itself when local,
  else a temporary download, removed on exit. For readers that only take local paths
  (transformers' tokenizer, the export's file copies); a missing folder yields an empty one."""
  if not is_remote(directory):
    yield directory
    return
  def download(src: epath.Path, dst: str) -> None:  # iterdir: gs:// has no rglob
    for path in src.iterdir():
      target = os.path.join(dst, path.name)
      if path.is_dir():
        os.makedirs(target, exist_ok=True)
        download(path, target)
      else:
        with open(target, 'wb') as f:
          f.write(path.read_bytes())

  with tempfile.TemporaryDirectory() as local:
    if epath.Path(directory).exists():
      download(epath.Path(directory), local)
    yield local
