"""ROC AUC from per-host histograms equals scikit-learn's, ties included."""

import numpy as np
import pytest
from sklearn import metrics as sk_metrics

from models.dlrm import roc_auc


def _data(n, seed, decimals=None):
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, 2, n)
  scores = 1 / (1 + np.exp(-(labels * 0.8 + rng.normal(0, 1, n))))
  if decimals is not None:  # Many exact ties, within and across classes.
    scores = np.round(scores, decimals)
  return scores.astype(np.float32), labels


@pytest.mark.parametrize('decimals', [None, 2, 0])
def test_one_host_equals_sklearn(decimals):
  scores, labels = _data(5000, 0, decimals)
  metric = roc_auc.RocAucMetric()
  metric.update({'score': scores[:1234], 'label': labels[:1234]})
  metric.update({'score': scores[1234:], 'label': labels[1234:]})
  want = sk_metrics.roc_auc_score(labels, scores)
  assert metric.result()['auc'] == pytest.approx(want, abs=1e-12)
  assert metric.result()['examples'] == 5000


def test_hosts_histograms_merge_to_the_whole_sets_auc():
  scores, labels = _data(3001, 1, decimals=3)
  hosts = [roc_auc.RocAucMetric(expected_examples=lambda: 3001)
           for _ in range(3)]
  # Uneven shares: a host's scores overlap the others' (shared ties).
  for host, part in zip(hosts, np.split(np.arange(3001), [1000, 2900])):
    host.update({'score': scores[part], 'label': labels[part]})
  parts = [h.statistics() for h in hosts]
  want = sk_metrics.roc_auc_score(labels, scores)
  assert hosts[0].result_from(parts)['auc'] == pytest.approx(want, abs=1e-12)
  # What travels: three numbers a distinct score of the host, not a host's
  # examples (about 1000 distinct values at 3 decimals).
  assert all(len(p) % 3 == 0 and len(p) <= 3 * 1001 for p in parts)
  # An example missing or counted twice is refused.
  with pytest.raises(RuntimeError, match='3001'):
    hosts[0].result_from(parts[:2])
  with pytest.raises(RuntimeError, match='counted twice'):
    hosts[0].result_from(parts + parts[2:])


def test_bad_inputs_are_named():
  metric = roc_auc.RocAucMetric()
  with pytest.raises(ValueError, match='0/1 labels'):
    metric.update({'score': np.ones(3), 'label': np.array([0, 1, 2])})
  with pytest.raises(ValueError, match='NaN'):
    metric.update({'score': np.array([np.nan, 1.0]),
                   'label': np.array([0, 1])})
  metric.update({'score': np.ones(3), 'label': np.ones(3)})
  with pytest.raises(ValueError, match='0 negatives'):
    metric.result()
