"""Host-side evaluation: a metric that is not a sum (ROC AUC) through the
runtime on 2 worker processes, computed beside training, against a plain
loop. (Over 3 replicas with padding: SSD's COCO mAP in
tests/test_ssd_train.py.)"""

import json

import numpy as np
import pytest
from scipy.special import softmax
from sklearn import metrics
import tensorflow as tf

from tests import binary_digits
from tests import helpers


def plain_auc(model, data_dir: str):
  """sklearn's ROC AUC over every validation digit, one device, no padding."""
  logits, labels = helpers.validation_logits(model, data_dir)
  positive = labels >= binary_digits.POSITIVE_FROM
  scores = softmax(logits.astype(np.float64), axis=-1)[:, 5:].sum(-1)
  return metrics.roc_auc_score(positive, scores), int(positive.sum())


@pytest.mark.slow
def test_auc_on_two_worker_processes_equals_a_plain_loop(quickstart_data,
                                                         tmp_path):
  model_dir = str(tmp_path / 'run')
  # The metric beside training (ASYNC_EVAL): both workers learn each result
  # at the same loop end from the chief.
  helpers.run_worker_processes(
      ['tests.multi_worker_main', quickstart_data, model_dir,
       'tests/binary_digits.gin', 'ASYNC_EVAL=True'], tmp_path)
  chief, other = (json.load(open(tmp_path / f'w{i}.npz.json'))
                  for i in range(2))
  # The chief computed the metric; the other worker received its quality.
  assert chief['metrics']['host_examples'] == 360
  assert 'host_examples' not in other['metrics']
  assert chief['quality'] == other['quality']
  # Score the run's final checkpoint with the plain loop.
  from models.resnet import ResNet
  model = ResNet(depth=10, width_multiplier=0.25, num_classes=10)
  tf.train.Checkpoint(model=model).read(tf.train.latest_checkpoint(
      f'{model_dir}/checkpoints')).expect_partial()
  auc, _ = plain_auc(model, quickstart_data)
  # A rank metric: the run's eval batches (50) and the plain loop's (1,000)
  # round the logits apart by float32 noise, which may swap a near-tied
  # pair or two (one pair is 1 / (180 x 180) = 3e-5 of AUC).
  assert chief['quality'] == pytest.approx(auc, abs=1e-4)
