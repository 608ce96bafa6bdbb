"""Writes each model's notebook from notebooks/quickstart.ipynb.

  python -m tools.write_notebooks           # after editing quickstart.ipynb
  python -m tools.write_notebooks --check   # exit 1 if one is out of date

notebooks/quickstart.ipynb holds every cell once and takes any model in
its MODEL parameter; notebooks/<model>.ipynb is the same notebook with its
model set, its title and its "Open in Colab" badge pointing at itself, so a
Colab user opens one model's page and runs it. Edit quickstart.ipynb only,
then run this (a test checks that every model's notebook is what this
writes).
"""

import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # Run as a script from anywhere.
# pylint: disable=wrong-import-position
from tools.notebook import quickstarts

FOLDER = os.path.join(ROOT, 'notebooks')
TEMPLATE = os.path.join(FOLDER, 'quickstart.ipynb')
_MODEL = re.compile(r"^MODEL = '\w+'.*$", re.M)
_TITLE = re.compile(r'^# .*$', re.M)


def path_of(model: str) -> str:
  return os.path.join(FOLDER, f'{model}.ipynb')


def render(template: dict, model: str) -> str:
  """The text of `model`'s notebook, made from the template's JSON."""
  quickstart = quickstarts.get(model)
  notebook = json.loads(json.dumps(template))
  cells = notebook['cells']
  title = ''.join(cells[0]['source'])
  title = _TITLE.sub(f'# MLPerf training suite: the {quickstart.title} '
                     'quickstart in a notebook', title, count=1)
  title = title.replace('/notebooks/quickstart.ipynb',
                        f'/notebooks/{model}.ipynb')
  cells[0]['source'] = title.splitlines(keepends=True)
  for cell in cells:
    if 'parameters' in cell['metadata'].get('tags', []):
      text = _MODEL.sub(
          f"MODEL = '{model}'  # this notebook's model "
          '(notebooks/quickstart.ipynb takes any)', ''.join(cell['source']),
          count=1)
      cell['source'] = text.splitlines(keepends=True)
  return dumps(notebook)


def dumps(notebook: dict) -> str:
  """A notebook's JSON as nbformat writes it (indent 1, a final newline)."""
  return json.dumps(notebook, indent=1, ensure_ascii=False) + '\n'


def main(argv) -> int:
  check = argv[1:] == ['--check']
  if argv[1:] and not check:
    print('error: the one flag is --check.', file=sys.stderr)
    return 2
  with open(TEMPLATE) as f:
    template = json.load(f)
  stale = []
  for model in quickstarts.QUICKSTARTS:
    text = render(template, model)
    path = path_of(model)
    if os.path.exists(path) and open(path).read() == text:
      continue
    stale.append(os.path.relpath(path, ROOT))
    if not check:
      with open(path, 'w') as f:
        f.write(text)
  if check and stale:
    print(f'error: out of date: {", ".join(stale)}: run python -m '
          'tools.write_notebooks.', file=sys.stderr)
    return 1
  if check:
    print('every model\'s notebook is up to date.')
  else:
    print(f'written: {", ".join(stale) or "none (all up to date)"}')
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv))
