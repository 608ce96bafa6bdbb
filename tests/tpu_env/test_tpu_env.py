"""A TPU VM's Python environment, built here as the launcher builds it
(tools/tpu_venv.py), and run: `make tpu_check`, CI's second step.

TPU_VENV names the venv (`make tpu_venv` builds .venv-tpu); without it this
folder is not collected (tests/conftest.py). tensorflow-tpu installs on an
x86 CPU and, with TPU_LOAD_LIBRARY=0, runs TensorFlow's CPU kernels: each
model's quickstart trains a few steps under the TPU build through train.py's
command line, with the data the main environment built.
"""

import json
import os
import subprocess
import sys

import pytest

from tests import helpers
from tests import tiny_quickstarts
from tools.notebook import quickstarts
from tools import tpu_venv

VENV = os.environ.get('TPU_VENV', '')
if not VENV:
  raise RuntimeError('Set TPU_VENV to the TPU environment (make tpu_check).')
PYTHON = tpu_venv.venv_python(VENV)


def test_the_environment_passes_its_check():
  """tensorflow-tpu is the only TensorFlow, the pinned libtpu loads at
  `import tensorflow` without aborting, every module of the suite imports."""
  done = subprocess.run(
      [sys.executable, 'tools/tpu_venv.py', f'--venv={VENV}', '--check_only'],
      cwd=helpers.ROOT, capture_output=True, text=True,
      timeout=helpers.HANG_SECONDS)
  assert done.returncode == 0, done.stderr[-3000:]
  assert 'import tensorflow 2.20.0 with libtpu loaded: ok' in done.stdout
  found = tpu_venv.installed(PYTHON)
  assert found['tensorflow-tpu'] == '2.20.0'
  assert not set(tpu_venv.OTHER_TENSORFLOWS) & set(found)


def train(gin_file, model_dir, bindings):
  """`python train.py` in the TPU environment, TensorFlow's CPU kernels."""
  args = [f'--gin_param={k} = {v}' for k, v in bindings.items()]
  return subprocess.run(
      [PYTHON, 'train.py', f'--gin_file={gin_file}',
       f'--model_dir={model_dir}', *args],
      cwd=helpers.ROOT, capture_output=True, text=True,
      timeout=helpers.HANG_SECONDS,
      env=dict(os.environ, TPU_LOAD_LIBRARY='0', PYTHONPATH=helpers.ROOT))


def assert_trained(done, model_dir, steps):
  assert done.returncode in (0, 1), (done.stdout + done.stderr)[-3000:]
  with open(os.path.join(model_dir, 'mlperf.log')) as f:
    log = f.read()
  assert '"key": "run_stop"' in log
  assert f'eval at step {steps}' in done.stdout


@pytest.mark.parametrize('model', sorted(tiny_quickstarts.TINY))
def test_each_quickstart_trains_under_the_tpu_build(model, request, tmp_path):
  """Each quickstart, 4 steps on the tests' small data (tests/
  tiny_quickstarts.py). MiniGo: self-play's searches in host processes
  spawned from the TPU build's Python, their leaves evaluated by the
  training process (the default SELFPLAY_INFERENCE = 'device'); the games
  against the target (OpenSpiel's MCTS, from requirements-tpu.txt) in NumPy
  in host processes; training on the device."""
  quickstart = quickstarts.get(model)
  data_dir = tiny_quickstarts.data_dir(model, request)
  model_dir = str(tmp_path / model)
  bindings = dict(b.split(' = ', 1) for b in
                  quickstarts.data_bindings(quickstart, data_dir))
  bindings.update(tiny_quickstarts.bindings(model, data_dir))
  done = train(os.path.basename(quickstart.gin_file), model_dir, bindings)
  assert_trained(done, model_dir, 4)
  if model == 'minigo':
    assert os.path.exists(os.path.join(model_dir, 'generations', '000000',
                                       'done-w0.json'))


def test_the_notebooks_tpu_branch_builds_the_environment_in_its_kernel(
    quickstart_data, tmp_path, monkeypatch):
  """Colab's TPU runtime as the notebook meets it: a Python with a kernel
  and no TensorFlow. The set-up cell's TPU branch (INSTALL = True, TPU =
  'local') builds the suite's TPU environment into the kernel's own Python
  with tools/tpu_venv.py --python; the rest of the notebook then trains,
  checks, exports and serves ResNet on tensorflow-tpu's CPU kernels (no
  TPU here: TPU is set back to '' after the set-up)."""
  from tests import test_notebook
  colab = tmp_path / 'colab'
  subprocess.run([sys.executable, '-m', 'venv', str(colab)], check=True)
  python = tpu_venv.venv_python(str(colab))
  pins = tpu_venv.pins(os.path.join(helpers.ROOT, 'requirements-test.txt'))
  subprocess.run([python, '-m', 'pip', 'install', '-q',
                  f'ipykernel=={pins["ipykernel"]}'], check=True,
                 timeout=helpers.HANG_SECONDS)
  assert 'tensorflow' not in tpu_venv.installed(python)
  kernels = tmp_path / 'jupyter' / 'kernels' / 'colab'
  kernels.mkdir(parents=True)
  (kernels / 'kernel.json').write_text(json.dumps({
      'argv': [python, '-m', 'ipykernel_launcher', '-f',
               '{connection_file}'],
      'display_name': 'a Python without TensorFlow', 'language': 'python'}))
  monkeypatch.setenv('JUPYTER_PATH', str(tmp_path / 'jupyter'))
  monkeypatch.setenv('TPU_LOAD_LIBRARY', '0')
  params = [f'{k} = {v}' for k, v in
            tiny_quickstarts.bindings('resnet', quickstart_data).items()]
  nb, error = test_notebook.execute(
      test_notebook.TEMPLATE,
      f"INSTALL = True\nTPU = 'local'\nDATA_DIR = {quickstart_data!r}\n"
      f'LOADGEN_MS = 1000\nGIN_PARAMS = {params!r}', tmp_path,
      kernel_name='colab', after_setup="TPU = ''  # No TPU here.")
  everything = '\n'.join(test_notebook.text_of(c) for c in nb.cells
                         if c.cell_type == 'code')
  assert error is None, everything[-4000:]
  found = tpu_venv.installed(python)
  assert found['tensorflow-tpu'] == '2.20.0'
  assert tpu_venv.distribution_problems(found, *(
      tpu_venv.pins(os.path.join(helpers.ROOT, f))
      for f in (tpu_venv.REQUIREMENTS, tpu_venv.COUPLED))) == []
  assert 'suite: ' in everything and 'TPU: local' in everything
  assert ' at step 4, time to train' in everything
  assert f'FP32: {test_notebook.SERVED}' in everything


# Colab's runtime Python since 2026-08-25 (googlecolab/colabtools#6081,
# "Upgrade to Python 3.13"; 3.12 before it: #5483).
COLAB_PYTHON = '3.13'
MANYLINUX = ('manylinux2014', 'manylinux_2_17', 'manylinux_2_27',
             'manylinux_2_28', 'manylinux_2_31', 'manylinux_2_34',
             'manylinux_2_35')


@pytest.mark.parametrize('files', [
    ('requirements-tpu.txt',),
    ('requirements.txt', 'requirements-inference.txt',
     'requirements-bert.txt', 'requirements-transformer.txt',
     'requirements-ssd.txt', 'requirements-minigo.txt',
     'requirements-cloud.txt'),
], ids=['tpu', 'cpu'])
def test_the_notebooks_requirements_install_on_colabs_python(files,
                                                             tmp_path):
  """What the notebooks install on Colab (tools/notebook/quickstarts.py:
  the TPU environment's files on its TPU runtime, the model's files on a
  CPU one) resolves to binary wheels for Colab's Python, with their
  dependencies (pip's resolver for that interpreter, nothing installed):
  this machine's Python is 3.11. requirements-tpu-nodeps.txt goes in with
  --no-deps, so alone."""
  platforms = [a for tag in MANYLINUX for a in ('--platform',
                                                f'{tag}_x86_64')]
  abi = 'cp' + COLAB_PYTHON.replace('.', '')
  for group, deps in ((files, []), (('requirements-tpu-nodeps.txt',),
                                    ['--no-deps'])):
    if 'requirements-tpu.txt' not in files and deps:
      continue
    done = subprocess.run(
        [sys.executable, '-m', 'pip', 'install', '-q', '--dry-run',
         '--ignore-installed', '--only-binary=:all:', *deps,
         f'--python-version={COLAB_PYTHON}', '--implementation=cp',
         f'--abi={abi}', *platforms, f'--target={tmp_path}',
         *[a for f in group for a in ('-r', f)]],
        cwd=helpers.ROOT, capture_output=True, text=True,
        timeout=helpers.HANG_SECONDS)
    assert done.returncode == 0, done.stderr[-3000:]
