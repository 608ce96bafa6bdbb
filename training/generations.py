"""Runs a task's data making between generations (training.task.Generations).

The Controller calls `produce(step)` before the first generation it trains
and after every later one; this hands the model's current weights to the
task's data, on every worker (each makes its share), and waits until every
worker is done: no worker reads a generation's examples before they are
all written. It hands over, too, the model's serving function on this
worker's devices (training/device_inference.py), for data making that
evaluates the model there.
"""

from typing import Callable, Sequence

import tensorflow as tf


def weights_by_name(variables) -> dict:
  """Variables' values as NumPy arrays, by name without the ':0'."""
  return {v.name.split(':')[0]: v.numpy() for v in variables}


class GenerationRunner:
  """`steps_per_generation` and `produce(step)` for the Controller."""

  def __init__(self, *, data, variables: Sequence[tf.Variable],
               worker_id: int, worker_sum: Callable, directory: str,
               infer: Callable | None = None):
    """Args:
      data: the task's data (training.task.Generations); its `directory`,
        if None, becomes `directory`.
      variables: the model's variables (trainable and state) handed over.
      worker_id: this worker's index.
      worker_sum: distribution.strategy.WorkerSum (a sum over workers).
      directory: the run's default for the data's `directory`.
      infer: the model's serving function on this worker's devices
        (training.device_inference.DeviceInference), or None.
    """
    self.data, self.variables = data, list(variables)
    self.infer = infer
    self.worker_id, self.worker_sum = worker_id, worker_sum
    self.steps_per_generation = int(data.steps_per_generation)
    if self.steps_per_generation <= 0:
      raise ValueError('`steps_per_generation` must be positive, got '
                       f'{self.steps_per_generation}.')
    self._workers = None
    if data.directory is None:
      data.directory = directory

  def produce(self, step: int) -> dict:
    if self._workers is None:
      self._workers = round(self.worker_sum(1.0))
    generation = step // self.steps_per_generation
    produced = self.data.produce(generation, weights_by_name(self.variables),
                                 worker=self.worker_id,
                                 workers=self._workers, infer=self.infer)
    self.worker_sum(1.0)  # Every worker's share is written.
    return produced
