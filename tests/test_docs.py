"""The documentation holds together: every relative link resolves, every
macro a gin file defines is in docs/configuration.md, the README stays a
short guide, and each folder of models/ opens with a README naming its
files."""

import glob
import os
import re

from tests import helpers

MODEL_FOLDERS = sorted(
    os.path.dirname(os.path.relpath(p, helpers.ROOT))
    for p in glob.glob(os.path.join(helpers.ROOT, 'models', '*',
                                    '__init__.py')))
PAGES = ['README.md'] + sorted(
    os.path.relpath(p, helpers.ROOT)
    for p in glob.glob(os.path.join(helpers.ROOT, 'docs', '*.md'))) + [
        os.path.join(f, 'README.md') for f in MODEL_FOLDERS]


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


def test_each_model_folder_opens_with_a_readme_naming_its_files():
  assert len(MODEL_FOLDERS) == 9, MODEL_FOLDERS  # 8 families and common/.
  wrong = []
  for folder in MODEL_FOLDERS:
    page = os.path.join(folder, 'README.md')
    text = open(os.path.join(helpers.ROOT, page)).read()
    modules = sorted(n for n in os.listdir(os.path.join(helpers.ROOT, folder))
                     if n.endswith('.py') and n != '__init__.py')
    wrong += [f'{page} does not name {m}' for m in modules
              if f'`{m}`' not in text]
    for path in re.findall(r'`((?:\.\./|gin/)[\w/.]+\.(?:py|gin))`', text):
      base = helpers.ROOT if path.startswith('gin/') else os.path.join(
          helpers.ROOT, folder)
      if not os.path.isfile(os.path.join(base, path)):
        wrong.append(f'{page} names {path}, which does not exist')
    if folder != 'models/common' and 'gin/models/' not in text:
      wrong.append(f'{page} names no model gin file')
  assert not wrong, '; '.join(wrong)
