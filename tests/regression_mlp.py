"""A two-layer regression MLP and its short training run, shared by the
tests of how updates and gradients are distributed (weight-update sharding,
two-level sums, packing)."""

import numpy as np
import tensorflow as tf

from distribution import gradients as gradients_lib
from distribution import weight_update_sharding as wus
from training import losses
from training import optimizers
from training import step as step_lib


class Mlp(tf.Module):
  """Two layers with sizes that do not divide by 4 (shards get padding)."""

  def __init__(self):
    super().__init__()
    rng = np.random.default_rng(0)
    self.params = {
        'dense_1/kernel': tf.Variable(
            rng.standard_normal((5, 7)).astype(np.float32) * 0.3,
            name='dense_1/kernel'),
        'dense_1/bias': tf.Variable(np.zeros(7, np.float32) + 0.1,
                                    name='dense_1/bias'),
        'dense_2/kernel': tf.Variable(
            rng.standard_normal((7, 3)).astype(np.float32) * 0.3,
            name='dense_2/kernel'),
    }
    self.state = {}

  def __call__(self, x):
    h = tf.nn.relu(x @ self.params['dense_1/kernel'] +
                   self.params['dense_1/bias'])
    return h @ self.params['dense_2/kernel']


class RegressionTask:
  def loss_share(self, model, batch):
    error = tf.reduce_sum(tf.square(model(batch['x']) - batch['y']), -1)
    return losses.share_of_global_mean(error), {}


def is_bias(name):
  return 'bias' in name


OPTIMIZERS = {
    'lars': lambda: optimizers.Lars(exclude=is_bias, momentum=0.9,
                                    weight_decay=1e-4, eeta=0.001),
    'lamb': lambda: optimizers.Lamb(exclude=is_bias, weight_decay=0.01),
    'adam': lambda: optimizers.Adam(),
    'sgd': lambda: optimizers.SgdMomentum(exclude=is_bias),
}


def train(strategy, make_optimizer, *, steps: int, sharded: bool = False,
          gradients=gradients_lib.GradientOptions()):
  """`steps` steps on a fixed data set of 64 examples in batches of 16.

  Returns:
    (weights as numpy arrays, the optimizer, the model, the train loop's
    collective op count for one step).
  """
  rng = np.random.default_rng(1)
  x = rng.standard_normal((64, 5)).astype(np.float32)
  y = rng.standard_normal((64, 3)).astype(np.float32)
  optimizer = make_optimizer()
  with strategy.scope():
    model, step = Mlp(), tf.Variable(0, dtype=tf.int64)
    optimizer.build(list(model.trainable_variables), make_slot=(
        wus.make_slot_factory(strategy.num_replicas_in_sync) if sharded
        else None))
  ds = tf.data.Dataset.from_tensor_slices({'x': x, 'y': y}).repeat().batch(16)
  iterator = iter(strategy.experimental_distribute_dataset(ds))
  loop = step_lib.make_train_loop(
      strategy=strategy, model=model, optimizer=optimizer,
      learning_rate=lambda s: 0.05, task=RegressionTask(), step=step,
      gradients=gradients, weight_update_sharding=sharded)
  loop(iterator, tf.constant(steps))
  graph = loop.get_concrete_function(iterator, tf.constant(1)).graph
  return ({k: v.numpy() for k, v in model.params.items()}, optimizer, model,
          collective_op_count(graph))


def collective_op_count(graph) -> int:
  from benchmarks import common
  return common.collective_ops(graph)
