"""Points the notebooks' "Open in Colab" badges and their clone URL at the
GitHub repository that publishes the suite: one constant, two places in
each notebook.

  python -m tools.set_repository              # from `git remote get-url origin`
  python -m tools.set_repository OWNER/REPO   # or given

Each notebook (notebooks/*.ipynb) holds the repository once, as
GITHUB_REPOSITORY in its parameters cell; its badge link names the same
OWNER/REPO (a test checks that they agree), and the notebook clones
https://github.com/GITHUB_REPOSITORY when opened outside a checkout (Colab).
Run this in the checkout you publish from, and commit the notebooks.
"""

import glob
import json
import os
import re
import subprocess
import sys

FOLDER = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), 'notebooks')
NOTEBOOK = os.path.join(FOLDER, 'quickstart.ipynb')
PLACEHOLDER = 'OWNER/REPO'
_CONSTANT = re.compile(r"^GITHUB_REPOSITORY = '([^']*)'", re.M)
_BADGE = re.compile(r'colab\.research\.google\.com/github/([^/]+/[^/]+)/blob/')


def from_remote(url: str) -> str:
  """OWNER/REPO of a GitHub remote URL (https or ssh)."""
  match = re.search(r'github\.com[:/]([^/]+)/([^/]+?)(?:\.git)?/?$', url)
  if not match:
    raise ValueError(f'{url} is not a GitHub remote: pass OWNER/REPO.')
  return f'{match.group(1)}/{match.group(2)}'


def repositories(notebook: dict) -> tuple[str, str]:
  """(the constant, the badge's OWNER/REPO) of a notebook."""
  text = [''.join(c['source']) for c in notebook['cells']]
  constant = next(m.group(1) for t in text for m in [_CONSTANT.search(t)] if m)
  badge = next(m.group(1) for t in text for m in [_BADGE.search(t)] if m)
  return constant, badge


def set_repository(repository: str, path: str = NOTEBOOK) -> None:
  if not re.fullmatch(r'[\w.-]+/[\w.-]+', repository):
    raise ValueError(f'{repository!r} is not OWNER/REPO.')
  with open(path) as f:
    notebook = json.load(f)
  for cell in notebook['cells']:
    text = ''.join(cell['source'])
    text = _CONSTANT.sub(f"GITHUB_REPOSITORY = '{repository}'", text)
    text = _BADGE.sub(
        f'colab.research.google.com/github/{repository}/blob/', text)
    cell['source'] = text.splitlines(keepends=True)
  with open(path, 'w') as f:
    json.dump(notebook, f, indent=1, ensure_ascii=False)
    f.write('\n')


def main(argv) -> int:
  try:
    if len(argv) > 1:
      repository = argv[1]
    else:
      url = subprocess.run(['git', 'remote', 'get-url', 'origin'],
                           capture_output=True, text=True).stdout.strip()
      if not url:
        raise ValueError('this checkout has no origin remote: pass '
                         'OWNER/REPO.')
      repository = from_remote(url)
    paths = sorted(glob.glob(os.path.join(FOLDER, '*.ipynb')))
    for path in paths:
      set_repository(repository, path)
  except ValueError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  print(f'{len(paths)} notebooks: badges and clone URL now '
        f'github.com/{repository}')
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv))
