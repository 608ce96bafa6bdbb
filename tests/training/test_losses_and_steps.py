"""Loss shares and the device loops on 3 logical CPU replicas, against NumPy."""

import numpy as np
import pytest
import tensorflow as tf

from distribution import gradients as gradients_lib
from distribution import strategy as strategies
from training import losses
from training import step as step_lib

REPLICAS = 3


@pytest.fixture(scope='module')
def strategy():
  return strategies.make_strategy(kind='mirrored', num_cpu_devices=REPLICAS)


def per_replica(strategy, fn):
  """fn(replica_id) on every replica; the replicas' results as NumPy."""
  def replica_fn():
    r = tf.distribute.get_replica_context().replica_id_in_sync_group
    return fn(r)
  out = strategy.run(tf.function(replica_fn))
  return [np.asarray(x) for x in strategy.experimental_local_results(out)]


VALUES = np.arange(12, dtype=np.float32).reshape(REPLICAS, 4) + 1
WEIGHTS = np.array([[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 1]], np.float32)


def test_share_of_global_mean_sums_to_the_weighted_global_mean(strategy):
  shares = per_replica(strategy, lambda r: losses.share_of_global_mean(
      tf.gather(VALUES, r), tf.gather(WEIGHTS, r)).value)
  expected = (VALUES * WEIGHTS).sum() / WEIGHTS.sum()
  assert sum(shares) == pytest.approx(expected, rel=1e-6)
  unweighted = per_replica(strategy, lambda r: losses.share_of_global_mean(
      tf.gather(VALUES, r)).value)
  assert sum(unweighted) == pytest.approx(VALUES.mean(), rel=1e-6)


def test_share_of_replica_mean_sums_to_the_mean_of_replica_means(strategy):
  shares = per_replica(strategy, lambda r: losses.share_of_replica_mean(
      tf.gather(VALUES, r), tf.gather(WEIGHTS, r)).value)
  means = (VALUES * WEIGHTS).sum(1) / WEIGHTS.sum(1)
  assert sum(shares) == pytest.approx(means.mean(), rel=1e-6)


def test_replica_sum_summed_sums_to_the_weighted_sum_and_reports_one_replica(
    strategy):
  shares = per_replica(strategy, lambda r: losses.replica_sum_summed(
      tf.gather(VALUES, r), tf.gather(WEIGHTS, r)).value)
  assert sum(shares) == pytest.approx((VALUES * WEIGHTS).sum(), rel=1e-6)
  one = losses.replica_sum_summed(tf.constant(VALUES[1]))
  assert float(one.value) * one.replica_factor == pytest.approx(
      VALUES[1].sum())


@pytest.mark.parametrize('helper', ['share_of_global_mean',
                                    'share_of_replica_mean',
                                    'replica_mean_summed',
                                    'replica_sum_summed'])
def test_replicas_stacked_in_one_batch_share_like_replicas(strategy, helper):
  # A mesh's one program holds the 3 replicas' batches stacked: its share is
  # what the 3 replicas' shares sum to, and share x factor their mean loss.
  fn = getattr(losses, helper)
  shares = per_replica(strategy, lambda r: fn(
      tf.gather(VALUES, r), tf.gather(WEIGHTS, r)).value)
  with losses.replicas_in_batch(REPLICAS):
    stacked = fn(tf.constant(VALUES.reshape(-1)),
                 tf.constant(WEIGHTS.reshape(-1)))
  assert float(stacked.value) == pytest.approx(sum(shares), rel=1e-6)
  means = (VALUES * WEIGHTS).sum(1) / WEIGHTS.sum(1)
  reported = {'share_of_global_mean': (VALUES * WEIGHTS).sum() / WEIGHTS.sum(),
              'replica_sum_summed': (VALUES * WEIGHTS).sum(1).mean()}.get(
                  helper, means.mean())
  assert float(stacked.value) * stacked.replica_factor == pytest.approx(
      reported, rel=1e-6)


def test_shares_of_different_normalisations_do_not_add():
  with pytest.raises(ValueError, match='different normalisations'):
    _ = losses.LossShare(1.0, 3.0) + losses.LossShare(1.0, 1.0)


class LinearTask:
  """y = x . w, squared error as a share of the global mean."""
  eval_sum_names = ('examples', 'error')
  eval_output_dtypes = {'prediction': tf.float32, 'index': tf.int32,
                        'mask': tf.float32}

  def loss_share(self, model, batch):
    pred = tf.linalg.matvec(batch['x'], model.w)
    return losses.share_of_global_mean(tf.square(pred - batch['y'])), {}

  def eval_sums(self, model, batch):
    pred = tf.linalg.matvec(batch['x'], model.w)
    return {'examples': tf.reduce_sum(batch['mask']),
            'error': tf.reduce_sum(tf.abs(pred - batch['y']) * batch['mask'])}

  def eval_outputs(self, model, batch):
    return {'prediction': tf.linalg.matvec(batch['x'], model.w),
            'index': batch['index'], 'mask': batch['mask']}


class Linear(tf.Module):
  def __init__(self):
    super().__init__()
    self.w = tf.Variable([0.5, -0.25], name='linear/w')
    self.state = {}


class Sgd:
  slots = {}

  def slots_for(self, variables):
    return [() for _ in variables]

  def takes_decay(self, variable):
    return False

  def loss_weight_decay(self):
    return 0.0

  def update(self, var, grad, slots, lr, step, *, decay):
    return [var.assign_sub(lr * grad)]


def data(n=24, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((n, 2)).astype(np.float32)
  y = (x @ np.array([2.0, -1.0]) + 0.1).astype(np.float32)
  return x, y


def test_train_loop_on_three_replicas_is_sgd_on_the_global_batch(strategy):
  x, y = data()
  with strategy.scope():
    model, step = Linear(), tf.Variable(0, dtype=tf.int64)
  ds = tf.data.Dataset.from_tensor_slices({'x': x, 'y': y}).repeat().batch(6)
  loop = step_lib.make_train_loop(
      strategy=strategy, model=model, optimizer=Sgd(),
      learning_rate=lambda s: 0.1, task=LinearTask(), step=step)
  loss = float(loop(iter(strategy.experimental_distribute_dataset(ds)),
                    tf.constant(3)))
  w, losses_ = np.array([0.5, -0.25]), []
  for i in range(3):
    xb, yb = x[6 * i:6 * i + 6], y[6 * i:6 * i + 6]
    err = xb @ w - yb
    losses_.append(np.mean(err**2))
    w = w - 0.1 * 2 * xb.T @ err / len(yb)
  np.testing.assert_allclose(model.w.numpy(), w, rtol=1e-5)
  assert loss == pytest.approx(np.mean(losses_), rel=1e-5)
  assert int(step.numpy()) == 3


def test_eval_loop_gathers_every_replicas_outputs_with_their_mask(strategy):
  x, y = data(n=10)
  with strategy.scope():
    model = Linear()
  index = np.arange(12, dtype=np.int32)
  mask = (index < 10).astype(np.float32)  # 10 real, padded to 12.
  xs, ys = np.concatenate([x, np.zeros((2, 2), np.float32)]), np.concatenate(
      [y, np.zeros(2, np.float32)])
  ds = tf.data.Dataset.from_tensor_slices(
      {'x': xs, 'y': ys, 'index': index, 'mask': mask}).batch(6)
  loop = step_lib.make_eval_loop(strategy=strategy, model=model,
                                 task=LinearTask())
  sums, outputs = loop(iter(strategy.experimental_distribute_dataset(ds)),
                       tf.constant(2))
  assert float(sums['examples']) == 10
  outputs = {k: v.numpy() for k, v in outputs.items()}
  assert sorted(outputs['index'].tolist()) == list(range(12))
  real = outputs['mask'] == 1
  order = np.argsort(outputs['index'][real])
  np.testing.assert_allclose(outputs['prediction'][real][order],
                             x @ np.array([0.5, -0.25]), rtol=1e-6)
  assert float(sums['error']) == pytest.approx(
      np.abs(x @ np.array([0.5, -0.25]) - y).sum(), rel=1e-5)


def test_replica_sum_summed_clips_each_replicas_sum_then_sums(strategy):
  # Google's v0.7 GNMT: clip_by_global_norm(grads of the core's token sum,
  # 5), then cross_replica_sum. Here: w . x summed, clipped at 5.
  x = np.arange(1, 1 + REPLICAS * 4 * 2, dtype=np.float32).reshape(
      REPLICAS, 4, 2) / 4
  options = gradients_lib.GradientOptions(clip_norm=5.0,
                                          clip_before_allreduce=True)

  def replica(r):
    w = tf.constant([0.5, -0.25])
    with tf.GradientTape() as tape:
      tape.watch(w)
      share = losses.replica_sum_summed(
          tf.linalg.matvec(tf.gather(x, r), w))
    grads = [tape.gradient(share.value, w)]
    return gradients_lib.all_reduce_gradients(
        grads, options=options, replica_factor=share.replica_factor)[0]

  got = per_replica(strategy, replica)
  own = x.sum(axis=1)  # Each replica's gradient of its sum: sum of its x.
  clipped = own * np.minimum(1.0, 5.0 / np.linalg.norm(own, axis=1))[:, None]
  for g in got:
    np.testing.assert_allclose(g, clipped.sum(0), rtol=1e-5)
  assert np.linalg.norm(own, axis=1).min() > 5  # Every replica was clipped.
