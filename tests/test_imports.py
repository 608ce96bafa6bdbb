"""The floors point one way (docs/architecture.md, "Floors"): each folder
imports only from the floors below it, and no modules import each other
in a circle; in models/, no benchmark family imports another and the
shared code imports no family. Read from the code's own import statements
(at any depth, lazy imports included), without importing anything."""

import ast
import os

from tests import helpers

# Lowest first. A floor may import its own modules and those of the floors
# below it; `tests/` may import anything.
FLOORS = (
    ('core',),            # start-up, entry points, gin, errors, exit codes
    ('input_pipeline',),  # host input pipelines
    ('distribution',),    # strategies, plans, meshes, gradient summation
    ('training',),        # the runtime: loops, checkpoints, logs, actions
    ('models',),          # tasks and models: one package a benchmark family
                          # and models/common/ (see SHARED_MODELS)
    ('inference',),       # the LoadGen harness
    ('train', 'tools'),   # the entry points: train.py, the user's commands
    ('benchmarks',),      # measurements of all of the above
)
# Two folders on one floor import nothing of each other: train.py runs
# without tools/, and the tools without train.py.


def _floor(package: str) -> int:
  return next(i for i, names in enumerate(FLOORS) if package in names)


def _modules() -> dict[str, str]:
  """module name -> path, for every module of the floors."""
  found = {}
  for names in FLOORS:
    for top in names:
      path = os.path.join(helpers.ROOT, top)
      if os.path.isfile(path + '.py'):
        found[top] = path + '.py'
        continue
      for where, _, files in os.walk(path):
        for name in files:
          if name.endswith('.py'):
            relative = os.path.relpath(os.path.join(where, name),
                                       helpers.ROOT)[:-3]
            module = relative.replace(os.sep, '.')
            found[module.removesuffix('.__init__')] = os.path.join(where,
                                                                   name)
  return found


def _imports(path: str, modules) -> set[str]:
  """The suite's modules `path` imports (`from a import b` is a.b when that
  is a module, else a)."""
  with open(path) as f:
    tree = ast.parse(f.read(), path)
  named = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      named |= {a.name for a in node.names}
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      named |= {f'{node.module}.{a.name}' for a in node.names} | {node.module}
  found = set()
  for name in named:
    while name and name not in modules:
      name = name.rpartition('.')[0]
    if name:
      found.add(name)
  return found


def _graph():
  modules = _modules()
  return {m: _imports(p, modules) - {m} for m, p in modules.items()}


def test_every_folder_imports_only_from_the_floors_below_it():
  wrong = []
  for module, imported in sorted(_graph().items()):
    top = module.split('.')[0]
    for other in sorted(imported):
      other_top = other.split('.')[0]
      if other_top == top:
        continue
      if _floor(other_top) > _floor(top):
        wrong.append(f'{module} imports {other}, a floor above it')
      elif _floor(other_top) == _floor(top):
        wrong.append(f'{module} imports {other}, on the same floor')
  assert not wrong, ('imports against the floors (docs/architecture.md): '
                     + '; '.join(wrong))


# models/ is one package a benchmark family and one shared place.
SHARED_MODELS = 'models.common'


def _family(module: str) -> str | None:
  """models.<family> for a module of a family, else None (models.common's
  modules and everything outside models/ belong to no family)."""
  parts = module.split('.')
  if parts[0] != 'models' or len(parts) < 3:
    return None
  home = '.'.join(parts[:2])
  return None if home == SHARED_MODELS else home


def _family_imports_wrong(graph) -> list[str]:
  wrong = []
  for module, imported in sorted(graph.items()):
    if not module.startswith('models.'):
      continue
    own = _family(module)
    for other in sorted(imported):
      theirs = _family(other)
      if theirs is None or theirs == own:
        continue
      wrong.append(f'{module} imports {other}, of the family {theirs}' +
                   ('' if own else ' (shared code imports no family)'))
  return wrong


def test_no_family_imports_another_and_shared_code_imports_no_family():
  wrong = _family_imports_wrong(_graph())
  assert not wrong, (
      'what two families use lives in models/common/ (docs/models.md, '
      '"Where each model lives"): ' + '; '.join(wrong))


def test_every_model_module_lives_in_a_family_or_the_shared_place():
  folder = os.path.join(helpers.ROOT, 'models')
  loose = [n for n in sorted(os.listdir(folder))
           if n.endswith('.py') and n != '__init__.py']
  assert not loose, (f'models/{loose[0]} lies outside every family: move it '
                     'to its benchmark\'s folder, or to models/common/ if two '
                     'families use it')


def _circles(graph) -> list[list[str]]:
  """Strongly connected groups of more than one module (Tarjan)."""
  index, low, stack, on_stack, groups = {}, {}, [], set(), []

  def visit(node):
    index[node] = low[node] = len(index)
    stack.append(node)
    on_stack.add(node)
    for nxt in graph.get(node, ()):
      if nxt not in index:
        visit(nxt)
        low[node] = min(low[node], low[nxt])
      elif nxt in on_stack:
        low[node] = min(low[node], index[nxt])
    if low[node] == index[node]:
      group = []
      while True:
        top = stack.pop()
        on_stack.discard(top)
        group.append(top)
        if top == node:
          break
      if len(group) > 1:
        groups.append(sorted(group))

  for node in sorted(graph):
    if node not in index:
      visit(node)
  return groups


def test_no_modules_import_each_other_in_a_circle():
  assert _circles(_graph()) == []


def test_the_checks_see_a_circle_and_a_floor_broken():
  # The two checks find what they are for: a made-up graph with a circle.
  assert _circles({'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}}) == [
      ['a', 'b', 'c']]
  graph = _graph()
  assert 'distribution.plan' in graph and 'core.startup' in graph
  assert 'input_pipeline.records' in graph['input_pipeline.coco']
  assert _floor('core') < _floor('distribution') < _floor('training')
  assert 'models.common.layers' in graph['models.maskrcnn.model']
  # The family check sees a family borrowing from another, and shared code
  # reaching into a family.
  assert _family_imports_wrong({
      'models.gnmt.task': {'models.transformer.task', 'models.common.bleu',
                           'models.gnmt.model', 'training.losses'},
      'models.common.bleu': {'models.gnmt.model'},
  }) == ['models.common.bleu imports models.gnmt.model, of the family '
         'models.gnmt (shared code imports no family)',
         'models.gnmt.task imports models.transformer.task, of the family '
         'models.transformer']


def test_every_module_directly_in_tools_is_a_command():
  # tools/ lists what a user runs; internals live in its subfolders.
  folder = os.path.join(helpers.ROOT, 'tools')
  not_commands = []
  for name in sorted(os.listdir(folder)):
    if name.endswith('.py') and name != '__init__.py':
      with open(os.path.join(folder, name)) as f:
        if "if __name__ == '__main__':" not in f.read():
          not_commands.append(name)
  assert not not_commands, (f'tools/{not_commands[0]} is no command: move it '
                            'to a subfolder of tools/ (launcher/, predictor/, '
                            'formats/) or below')
