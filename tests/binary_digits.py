"""A task whose quality is not a sum: ROC AUC of "digit >= 5" on the digits.

The ResNet quickstart model and loss, scored on the host by
`sklearn.metrics.roc_auc_score` over per-example outputs: the test of the
runtime's host-side evaluation.
"""

import numpy as np
from sklearn import metrics
import tensorflow as tf

from input_pipeline.image_preprocessing import normalize
from models.resnet.task import ResNetTask

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


class BinnedRocAuc:
  """Implements training.task.PerHostMetric: ROC AUC of the scores rounded
  down to 1/BINS, from per-bin counts of positives and negatives (the
  histogram each host sums for its examples; ties count half, as sklearn's).
  """

  BINS = 4096

  def __init__(self):
    self.reset()

  def reset(self):
    self.positives = np.zeros(self.BINS)
    self.negatives = np.zeros(self.BINS)
    self.fed = 0

  def update(self, outputs):
    bins = binned(outputs['score'])
    positive = outputs['positive'] == 1
    self.positives += np.bincount(bins[positive], minlength=self.BINS)
    self.negatives += np.bincount(bins[~positive], minlength=self.BINS)
    self.fed += len(bins)

  def statistics(self):
    return np.concatenate([self.positives, self.negatives])

  def result_from(self, parts):
    statistics = np.sum(parts, axis=0)
    pos, neg = statistics[:self.BINS], statistics[self.BINS:]
    below = np.cumsum(neg) - neg  # Negatives in lower bins.
    auc = (pos * (below + 0.5 * neg)).sum() / (pos.sum() * neg.sum())
    return {'auc': float(auc), 'host_examples': float(pos.sum() + neg.sum()),
            'host_positives': float(pos.sum()),
            'examples_fed_here': float(self.fed)}

  def result(self):
    return self.result_from([self.statistics()])


def binned(scores):
  """Scores in [0, 1] as bins 0..BINS - 1."""
  return np.minimum((np.asarray(scores, np.float64) * BinnedRocAuc.BINS)
                    .astype(np.int64), BinnedRocAuc.BINS - 1)


class BinaryDigitsTask(ResNetTask):
  """The quickstart ResNet judged by ROC AUC of digit >= 5 (per host:
  over scores binned to 1/4096, from each host's histogram)."""

  def __init__(self, *, per_host: bool = False, **kwargs):
    super().__init__(**kwargs)
    self.per_host = per_host

  quality_name = 'ROC AUC (digit >= 5)'
  quality_tag = 'auc'
  eval_output_dtypes = {'score': tf.float32, 'positive': tf.int32,
                        'mask': tf.float32}

  def eval_outputs(self, model, batch):
    logits, _ = model(normalize(batch['image']), training=False)
    return {'score': positive_score(logits),
            'positive': tf.cast(batch['label'] >= POSITIVE_FROM, tf.int32),
            'mask': batch['mask']}

  def host_metric(self):
    return BinnedRocAuc() if self.per_host else RocAuc()

  @staticmethod
  def quality(metrics: dict) -> float:
    return metrics['auc']
