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


def plain_auc(model, data_dir: str, binned: bool = False):
  """sklearn's ROC AUC over every validation digit, one device, no padding
  (of the scores' bins: `binned`)."""
  logits, labels = helpers.validation_logits(model, data_dir)
  positive = labels >= binary_digits.POSITIVE_FROM
  scores = softmax(logits.astype(np.float64), axis=-1)[:, 5:].sum(-1)
  if binned:
    scores = binary_digits.binned(scores)
  return metrics.roc_auc_score(positive, scores), int(positive.sum())


# Slow (about 25 s each): 2 worker processes training and evaluating. The
# per-host case is the only run of the collective that sums per-host
# statistics (it needs 2 processes).
@pytest.mark.slow
@pytest.mark.parametrize('per_host', [False, True])
def test_auc_on_two_worker_processes_equals_a_plain_loop(quickstart_data,
                                                         tmp_path, per_host):
  model_dir = str(tmp_path / 'run')
  # The metric beside training (ASYNC_EVAL): both workers learn each result
  # at the same loop end.
  helpers.run_worker_processes(
      ['tests.multi_worker_main', quickstart_data, model_dir,
       'tests/binary_digits.gin', 'ASYNC_EVAL=True',
       f'tests.binary_digits.BinaryDigitsTask.per_host={per_host}'],
      tmp_path)
  chief, other = (json.load(open(tmp_path / f'w{i}.npz.json'))
                  for i in range(2))
  assert chief['metrics']['host_examples'] == 360
  assert chief['quality'] == other['quality']
  if per_host:
    # Each worker fed its own replica's examples and sent only its
    # histogram; both scored the same sums.
    fed = [w['metrics']['examples_fed_here'] for w in (chief, other)]
    assert sum(fed) == 360 and min(fed) > 0, fed
    assert other['metrics']['host_examples'] == 360
  else:
    # The chief computed the metric; the other worker received its quality.
    assert 'host_examples' not in other['metrics']
  # Score the run's final checkpoint with the plain loop.
  from models.common.resnet import ResNet
  model = ResNet(depth=10, width_multiplier=0.25, num_classes=10)
  tf.train.Checkpoint(model=model).read(tf.train.latest_checkpoint(
      f'{model_dir}/checkpoints')).expect_partial()
  auc, _ = plain_auc(model, quickstart_data, binned=per_host)
  # A rank metric: the run's eval batches (50) and the plain loop's (1,000)
  # round the logits apart by float32 noise, which may swap a near-tied
  # pair or two (one pair is 1 / (180 x 180) = 3e-5 of AUC).
  assert chief['quality'] == pytest.approx(auc, abs=1e-4)


def test_binned_auc_from_two_hosts_histograms_is_sklearns():
  rng = np.random.default_rng(0)
  scores = rng.beta(2, 2, 1000).astype(np.float32)
  scores[:50] = scores[50:100]  # Ties.
  positive = (rng.random(1000) < scores).astype(np.int32)
  hosts = [binary_digits.BinnedRocAuc() for _ in range(2)]
  for h, part in enumerate(np.array_split(rng.permutation(1000), 2)):
    hosts[h].update({'score': scores[part], 'positive': positive[part]})
  got = hosts[1].result_from([h.statistics() for h in hosts])
  want = metrics.roc_auc_score(positive, binary_digits.binned(scores))
  assert got['auc'] == pytest.approx(want, abs=1e-12)
  assert got['host_examples'] == 1000 and got['examples_fed_here'] == 500
