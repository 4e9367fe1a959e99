"""A study's archived results: the reports, tables, JSON and plots its scripts wrote that the
tree does not keep readable, in one xz-compressed tar per study (`results.tar.xz` in the
study's folder), each file under its path from the repository root.

    python -m studies.results_archive list ARCHIVE
    python -m studies.results_archive unpack ARCHIVE       # every file back to its path
    python -m studies.results_archive add ARCHIVE FILE...  # into ARCHIVE (same path: replaced)

`unpack` is `tar -xJf ARCHIVE` from the repository root that refuses a path outside the
repository and leaves a file that differs from its archived copy as it is (--force writes
it). `add` writes the archive in sorted order with fixed metadata, so the same files always
give the same bytes; it leaves the files where they are (`git rm` them once archived). What
the tree keeps readable and what it archives is each study's README's to say.
"""

from __future__ import annotations

import argparse
import io
import lzma
import os
import sys
import tarfile
from typing import Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_archive(path: str) -> dict[str, bytes]:
  """Every file in the archive: its path from the repository root -> its bytes."""
  if not os.path.isfile(path):
    return {}
  with tarfile.open(path, 'r:xz') as tar:
    return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def write_archive(files: dict[str, bytes], path: str) -> None:
  tmp = path + '.tmp'
  with tarfile.open(tmp, 'w:xz', preset=9 | lzma.PRESET_EXTREME,
                    format=tarfile.PAX_FORMAT) as tar:
    for name in sorted(files):
      info = tarfile.TarInfo(name)
      info.size, info.mode, info.mtime = len(files[name]), 0o644, 0
      tar.addfile(info, io.BytesIO(files[name]))
  os.replace(tmp, path)


def _member(path: str, root: str) -> str:
  name = os.path.relpath(os.path.abspath(path), root).replace(os.sep, '/')
  if name.startswith('../') or os.path.isabs(name):
    raise ValueError(f'{path} is outside {root}')
  return name


def add(archive: str, paths: Sequence[str], root: str = REPO) -> int:
  """Adds (or replaces) `paths` in `archive`; the number of files added."""
  files = read_archive(archive)
  for path in paths:
    with open(path, 'rb') as f:
      files[_member(path, root)] = f.read()
  write_archive(files, archive)
  return len(paths)


def unpack(archive: str, root: str = REPO, force: bool = False) -> list[str]:
  """Writes every archived file to its path under `root`; the paths that differ and were left
  as they are (none with `force`)."""
  kept = []
  for name, data in read_archive(archive).items():
    out = os.path.join(root, *name.split('/'))
    if name.startswith('/') or _member(out, root) != name:
      raise ValueError(f'{archive}: {name} is outside {root}')
    if os.path.exists(out):
      with open(out, 'rb') as f:
        if f.read() == data:
          continue
      if not force:
        kept.append(name)
        continue
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, 'wb') as f:
      f.write(data)
  return kept


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog='python -m studies.results_archive',
                                   description=__doc__.split('\n\n')[0])
  commands = parser.add_subparsers(dest='command', required=True)
  commands.add_parser('list').add_argument('archive')
  un = commands.add_parser('unpack')
  un.add_argument('archive')
  un.add_argument('--force', action='store_true', help='overwrite files that differ')
  ad = commands.add_parser('add')
  ad.add_argument('archive')
  ad.add_argument('paths', nargs='+')
  args = parser.parse_args(argv)
  if args.command == 'list':
    for name, data in sorted(read_archive(args.archive).items()):
      print(f'{len(data):9d}  {name}')
  elif args.command == 'unpack':
    for name in unpack(args.archive, force=args.force):
      print(f'{name}: differs from its archived copy, left as it is (--force writes it)',
            file=sys.stderr)
  else:
    add(args.archive, args.paths)
    print(f'{args.archive}: {len(read_archive(args.archive))} files, '
          f'{os.path.getsize(args.archive)} bytes', file=sys.stderr)
  return 0


if __name__ == '__main__':
  sys.exit(main())
