"""Every entry point's `--help` answers before TensorFlow loads, and every
command line the README, docs/, the Makefile and the entry points' own
docstrings print names a module that exists and only flags it defines (so
no documented usage line rots)."""

import functools
import glob
import json
import os
import re
import subprocess
import sys

import pytest

from tests import helpers

ABSL_ENTRY_POINTS = ['train.py', 'inference/run.py'] + sorted(
    os.path.relpath(p, helpers.ROOT)
    for p in glob.glob(os.path.join(helpers.ROOT, 'tools', '**', '*.py'),
                       recursive=True)
    if "if __name__ == '__main__':" in open(p).read() and
    'absl import app' in open(p).read())

# Runs one entry point with --help in a fresh interpreter and reports the
# flags it defined and whether TensorFlow was imported.
PROBE = '''
import json, runpy, sys
path = sys.argv[1]
sys.argv = [path, '--help']
try:
  runpy.run_path(path, run_name='__main__')
except SystemExit as e:
  code = e.code
else:
  code = None
from absl import flags
print('PROBE ' + json.dumps({'tensorflow': 'tensorflow' in sys.modules,
                             'code': code, 'flags': sorted(flags.FLAGS)}))
'''


@functools.lru_cache(maxsize=None)
def probe(path: str) -> dict:
  result = subprocess.run([sys.executable, '-c', PROBE, path],
                          cwd=helpers.ROOT, capture_output=True, text=True,
                          timeout=helpers.HANG_SECONDS, check=False,
                          env=dict(os.environ, PYTHONPATH=helpers.ROOT))
  lines = [l for l in result.stdout.splitlines() if l.startswith('PROBE ')]
  assert lines, result.stdout + result.stderr
  report = json.loads(lines[-1][len('PROBE '):])
  report['help'] = result.stdout
  return report


def test_the_entry_points_are_found():
  assert {'train.py', 'inference/run.py', 'tools/launch.py',
          'tools/convert_criteo.py', 'tools/score.py'} <= set(
              ABSL_ENTRY_POINTS)


@pytest.mark.parametrize('path', ABSL_ENTRY_POINTS)
def test_help_answers_before_tensorflow_loads(path):
  report = probe(path)
  assert report['code'] in (0, 1)  # absl's --help exits 1.
  assert not report['tensorflow'], f'{path} --help imported TensorFlow'
  assert 'flags:' in report['help'].lower() or '--' in report['help']


def _documents() -> list[tuple[str, str]]:
  paths = ['README.md', 'Makefile'] + sorted(
      glob.glob(os.path.join(helpers.ROOT, 'docs', '*.md'))) + [
          os.path.join(helpers.ROOT, p) for p in ABSL_ENTRY_POINTS]
  out = []
  for p in paths:
    with open(os.path.join(helpers.ROOT, p)) as f:
      out.append((os.path.relpath(os.path.join(helpers.ROOT, p),
                                  helpers.ROOT), f.read()))
  return out


COMMAND = re.compile(
    r'(?:python3?|\$\(PY\)|\.venv/bin/python) +'
    r'(?:-m +(?P<module>[a-z_][\w.]*)|(?P<script>[\w/]+\.py))'
    r'(?P<args>[^\n`|;&)#]*)')


def documented_commands() -> list[tuple[str, str, list[str]]]:
  """(document, entry point path, flags named) of each command printed."""
  found = []
  for name, text in _documents():
    text = re.sub(r'\\\n\s*', ' ', text)  # Join continued lines.
    for m in COMMAND.finditer(text):
      if m['module']:
        path = m['module'].replace('.', '/') + '.py'
      else:
        path = m['script']
      if not (path.startswith(('tools/', 'inference/', 'benchmarks/')) or
              path == 'train.py'):
        continue
      if path.startswith('benchmarks/'):
        # Benchmarks load TensorFlow to define their flags: the module only.
        found.append((name, path, []))
        continue
      mine = m['args'].split(' -- ')[0]  # After --: a command it runs.
      names = re.findall(r'(?:^|\s)--([a-z]\w*)(?=[=\s]|$)', mine)
      found.append((name, path, names))
  return found


def test_documented_command_lines_name_real_tools_and_flags():
  commands = documented_commands()
  assert len(commands) > 20, commands  # The scan finds the README's.
  problems = []
  for document, path, names in commands:
    if not os.path.exists(os.path.join(helpers.ROOT, path)):
      problems.append(f'{document}: {path} does not exist')
      continue
    if path not in ABSL_ENTRY_POINTS:
      continue
    defined = set(probe(path)['flags'])
    for name in names:
      plain = name[2:] if name.startswith('no') else name
      if name not in defined and plain not in defined:
        problems.append(f'{document}: {path} has no flag --{name}')
  assert not problems, '\n'.join(sorted(set(problems)))
