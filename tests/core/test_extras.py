"""A module of an optional requirements file, not installed, is one line
naming the file to install (core/extras.py), in train.py and every tool."""

import subprocess
import sys

import pytest

from tests import helpers
from core import extras


def import_error(module: str) -> ImportError:
  """The real error of importing `module` when it is not installed."""
  saved = sys.modules.get(module)
  sys.modules[module] = None  # What Python raises for a missing module.
  try:
    __import__(module)
  except ImportError as e:
    return e
  finally:
    if saved is None:
      del sys.modules[module]
    else:
      sys.modules[module] = saved
  raise AssertionError(f'{module} imported')


@pytest.mark.parametrize('module, file', [
    ('pycocotools', 'requirements-ssd.txt'),
    ('sacrebleu', 'requirements-transformer.txt'),
    ('mlperf_loadgen', 'requirements-inference.txt'),
    ('onnxruntime', 'requirements-inference.txt'),
    ('tensorflow_text', 'requirements-bert.txt or requirements-transformer'),
])
def test_a_missing_optional_module_names_its_requirements_file(module, file):
  line = extras.explain(import_error(module))
  assert line.startswith(f'{module} is not installed: pip install -r {file}')


def test_other_import_errors_are_not_explained_away():
  assert extras.explain(import_error('json')) is None
  assert extras.explain(ModuleNotFoundError("No module named 'nope'")) is None


def test_every_named_file_exists():
  import os  # pylint: disable=import-outside-toplevel
  for file, _ in extras.EXTRAS.values():
    for name in file.replace(' or ', ' ').split():
      if name.startswith('requirements'):
        assert os.path.exists(os.path.join(helpers.ROOT, name)), name


@pytest.mark.slow  # A train.py process: TensorFlow's import, about 10 s.
def test_train_py_says_which_file_to_install(tmp_path):
  program = (
      "import sys, runpy; sys.modules['pycocotools'] = None; "
      f"sys.argv = ['train.py', '--gin_file=gin/ssd_quickstart.gin', "
      f"'--model_dir={tmp_path}/run']; "
      "runpy.run_path('train.py', run_name='__main__')")
  done = subprocess.run([helpers.PYTHON, '-c', program], cwd=helpers.ROOT,
                        capture_output=True, text=True, timeout=helpers.HANG_SECONDS)
  assert done.returncode == 2, done.stderr[-2000:]
  assert done.stderr.strip().splitlines()[-1] == (
      'error: pycocotools is not installed (gin/models/ssd.gin imports '
      'models.ssd.task, which needs it): pip install -r requirements-ssd.txt '
      '(make ssd_quickstart does it too).')


@pytest.mark.slow  # A tool's process: TensorFlow's import, about 10 s.
def test_a_tool_says_which_file_to_install(tmp_path):
  program = (
      "import sys, runpy; sys.modules['tf2onnx'] = None; "
      "sys.argv = ['tools/export_onnx.py', '--saved_model=/nonexistent', "
      f"'--output={tmp_path}/out/m.onnx']; "
      "runpy.run_path('tools/export_onnx.py', run_name='__main__')")
  done = subprocess.run([helpers.PYTHON, '-c', program], cwd=helpers.ROOT,
                        capture_output=True, text=True,
                        timeout=helpers.HANG_SECONDS)
  assert done.returncode == 2, done.stderr[-2000:]
  assert done.stderr.strip().splitlines()[-1] == (
      'error: tf2onnx is not installed: pip install -r '
      'requirements-inference.txt (make venv does it too).')
  assert 'Traceback' not in done.stderr
  assert not (tmp_path / 'out').exists()
