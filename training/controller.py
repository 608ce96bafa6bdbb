"""The outer loop: train N steps a call, evaluate, checkpoint, stop at target.

Written in the spirit of Orbit's Controller: the device loops come from
training/step.py; this file owns the schedule, the MLPerf events, summaries,
checkpoints and the progress line.
"""

import dataclasses
import math
import time

from absl import logging
from mlperf_logging.mllog import constants as mlc
import tensorflow as tf


@dataclasses.dataclass
class Schedule:
  """When things happen, in global steps."""
  total_steps: int
  steps_per_loop: int
  eval_every_steps: int
  checkpoint_every_steps: int
  steps_per_epoch_num: float  # Steps per unit of MLPerf's epoch_num.
  first_eval_step: int = 0  # No eval before this step (MLPerf BERT: 3M samples).

  def validate(self):
    for name in ('total_steps', 'steps_per_loop', 'eval_every_steps'):
      if getattr(self, name) <= 0:
        raise ValueError(f'`{name}` must be positive, got {getattr(self, name)}.')
    if self.eval_every_steps % self.steps_per_loop:
      raise ValueError(
          f'`eval_every_steps` ({self.eval_every_steps}) must be a multiple of '
          f'`steps_per_loop` ({self.steps_per_loop}).')
    if self.checkpoint_every_steps % self.steps_per_loop:
      raise ValueError(
          f'`checkpoint_every_steps` ({self.checkpoint_every_steps}) must be a '
          f'multiple of `steps_per_loop` ({self.steps_per_loop}).')

  def epoch(self, step: int) -> float:
    return round(step / self.steps_per_epoch_num, 4)

  def evaluates_at(self, step: int) -> bool:
    """Every eval_every_steps from first_eval_step on, and at the end."""
    return step == self.total_steps or (step % self.eval_every_steps == 0 and
                                        step >= self.first_eval_step)


@dataclasses.dataclass
class Result:
  status: str  # 'success' or 'aborted' (MLPerf run_stop statuses).
  step: int
  quality: float | None
  time_to_train: float  # seconds from run_start to run_stop.
  evals: list  # (step, epoch, quality, metric sums) of each evaluation.
  model: object = dataclasses.field(default=None, repr=False)


def format_eta(seconds: float) -> str:
  if not math.isfinite(seconds):
    return '?'
  seconds = int(seconds)
  return f'{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}'


class Controller:
  """Runs the training schedule of one run."""

  def __init__(self, *, train_loop, eval_loop, train_iterator, make_eval_iterator,
               eval_steps: int, step: tf.Variable, schedule: Schedule,
               global_batch_size: int, learning_rate, quality, target: float,
               stop_at_target: bool, checkpointer, mlperf, summary_writers,
               explain_input_error, expected_eval_count: int = 0):
    self.train_loop, self.eval_loop = train_loop, eval_loop
    self.train_iterator = train_iterator
    self.make_eval_iterator = make_eval_iterator
    self.eval_steps, self.step, self.schedule = eval_steps, step, schedule
    self.global_batch_size = global_batch_size
    self.learning_rate, self.quality = learning_rate, quality
    self.target, self.stop_at_target = target, stop_at_target
    self.checkpointer, self.mlperf = checkpointer, mlperf
    self.train_writer, self.eval_writer = summary_writers
    self.explain_input_error = explain_input_error
    self.expected_eval_count = expected_eval_count

  def compile(self):
    """Builds and runs both loops with 0 steps: compiled, no state changed."""
    self.train_loop(self.train_iterator, tf.constant(0))
    self.eval_loop(self.make_eval_iterator(), tf.constant(0))

  def _explained(self, loop, *args):
    """Runs a loop; an input error comes back naming the file and record."""
    try:
      return loop(*args)
    except tf.errors.InvalidArgumentError as e:
      message = self.explain_input_error(e)
      if message:
        raise ValueError(message) from e
      raise

  def _run_train_loop(self, num_steps: int) -> float:
    return float(self._explained(self.train_loop, self.train_iterator,
                                 tf.constant(num_steps)))

  def evaluate(self) -> dict:
    sums = self._explained(self.eval_loop, self.make_eval_iterator(),
                           tf.constant(self.eval_steps))
    sums = {k: float(v) for k, v in sums.items()}
    seen = int(sums['examples'])
    if self.expected_eval_count and seen != self.expected_eval_count:
      logging.warning('Eval covered %d of %d examples: %d were dropped (see '
                      'the input warnings above).', seen,
                      self.expected_eval_count, self.expected_eval_count - seen)
    return sums

  def run(self) -> Result:
    """Trains to the target or the step budget, whichever comes first.

    Any exception ends the MLPerf log with run_stop status 'aborted' before it
    propagates. The final state is checkpointed whatever the outcome except
    a NaN loss, which keeps the last good checkpoint instead.
    """
    self.mlperf.start(mlc.RUN_START)
    run_start = time.time()
    try:
      status, quality, evals, saved_step = self._loop()
    except BaseException:
      self.mlperf.end(mlc.RUN_STOP, metadata={'status': 'aborted'})
      raise
    self.mlperf.end(mlc.RUN_STOP, metadata={'status': status})
    time_to_train = time.time() - run_start
    step = int(self.step.numpy())
    if step != saved_step:
      self.checkpointer.save(step)
    return Result(status=status, step=step, quality=quality,
                  time_to_train=time_to_train, evals=evals)

  def _loop(self):
    """The training loop; returns (status, last quality, evals, saved step)."""
    s, mlperf = self.schedule, self.mlperf
    start = int(self.step.numpy())
    evals, quality, status, saved_step = [], None, 'aborted', None
    block_start_step = start
    mlperf.start(mlc.BLOCK_START, metadata=self._block_metadata(start))
    last_time, last_step = time.time(), start
    while int(self.step.numpy()) < s.total_steps:
      step = int(self.step.numpy())
      loss = self._run_train_loop(min(s.steps_per_loop, s.total_steps - step))
      step = int(self.step.numpy())
      now = time.time()
      examples_per_second = ((step - last_step) * self.global_batch_size /
                             max(now - last_time, 1e-9))
      last_time, last_step = now, step
      if not math.isfinite(loss):
        latest = self.checkpointer.latest()
        raise FloatingPointError(
            f'The training loss became {loss} in the loop ending at step '
            f'{step}. Stopped; the last good checkpoint is kept '
            f'({latest or "none saved yet"}). Lower the learning rate or '
            'lengthen the warmup, then rerun to resume from it.')
      self._report(step, loss, examples_per_second)

      if s.evaluates_at(step):
        mlperf.end(mlc.BLOCK_STOP,
                   metadata=self._block_metadata(block_start_step))
        quality, sums = self._evaluate_logged(step)
        evals.append((step, s.epoch(step), quality, sums))
        # MLPerf: success needs the target and the minimum samples trained.
        if quality >= self.target and step >= s.first_eval_step:
          status = 'success'
          if self.stop_at_target:
            break
        if step < s.total_steps:
          block_start_step = step
          mlperf.start(mlc.BLOCK_START, metadata=self._block_metadata(step))
      if s.checkpoint_every_steps and step % s.checkpoint_every_steps == 0:
        self.checkpointer.save(step)
        saved_step = step
    return status, quality, evals, saved_step

  def _report(self, step: int, loss: float, examples_per_second: float):
    """The progress line and the training scalars of one loop."""
    lr = float(self.learning_rate(step))
    eta = (self.schedule.total_steps - step) / max(
        examples_per_second / self.global_batch_size, 1e-9)
    print(f'step {step}/{self.schedule.total_steps}  loss {loss:.4f}  '
          f'lr {lr:.5g}  {examples_per_second:.1f} examples/s  '
          f'ETA {format_eta(eta)}', flush=True)
    with self.train_writer.as_default(step=step):
      tf.summary.scalar('loss', loss)
      tf.summary.scalar('learning_rate', lr)
      tf.summary.scalar('examples_per_second', examples_per_second)

  def _evaluate_logged(self, step: int):
    """One evaluation with its MLPerf events, progress line and summary."""
    epoch = self.schedule.epoch(step)
    self.mlperf.start(mlc.EVAL_START, metadata={'epoch_num': epoch})
    sums = self.evaluate()
    quality = self.quality(sums)
    self.mlperf.event(mlc.EVAL_ACCURACY, quality, metadata={'epoch_num': epoch})
    self.mlperf.end(mlc.EVAL_STOP, metadata={'epoch_num': epoch})
    print(f'eval at step {step} (epoch {epoch}): quality {quality:.4f} '
          f'(target {self.target})', flush=True)
    with self.eval_writer.as_default(step=step):
      tf.summary.scalar('quality', quality)
    return quality, sums

  def _block_metadata(self, first_step: int) -> dict:
    s = self.schedule
    last = min(first_step + s.eval_every_steps - first_step % s.eval_every_steps,
               s.total_steps)
    return {'first_epoch_num': s.epoch(first_step),
            'epoch_count': max(s.epoch(last) - s.epoch(first_step), 1e-4)}
