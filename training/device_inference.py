"""A model's inference on this worker's devices, for host code that holds
NumPy batches (MiniGo's self-play leaves: training.task.Generations'
`infer`).

A batch is split over the worker's replicas and run under the run's
strategy (one `strategy.run` in a `tf.function`), then put back together
in order. The per-replica batch is padded to a power of two (at most
`max_per_replica`; larger batches go in pieces), so a run compiles a few
shapes, not one per batch size (a TPU compiles each shape once).

The function is the task's `serving_fn(model)`: inference mode, the
model's current variables; the weights the training loop leaves are the
ones used, with no copy.
"""

import math
import threading
from typing import Callable

import numpy as np
import tensorflow as tf

from distribution import strategy as strategies


class DeviceInference:
  """`infer(x) -> {name: array}` for a NumPy batch, on the devices."""

  def __init__(self, *, strategy: tf.distribute.Strategy,
               fn: Callable[[tf.Tensor], dict], max_per_replica: int = 1024):
    """Args:
      strategy: the run's (its replicas on this worker share each batch).
      fn: a batch of one replica -> a dict of [b, ...] outputs.
      max_per_replica: the largest batch a replica gets in one call.
    """
    if max_per_replica < 1:
      raise ValueError('max_per_replica must be at least 1, got '
                       f'{max_per_replica}.')
    self.strategy = strategy
    # This worker's (a TPU pod's one process drives all of them).
    self.replicas = strategy.num_replicas_in_sync // strategies.num_workers(
        strategy)
    self.max_per_replica = max_per_replica
    self._lock = threading.Lock()

    @tf.function(autograph=False)
    def run(x):
      # A plain function: MirroredStrategy hands a tf.function `fn` the
      # PerReplica value itself (its python_function path).
      return strategy.run(lambda rows: fn(rows), args=(x,))  # pylint: disable=unnecessary-lambda

    self._run = run

  def per_replica_batch(self, rows: int) -> int:
    """The padded per-replica batch a call of `rows` rows runs at."""
    need = max(1, math.ceil(rows / self.replicas))
    return min(self.max_per_replica, 1 << (need - 1).bit_length())

  def __call__(self, x: np.ndarray) -> dict[str, np.ndarray]:
    with self._lock:
      per = self.per_replica_batch(len(x))
      piece = per * self.replicas
      parts = [self._piece(x[start:start + piece], per)
               for start in range(0, max(len(x), 1), piece)]
    return {name: np.concatenate([p[name] for p in parts])
            for name in parts[0]}

  def _piece(self, x: np.ndarray, per: int) -> dict[str, np.ndarray]:
    rows = len(x)
    padded = np.zeros((per * self.replicas,) + x.shape[1:], x.dtype)
    padded[:rows] = x

    def replica_rows(context):
      # This worker's replicas, in order (global ids on a multi-worker run).
      local = context.replica_id_in_sync_group % self.replicas
      return padded[local * per:(local + 1) * per]

    values = self.strategy.experimental_distribute_values_from_function(
        replica_rows)
    outputs = self.strategy.experimental_local_results(self._run(values))
    return {name: np.concatenate([o[name].numpy() for o in outputs])[:rows]
            for name in outputs[0]}
