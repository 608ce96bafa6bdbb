"""A task whose quality is not a sum: ROC AUC of "digit >= 5" on the digits.

The ResNet quickstart model and loss, scored on the host by
`sklearn.metrics.roc_auc_score` over per-example outputs: the test of the
runtime's host-side evaluation.
"""

import numpy as np
from sklearn import metrics
import tensorflow as tf

from input_pipeline.image_preprocessing import normalize
from models.resnet_task import ResNetTask

POSITIVE_FROM = 5  # Digits 5..9 are the positive class.


def positive_score(logits):
  """P(digit >= 5) from the 10-class logits."""
  return tf.reduce_sum(tf.nn.softmax(logits)[:, POSITIVE_FROM:], axis=-1)


class RocAuc:
  """Implements training.task.HostMetric: collects scores, gives ROC AUC."""

  def __init__(self):
    self.reset()

  def reset(self):
    self.scores, self.labels = [], []

  def update(self, outputs):
    self.scores.append(outputs['score'])
    self.labels.append(outputs['positive'])

  def result(self):
    labels, scores = np.concatenate(self.labels), np.concatenate(self.scores)
    return {'auc': float(metrics.roc_auc_score(labels, scores)),
            'host_examples': float(len(labels)),
            'host_positives': float(labels.sum())}


class BinaryDigitsTask(ResNetTask):
  """The quickstart ResNet judged by ROC AUC of digit >= 5."""

  quality_name = 'ROC AUC (digit >= 5)'
  eval_output_dtypes = {'score': tf.float32, 'positive': tf.int32,
                        'mask': tf.float32}

  def eval_outputs(self, model, batch):
    logits, _ = model(normalize(batch['image']), training=False)
    return {'score': positive_score(logits),
            'positive': tf.cast(batch['label'] >= POSITIVE_FROM, tf.int32),
            'mask': batch['mask']}

  def host_metric(self):
    return RocAuc()

  @staticmethod
  def quality(metrics: dict) -> float:
    return metrics['auc']
