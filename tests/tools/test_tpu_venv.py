"""The TPU VM's environment as one script (tools/tpu_venv.py): what it pins
and how it judges an installed environment, that the launcher, the notebook
and `make tpu_venv` all build it with that script, and the PJRT variables a
TPU VM's process sets. The environment itself is built and run by `make
tpu_check` (tests/tpu_env/)."""

import json
import os
import sys

import pytest

from core import startup
from distribution import tpu_slices
from tests import helpers
from tools import tpu_venv

MAIN = tpu_venv.pins(os.path.join(helpers.ROOT, tpu_venv.REQUIREMENTS))
COUPLED = tpu_venv.pins(os.path.join(helpers.ROOT, tpu_venv.COUPLED))


def test_tensorflow_tpu_and_its_libtpu_are_pinned_as_a_pair():
  assert MAIN['tensorflow-tpu'] == tpu_slices.TENSORFLOW_TPU == '2.20.0'
  # tensorflow-tpu 2.20.0 declares libtpu~=0.0.14: the one it was built
  # against (0.0.52, which pip would take, aborts `import tensorflow`).
  assert MAIN['libtpu'] == '0.0.14'
  assert MAIN['tensorboard'].startswith('2.20.')
  assert not set(tpu_venv.OTHER_TENSORFLOWS) & set(MAIN)
  # 2.20.1, not 2.20.0: the first 2.20 with wheels for Python 3.13, Colab's
  # since 2026-08-25 (the notebooks' TPU branch installs this file there).
  assert COUPLED == {'tensorflow-text': '2.20.1'}


def good_environment():
  return {**MAIN, **COUPLED, 'keras': '3.15.1'}


def test_a_correct_environment_passes():
  assert tpu_venv.distribution_problems(good_environment(), MAIN,
                                        COUPLED) == []


@pytest.mark.parametrize('change,message', [
    ({'tensorflow': '2.20.0'}, 'a second TensorFlow is installed beside '
     'tensorflow-tpu (tensorflow 2.20.0)'),
    ({'libtpu': '0.0.52'}, 'libtpu is 0.0.52, requirements-tpu.txt pins '
     '0.0.14'),
    ({'tensorflow-text': '2.21.1'}, 'tensorflow-text is 2.21.1, '
     'requirements-tpu-nodeps.txt pins 2.20.1'),
    ({'tensorflow-tpu': None}, 'tensorflow-tpu is missing'),
])
def test_a_wrong_environment_is_named(change, message):
  found = good_environment()
  for name, version in change.items():
    if version is None:
      del found[name]
    else:
      found[name] = version
  problems = tpu_venv.distribution_problems(found, MAIN, COUPLED)
  assert any(p.startswith(message) for p in problems), problems


def test_a_coupled_package_for_another_tensorflow_is_named():
  problems = tpu_venv.distribution_problems(
      good_environment(), MAIN, {'tensorflow-text': '2.20.1',
                                 'tf-keras': '2.19.0'})
  assert problems == ['tf-keras is missing, requirements-tpu-nodeps.txt pins '
                      '2.19.0']
  found = {**good_environment(), 'tf-keras': '2.19.0'}
  assert tpu_venv.distribution_problems(
      found, MAIN, {'tf-keras': '2.19.0'}) == [
          'tf-keras 2.19.0 is built for TensorFlow 2.19, tensorflow-tpu is '
          '2.20.0']


def test_the_launcher_the_notebook_and_make_build_it_with_this_script():
  from tests.tools import test_launch
  from tools.launcher import job as job_lib
  job = test_launch.job(slice=tpu_slices.parse('v3-8'), runtime='x')
  unpack = job_lib.install(job, '/tmp/suite.tar.gz')[1]
  assert any('python3 suite/tools/tpu_venv.py --venv=suite/.venv' in a
             for a in unpack)
  with open(os.path.join(helpers.ROOT, 'notebooks', 'quickstart.ipynb')) as f:
    notebook = json.load(f)
  source = ''.join(''.join(c['source']) for c in notebook['cells'])
  assert 'quickstarts.install(QUICKSTART, tpu=ON_TPU_VM,' in source
  assert 'requirements-tpu.txt' not in source
  from tools.notebook import quickstarts
  for model in quickstarts.QUICKSTARTS:
    assert quickstarts.install_commands(
        quickstarts.get(model), tpu=True, cloud=False) == [
            [sys.executable, 'tools/tpu_venv.py', f'--python={sys.executable}']]
  with open(os.path.join(helpers.ROOT, 'Makefile')) as f:
    assert 'python3 tools/tpu_venv.py --venv=$(TPU_VENV) --check' in f.read()
  with open(os.path.join(helpers.ROOT, '.ci', 'run')) as f:
    assert 'make tpu_check' in f.read()


def test_a_tpu_vm_process_sets_google_s_pjrt_variables(tmp_path, monkeypatch):
  accel = tmp_path / 'accel0'
  accel.write_text('')
  devices = (str(tmp_path / 'accel*'),)
  library = str(tmp_path / 'libtpu.so')
  monkeypatch.setattr(startup, 'libtpu_path', lambda: library)
  assert startup.tpu_environment({}, devices) == {
      'NEXT_PLUGGABLE_DEVICE_USE_C_API': 'true',
      'TF_PLUGGABLE_DEVICE_LIBRARY_PATH': library}
  # A user's own value stays; worker 0 of a pod (TPU_LOAD_LIBRARY=0) and a
  # machine without TPU devices get nothing.
  assert startup.tpu_environment(
      {'TF_PLUGGABLE_DEVICE_LIBRARY_PATH': '/lib/libtpu.so'}, devices) == {
          'NEXT_PLUGGABLE_DEVICE_USE_C_API': 'true'}
  assert startup.tpu_environment({'TPU_LOAD_LIBRARY': '0'}, devices) == {}
  assert startup.tpu_environment({}, (str(tmp_path / 'vfio*'),)) == {}
  monkeypatch.setattr(startup, 'libtpu_path', lambda: None)
  assert startup.tpu_environment({}, devices) == {}
