"""English -> German pairs from the gettext catalogs inside installed pip
packages (the Transformer quickstart's data; nothing is downloaded).

Django, Sphinx and pycountry ship human translations of their messages and
names as `locale(s)/de/LC_MESSAGES/*.po` / `.mo`; polib reads them. A
message's English `msgid` is the source, its German `msgstr` the target
(both forms of a plural message are pairs). Fuzzy and obsolete entries are
skipped; whitespace runs become one space (translation data is one sentence
a line).
"""

import importlib.metadata

PACKAGES = ('Django', 'Sphinx', 'pycountry')


def _one_line(text: str) -> str:
  return ' '.join(text.split())


def _catalogs(package: str):
  try:
    files = importlib.metadata.files(package) or []
  except importlib.metadata.PackageNotFoundError as e:
    raise FileNotFoundError(
        f'The package {package} is not installed; the quickstart reads its '
        'German message catalogs: pip install -r requirements-transformer.txt.') from e
  paths = {str(f): f for f in files if '/de/LC_MESSAGES/' in str(f)}
  for name in sorted(paths):
    stem, _, ext = name.rpartition('.')
    # A .po is the catalog's source; its .mo is the same messages compiled.
    if ext == 'po' or (ext == 'mo' and f'{stem}.po' not in paths):
      yield ext, str(paths[name].locate())


def catalog_pairs(packages=PACKAGES) -> list[tuple[str, str]]:
  """(English, German) pairs, first translation of each English text kept,
  in a fixed order (package, catalog path, entry)."""
  import polib
  seen, pairs = set(), []
  for package in packages:
    for ext, path in _catalogs(package):
      catalog = polib.pofile(path) if ext == 'po' else polib.mofile(path)
      for entry in catalog:
        if entry.obsolete or 'fuzzy' in entry.flags:
          continue
        if entry.msgid_plural:
          forms = [(entry.msgid, entry.msgstr_plural.get(0)),
                   (entry.msgid_plural, entry.msgstr_plural.get(1))]
        else:
          forms = [(entry.msgid, entry.msgstr)]
        for source, target in forms:
          source, target = _one_line(source or ''), _one_line(target or '')
          if source and target and source not in seen:
            seen.add(source)
            pairs.append((source, target))
  return pairs
