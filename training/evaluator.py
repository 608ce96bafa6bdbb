"""One evaluation: device-side sums and, for host metrics, gathered outputs.

Sums are the fast path: each replica sums its batch and the loop all-reduces.
A task with a host metric (training.task.HostMetric: AUC, BLEU, COCO mAP)
also names per-example outputs; the eval loop all-gathers them on the
device, the chief drops the padding (mask 0) and feeds its host metric chunk
by chunk, computes the quality, and broadcasts it so every worker takes the
same stop decision.

An evaluation has two halves: `start(step)` runs the device loop over the
eval set (the weights of that step) and hands the outputs to the host
metric; `results()` gives back the evaluations whose quality is known, in
the order they started. Synchronous, the host metric runs inside `start`.
Asynchronous (`asynchronous=True`, Google's v0.7 runs: the Transformer's
BLEU in a host thread, SSD's COCO mAP in host processes), it runs in one
background thread while training goes on, and `results()` returns an
evaluation at the first loop end after its metric is done; every worker
learns that at the same loop end (a collective), so they stop together.

A per-host metric (training.task.PerHostMetric: BLEU, COCO mAP) is fed on
every worker with that worker's own replicas' outputs (the eval loop built
with `local_outputs`); each worker reduces them to statistics, only those
are gathered to every worker (`gather_by_sum`), and every worker scores
them.
"""

import collections
import concurrent.futures
import dataclasses
import queue
import threading
import time

from absl import logging
import numpy as np
import tensorflow as tf

from distribution import strategy as strategies
from training import task as task_lib


@dataclasses.dataclass(frozen=True)
class EvalResult:
  """An evaluation of the weights of `step`: its quality and metrics (the
  eval sums and the host metric's values)."""
  step: int
  quality: float
  metrics: dict
  as_of: float | None = None  # events.EvalEnd.as_of.


@dataclasses.dataclass
class _Pending:
  step: int
  sums: dict
  # The chief's host-metric calls (reset, updates, result), in order; the
  # last one's value is the metric's (a per-host metric's: every worker's
  # calls, the last one its statistics).
  host: list[concurrent.futures.Future]
  own_state: float = 0.0  # This worker's, at the last per-host check.

  def finished(self) -> bool:
    return all(f.done() for f in self.host)

  def error(self) -> BaseException | None:
    return next((f.exception() for f in self.host if f.exception()), None)


class HostThread:
  """Runs host-metric work in one background thread, in submission order.

  A daemon thread: a metric that hangs cannot keep the process from exiting
  (concurrent.futures' executors join their threads at exit).
  """

  def __init__(self, name: str = 'host-metric'):
    self._queue = queue.SimpleQueue()
    self._name = name
    self._thread = None

  def submit(self, fn, *args) -> concurrent.futures.Future:
    if self._thread is None:
      self._thread = threading.Thread(target=self._run, name=self._name,
                                      daemon=True)
      self._thread.start()
    future = concurrent.futures.Future()
    self._queue.put((future, fn, args))
    return future

  def _run(self):
    while True:
      future, fn, args = self._queue.get()
      if not future.set_running_or_notify_cancel():
        continue  # Cancelled while queued.
      try:
        future.set_result(fn(*args))
      except BaseException as e:  # pylint: disable=broad-except
        future.set_exception(e)


def _done(fn, *args) -> concurrent.futures.Future:
  """Runs fn now; its outcome as a finished future."""
  future = concurrent.futures.Future()
  try:
    future.set_result(fn(*args))
  except Exception as e:  # pylint: disable=broad-except
    future.set_exception(e)
  return future


class HostMetricError(RuntimeError):
  """The host metric of an evaluation failed or did not finish in time."""


# States the chief broadcasts for the oldest evaluation in flight.
_RUNNING, _DONE, _FAILED = 0.0, 1.0, 2.0


class Evaluator:
  """Runs the eval loop over the whole eval set and computes the quality."""

  def __init__(self, *, eval_loop, make_iterator, steps: int, task,
               chief: bool, worker_sum: strategies.WorkerSum,
               expected_count: int = 0, steps_per_loop: int = 0,
               asynchronous: bool = False,
               host_timeout_seconds: float = 3600.0, host_metric=None,
               per_host: bool = True, worker_id: int = 0,
               progress_seconds: float = 10.0):
    """Args:
      eval_loop: eval_loop(iterator, num_steps) -> (sums, outputs) (step.py);
        built with `local_outputs` when the host metric is per host.
      make_iterator: () -> a fresh eval iterator.
      steps: eval steps covering every example once.
      task: the training.task.Task (quality, host_metric).
      chief: whether this worker computes host metrics.
      worker_sum: sums host values over the workers, in float64 so every
        worker sees exactly the chief's figure (distribution.strategy).
      expected_count: real eval examples, to report any dropped (0: skip).
      steps_per_loop: eval steps per device call (0: all in one); bounds the
        host memory that gathered outputs take.
      asynchronous: compute the host metric in a background thread while
        training goes on (tasks without a host metric are complete after
        the device loop either way).
      host_timeout_seconds: how long `results(wait=True)` waits for a host
        metric before it stops the run naming the evaluation (0: forever).
      host_metric: the task's host metric, if the caller made it already
        (None: task.host_metric()).
      per_host: score a PerHostMetric per host (each worker its own
        examples, the statistics summed); False: on the chief, as any host
        metric (the eval loop gathers every host's outputs).
      worker_id: this worker's index (0 the chief), for per-host metrics.
      progress_seconds: an evaluation of several device calls (steps_per_loop)
        prints the examples done and their rate when this long has passed
        since the last line (the chief; a beam-search eval takes minutes).
    """
    self.eval_loop = eval_loop
    self.make_iterator, self.steps, self.task = make_iterator, steps, task
    self.chief, self.expected_count = chief, expected_count
    self.steps_per_loop = steps_per_loop or steps
    self.host_metric = (host_metric if host_metric is not None
                        else task.host_metric())
    self.per_host = per_host and task_lib.is_per_host(self.host_metric)
    self._worker_sum = worker_sum if self.host_metric is not None else None
    self._workers = None  # Counted at the first per-host result.
    self._worker_id = worker_id
    self.asynchronous = asynchronous and self.host_metric is not None
    self.host_timeout_seconds = host_timeout_seconds
    self.progress_seconds = progress_seconds
    self._feeds = self.host_metric is not None and (chief or self.per_host)
    self._thread = (HostThread() if self.asynchronous and self._feeds
                    else None)
    self._pending = collections.deque()

  def compile(self) -> None:
    """Builds the eval loop with 0 steps (no eval happens)."""
    self.eval_loop(self.make_iterator(), tf.constant(0))
    if self._worker_sum:
      self._worker_sum(0.0, first_replica_only=True)

  @property
  def pending_steps(self) -> list[int]:
    """Steps of the evaluations started whose results are not out yet."""
    return [p.step for p in self._pending]

  def _host(self, fn, *args) -> concurrent.futures.Future:
    return self._thread.submit(fn, *args) if self._thread else _done(fn, *args)

  def start(self, step: int) -> None:
    """Evaluates the current weights (those of `step`) on the devices and
    hands the outputs to the host metric."""
    iterator = self.make_iterator()
    sums, host = None, []
    feeds = self._feeds
    if feeds:
      host.append(self._host(self.host_metric.reset))
    done = 0
    began = last = time.monotonic()
    while done < self.steps:
      n = min(self.steps_per_loop, self.steps - done)
      chunk_sums, outputs = self.eval_loop(iterator, tf.constant(n))
      chunk_sums = {k: float(v) for k, v in chunk_sums.items()}
      sums = chunk_sums if sums is None else {
          k: sums[k] + chunk_sums[k] for k in sums}
      now = time.monotonic()
      if (self.chief and done + n < self.steps and self.progress_seconds and
          now - last >= self.progress_seconds):
        last = now
        of = f'/{self.expected_count:,}' if self.expected_count else ''
        print(f'  evaluating at step {step}: {int(sums["examples"]):,}{of} '
              f'examples, {sums["examples"] / (now - began):.1f}/s',
              flush=True)
      if feeds:
        real = outputs_without_padding({k: v.numpy()
                                        for k, v in outputs.items()})
        if any(len(v) for v in real.values()):  # Skip all-padding chunks.
          host.append(self._host(self.host_metric.update, real))
      done += n
    seen = int(sums['examples'])
    if self.expected_count and seen != self.expected_count:
      logging.warning('Eval covered %d of %d examples: %d were dropped (see '
                      'the input warnings above).', seen, self.expected_count,
                      self.expected_count - seen)
    if feeds:
      host.append(self._host(self.host_metric.statistics if self.per_host
                             else self.host_metric.result))
    self._pending.append(_Pending(step=step, sums=sums, host=host))

  def results(self, *, wait: bool) -> list[EvalResult]:
    """The evaluations whose quality is known now, oldest first (with
    `wait`, every one started). A collective: every worker calls it at the
    same points and gets the same results.

    Raises:
      HostMetricError: a host metric raised or outlived host_timeout_seconds;
        names the task and the evaluation's step.
    """
    out = []
    while self._pending:
      head = self._pending[0]
      if self.host_metric is None:
        self._pending.popleft()
        out.append(EvalResult(head.step, self.task.quality(head.sums),
                              dict(head.sums)))
        continue
      state = self._state(head, wait)
      if state == _RUNNING:
        break
      self._pending.popleft()
      if state == _FAILED:
        self.cancel()
        raise self._failure(head)
      metrics, quality = dict(head.sums), 0.0
      if self.per_host:
        # Every worker scores the same statistics: the same quality.
        parts = gather_by_sum(self._worker_sum, self._worker_id,
                              self._workers, head.host[-1].result())
        metrics.update(self.host_metric.result_from(parts))
        quality = self.task.quality(metrics)
      else:
        if self.chief:
          metrics.update(head.host[-1].result())
          quality = self.task.quality(metrics)
        quality = self._worker_sum(quality, first_replica_only=True)
      out.append(EvalResult(head.step, quality, metrics))
    return out

  def _state(self, head: _Pending, wait: bool) -> float:
    """The oldest evaluation's state, the same on every worker: the
    chief's, or for a per-host metric every worker's (failed if any
    failed, done when all are)."""
    if not self.per_host:
      return self._worker_sum(self._own_state(head, wait),
                              first_replica_only=True)
    if self._workers is None:
      self._workers = round(self._worker_sum(1.0))
    # Running 0, done 1, failed more than all the workers' ones together.
    code = {_RUNNING: 0.0, _DONE: 1.0, _FAILED: self._workers + 1.0}
    head.own_state = self._own_state(head, wait)
    total = self._worker_sum(code[head.own_state])
    if total > self._workers:
      return _FAILED
    return _DONE if total == self._workers else _RUNNING

  def _own_state(self, head: _Pending, wait: bool) -> float:
    if not self._feeds:
      return _RUNNING
    if wait:
      concurrent.futures.wait(
          head.host, timeout=self.host_timeout_seconds or None)
    if not head.finished():
      return _FAILED if wait else _RUNNING
    return _FAILED if head.error() else _DONE

  def _failure(self, head: _Pending) -> HostMetricError:
    name = type(self.task).__name__
    if not self._feeds or (self.per_host and head.own_state != _FAILED):
      where = 'another worker' if self.per_host else 'the chief'
      return HostMetricError(
          f'The host metric of {name} failed on {where} for the evaluation '
          f'at step {head.step}; that worker\'s log names the error.')
    if not head.finished():
      return HostMetricError(
          f'The host metric of {name} did not finish the evaluation at step '
          f'{head.step} in {self.host_timeout_seconds:g} s '
          '(training.run_options.RunOptions.host_metric_timeout_seconds); '
          'stopped. Rerun to '
          'resume from the last checkpoint.')
    error = head.error()
    failure = HostMetricError(
        f'The host metric of {name} failed on the evaluation at step '
        f'{head.step}: {type(error).__name__}: {error}')
    failure.__cause__ = error
    return failure

  def cancel(self) -> list[int]:
    """Drops the evaluations in flight; returns their steps. A metric
    already running finishes in its thread, unread."""
    steps = self.pending_steps
    for pending in self._pending:
      for future in pending.host:
        future.cancel()
    self._pending.clear()
    return steps

  def evaluate(self) -> tuple[float, dict]:
    """One whole evaluation now: (quality, metrics)."""
    self.start(step=-1)
    result = self.results(wait=True)[-1]
    return result.quality, result.metrics


def gather_by_sum(worker_sum: strategies.WorkerSum, worker_id: int,
                  workers: int, value) -> list[np.ndarray]:
  """Every worker's 1-D `value` (any length), in worker order, on every
  worker: two sums, of the lengths and of a [workers, longest] matrix where
  each worker fills its own row (exact: one value and zeros per entry)."""
  value = np.asarray(value, np.float64).reshape(-1)
  lengths = np.zeros(workers)
  lengths[worker_id] = len(value)
  lengths = np.asarray(worker_sum(lengths)).astype(np.int64)
  width = max(int(lengths.max()), 1)
  rows = np.zeros([workers, width])
  rows[worker_id, :len(value)] = value
  rows = np.asarray(worker_sum(rows.reshape(-1))).reshape(workers, width)
  return [rows[w, :lengths[w]] for w in range(workers)]


def outputs_without_padding(outputs: dict) -> dict:
  """Host arrays of the real examples of gathered outputs (mask 1)."""
  arrays = {k: np.asarray(v) for k, v in outputs.items()}
  real = arrays.pop('mask') == 1
  return {k: v[real] for k, v in arrays.items()}
