"""Host-side evaluation: a metric that is not a sum (ROC AUC) through the
runtime, on 3 replicas and on 2 worker processes, against a plain loop."""

import json

import numpy as np
import pytest
from scipy.special import softmax
from sklearn import metrics
import tensorflow as tf

from tests import binary_digits
from tests import helpers

SHORT = {'TRAIN_STEPS': 30, 'EVAL_EVERY_STEPS': 30, 'STEPS_PER_LOOP': 10}


def plain_auc(model, data_dir: str):
  """sklearn's ROC AUC over every validation digit, one device, no padding."""
  logits, labels = helpers.validation_logits(model, data_dir)
  positive = labels >= binary_digits.POSITIVE_FROM
  scores = softmax(logits.astype(np.float64), axis=-1)[:, 5:].sum(-1)
  return metrics.roc_auc_score(positive, scores), int(positive.sum())


@pytest.mark.slow
def test_auc_on_three_replicas_equals_a_plain_loop(quickstart_data, tmp_path):
  result = helpers.run_gin(
      ['tests/binary_digits.gin', 'gin/hardware/cpu_mirrored.gin'],
      helpers.quick_bindings(quickstart_data, str(tmp_path / 'run'),
                             CPU_REPLICAS=3, GLOBAL_BATCH_SIZE=48,
                             EVAL_BATCH_SIZE=42, **SHORT))  # 360 % 42 != 0
  metrics_ = result.evals[-1][3]
  auc, positives = plain_auc(result.model, quickstart_data)
  # Every example reached the host metric once; the padding did not.
  assert metrics_['host_examples'] == metrics_['examples'] == 360
  assert metrics_['host_positives'] == positives
  assert 0.5 < auc < 1.0  # Trained a little: a rank metric with real content.
  assert result.quality == pytest.approx(auc, abs=1e-5)


@pytest.mark.slow
def test_auc_on_two_worker_processes_equals_a_plain_loop(quickstart_data,
                                                         tmp_path):
  model_dir = str(tmp_path / 'run')
  helpers.run_two_workers(quickstart_data, model_dir, tmp_path,
                          gin_file='tests/binary_digits.gin')
  chief, other = (json.load(open(tmp_path / f'w{i}.npz.json'))
                  for i in range(2))
  # The chief computed the metric; the other worker received its quality.
  assert chief['metrics']['host_examples'] == 360
  assert 'host_examples' not in other['metrics']
  assert chief['quality'] == other['quality']
  # Score the run's final checkpoint with the plain loop.
  from models.resnet import ResNet
  model = ResNet(depth=18, width_multiplier=0.25, num_classes=10)
  tf.train.Checkpoint(model=model).read(tf.train.latest_checkpoint(
      f'{model_dir}/checkpoints')).expect_partial()
  auc, _ = plain_auc(model, quickstart_data)
  assert chief['quality'] == pytest.approx(auc, abs=1e-5)
