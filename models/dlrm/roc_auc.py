"""ROC AUC, exact, over every eval example once, without the examples
leaving their hosts.

The value is sklearn.metrics.roc_auc_score's (the area under the ROC
curve, ties between a positive's and a negative's score counted one half):

  AUC = sum over distinct scores s of  pos(s) * (neg(< s) + neg(s) / 2)
        / (positives * negatives)

It depends on the examples only through, for each distinct score, its
positive and negative counts. So each host reduces its own examples to
that histogram (`statistics`: the distinct float32 scores, sorted, with
their counts), the hosts' histograms are gathered, and `result_from`
merges them (equal scores from two hosts add their counts) and sums the
formula above in float64. What travels is three numbers per distinct score
of a host, not every prediction: with bfloat16 scores at most 16,256
distinct values exist in (0, 1), however many examples; with float32
scores it is at most the host's example count.

Google's v0.7 DLRM gathered every prediction to the host and computed the
same area in C++ (util/roc_metrics); MLPerf's reference uses scikit-learn.
Implements training.task.PerHostMetric.
"""

from typing import Mapping, Sequence

import numpy as np


def histogram(scores, labels) -> np.ndarray:
  """[k, 3] rows (score, positives, negatives) for the k distinct scores,
  in increasing score order."""
  scores = np.asarray(scores, np.float32).reshape(-1)
  labels = np.asarray(labels).reshape(-1)
  if len(scores) != len(labels):
    raise ValueError(f'{len(scores)} scores for {len(labels)} labels.')
  if not np.all((labels == 0) | (labels == 1)):
    raise ValueError('ROC AUC needs 0/1 labels; got values '
                     f'{sorted(set(np.unique(labels).tolist()) - {0, 1})}.')
  if np.isnan(scores).any():
    raise ValueError(f'{int(np.isnan(scores).sum())} eval scores are NaN: '
                     'the model diverged.')
  distinct, where = np.unique(scores, return_inverse=True)
  positives = np.bincount(where, weights=labels == 1,
                          minlength=len(distinct))
  negatives = np.bincount(where, weights=labels == 0,
                          minlength=len(distinct))
  return np.stack([distinct.astype(np.float64), positives, negatives], 1)


def merge(parts: Sequence[np.ndarray]) -> np.ndarray:
  """One histogram of several hosts' (each [k_i, 3])."""
  rows = np.concatenate([np.asarray(p, np.float64).reshape(-1, 3)
                         for p in parts]) if parts else np.zeros([0, 3])
  distinct, where = np.unique(rows[:, 0], return_inverse=True)
  return np.stack([distinct,
                   np.bincount(where, rows[:, 1], len(distinct)),
                   np.bincount(where, rows[:, 2], len(distinct))], 1)


def auc_of(hist: np.ndarray) -> float:
  """The area of a merged histogram (ValueError when one class is absent,
  where scikit-learn raises too)."""
  positives, negatives = hist[:, 1], hist[:, 2]
  total_pos, total_neg = positives.sum(), negatives.sum()
  if not total_pos or not total_neg:
    raise ValueError(
        f'ROC AUC needs positive and negative examples; the eval set has '
        f'{total_pos:.0f} positives and {total_neg:.0f} negatives.')
  below = np.cumsum(negatives) - negatives
  return float(np.sum(positives * (below + negatives / 2.0)) /
               (total_pos * total_neg))


class RocAucMetric:
  """AUC of `score` (the click probability) against `label`, over every
  eval example exactly once. Implements training.task.PerHostMetric."""

  def __init__(self, *, expected_examples=None):
    """Args:
      expected_examples: () -> the eval set's size; `result_from` refuses
        a total that differs (an example missing or repeated).
    """
    self.expected_examples = expected_examples
    self.reset()

  def reset(self) -> None:
    self._parts = []

  def update(self, outputs: Mapping[str, np.ndarray]) -> None:
    self._parts.append(histogram(outputs['score'], outputs['label']))

  def statistics(self) -> np.ndarray:
    """This host's histogram, flattened: score, positives, negatives per
    distinct score (float32 scores and counts below 2^53: exact)."""
    return merge(self._parts).reshape(-1)

  def result(self) -> dict[str, float]:
    return self.result_from([self.statistics()])

  def result_from(self, parts: Sequence[np.ndarray]) -> dict[str, float]:
    """{'auc', 'examples'} of every host's statistics."""
    hist = merge(parts)
    examples = float(hist[:, 1:].sum())
    if self.expected_examples is not None:
      want = self.expected_examples()
      if examples != want:
        raise RuntimeError(
            f'The AUC saw {examples:.0f} eval examples, the eval set has '
            f'{want}: an example was dropped or counted twice.')
    return {'auc': auc_of(hist), 'examples': examples}
