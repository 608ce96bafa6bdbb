"""The documentation holds together: every relative link resolves, every
macro a gin file defines is in docs/configuration.md, and the README stays
a short guide."""

import glob
import os
import re

from tests import helpers

PAGES = ['README.md'] + sorted(
    os.path.relpath(p, helpers.ROOT)
    for p in glob.glob(os.path.join(helpers.ROOT, 'docs', '*.md')))


def test_every_relative_link_resolves():
  broken = []
  for page in PAGES:
    text = open(os.path.join(helpers.ROOT, page)).read()
    for target in re.findall(r'\]\(([^)\s]+)\)', text):
      path = target.split('#')[0]
      if not path or re.match(r'[a-z]+:', path):
        continue
      if not os.path.exists(os.path.join(helpers.ROOT, os.path.dirname(page),
                                         path)):
        broken.append(f'{page}: ({target})')
  assert not broken, '\n'.join(broken)


def test_every_macro_of_the_gin_files_is_documented():
  defined = set()
  for path in glob.glob(os.path.join(helpers.ROOT, 'gin', '**', '*.gin'),
                        recursive=True):
    defined |= set(re.findall(r'^([A-Z][A-Z0-9_]*)\s*=', open(path).read(),
                              re.M))
  assert {'TRAIN_STEPS', 'TASK', 'TABLE_SIZES', 'CPU_REPLICAS'} <= defined
  doc = open(os.path.join(helpers.ROOT, 'docs', 'configuration.md')).read()
  missing = sorted(m for m in defined if f'`{m}`' not in doc)
  assert not missing, f'docs/configuration.md lacks {missing}'


def test_the_readme_is_a_short_guide():
  readme = open(os.path.join(helpers.ROOT, 'README.md')).read()
  assert len(readme.splitlines()) <= 250
  for page in ('docs/models.md', 'docs/configuration.md', 'docs/pods.md',
               'docs/scaling.md', 'docs/failures.md', 'docs/inference.md',
               'docs/runs.md', 'docs/data.md', 'docs/testing.md'):
    assert f']({page})' in readme, page
