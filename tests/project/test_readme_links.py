"""README.md stays a page for users and its links hold: it is at most 250 lines (history and
studies live in their folders, detail in docs/), and every relative link in it and in the
docs/ pages names a file or folder of the repository, and a heading there when it has an
anchor (`page.md#heading`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / 'README.md', *sorted((ROOT / 'docs').glob('*.md'))]
LINK = re.compile(r'\]\(([^)\s]+)\)')


def slug(heading: str) -> str:
  """GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped, spaces
  to '-'."""
  return re.sub(r'[^\w\- ]', '', heading.strip().lower()).replace(' ', '-')


def anchors(page: Path) -> set[str]:
  text = re.sub(r'```.*?```', '', page.read_text(), flags=re.S)  # no headings in code blocks
  return {slug(m.group(1)) for m in re.finditer(r'^#+ (.+)$', text, flags=re.M)}


def test_readme_is_at_most_250_lines():
  lines = (ROOT / 'README.md').read_text().splitlines()
  assert len(lines) <= 250, (f'README.md has {len(lines)} lines (at most 250): move detail to '
                             'a page of docs/ and link it')


@pytest.mark.parametrize('page', PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
  broken = []
  for target in LINK.findall(page.read_text()):
    if re.match(r'[a-z]+:', target):  # http(s):, mailto:
      continue
    path, _, anchor = target.partition('#')
    dest = (page.parent / path).resolve() if path else page
    if not dest.exists() or ROOT not in (dest, *dest.parents):
      broken.append(target)
    elif anchor and dest.suffix == '.md' and anchor not in anchors(dest):
      broken.append(target)
  assert not broken, f'{page.relative_to(ROOT)}: links that do not resolve: {broken}'
