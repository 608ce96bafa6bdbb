"""DLRM through the runtime on the MovieLens quickstart records: the AUC
over replicas and processes equals scikit-learn's on every eval example, a
run to target writes a log the 0.7.0 checker accepts, its exported model
gives the same AUC in LoadGen, and sharded tables train as whole ones."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from sklearn import metrics as sk_metrics

from input_pipeline import clicks
from models.dlrm import model as dlrm
from tests import helpers


def bindings(data_dir, model_dir, **overrides):
  values = {'DATA_DIR': repr(data_dir), 'train.train.model_dir': repr(model_dir),
            'DETERMINISTIC': True, 'ASYNC_EVAL': False,
            # 7,285 eval impressions: batches of 999 leave a padded tail.
            'EVAL_BATCH_SIZE': 999, 'TRAIN_STEPS': 40, 'STEPS_PER_LOOP': 20,
            'EVAL_EVERY_STEPS': 40, 'WARMUP_STEPS': 10,
            'DECAY_START_STEP': 20, 'DECAY_STEPS': 20}
  values.update(overrides)
  return [f'{k} = {v}' for k, v in values.items()]


def sklearn_auc(data_dir, weights):
  """scikit-learn's AUC of the final weights on every eval record, on one
  device, read straight from the files."""
  metadata = clicks.read_metadata(data_dir)
  model = dlrm.Dlrm(vocab_sizes=metadata['vocab_sizes'],
                    num_dense=len(metadata['dense_features']),
                    embedding_dim=16, bottom_mlp=(64, 16), top_mlp=(64, 32, 1))
  for name, variable in model.params.items():
    variable.assign(weights[name])
  files = sorted(tf.io.gfile.glob(os.path.join(data_dir, 'eval-*')))
  spec = clicks.features(len(metadata['dense_features']),
                         len(metadata['vocab_sizes']))
  scores, labels = [], []
  for raw in tf.data.TFRecordDataset(files).batch(4096):
    f = tf.io.parse_example(raw, spec)
    scores.append(tf.sigmoid(model(f['dense'], f['sparse'])).numpy())
    labels.append(f['label'].numpy()[:, 0])
  labels = np.concatenate(labels)
  assert len(labels) == metadata['eval_examples']
  return sk_metrics.roc_auc_score(labels, np.concatenate(scores))


# About 15 s alone: the quickstart's steps to its target on 3 replicas,
# then the checker.
@pytest.mark.slow
def test_three_replicas_reach_the_target_with_sklearns_auc(dlrm_data,
                                                          tmp_path):
  model_dir = str(tmp_path / 'run')
  result = helpers.run_gin(
      ['gin/dlrm_quickstart.gin', 'gin/hardware/cpu_mirrored.gin'],
      bindings(dlrm_data, model_dir, CPU_REPLICAS=3, GLOBAL_BATCH_SIZE=513,
               TRAIN_STEPS=2000, STEPS_PER_LOOP=88, EVAL_EVERY_STEPS=176,
               WARMUP_STEPS=100, DECAY_START_STEP=1000, DECAY_STEPS=1000))
  assert result.quality >= 0.8025 and result.step < 2000
  _, _, quality, metrics = result.evals[-1]
  # Every eval impression once over 3 replicas; the padding not counted.
  assert metrics['examples'] == 7285
  weights = {k: v.numpy() for k, v in result.model.params.items()}
  assert quality == pytest.approx(sklearn_auc(dlrm_data, weights), abs=2e-6)

  log = os.path.join(model_dir, 'mlperf.log')
  events = [json.loads(line.split(':::MLLOG ', 1)[1]) for line in open(log)]
  logged = {e['key']: e['value'] for e in events}
  assert logged['submission_benchmark'] == 'dlrm'
  assert logged['eval_samples'] == 7285 and logged['train_samples'] == 65570
  assert logged['sgd_opt_learning_rate_decay_poly_power'] == 2
  assert logged['lr_decay_start_steps'] == 1000
  # epoch_num numbers the evaluations, as Google's log does.
  assert [e['metadata']['epoch_num'] for e in events
          if e['key'] == 'eval_accuracy'][:2] == [1.0, 2.0]
  checked = helpers.run_checker(log, '0.7.0', str(tmp_path))
  assert 'SUCCESS' in checked.stdout + checked.stderr, (
      checked.stdout + checked.stderr)[-2000:]

  # The exported model in LoadGen: accuracy mode scores the loop's AUC over
  # every eval impression (one impression a sample); Offline and Server run.
  import gin
  from inference import backend as backends
  from inference import run as run_lib
  from tools import export_savedmodel
  try:
    export_savedmodel.export(
        gin_files=[os.path.join(helpers.ROOT, 'gin/dlrm_quickstart.gin')],
        gin_params=[f'DATA_DIR = {dlrm_data!r}'], checkpoint_dir=model_dir,
        export_dir=str(tmp_path / 'saved'))
  finally:
    gin.clear_config()
  backend = backends.SavedModelBackend(str(tmp_path / 'saved'))
  loaded = helpers.inference_task('gin/dlrm_quickstart.gin', dlrm_data, ())

  def run(scenario, mode='performance', **settings):
    return run_lib.run_benchmark(
        task=loaded, backend=backend, scenario=scenario, mode=mode,
        output_dir=str(tmp_path / f'{scenario}_{mode}'), model_name='dlrm',
        **settings)

  accuracy = run('Offline', 'accuracy')
  assert accuracy.quality == pytest.approx(quality, abs=2e-6)
  assert run('Offline', min_duration_ms=300,
             offline_expected_qps=200000).valid
  server = run('Server', min_duration_ms=300, min_query_count=20,
               server_target_qps=50)
  assert server.value, server


def two_processes(data_dir, out_dir, *overrides):
  model_dir = str(out_dir / 'run')
  helpers.run_worker_processes(
      ['tests.dlrm_worker_main', data_dir, model_dir, 'EVAL_BATCH_SIZE=998',
       'CHECKPOINT_EVERY_STEPS=40', *overrides], out_dir)
  outputs = [json.load(open(out_dir / f'w{i}.npz.json')) for i in range(2)]
  saved = np.load(out_dir / 'w0.npz')
  return outputs, {k.replace('.', '/'): saved[k] for k in saved.files}


def test_two_processes_score_every_example_once_sharded_or_not(dlrm_data,
                                                              tmp_path):
  (tmp_path / 'plain').mkdir()
  (tmp_path / 'sharded').mkdir()
  outputs, weights = two_processes(dlrm_data, tmp_path / 'plain')
  # Both workers score the same statistics: one AUC, every example once.
  assert outputs[0]['quality'] == outputs[1]['quality']
  assert outputs[0]['metrics']['examples'] == 7285
  assert outputs[0]['quality'] == pytest.approx(
      sklearn_auc(dlrm_data, weights), abs=2e-6)
  # The largest tables (items, users) split over the 2 processes: the same
  # weights within float32 round-off, the checkpoint's tables whole.
  sharded, sharded_weights = two_processes(
      dlrm_data, tmp_path / 'sharded', "EMBEDDING_SHARDING='mod'",
      'SHARDED_TABLES=2')
  assert sharded[0]['quality'] == pytest.approx(outputs[0]['quality'],
                                                abs=1e-5)
  assert sorted(sharded_weights) == sorted(weights)
  for name, value in weights.items():
    np.testing.assert_allclose(sharded_weights[name], value, rtol=1e-4,
                               atol=1e-6, err_msg=name)
