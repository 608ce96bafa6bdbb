"""The Evaluator: host metrics fed chunk by chunk without padding."""

import numpy as np
import pytest
import tensorflow as tf

from distribution import strategy as strategies
from tests.training.test_losses_and_steps import Linear
from tests.training.test_losses_and_steps import LinearTask
from tests.training.test_losses_and_steps import data
from training import evaluator as evaluator_lib
from training import step as step_lib


class Collect:
  """A HostMetric keeping what it was given."""

  def reset(self):
    self.chunks = []

  def update(self, outputs):
    self.chunks.append({k: np.array(v) for k, v in outputs.items()})

  def result(self):
    index = np.concatenate([c['index'] for c in self.chunks])
    return {'host_examples': float(len(index)),
            'max_prediction': float(max(c['prediction'].max()
                                        for c in self.chunks))}


class HostTask(LinearTask):
  def __init__(self):
    self.metric = Collect()

  def host_metric(self):
    return self.metric

  @staticmethod
  def quality(metrics):
    return metrics['max_prediction']


@pytest.mark.parametrize('steps_per_loop', [0, 1])
def test_host_metric_gets_every_real_example_once_in_chunks(steps_per_loop):
  strategy = strategies.make_strategy(kind='mirrored', num_cpu_devices=3)
  x, y = data(n=10)
  with strategy.scope():
    model = Linear()
  n = 18  # 10 real examples padded to 3 steps of 6.
  pad = n - 10
  ds = tf.data.Dataset.from_tensor_slices({
      'x': np.concatenate([x, np.zeros((pad, 2), np.float32)]),
      'y': np.concatenate([y, np.zeros(pad, np.float32)]),
      'index': np.arange(n, dtype=np.int32),
      'mask': (np.arange(n) < 10).astype(np.float32)}).batch(6)
  dist = strategy.experimental_distribute_dataset(ds)
  task = HostTask()
  evaluator = evaluator_lib.Evaluator(
      worker_sum=strategies.make_worker_sum(strategy, tf.float64),
      eval_loop=step_lib.make_eval_loop(strategy=strategy, model=model,
                                        task=task),
      make_iterator=lambda: iter(dist), steps=3, task=task, chief=True,
      expected_count=10, steps_per_loop=steps_per_loop)
  evaluator.compile()
  for _ in range(2):  # A second evaluation starts afresh.
    quality, metrics = evaluator.evaluate()
  chunks = task.metric.chunks
  # One chunk a step, but the last step holds only padding: not passed on.
  assert len(chunks) == (2 if steps_per_loop == 1 else 1)
  seen = np.concatenate([c['index'] for c in chunks])
  assert sorted(seen.tolist()) == list(range(10))
  assert metrics['examples'] == metrics['host_examples'] == 10
  assert quality == pytest.approx(float((x @ np.array([0.5, -0.25])).max()),
                                  rel=1e-6)
