"""The notebooks (notebooks/quickstart.ipynb and each model's, written from
it by tools/write_notebooks.py) executed headless (nbclient) with CPU
parameters: every model trains, plots, is checked, exports and is served
by the LoadGen where MLPerf has the benchmark; bad input is one line."""

import glob
import json
import os
import shutil

import nbformat
import pytest

from tests import helpers
from tests import tiny_quickstarts
from tools.notebook import quickstarts
from tools import set_repository
from tools import write_notebooks

FOLDER = os.path.join(helpers.ROOT, 'notebooks')
TEMPLATE = os.path.join(FOLDER, 'quickstart.ipynb')
NOTEBOOKS = sorted(glob.glob(os.path.join(FOLDER, '*.ipynb')))


def text_of(cell) -> str:
  parts = []
  for output in cell.get('outputs', []):
    parts.append(output.get('text', ''))
    parts.append(output.get('data', {}).get('text/plain', ''))
    if output.get('output_type') == 'error':
      parts.append('\n'.join(output.get('traceback', [])))
  return ''.join(parts)


def parameters_at(nb) -> int:
  return next(i for i, c in enumerate(nb.cells)
              if 'parameters' in c.metadata.get('tags', []))


def execute(path, overrides: str, tmp_path, extra_cells=(),
            kernel_name='python3', after_setup=''):
  """The notebook at `path` run in a fresh kernel, `overrides` as a cell
  after its parameters cell (as papermill injects them) and `after_setup`
  as one after the set-up cell; returns it with its outputs, and the error
  that stopped it, if one did."""
  from nbclient import NotebookClient
  from nbclient.exceptions import CellExecutionError
  nb = nbformat.read(path, as_version=4)
  at = parameters_at(nb)
  if after_setup:
    setup = next(i for i, c in enumerate(nb.cells)
                 if 'startup.import_tensorflow()' in c.source)
    nb.cells.insert(setup + 1, nbformat.v4.new_code_cell(after_setup))
  nb.cells.insert(at + 1, nbformat.v4.new_code_cell(
      overrides + f'\nMODEL_DIR = {str(tmp_path / "runs")!r}'))
  nb.cells.extend(nbformat.v4.new_code_cell(c) for c in extra_cells)
  client = NotebookClient(nb, timeout=helpers.HANG_SECONDS,
                          kernel_name=kernel_name, resources={
                              'metadata': {'path': FOLDER}})
  try:
    client.execute(env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'))
  except CellExecutionError as e:
    return nb, e
  return nb, None


def test_the_committed_notebooks_are_stripped_and_have_their_parts():
  assert {os.path.basename(p) for p in NOTEBOOKS} == {
      'quickstart.ipynb', *(f'{m}.ipynb' for m in quickstarts.QUICKSTARTS)}
  for path in NOTEBOOKS:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
      if cell.cell_type == 'code':
        assert cell.outputs == [] and cell.execution_count is None, path
    tagged = [c for c in nb.cells if 'parameters' in c.metadata.get('tags', [])]
    assert len(tagged) == 1 and 'DATA_DIR' in tagged[0].source, path
    # Colab opens it on a CPU runtime: the path every test runs.
    assert 'accelerator' not in nb.metadata, path


def test_each_models_notebook_is_the_template_with_its_model_set():
  template = json.load(open(TEMPLATE))
  for model in quickstarts.QUICKSTARTS:
    with open(write_notebooks.path_of(model)) as f:
      assert f.read() == write_notebooks.render(template, model), (
          f'notebooks/{model}.ipynb is out of date: python -m '
          'tools.write_notebooks')
    nb = nbformat.read(write_notebooks.path_of(model), as_version=4)
    assert f"MODEL = '{model}'" in nb.cells[parameters_at(nb)].source
    assert quickstarts.get(model).title in nb.cells[0].source


def test_each_badge_opens_its_own_notebook_and_names_one_repository(
    tmp_path):
  for path in NOTEBOOKS:
    nb = json.load(open(path))
    constant, badge = set_repository.repositories(nb)
    assert constant == badge  # One constant, in two places.
    name = os.path.basename(path)
    assert (f'/blob/main/notebooks/{name})'
            in ''.join(nb['cells'][0]['source'])), name
  copy = tmp_path / 'quickstart.ipynb'
  shutil.copy(TEMPLATE, copy)
  set_repository.set_repository('mlperf-suite/training', str(copy))
  assert set_repository.repositories(json.load(open(copy))) == (
      'mlperf-suite/training', 'mlperf-suite/training')
  nbformat.validate(nbformat.read(str(copy), as_version=4))
  for url in ('https://github.com/mlperf-suite/training.git',
              'git@github.com:mlperf-suite/training.git'):
    assert set_repository.from_remote(url) == 'mlperf-suite/training'
  with pytest.raises(ValueError, match='not a GitHub remote'):
    set_repository.from_remote('https://gitlab.com/a/b.git')


def test_the_quickstart_table_matches_the_gin_files_and_makefile():
  """Each quickstart's data folder is its gin file's DATA_DIR, and the
  Makefile's target builds the file it waits for."""
  makefile = open(os.path.join(helpers.ROOT, 'Makefile')).read()
  for q in quickstarts.QUICKSTARTS.values():
    gin_text = open(os.path.join(helpers.ROOT, q.gin_file)).read()
    if q.data_dir:
      assert f"DATA_DIR = '{q.data_dir}'" in gin_text, q.name
      assert f'{q.data_dir}/{q.marker}:' in makefile, q.name
    for requirements in q.requirements:
      assert os.path.exists(os.path.join(helpers.ROOT, requirements))
    if q.small_slice:
      assert os.path.exists(os.path.join(helpers.ROOT, q.small_slice))


# -- Every model, headless ----------------------------------------------------

SERVED = 'Offline performance: VALID for its own settings; shorter than the '


# A kernel, TensorFlow's import, a run, an export and the LoadGen each:
# 10-40 s, GNMT about 50 s alone (its export traces the beam search, and
# its accuracy run decodes the held-out pairs).
@pytest.mark.slow
@pytest.mark.parametrize('model', sorted(set(quickstarts.QUICKSTARTS)
                                         - {'resnet'}))
def test_each_models_notebook_runs_headless(model, request, tmp_path):
  quickstart = quickstarts.get(model)
  data_dir = tiny_quickstarts.data_dir(model, request)
  params = [f'{k} = {v}' for k, v in
            tiny_quickstarts.bindings(model, data_dir).items()]
  nb, error = execute(write_notebooks.path_of(model),
                      f'DATA_DIR = {data_dir!r}\nLOADGEN_MS = 1000\n'
                      f'GIN_PARAMS = {params!r}', tmp_path)
  everything = '\n'.join(text_of(c) for c in nb.cells if c.cell_type == 'code')
  assert error is None, everything[-4000:]
  assert 'runtime: CPU: no TPU on this machine' in everything
  assert f'model: {quickstart.title}' in everything
  [run] = os.listdir(tmp_path / 'runs')
  run_dir = tmp_path / 'runs' / run
  assert ' at step 4, time to train' in everything
  assert (run_dir / 'operative_config.gin').exists()
  images = [o for c in nb.cells if c.cell_type == 'code'
            for o in c.get('outputs', []) if 'image/png' in o.get('data', {})]
  assert len(images) == 1
  if quickstart.training_benchmark:
    # The checker read the whole log: a 4-step run stops short of the
    # target, so the one check it may fail is the last evaluation's.
    checker = next(text_of(c) for c in nb.cells
                   if 'compliance checker (ruleset 0.7.0)' in text_of(c))
    failed = [l for l in checker.splitlines() if 'Failed check' in l]
    assert ('INFO - SUCCESS' in checker and not failed) or (
        'ERROR - FAILED' in checker and failed and
        all('Failed checks for eval_accuracy' in l for l in failed) and
        'stopped before its target' in checker), checker
  else:
    assert 'MLPerf Training has no such benchmark' in everything
  assert (run_dir / 'saved_model' / 'saved_model.pb').exists()
  if quickstart.serves:
    assert f'FP32: {SERVED}' in everything
    assert 'FP32: Offline accuracy: accuracy run' in everything
  else:
    assert 'MLPerf Inference has no such benchmark' in everything
  if quickstart.calibration:
    assert f'INT8: {SERVED}' in everything
    assert 'INT8: Offline accuracy: accuracy run' in everything
  assert 'Traceback' not in everything


@pytest.mark.slow  # Trains to the target twice and runs the LoadGen.
def test_the_template_trains_resnet_to_its_target_twice(quickstart_data,
                                                        tmp_path):
  nb, error = execute(
      TEMPLATE, f'DATA_DIR = {quickstart_data!r}\nLOADGEN_MS = 1000\n'
      f"SEED = 3\nGIN_PARAMS = ['DEPTH = {helpers.SMALL_RESNET_DEPTH}']",
      tmp_path, extra_cells=[
          "second = run_training(os.path.join(MODEL_DIR, 'second'))\n"
          "print('second run:', second.status, second.step)"])
  outputs = [text_of(c) for c in nb.cells if c.cell_type == 'code']
  everything = '\n'.join(outputs)
  assert error is None, everything[-4000:]
  assert 'success: quality' in everything
  assert 'compliance checker (ruleset 0.7.0): INFO - SUCCESS' in everything
  assert f'FP32: {SERVED}' in everything
  assert 'whatever LoadGen says' not in everything  # Said once, not twice.
  assert 'quality from mlperf_log_accuracy.json' in everything
  assert 'second run: success' in outputs[-1]
  runs = os.listdir(tmp_path / 'runs')
  assert 'second' in runs and len(runs) == 2
  first = next(r for r in runs if r != 'second')
  config = open(tmp_path / 'runs' / first / 'config.gin').read()
  assert 'SEED = 3' in config
  assert f'DEPTH = {helpers.SMALL_RESNET_DEPTH}' in config
  # TensorFlow's native start-up lines stay out of the cells.
  assert 'cuInit' not in everything and 'absl::InitializeLog' not in everything


@pytest.mark.parametrize('overrides,line', [
    ("MODEL = 'resnet51'",
     "error: MODEL = 'resnet51' is not a quickstart: set it to one of "
     'resnet, bert,'),
    ("DATA_DIR = '/no/such/folder'",
     "error: DATA_DIR = '/no/such/folder': no such folder. Leave DATA_DIR = "
     "'' to build the ResNet-50 v1.5 quickstart data in data/quickstart"),
    # A runtime without the model's packages: pycocotools kept from
    # importing, as Python does for a module set to None in sys.modules.
    ("MODEL = 'ssd'\nimport sys\nsys.modules['pycocotools'] = None",
     'error: pycocotools is not installed: pip install -r '
     'requirements-ssd.txt'),
])
def test_bad_input_is_one_line_in_the_cell(overrides, line, tmp_path):
  nb, error = execute(TEMPLATE, overrides, tmp_path)
  assert error is not None  # "Run all" stops at that cell.
  failed = next(c for c in nb.cells if c.cell_type == 'code' and line in
                text_of(c))
  shown = text_of(failed)
  assert shown.count('\n') <= 2 and 'Traceback' not in shown, shown
  assert not os.path.exists(tmp_path / 'runs')  # Nothing ran.
