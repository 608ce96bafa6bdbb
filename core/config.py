"""Gin at the entry points: parsing, `--gin.NAME=VALUE` sugar, binding
types, the TASK macro.

Training (train.py), export (tools/export_savedmodel.py), inference
(inference/run.py), the launcher's preflight and the notebook read the same
gin files; each model's gin file binds the macro TASK, and all of them
build the task from it. The runtime's own code (training/, models/, ...)
never calls gin: this module is what the entry points share.
"""

import collections.abc
import contextlib
import difflib
import os
import re
import types
import typing

from absl import app
import gin

from core import moved_names

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIN_FOLDER = os.path.join(ROOT, 'gin')
GIN_SUGAR = '--gin.'
SEARCH_PATHS_HELP = ('Folders, comma-separated, where --gin_file names are '
                     'looked for (after the working directory, before the '
                     "repository's gin/ and its subfolders).")


def split_gin_sugar(argv: list[str]) -> tuple[list[str], list[str]]:
  """Turns `--gin.NAME=VALUE` arguments into gin bindings `NAME=VALUE`."""
  rest, bindings = [], []
  for arg in argv:
    if arg.startswith(GIN_SUGAR):
      name, sep, value = arg[len(GIN_SUGAR):].partition('=')
      if not sep:
        raise app.UsageError(f'{arg} needs a value: --gin.NAME=VALUE')
      bindings.append(f'{name} = {value}')
    else:
      rest.append(arg)
  return rest, bindings


def _gin_files_under(folder: str) -> list[str]:
  found = []
  for where, _, names in os.walk(folder):
    found += [os.path.join(where, n) for n in names if n.endswith('.gin')]
  return sorted(found)


def shown_path(path: str) -> str:
  """A gin file as commands and messages name it: relative to the
  repository inside it (gin/bert_pod.gin), else absolute."""
  path = os.path.abspath(path)
  inside = os.path.relpath(path, ROOT)
  return path if inside.startswith(os.pardir) else inside


def resolve_gin_file(name: str, search_paths=()) -> str:
  """The gin file `name` names, found as T5X's --gin_search_paths find them:
  as given (from the working directory, or absolute), then under each
  search path, the repository and its gin/, then by file name in gin/'s
  subfolders (`tpu.gin` is gin/hardware/tpu.gin). Returns it as
  `shown_path` writes it, so `bert_pod.gin` and `gin/bert_pod.gin` are one
  experiment everywhere (logs, predict's stored costs, the launcher).

  Raises:
    ValueError: one line naming the file, where it was looked for and the
      nearest gin files (or, for a bare name in two subfolders, both).
  """
  bases = [*search_paths, ROOT, GIN_FOLDER]
  for candidate in [name] + [os.path.join(b, name) for b in bases]:
    if os.path.isfile(candidate):
      return shown_path(candidate)
  if os.sep not in name and '/' not in name:
    matches = [p for p in _gin_files_under(GIN_FOLDER)
               if os.path.basename(p) == name]
    if len(matches) == 1:
      return shown_path(matches[0])
    if matches:
      raise ValueError(f'--gin_file={name} is ambiguous: '
                       f'{", ".join(map(shown_path, matches))}; give its folder.')
  known = [shown_path(p) for b in [*search_paths, GIN_FOLDER]
           for p in _gin_files_under(b)]
  by_name = {}
  for path in known:
    by_name.setdefault(os.path.basename(path), path)
    by_name.setdefault(path, path)
  near = difflib.get_close_matches(name, sorted(by_name), n=3, cutoff=0.5)
  nearest = list(dict.fromkeys(by_name[n] for n in near))  # Best first.
  where = ', '.join(['the working directory', *search_paths,
                     "the repository's gin/ and its subfolders"])
  hint = (f'nearest: {", ".join(nearest)}' if nearest else
          f'the experiments are in {shown_path(GIN_FOLDER)}/')
  raise ValueError(f'--gin_file={name}: no such file in {where}; {hint}. '
                   'Add a folder with --gin_search_paths.')


def _search_first(folder: str) -> None:
  """Makes gin look for `include`d files in `folder` before the working
  directory. gin has only add_config_file_search_path, which appends: its
  first prefix, '' (the working directory), would then be tried first and,
  from another folder, its package-resource reader logs an error line for
  every include of ours (`Path not found: gin/models/bert.gin`) before the
  repository's copy is found."""
  prefixes = gin.config._LOCATION_PREFIXES  # pylint: disable=protected-access
  if folder in prefixes:
    prefixes.remove(folder)
  prefixes.insert(0, folder)


def resolve_gin_files(names, search_paths=()) -> list[str]:
  """`resolve_gin_file` of each name; the search paths also serve the
  files' own `include` lines (before the repository and the working
  directory)."""
  _search_first(ROOT)
  for path in reversed(search_paths):
    _search_first(os.path.abspath(path))
  return [resolve_gin_file(n, tuple(search_paths)) for n in names]


def _gin_path(shown: str) -> str:
  return shown if os.path.isabs(shown) else os.path.join(ROOT, shown)


def parse(gin_files: list[str], bindings: list[str],
          finalize: bool = False, unread_macros: str = 'refuse') -> None:
  """Parses gin files (found by `resolve_gin_file`) and bindings, then
  checks each bound value against its parameter's type and that every
  macro set is read.

  Args:
    unread_macros: 'refuse' (training: a macro nothing reads is a typo
      that would change nothing) or 'known' (tools that reuse a training
      command's bindings without all its files, e.g. the export without the
      hardware file that reads CPU_REPLICAS: only a macro that no gin file
      of this repository reads is refused).
  """
  gin_files = [_gin_path(f) for f in resolve_gin_files(gin_files)]
  # Files first: the macros their bindings read, before a command-line
  # binding of a parameter replaces the binding that read one.
  with _unknown_names_explained():
    gin.parse_config_files_and_bindings(list(gin_files), [],
                                        finalize_config=False)
  read_by_files = macros_read()
  with _unknown_names_explained():
    gin.parse_config_files_and_bindings([], list(bindings),
                                        finalize_config=False)
  if finalize:
    finalize_config()
  check_binding_types()
  if unread_macros == 'known':
    read_by_files = read_by_files | macros_of_the_gin_files()
  check_macros_read(read_by_files)


# The suite's top-level packages: a gin file's import of a missing module
# of theirs is the file's mistake.
_OWN_PACKAGES = ('core', 'input_pipeline', 'distribution', 'training',
                 'models', 'inference', 'tools', 'train')
_UNKNOWN = re.compile(r"^(?:No module named|No configurable matching) "
                      r"'([\w.]+)'")
_WHERE = re.compile(r'^\s*In (?:file "([^"]+)", line (\d+)|bindings string '
                    r'line (\d+))')


@contextlib.contextmanager
def _unknown_names_explained():
  """gin's "No module named X" (from a gin `import`: a crash) and "No
  configurable matching X" as one line naming where and, for a module
  that moved (core/moved_names.py), the name to write instead."""
  try:
    yield
  except (ImportError, ValueError) as e:
    lines = str(e).splitlines()
    unknown = _UNKNOWN.match(lines[0]) if lines else None
    if not unknown:
      raise
    name = unknown[1]
    # A module the gin text imports, not one that module imports in turn
    # (a package not installed: core/extras.py explains those).
    if isinstance(e, ImportError) and (
        name not in lines[-1] or name.split('.')[0] not in _OWN_PACKAGES):
      raise
    where = next((m for m in map(_WHERE.match, lines[1:]) if m), None)
    if where and where[1]:
      place = f'{shown_path(where[1])}, line {where[2]}'
    elif where:
      place = f'the bindings (--gin_param, --gin.), line {where[3]}'
    else:
      place = 'the gin config'
    new = moved_names.moved(name)
    if new:
      raise ValueError(
          f'{place}: {name} is now {new} (models/ is one folder a benchmark '
          'since 2026-12-07; docs/models.md, "Moved names"): rename it there.'
          ) from None
    if isinstance(e, ImportError):
      raise ValueError(f'{place} imports {name}, which is no module of this '
                       'suite: check the name (docs/models.md says where '
                       'each model lives).') from None
    raise ValueError(f'{place}: no configurable is named {name}; check the '
                     'name and that its module is imported.') from None


def _bindings():
  """(selector, parameter, value) of every binding parsed so far."""
  # gin has no public listing of bindings: gin.config._CONFIG maps
  # (scope, selector) -> {parameter: value}.
  config = gin.config._CONFIG  # pylint: disable=protected-access
  return [(selector, name, value)
          for (_, selector), params in list(config.items())
          for name, value in params.items()]


def _macro_value(value):
  """Follows macro references to a value; returns (value, macro names)."""
  macros = []
  while (isinstance(value, gin.config.ConfigurableReference) and
         value.scoped_selector.endswith('/gin.macro') and len(macros) < 20):
    macros.append(value.scoped_selector.split('/')[0])
    value = gin.query_parameter(f'%{macros[-1]}')
  return value, macros


_SIMPLE = {int: (int,), float: (int, float), bool: (bool,), str: (str,)}


def _fits(value, hint) -> bool | None:
  """Whether `value` fits the annotation `hint`; None when we cannot tell."""
  if hint is type(None):
    return value is None
  if hint in _SIMPLE:
    if isinstance(value, bool) and hint is not bool:
      return False
    return isinstance(value, _SIMPLE[hint])
  origin = typing.get_origin(hint)
  if origin in (typing.Union, types.UnionType):
    fits = [_fits(value, h) for h in typing.get_args(hint)]
    return True if any(fits) else (None if None in fits else False)
  if origin in (tuple, list, collections.abc.Sequence):
    return isinstance(value, (tuple, list))
  return None


def _hints(selector: str) -> dict:
  try:
    fn = gin.get_configurable(selector)
    fn = getattr(fn, '__wrapped__', fn)
    return typing.get_type_hints(fn.__init__ if isinstance(fn, type) else fn)
  except Exception:  # pylint: disable=broad-except
    return {}  # Unannotated or unresolvable: nothing to check.


def check_binding_types() -> None:
  """Each bound value (macros followed) against its parameter's annotation.

  Raises:
    ValueError: naming the binding, the macro it came from, the value and
      the type the parameter takes.
  """
  for selector, name, value in _bindings():
    if selector == 'gin.macro':
      continue
    hint = _hints(selector).get(name)
    if hint is None:
      continue
    value, macros = _macro_value(value)
    if isinstance(value, gin.config.ConfigurableReference):
      continue
    if _fits(value, hint) is False:
      via = f' (set through the macro {macros[-1]})' if macros else ''
      shown = getattr(hint, '__name__', None) or str(hint)
      kind = type(value).__name__
      article = 'an' if kind[0] in 'aeiou' else 'a'
      raise ValueError(
          f'Gin binding {selector}.{name}{via} is {value!r}, {article} '
          f'{kind}; it must be {shown}.')


# Macros that code reads with gin.query_parameter instead of a binding.
MACROS_READ_BY_CODE = ('TASK',)


def _macro_references(value, found: set[str]) -> set[str]:
  """The macros `value` refers to, in lists, tuples and dicts too."""
  if isinstance(value, gin.config.ConfigurableReference):
    if value.scoped_selector.endswith('gin.macro'):
      found.add(value.scoped_selector.split('/')[0])
  elif isinstance(value, (list, tuple)):
    for v in value:
      _macro_references(v, found)
  elif isinstance(value, dict):
    for v in value.values():
      _macro_references(v, found)
  return found


def macros_read() -> set[str]:
  """The macros the bindings parsed so far read (and the code's, TASK)."""
  read: set[str] = set(MACROS_READ_BY_CODE)
  for _, _, value in _bindings():
    _macro_references(value, read)
  return read


def macros_of_the_gin_files() -> set[str]:
  """Every macro a gin file of this repository reads (`%NAME`)."""
  found = set()
  for folder, _, names in os.walk(os.path.join(ROOT, 'gin')):
    for name in names:
      if name.endswith('.gin'):
        with open(os.path.join(folder, name)) as f:
          found |= set(re.findall(r'%([A-Z][A-Z0-9_]*)\b', f.read()))
  return found


def check_macros_read(read_by_files: set[str] = frozenset()) -> None:
  """Every macro set is read by some binding (or by the code, TASK).

  `--gin.TRAIN_STEP=30` defines a new macro that nothing reads, so the run
  would silently use the whole budget: refused, naming the nearest macro.
  A macro the gin files read counts as read even where a command-line
  binding of the parameter replaced the binding that read it
  (`--gin.training.controller.RunSchedule.train_steps=4` leaves
  TRAIN_STEPS unread but known).

  Raises:
    ValueError: naming the unread macro and the nearest one that is read.
  """
  read = macros_read() | set(read_by_files)
  defined = [scope for (scope, selector) in list(gin.config._CONFIG)  # pylint: disable=protected-access
             if selector == 'gin.macro']
  unread = [name for name in defined if name not in read]
  if unread:
    name = unread[0]
    near = difflib.get_close_matches(name, sorted(read), n=1, cutoff=0.6)
    hint = (f'did you mean {near[0]}?' if near else
            'see the macro table in docs/configuration.md.')
    raise ValueError(
        f'Gin macro {name} is set but no binding reads it, so it would '
        f'change nothing: {hint}')


_ALIAS = re.compile(r'^import ([\w.]+) as (\w+)$', re.M)


def readable(config_text: str) -> str:
  """gin's config text with its module aliases undone.

  With dynamic registration gin writes `import distribution.gradients as
  distribution7` and then `distribution7.GradientOptions...`; this writes
  `import distribution.gradients` and `distribution.gradients.
  GradientOptions...`, which reads as the files do and parses the same.
  """
  aliases = dict((alias, module) for module, alias in
                 _ALIAS.findall(config_text))
  text = _ALIAS.sub(r'import \1', config_text)
  if not aliases:
    return text
  names = '|'.join(sorted(map(re.escape, aliases), key=len, reverse=True))
  return re.sub(rf'(?<![\w.])({names})\.',
                lambda m: aliases[m[1]] + '.', text)


_REQUIRED = re.compile(r'^(\w+)/macro\.value set to `%gin\.REQUIRED`')


def finalize_config() -> None:
  """gin.finalize(); a %gin.REQUIRED macro nothing binds is one line
  naming it and how to give it (gin's own says "DATA_DIR/macro.value set
  to `%gin.REQUIRED` but not subsequently overridden")."""
  try:
    gin.finalize()
  except ValueError as e:
    required = _REQUIRED.match(str(e))
    if not required:
      raise
    name = required[1]
    raise ValueError(
        f'{name} is %gin.REQUIRED by the gin files and nothing binds it: '
        f'give it, e.g. --gin_param="{name}=\'...\'" (the experiment '
        'file\'s header lists what it needs; docs/configuration.md).'
        ) from None


def configured_task():
  """The task the TASK macro of the parsed gin files builds."""
  try:
    reference = gin.query_parameter('%TASK')
  except ValueError as e:
    raise ValueError('The gin files bind no TASK macro: pass the model\'s '
                     'training gin file (e.g. gin/resnet_quickstart.gin).'
                     ) from e
  return reference.scoped_configurable_fn()
