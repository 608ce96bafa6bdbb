"""BERT masked-LM through export and the LoadGen harness."""

import os

import gin
import numpy as np
import pytest

from inference import backend as backends
from inference import run as run_lib
from inference import sample_library
from tests import helpers
from tools import export_savedmodel

pytestmark = pytest.mark.slow  # End-to-end: real runs and processes.

GIN_FILE = 'gin/bert_quickstart.gin'


@pytest.fixture(scope='module')
def trained(bert_run, tmp_path_factory):
  """The tiny BERT of the shared 2-replica run (conftest.bert_run, trained
  on the counting corpus to its target), exported; its last eval."""
  folder = tmp_path_factory.mktemp('bert_export')
  bindings = bert_run['bindings']
  try:
    export_savedmodel.export(gin_files=[os.path.join(helpers.ROOT, GIN_FILE)],
                             gin_params=bindings,
                             checkpoint_dir=bert_run['model_dir'],
                             export_dir=str(folder / 'saved'))
  finally:
    gin.clear_config()
  return str(folder / 'saved'), bindings, bert_run['evals'][-1]


def test_accuracy_mode_gives_the_masked_lm_accuracy_of_in_loop_eval(
    trained, sums_data, tmp_path):
  saved, bindings, (_, _, in_loop, sums) = trained
  task = helpers.inference_task(GIN_FILE, sums_data, bindings)
  backend = backends.SavedModelBackend(saved)
  report = run_lib.run_benchmark(
      task=task, backend=backend, scenario='Offline', mode='accuracy',
      output_dir=str(tmp_path / 'accuracy'), model_name='bert', max_batch=16)
  library = sample_library.EvalSampleLibrary(task=task)
  library.load(range(library.total))
  assert library.total == sums['examples'] == 100
  predicted = backend.predict(library.get(list(range(100))))
  refs = library.references()
  weights = refs['masked_lm_weights'].astype(np.float64)
  hits = predicted['masked_lm_predictions'] == refs['masked_lm_ids']
  assert report.quality == float(np.sum(weights * hits) / np.sum(weights))
  # The in-loop eval ran the same weights in the training process, at
  # another batch size: a near-tie may round to another argmax.
  assert report.quality == pytest.approx(in_loop, abs=0.01)
  assert report.quality > 0.5  # Trained: far above chance (1/200).


def test_server_run_from_the_command_line_reads_bert_user_conf_lines(
    trained, sums_data, tmp_path):
  """The bert line of user.conf sets the run's target, not the resnet50
  one. Whether LoadGen then finds the 2-second run VALID is a matter of the
  machine's load (its latency bound): both verdicts are accepted, each with
  its exit code and LoadGen's reasons."""
  # Two workers of one thread each: the CPU split of docs/inference.md's benchmark (b).
  saved, bindings, _ = trained
  conf = tmp_path / 'user.conf'
  conf.write_text('bert.Server.target_qps = 100\n'
                  'resnet50.Server.target_qps = 9999\n')
  done = helpers.run_inference(
      f'--gin_file={GIN_FILE}', *(f'--gin_param={b}' for b in bindings),
      f'--saved_model={saved}', f'--dataset={sums_data}',
      f'--output_dir={tmp_path / "out"}', '--scenario=Server',
      f'--user_conf={conf}', '--min_duration_ms=2000', '--min_query_count=100',
      '--target_latency_ms=100', '--workers=2', '--intra_op_threads=1')
  output = done.stdout[-2000:] + done.stderr[-2000:]
  if 'Server performance: VALID' in done.stdout:
    assert done.returncode == 0, output
  else:
    assert done.returncode == 1, output
    assert 'Server performance: INVALID' in done.stdout, output
    assert 'reason:' in done.stdout, output
  summary = run_lib.parse_summary(str(tmp_path / 'out' /
                                      'mlperf_log_summary.txt'))
  assert float(summary['target_qps']) == 100  # The task's name: bert.
