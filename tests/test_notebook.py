"""notebooks/quickstart.ipynb executed headless (nbclient) with CPU
parameters: it trains, plots, checks, exports and runs the LoadGen; a second
training run in the same kernel works."""

import os

import nbformat
import pytest

from tests import helpers

pytestmark = pytest.mark.slow  # Trains twice and runs the LoadGen.

NOTEBOOK = os.path.join(helpers.ROOT, 'notebooks', 'quickstart.ipynb')


def text_of(cell) -> str:
  parts = []
  for output in cell.get('outputs', []):
    parts.append(output.get('text', ''))
    parts.append(output.get('data', {}).get('text/plain', ''))
    if output.get('output_type') == 'error':
      parts.append('\n'.join(output.get('traceback', [])))
  return ''.join(parts)


def test_the_committed_notebook_is_stripped_and_has_its_parts():
  nb = nbformat.read(NOTEBOOK, as_version=4)
  nbformat.validate(nb)
  for cell in nb.cells:
    if cell.cell_type == 'code':
      assert cell.outputs == [] and cell.execution_count is None
  tagged = [c for c in nb.cells if 'parameters' in c.metadata.get('tags', [])]
  assert len(tagged) == 1 and 'DATA_DIR' in tagged[0].source
  assert 'colab-badge.svg' in nb.cells[0].source
  assert 'notebooks/quickstart.ipynb' in nb.cells[0].source


def test_the_notebook_runs_headless_end_to_end(quickstart_data, tmp_path,
                                               monkeypatch):
  from nbclient import NotebookClient
  monkeypatch.setenv('TF_CPP_MIN_LOG_LEVEL', '2')
  nb = nbformat.read(NOTEBOOK, as_version=4)
  at = next(i for i, c in enumerate(nb.cells)
            if 'parameters' in c.metadata.get('tags', []))
  nb.cells.insert(at + 1, nbformat.v4.new_code_cell(
      f'DATA_DIR = {quickstart_data!r}\n'
      f'MODEL_DIR = {str(tmp_path / "runs")!r}\n'
      'LOADGEN_MS = 1000\nSEED = 3\n'
      f"GIN_PARAMS = ['DEPTH = {helpers.SMALL_RESNET_DEPTH}']"))
  nb.cells.append(nbformat.v4.new_code_cell(
      "second = run_training(os.path.join(MODEL_DIR, 'second'))\n"
      "print('second run:', second.status, second.step)"))
  NotebookClient(nb, timeout=900, kernel_name='python3', resources={
      'metadata': {'path': os.path.dirname(NOTEBOOK)}}).execute()
  outputs = [text_of(c) for c in nb.cells if c.cell_type == 'code']
  everything = '\n'.join(outputs)
  assert 'runtime: CPU: no TPU on this machine' in everything
  assert 'success: quality' in everything
  images = [o for c in nb.cells if c.cell_type == 'code'
            for o in c.get('outputs', []) if 'image/png' in o.get('data', {})]
  assert len(images) == 1
  assert 'compliance checker (ruleset 0.7.0): INFO - SUCCESS' in everything
  assert ('Offline performance: VALID for its own settings; shorter than the '
          "rules' 600 s minimum, so a measurement, not a submission result"
          in everything)
  assert 'whatever LoadGen says' not in everything  # Said once, not twice.
  assert 'Offline accuracy: accuracy run' in everything
  assert 'quality from mlperf_log_accuracy.json' in everything
  assert 'second run: success' in outputs[-1]
  runs = os.listdir(tmp_path / 'runs')
  assert 'second' in runs and len(runs) == 2
  first = next(r for r in runs if r != 'second')
  config = open(tmp_path / 'runs' / first / 'config.gin').read()
  assert 'SEED = 3' in config
  assert f'DEPTH = {helpers.SMALL_RESNET_DEPTH}' in config
  # TensorFlow's native start-up lines stay out of the cells.
  assert 'startup.import_tensorflow()' in nb.cells[at + 3].source
  assert 'cuInit' not in everything and 'absl::InitializeLog' not in everything


def test_the_badge_and_the_clone_url_name_one_repository(tmp_path):
  import json
  import shutil
  from tools import set_repository
  nb = json.load(open(NOTEBOOK))
  constant, badge = set_repository.repositories(nb)
  assert constant == badge  # One constant, in two places.
  copy = tmp_path / 'quickstart.ipynb'
  shutil.copy(NOTEBOOK, copy)
  set_repository.set_repository('mlperf-suite/training', str(copy))
  assert set_repository.repositories(json.load(open(copy))) == (
      'mlperf-suite/training', 'mlperf-suite/training')
  nbformat.validate(nbformat.read(str(copy), as_version=4))
  for url in ('https://github.com/mlperf-suite/training.git',
              'git@github.com:mlperf-suite/training.git'):
    assert set_repository.from_remote(url) == 'mlperf-suite/training'
  with pytest.raises(ValueError, match='not a GitHub remote'):
    set_repository.from_remote('https://gitlab.com/a/b.git')
