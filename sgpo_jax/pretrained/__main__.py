"""`python -m sgpo_jax.pretrained fetch NAME | list`: get a catalog model into the cache."""

from __future__ import annotations

import argparse
import sys

from sgpo_jax.pretrained import catalog, fetch


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog='python -m sgpo_jax.pretrained',
                                   description=__doc__.splitlines()[0])
  sub = parser.add_subparsers(dest='command', required=True)
  get = sub.add_parser('fetch', help='download and convert (again with --force)')
  get.add_argument('name', help=f'one of {sorted(catalog.MODELS)}')
  get.add_argument('--force', action='store_true', help='fetch even when cached')
  sub.add_parser('list', help='the catalog, with where each model is cached')
  args = parser.parse_args(argv)
  if args.command == 'list':
    for name, model in sorted(catalog.MODELS.items()):
      state = 'cached' if fetch.is_cached(name) else 'not fetched'
      print(f'{name}  {model.licence}  {state}: {fetch.model_dir(name)}')
    return 0
  try:
    cached = fetch.is_cached(args.name) and not args.force
    path = (fetch.fetch if args.force else fetch.ensure)(args.name)
  except (ValueError, ConnectionError) as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  if cached:  # a fetch has printed the licence already
    print(f'{fetch.describe(args.name)}. Cached in {path}', file=sys.stderr)
  print(path)
  return 0


if __name__ == '__main__':
  sys.exit(main())
