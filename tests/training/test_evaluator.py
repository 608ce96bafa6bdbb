"""The Evaluator: host metrics fed chunk by chunk without padding."""

import threading

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
def test_host_metric_gets_every_real_example_once_in_chunks(steps_per_loop,
                                                           capsys):
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
      expected_count=10, steps_per_loop=steps_per_loop,
      progress_seconds=1e-9)  # A progress line after every call but the last.
  evaluator.compile()
  for _ in range(2):  # A second evaluation starts afresh.
    quality, metrics = evaluator.evaluate()
  progress = [l for l in capsys.readouterr().out.splitlines()
              if 'evaluating at step' in l]
  if steps_per_loop:
    # 6 real examples after the first call, 10 after the second; twice.
    assert [l.split(': ')[1].split(' examples')[0] for l in progress] == [
        '6/10', '10/10'] * 2
  else:
    assert not progress  # One call: nothing to report between calls.
  chunks = task.metric.chunks
  # One chunk a step, but the last step holds only padding: not passed on.
  assert len(chunks) == (2 if steps_per_loop == 1 else 1)
  seen = np.concatenate([c['index'] for c in chunks])
  assert sorted(seen.tolist()) == list(range(10))
  assert metrics['examples'] == metrics['host_examples'] == 10
  assert quality == pytest.approx(float((x @ np.array([0.5, -0.25])).max()),
                                  rel=1e-6)


class Failing(Collect):
  def update(self, outputs):
    raise ValueError('a bad chunk')


class Blocking(Collect):
  """Its result waits for `release` (a metric that hangs, then recovers)."""

  def __init__(self):
    self.release = threading.Event()

  def result(self):
    self.release.wait()
    return super().result()


def evaluator_for(metric, **options):
  strategy = strategies.make_strategy(kind='mirrored', num_cpu_devices=2)
  x, y = data(n=8)
  with strategy.scope():
    model = Linear()
  ds = tf.data.Dataset.from_tensor_slices({
      'x': x, 'y': y, 'index': np.arange(8, dtype=np.int32),
      'mask': np.ones(8, np.float32)}).batch(4)
  dist = strategy.experimental_distribute_dataset(ds)
  task = HostTask()
  task.metric = metric
  evaluator = evaluator_lib.Evaluator(
      worker_sum=strategies.make_worker_sum(strategy, tf.float64),
      eval_loop=step_lib.make_eval_loop(strategy=strategy, model=model,
                                        task=task),
      make_iterator=lambda: iter(dist), steps=2, task=task, chief=True,
      expected_count=8, **options)
  evaluator.compile()
  return evaluator, model, x


def test_async_results_come_in_order_each_with_the_weights_of_its_step():
  evaluator, model, x = evaluator_for(Collect(), asynchronous=True)
  assert evaluator.asynchronous
  expected = []
  for step, w in ((10, [0.5, -0.25]), (20, [-1.0, 2.0])):
    model.w.assign(w)  # Training moved the weights on.
    evaluator.start(step)
    expected.append(float((x @ np.array(w, np.float32)).max()))
  results = evaluator.results(wait=True)
  assert [r.step for r in results] == [10, 20]
  assert [r.quality for r in results] == pytest.approx(expected, rel=1e-6)
  assert all(r.metrics['host_examples'] == r.metrics['examples'] == 8
             for r in results)
  assert evaluator.pending_steps == []


def test_an_async_result_not_ready_is_not_waited_for():
  metric = Blocking()
  evaluator, _, _ = evaluator_for(metric, asynchronous=True)
  evaluator.start(5)
  assert evaluator.results(wait=False) == []  # Training goes on.
  assert evaluator.pending_steps == [5]
  metric.release.set()
  assert [r.step for r in evaluator.results(wait=True)] == [5]


def test_a_hung_host_metric_stops_the_run_naming_the_eval_step():
  metric = Blocking()
  evaluator, _, _ = evaluator_for(metric, asynchronous=True,
                                  host_timeout_seconds=0.2)
  evaluator.start(5)
  try:
    with pytest.raises(evaluator_lib.HostMetricError,
                       match=r'HostTask did not finish the evaluation at step '
                       r'5 in 0.2 s \(training.run_options.RunOptions.host_metric_timeout_'):
      evaluator.results(wait=True)
  finally:
    metric.release.set()
  assert evaluator.pending_steps == []


@pytest.mark.parametrize('asynchronous', [False, True])
def test_a_failing_host_metric_is_named_with_its_eval_step(asynchronous):
  evaluator, _, _ = evaluator_for(Failing(), asynchronous=asynchronous)
  evaluator.start(3)
  with pytest.raises(evaluator_lib.HostMetricError,
                     match=r'HostTask failed on the evaluation at step 3: '
                     r'ValueError: a bad chunk'):
    evaluator.results(wait=True)


def test_gather_by_sum_gives_every_workers_array_in_worker_order():
  # Three workers as threads; their sums meet at a barrier, as a collective.
  values = [np.array([1.5, -2.0, 3.0]), np.array([]), np.array([7.0])]
  barrier = threading.Barrier(3)
  calls, out = {}, {}

  def worker(w):
    count = 0

    def worker_sum(value, first_replica_only=False):
      nonlocal count
      del first_replica_only
      key = count
      count += 1
      calls.setdefault(key, [None] * 3)[w] = np.asarray(value, np.float64)
      barrier.wait()
      total = np.sum(calls[key], axis=0)
      barrier.wait()
      return total

    out[w] = evaluator_lib.gather_by_sum(worker_sum, w, 3, values[w])

  threads = [threading.Thread(target=worker, args=(w,)) for w in range(3)]
  for t in threads:
    t.start()
  for t in threads:
    t.join(60)
  for w in range(3):
    assert [a.tolist() for a in out[w]] == [v.tolist() for v in values]
