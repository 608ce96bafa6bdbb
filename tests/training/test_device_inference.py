"""training.device_inference: a NumPy batch split over a worker's replicas
and put back in order, padded to a few compiled shapes."""

import numpy as np
import pytest
import tensorflow as tf

from distribution import strategy as strategies
from training import device_inference


@tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
def double_and_sum(x):
  return {'double': 2 * x, 'sum': tf.reduce_sum(x, axis=1)}


@pytest.mark.parametrize('devices', [1, 2])
def test_rows_come_back_in_order_through_every_shape(devices):
  strategy = strategies.mirrored([f'/cpu:{i}' for i in range(devices)])
  infer = device_inference.DeviceInference(
      strategy=strategy, fn=double_and_sum, max_per_replica=4)
  assert infer.replicas == devices
  rng = np.random.default_rng(0)
  for rows in (0, 1, 2, 3, 5, 8, 9, 23):
    x = rng.normal(size=(rows, 3)).astype(np.float32)
    out = infer(x)
    np.testing.assert_array_equal(out['double'], 2 * x)
    np.testing.assert_allclose(out['sum'], x.sum(axis=1), rtol=1e-6)
  # Per-replica batches 1, 2 and 4 only: three traces, not seven.
  assert [infer.per_replica_batch(r) for r in (1, 2, 3, 4, 5, 100)] == (
      [1, 1, 2, 2, 4, 4] if devices == 2 else [1, 2, 4, 4, 4, 4])
  assert infer._run.experimental_get_tracing_count() == 3  # pylint: disable=protected-access


def test_the_default_strategy_is_one_replica():
  infer = device_inference.DeviceInference(
      strategy=tf.distribute.get_strategy(), fn=double_and_sum)
  x = np.arange(6, dtype=np.float32).reshape(2, 3)
  assert infer.replicas == 1
  np.testing.assert_array_equal(infer(x)['double'], 2 * x)
