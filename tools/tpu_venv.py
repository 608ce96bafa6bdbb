"""Builds a TPU VM's Python environment: TensorFlow's TPU build, the libtpu
it was built against, and every package the suite's models need.

  python3 tools/tpu_venv.py --venv=.venv          # a TPU VM (tools.launch
                                                  # runs this on every worker)
  python3 tools/tpu_venv.py --python=python3      # into an interpreter as it
                                                  # is (Colab's TPU runtime)
  python3 tools/tpu_venv.py --venv=.venv-tpu --check   # `make tpu_venv`
  python3 tools/tpu_venv.py --venv=.venv-tpu --check_only

The one way the suite's TPU environment is made: the launcher, the
notebook's TPU branch and `make tpu_venv` all run this file. Standard library
only, so it runs on a fresh VM before anything is installed.

1. requirements-tpu.txt: tensorflow-tpu with the libtpu it was built
   against, pinned as a pair (tensorflow-tpu 2.20.0 declares
   `libtpu~=0.0.14`, which lets pip take libtpu 0.0.52; with that one
   `import tensorflow` aborts the process: "ConfigureDistributedTpuOp_DoWork
   not available in this library"), and the packages that do not depend on
   TensorFlow.
2. requirements-tpu-nodeps.txt with `--no-deps`: the packages built for one
   TensorFlow version (tensorflow-text), pinned to tensorflow-tpu's. Each
   requires the distribution `tensorflow`, which tensorflow-tpu is not: with
   its dependencies pip would install CPU TensorFlow into the same
   site-packages.
3. Always, the install checked: tensorflow-tpu is the only TensorFlow
   distribution, libtpu and tensorflow-tpu are the pinned pair, and every
   TensorFlow-coupled package has tensorflow-tpu's major.minor version.

`--check` then runs the environment with libtpu loaded (off a TPU VM with
TPU_SKIP_MDS_QUERY=1: libtpu then skips the metadata server's TPU queries,
which nothing answers here, instead of retrying each 30 times): `import
tensorflow` must not abort, and every module of the suite must import. `make tpu_check` goes on to
train each model's quickstart a few steps in it (tests/tpu_env/).

Exit codes: 0 built (and checked), 1 a step or check failed (one line
naming it), 2 bad arguments. Its own imports are the standard library's and
core/startup.py's (itself standard library only): it runs on a fresh VM
before anything is installed.
"""

import argparse
import glob
import json
import os
import shlex
import signal
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # Run as a script with any Python.
from core import startup  # pylint: disable=wrong-import-position

REQUIREMENTS = 'requirements-tpu.txt'
COUPLED = 'requirements-tpu-nodeps.txt'
# Distributions that hold a `tensorflow` package of their own: beside
# tensorflow-tpu, one of them would overwrite its files.
OTHER_TENSORFLOWS = ('tensorflow', 'tensorflow-cpu', 'tensorflow-gpu',
                     'tensorflow-intel', 'tensorflow-macos', 'tf-nightly',
                     'tf-nightly-cpu', 'tf-nightly-tpu', 'tf-nightly-gpu')
# The suite's modules that must import on a TPU VM: every module of these
# packages, train.py, and the tools a TPU VM runs.
PACKAGES = ('models', 'input_pipeline', 'training', 'distribution',
            'inference')
TOOLS = ('tools.launcher.job_runner', 'tools.launcher.object_store', 'core.staged_files',
         'tools.export_savedmodel', 'tools.score', 'tools.convert_coco',
         'tools.convert_criteo', 'tools.convert_image_folder',
         'tools.create_pretraining_data', 'tools.build_vocab',
         'tools.build_quickstart_data', 'tools.build_bert_quickstart_data',
         'tools.build_ssd_quickstart_data', 'tools.stage_data')


class Failed(RuntimeError):
  """A step or check failed: one line saying which and why."""


def pins(path: str) -> dict[str, str]:
  """{distribution: version} of the `name==version` lines of a
  requirements file (names normalised as pip does)."""
  found = {}
  with open(path) as f:
    for line in f:
      line = line.split('#', 1)[0].strip()
      if '==' in line:
        name, version = line.split('==', 1)
        found[normalise(name)] = version.strip()
  return found


def normalise(name: str) -> str:
  return name.strip().lower().replace('_', '-').replace('.', '-')


def run(argv: list[str], what: str, env=None) -> None:
  print('+ ' + shlex.join(argv), flush=True)
  code = subprocess.run(argv, cwd=ROOT, env=env, check=False).returncode
  if code:
    raise Failed(f'{what} failed (exit {code}); its output is above.')


def build(python: str) -> None:
  pip = [python, '-m', 'pip', 'install', '-q']
  run(pip + ['-r', REQUIREMENTS], f'pip install -r {REQUIREMENTS}')
  run(pip + ['--no-deps', '-r', COUPLED],
      f'pip install --no-deps -r {COUPLED}')


def installed(python: str) -> dict[str, str]:
  """{distribution: version} of what `python` has installed."""
  code = ('import importlib.metadata as m, json; print(json.dumps({'
          'd.metadata["Name"]: d.version for d in m.distributions()}))')
  out = subprocess.run([python, '-c', code], capture_output=True, text=True,
                       check=False)
  if out.returncode:
    raise Failed(f'{python} cannot list its packages: '
                 f'{(out.stderr.strip().splitlines() or ["?"])[-1]}')
  return {normalise(k): v for k, v in json.loads(out.stdout).items()}


def major_minor(version: str) -> str:
  return '.'.join(version.split('.')[:2])


def distribution_problems(found: dict[str, str], main: dict[str, str],
                          coupled: dict[str, str]) -> list[str]:
  """What is wrong with an installed environment, one sentence each."""
  problems = []
  others = [f'{n} {found[n]}' for n in OTHER_TENSORFLOWS if n in found]
  if others:
    problems.append(f'a second TensorFlow is installed beside tensorflow-tpu '
                    f'({", ".join(others)}): a package pulled it in; install '
                    f'TensorFlow-coupled packages from {COUPLED} with '
                    '--no-deps')
  for name in ('tensorflow-tpu', 'libtpu'):
    if found.get(name) != main.get(name):
      problems.append(f'{name} is {found.get(name, "missing")}, '
                      f'{REQUIREMENTS} pins {main.get(name)}')
  tf = found.get('tensorflow-tpu', '')
  for name, version in coupled.items():
    if found.get(name) != version:
      problems.append(f'{name} is {found.get(name, "missing")}, {COUPLED} '
                      f'pins {version}')
    elif major_minor(version) != major_minor(tf):
      problems.append(f'{name} {version} is built for TensorFlow '
                      f'{major_minor(version)}, tensorflow-tpu is {tf}')
  return problems


def on_tpu_vm() -> bool:
  return any(glob.glob(p) for p in startup.TPU_DEVICE_FILES)


def libtpu_environment() -> dict:
  """This environment with libtpu loaded at `import tensorflow` (and, off a
  TPU VM, its metadata queries skipped)."""
  env = dict(os.environ)
  env.pop('TPU_LOAD_LIBRARY', None)
  if not on_tpu_vm():
    env['TPU_SKIP_MDS_QUERY'] = '1'
  return env


def check_import(python: str, timeout: float = 600) -> str:
  """`import tensorflow` with libtpu loaded; returns TensorFlow's version.

  Raises:
    Failed: the import aborted (a libtpu TensorFlow was not built against),
      failed, or hung.
  """
  env = libtpu_environment()
  code = 'import tensorflow as tf; print("version", tf.__version__)'
  try:
    out = subprocess.run([python, '-c', code], capture_output=True,
                         text=True, env=env, timeout=timeout, check=False)
  except subprocess.TimeoutExpired as e:
    raise Failed(f'import tensorflow with libtpu loaded did not finish in '
                 f'{timeout:.0f} s') from e
  if out.returncode:
    how = (f'was killed by {signal.Signals(-out.returncode).name}'
           if out.returncode < 0 else f'exited {out.returncode}')
    fatal = [l for l in out.stderr.splitlines() if l.startswith('F')]
    raise Failed(f'import tensorflow with libtpu loaded {how}'
                 f'{": " + fatal[-1] if fatal else ""} (the libtpu is not the '
                 'one this TensorFlow was built against?)')
  return out.stdout.split('version', 1)[1].strip()


def suite_modules() -> list[str]:
  names = ['train']
  for package in PACKAGES:
    for path in sorted(glob.glob(os.path.join(ROOT, package, '*.py'))):
      name = os.path.splitext(os.path.basename(path))[0]
      names.append(package if name == '__init__' else f'{package}.{name}')
  return names + list(TOOLS)


def check_modules(python: str, timeout: float = 900) -> int:
  """Imports every module of the suite with libtpu loaded; returns how
  many.

  Raises:
    Failed: naming each module that does not import and why.
  """
  modules = suite_modules()
  code = ('import importlib, json, sys\n'
          'failed = {}\n'
          f'for name in {modules!r}:\n'
          '  try:\n'
          '    importlib.import_module(name)\n'
          '  except Exception as e:  # noqa\n'
          '    failed[name] = f"{type(e).__name__}: {e}".splitlines()[0]\n'
          'print("failed", json.dumps(failed))\n')
  env = dict(libtpu_environment(), TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=ROOT)
  out = subprocess.run([python, '-c', code], capture_output=True, text=True,
                       cwd=ROOT, env=env, timeout=timeout, check=False)
  if out.returncode or 'failed ' not in out.stdout:
    raise Failed('importing the suite\'s modules exited '
                 f'{out.returncode}: '
                 f'{(out.stderr.strip().splitlines() or ["?"])[-1]}')
  failed = json.loads(out.stdout.split('failed ', 1)[1])
  if failed:
    raise Failed('modules that do not import: ' + '; '.join(
        f'{k} ({v})' for k, v in failed.items()))
  return len(modules)


def venv_python(folder: str) -> str:
  return os.path.join(os.path.abspath(folder), 'bin', 'python')


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  where = parser.add_mutually_exclusive_group(required=True)
  where.add_argument('--venv', help='make (or reuse) this venv and install '
                     'into it')
  where.add_argument('--python', help='install into this interpreter as it '
                     'is (Colab)')
  parser.add_argument('--check', action='store_true',
                      help='then import TensorFlow with libtpu loaded and '
                      'every module of the suite')
  parser.add_argument('--check_only', action='store_true',
                      help='check an environment built before; install '
                      'nothing')
  args = parser.parse_args(argv)
  python = venv_python(args.venv) if args.venv else args.python
  try:
    if not args.check_only:
      if args.venv and not os.path.exists(python):
        run([sys.executable, '-m', 'venv', args.venv], 'python3 -m venv')
      build(python)
    elif not os.path.exists(python) and os.sep in python:
      raise Failed(f'{python} does not exist: build the environment first '
                   '(drop --check_only).')
    problems = distribution_problems(
        installed(python), pins(os.path.join(ROOT, REQUIREMENTS)),
        pins(os.path.join(ROOT, COUPLED)))
    if problems:
      raise Failed('; '.join(problems) + '.')
    print('tpu_venv: tensorflow-tpu is the only TensorFlow; libtpu and '
          'the TensorFlow-coupled packages are the pinned ones.', flush=True)
    if args.check or args.check_only:
      version = check_import(python)
      print(f'tpu_venv: import tensorflow {version} with libtpu loaded: ok.',
            flush=True)
      count = check_modules(python)
      print(f'tpu_venv: {count} modules of the suite import with libtpu '
            'loaded.', flush=True)
  except Failed as e:
    print(f'error: {e}', file=sys.stderr, flush=True)
    return 1
  return 0


if __name__ == '__main__':
  sys.exit(main())
