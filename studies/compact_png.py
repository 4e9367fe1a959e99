"""The PNG plots the studies commit, as 256-colour palette images.

matplotlib writes RGBA; a line plot with shaded bands holds a few thousand distinct colours at
most, and their 256-colour median-cut palette (no dithering) looks the same at a third of the
bytes. The study scripts save their plots through `save`; a plot written by another tool (the
comparison report's) is rewritten in place:

    python -m studies.compact_png FILE.png [FILE.png ...]
"""

from __future__ import annotations

import io
import os
import sys
from typing import Sequence

from PIL import Image

COLOURS = 256


def _write_palette(image: Image.Image, path: str) -> None:
  palette = image.convert('RGB').quantize(colors=COLOURS, method=Image.Quantize.MEDIANCUT,
                                          dither=Image.Dither.NONE)
  palette.save(path, format='PNG', optimize=True, dpi=image.info.get('dpi', (72, 72)))


def save(figure, path: str, dpi: int) -> None:
  """`figure.savefig(path, dpi=dpi)`, written as a palette PNG."""
  buffer = io.BytesIO()
  figure.savefig(buffer, dpi=dpi, format='png')
  buffer.seek(0)
  with Image.open(buffer) as image:
    image.load()
    _write_palette(image, path)


def compact(path: str) -> tuple[int, int]:
  """Rewrites the PNG at `path` as a palette PNG; (bytes before, bytes after)."""
  before = os.path.getsize(path)
  with Image.open(path) as image:
    image.load()
  _write_palette(image, path)
  return before, os.path.getsize(path)


def main(argv: Sequence[str] | None = None) -> int:
  paths = list(sys.argv[1:] if argv is None else argv)
  if not paths:
    print(__doc__, file=sys.stderr)
    return 2
  for path in paths:
    before, after = compact(path)
    print(f'{path}: {before} -> {after} bytes', file=sys.stderr)
  return 0


if __name__ == '__main__':
  sys.exit(main())
