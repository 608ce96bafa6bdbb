"""One evaluation: device-side sums and, for host metrics, gathered outputs.

Sums are the fast path: each replica sums its batch and the loop all-reduces.
A task with a host metric (training.task.HostMetric: AUC, BLEU, COCO mAP)
also names per-example outputs; the eval loop all-gathers them on the
device, the chief drops the padding (mask 0) and feeds its host metric chunk
by chunk, computes the quality, and broadcasts it so every worker takes the
same stop decision.
"""

from absl import logging
import numpy as np
import tensorflow as tf

from distribution import strategy as strategies


class Evaluator:
  """Runs the eval loop over the whole eval set and computes the quality."""

  def __init__(self, *, eval_loop, make_iterator, steps: int, task,
               chief: bool, worker_sum: strategies.WorkerSum,
               expected_count: int = 0, steps_per_loop: int = 0):
    """Args:
      eval_loop: eval_loop(iterator, num_steps) -> (sums, outputs) (step.py).
      make_iterator: () -> a fresh eval iterator.
      steps: eval steps covering every example once.
      task: the training.task.Task (quality, host_metric).
      chief: whether this worker computes host metrics.
      worker_sum: sums host values over the workers, in float64 so every
        worker sees exactly the chief's figure (distribution.strategy).
      expected_count: real eval examples, to report any dropped (0: skip).
      steps_per_loop: eval steps per device call (0: all in one); bounds the
        host memory that gathered outputs take.
    """
    self.eval_loop = eval_loop
    self.make_iterator, self.steps, self.task = make_iterator, steps, task
    self.chief, self.expected_count = chief, expected_count
    self.steps_per_loop = steps_per_loop or steps
    self.host_metric = task.host_metric()
    self._worker_sum = worker_sum if self.host_metric is not None else None

  def compile(self) -> None:
    """Builds the eval loop with 0 steps (no eval happens)."""
    self.eval_loop(self.make_iterator(), tf.constant(0))
    if self._worker_sum:
      self._worker_sum(0.0, first_replica_only=True)

  def evaluate(self) -> tuple[float, dict]:
    """Returns (quality, metrics): the sums and any host metric's values."""
    iterator = self.make_iterator()
    sums = None
    if self.host_metric is not None and self.chief:
      self.host_metric.reset()
    done = 0
    while done < self.steps:
      n = min(self.steps_per_loop, self.steps - done)
      chunk_sums, outputs = self.eval_loop(iterator, tf.constant(n))
      chunk_sums = {k: float(v) for k, v in chunk_sums.items()}
      sums = chunk_sums if sums is None else {
          k: sums[k] + chunk_sums[k] for k in sums}
      if self.host_metric is not None and self.chief:
        real = outputs_without_padding({k: v.numpy()
                                        for k, v in outputs.items()})
        if any(len(v) for v in real.values()):  # Skip all-padding chunks.
          self.host_metric.update(real)
      done += n
    metrics = dict(sums)
    seen = int(metrics['examples'])
    if self.expected_count and seen != self.expected_count:
      logging.warning('Eval covered %d of %d examples: %d were dropped (see '
                      'the input warnings above).', seen, self.expected_count,
                      self.expected_count - seen)
    if self.host_metric is None:
      return self.task.quality(metrics), metrics
    quality = 0.0
    if self.chief:
      metrics.update(self.host_metric.result())
      quality = self.task.quality(metrics)
    quality = self._worker_sum(quality, first_replica_only=True)
    return quality, metrics


def outputs_without_padding(outputs: dict) -> dict:
  """Host arrays of the real examples of gathered outputs (mask 1)."""
  arrays = {k: np.asarray(v) for k, v in outputs.items()}
  real = arrays.pop('mask') == 1
  return {k: v[real] for k, v in arrays.items()}
