"""The package's import graph is acyclic, function-level imports included."""

from __future__ import annotations

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / 'sgpo_jax'


def module_names() -> dict[str, pathlib.Path]:
  names = {}
  for path in PACKAGE.rglob('*.py'):
    parts = path.relative_to(PACKAGE.parent).with_suffix('').parts
    if parts[-1] == '__init__':
      parts = parts[:-1]
    names['.'.join(parts)] = path
  return names


def imported(module: str, path: pathlib.Path, known: set[str]) -> set[str]:
  """sgpo_jax modules `module` imports anywhere in its body (functions included).

  Importing a.b.c also runs a.b's and a's __init__: those count, except packages that
  contain the importer (they are already initialised when it runs).
  """
  is_package = path.name == '__init__.py'
  targets = set()
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if isinstance(node, ast.Import):
      targets.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
      if node.level:  # relative: resolve against the importer's package
        base = module.split('.') if is_package else module.split('.')[:-1]
        base = base[:len(base) - node.level + 1]
        prefix = '.'.join(base + ([node.module] if node.module else []))
      else:
        prefix = node.module or ''
      targets.add(prefix)
      targets.update(f'{prefix}.{alias.name}' for alias in node.names)
  edges = set()
  for target in targets:
    parts = target.split('.')
    for i in range(1, len(parts) + 1):
      name = '.'.join(parts[:i])
      inside = module == name or module.startswith(name + '.')
      if name in known and not inside:
        edges.add(name)
  return edges


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
  state: dict[str, int] = {}  # 1 = on the stack, 2 = done
  stack: list[str] = []

  def visit(node: str) -> list[str] | None:
    state[node] = 1
    stack.append(node)
    for nxt in sorted(graph[node]):
      if state.get(nxt) == 1:
        return stack[stack.index(nxt):] + [nxt]
      if nxt not in state:
        found = visit(nxt)
        if found:
          return found
    stack.pop()
    state[node] = 2
    return None

  for node in sorted(graph):
    if node not in state:
      found = visit(node)
      if found:
        return found
  return None


def test_find_cycle_sees_function_level_and_package_init_imports(tmp_path):
  graph = {'p.a': {'p.b'}, 'p.b': set(), 'p': set()}
  assert find_cycle(graph) is None
  graph['p.b'] = {'p.a'}
  assert find_cycle(graph) == ['p.a', 'p.b', 'p.a']
  src = tmp_path / 'm.py'
  src.write_text('def f():\n  from sgpo_jax.tasks import arithmetic\n')
  known = {'sgpo_jax', 'sgpo_jax.tasks', 'sgpo_jax.tasks.arithmetic', 'sgpo_jax.data.loading'}
  # sgpo_jax itself contains the importer (already initialised); sgpo_jax.tasks does not.
  assert imported('sgpo_jax.data.loading', src, known) == {'sgpo_jax.tasks', 'sgpo_jax.tasks.arithmetic'}


def test_sgpo_jax_import_graph_is_acyclic():
  names = module_names()
  graph = {m: imported(m, p, set(names)) - {m} for m, p in names.items()}
  assert len(graph) > 30
  assert find_cycle(graph) is None, ' -> '.join(find_cycle(graph))


def test_the_package_never_imports_a_study_or_a_benchmark():
  """studies/ and benchmarks/ use the package; nothing in sgpo_jax (CLIs included) uses them."""
  offenders = []
  for module, path in module_names().items():
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
      names = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else
               [node.module or ''] if isinstance(node, ast.ImportFrom) else [])
      offenders += [f'{module} imports {name}' for name in names
                    if name.split('.')[0] in ('studies', 'benchmarks', 'experiments')]
  assert not offenders, offenders


ALLOCATORS = 'sgpo_jax.allocators'
# What every allocator may build on; anything else under allocators/ is one method's own.
SHARED_ALLOCATOR_MODULES = frozenset(f'{ALLOCATORS}.{m}' for m in (
    'base', 'rows', 'settings', 'pool_walk', 'dynamic_sampling', 'beta', 'coverage'))


def _method_of(module: str) -> str | None:
  """'dapo' for sgpo_jax.allocators.dapo, 'sgpo' for sgpo_jax.allocators.sgpo.allocator;
  None for the package, its shared helpers and modules outside it."""
  if not module.startswith(ALLOCATORS + '.') or module in SHARED_ALLOCATOR_MODULES:
    return None
  return module[len(ALLOCATORS) + 1:].split('.')[0]


def test_each_allocator_depends_on_base_and_shared_helpers_only():
  """No allocator reaches into another's module (no inheritance across methods), and the
  interface, the shared helpers and the trainer name no method (issue 52 item 3)."""
  names = module_names()
  offenders = []
  for module, path in names.items():
    own = _method_of(module)
    neutral = module in SHARED_ALLOCATOR_MODULES or module == 'sgpo_jax.train'
    if own is None and not neutral:
      continue
    for target in imported(module, path, set(names)):
      other = _method_of(target)
      if other is not None and other != own:
        offenders.append(f'{module} imports {target}')
  assert not offenders, offenders


def test_no_module_imports_a_private_name_of_another():
  offenders = []
  for module, path in module_names().items():
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
      if isinstance(node, ast.ImportFrom):
        offenders += [f'{module} imports {node.module}.{alias.name}' for alias in node.names
                      if alias.name.startswith('_') and not alias.name.startswith('__')]
  assert not offenders, offenders
