"""A replica's share of the loss, and how it is normalised.

The runtime sums every replica's gradients of its share (one all-reduce SUM).
What a share means is the task's choice, made with one of the helpers:

- `share_of_global_mean`: the loss is a mean over everything all replicas hold
  (examples for ResNet; target tokens for the Transformer's 'global' token
  mean; later matched anchors for SSD). Each replica contributes
  sum(values x weights) / (the weights summed over all replicas), so the
  summed gradient is the global mean's gradient whatever the replicas'
  shares of the weight.
- `share_of_replica_mean`: each replica's loss is the mean over its own
  examples; the share is that mean divided by the replica count, so the
  summed gradient is the average of the replicas' own-mean gradients
  (Google's v0.7 Transformer: each core's token mean).
- `replica_mean_summed`: the share is the replica's own mean itself, so the
  optimizer receives the *sum* of the replicas' own-mean gradients. This is
  Google's MLPerf v0.7 BERT: each core's loss is its own mean, each core
  clips its gradients to norm 1, and `tf.tpu.cross_replica_sum` adds them
  with no division (optimization.py). LAMB is scale-invariant but for its
  epsilon, which the mean would make act 8192x stronger on 8192 cores.
- `replica_sum_summed`: the share is the replica's own (weighted) sum, and
  the optimizer receives the sum of the replicas' own-sum gradients. This is
  Google's MLPerf v0.7 GNMT: each core's loss is the sum over its tokens,
  each core clips that sum's gradients to norm 5, and `cross_replica_sum`
  adds them (model.py); Adam is scale-invariant but for its epsilon.

`replica_factor` turns a share into the replica's own loss (its mean; its
sum for `replica_sum_summed`), which is what clipping before the all-reduce
clips (MLPerf BERT and GNMT v0.7 clip per core); the loss the runtime
reports is the replicas' own losses averaged.

Under a mesh (distribution/mesh.py) one program holds the batches of the
mesh's data-parallel replicas stacked along dimension 0; inside
`replicas_in_batch(R)` the helpers normalise each of those R slices as a
strategy's replica would, so a mesh trains as R data-parallel replicas do.
"""

import contextlib
import contextvars
import dataclasses

import tensorflow as tf

_REPLICAS_IN_BATCH = contextvars.ContextVar('replicas_in_batch', default=1)


@contextlib.contextmanager
def replicas_in_batch(count: int):
  """Inside (while a step is traced), a batch is `count` replicas' batches
  stacked along dimension 0, in equal slices."""
  token = _REPLICAS_IN_BATCH.set(count)
  try:
    yield
  finally:
    _REPLICAS_IN_BATCH.reset(token)


@dataclasses.dataclass(frozen=True)
class LossShare:
  """A replica's share of the loss.

  Attributes:
    value: the scalar whose gradients the runtime sums over replicas.
    replica_factor: value x replica_factor is this replica's own loss (its
      mean, or its sum for `replica_sum_summed`).
  """
  value: tf.Tensor
  replica_factor: float

  def __add__(self, other: 'LossShare') -> 'LossShare':
    if other.replica_factor != self.replica_factor:
      raise ValueError(
          'Loss shares of different normalisations cannot be added '
          f'(replica factors {self.replica_factor} and '
          f'{other.replica_factor}): normalise both terms the same way.')
    return LossShare(self.value + other.value, self.replica_factor)


def _num_replicas() -> int:
  return tf.distribute.get_replica_context().num_replicas_in_sync


def _weighted_sum(values, weights):
  if weights is None:
    return tf.reduce_sum(values), tf.cast(tf.size(values), values.dtype)
  weights = tf.cast(weights, values.dtype)
  return tf.reduce_sum(values * weights), tf.reduce_sum(weights)


def _slice_means(values, weights, epsilon):
  """Each stacked replica's (weighted) mean: shape [replicas in batch]."""
  count = _REPLICAS_IN_BATCH.get()
  if count == 1:
    total, weight = _weighted_sum(values, weights)
    return tf.reshape(total / (weight + epsilon), [1])
  values = tf.reshape(values, [count, -1])
  if weights is None:
    weights = tf.ones_like(values)
  weights = tf.reshape(tf.cast(weights, values.dtype), [count, -1])
  return (tf.reduce_sum(values * weights, axis=1) /
          (tf.reduce_sum(weights, axis=1) + epsilon))


def share_of_global_mean(values: tf.Tensor,
                         weights: tf.Tensor | None = None) -> LossShare:
  """sum(values x weights) over this replica / the weight of all replicas.

  Args:
    values: per-example (or per-token) losses of this replica.
    weights: their weights (0 for padding); None weighs every value 1, and
      then the global weight is known without a collective.
  """
  n = _num_replicas()
  total, weight = _weighted_sum(values, weights)
  if weights is None:
    global_weight = weight * n
  else:
    ctx = tf.distribute.get_replica_context()
    global_weight = ctx.all_reduce(tf.distribute.ReduceOp.SUM,
                                   tf.stop_gradient(weight))
  return LossShare(total / tf.maximum(global_weight, 1e-9), float(n))


def share_of_replica_mean(values: tf.Tensor, weights: tf.Tensor | None = None,
                          epsilon: float = 0.0) -> LossShare:
  """This replica's (weighted) mean of `values`, divided by the replicas.

  Args:
    values: per-example (or per-token) losses of this replica.
    weights: their weights; None weighs every value 1.
    epsilon: added to the weight sum (the BERT reference adds 1e-5).
  """
  n = _num_replicas()
  return LossShare(tf.reduce_mean(_slice_means(values, weights, epsilon)) / n,
                   float(n))


def replica_mean_summed(values: tf.Tensor, weights: tf.Tensor | None = None,
                        epsilon: float = 0.0) -> LossShare:
  """This replica's (weighted) mean of `values`; gradients summed over
  replicas, not averaged (Google's v0.7 BERT).

  Args:
    values: per-example (or per-token) losses of this replica.
    weights: their weights; None weighs every value 1.
    epsilon: added to the weight sum (the BERT reference adds 1e-5).
  """
  # Stacked replicas' means are summed too; value x 1/count is their mean.
  return LossShare(tf.reduce_sum(_slice_means(values, weights, epsilon)),
                   1.0 / _REPLICAS_IN_BATCH.get())


def replica_sum_summed(values: tf.Tensor,
                       weights: tf.Tensor | None = None) -> LossShare:
  """This replica's (weighted) sum of `values`; gradients summed over
  replicas, not averaged (Google's v0.7 GNMT).

  Args:
    values: per-token losses of this replica.
    weights: their weights; None weighs every value 1 (GNMT's: padding
      included).
  """
  total, _ = _weighted_sum(values, weights)
  # Stacked replicas' sums add up; value x 1/count is their mean.
  return LossShare(total, 1.0 / _REPLICAS_IN_BATCH.get())
