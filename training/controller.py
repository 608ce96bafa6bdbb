"""The outer loop: restore, train N steps a call, evaluate, save.

Written in the spirit of Orbit's Controller: the device loops come from
training/step.py and training/evaluator.py; this file owns restore, the loop,
the evaluation schedule and the final save. Everything around a loop or an
evaluation (MLPerf log, summaries, progress line, NaN guard, target test,
periodic checkpoints, user hooks) is an action (training/events.py,
training/actions.py).
"""

import contextlib
import dataclasses
import math
import time
from typing import Callable, Sequence

import tensorflow as tf

from training import events as ev
from training import watchdog as watchdog_lib


@dataclasses.dataclass(frozen=True)
class RunSchedule:
  """What the run does, in global steps (gin: `train.train.schedule`).

  Attributes:
    global_batch_size: training examples per step over all replicas.
    steps_per_loop: steps per device call (one host round trip).
    eval_every_steps: steps between evaluations (multiple of steps_per_loop).
    train_steps: step budget; overrides train_epochs when > 0.
    train_epochs: step budget in epochs of the training data.
    eval_batch_size: eval examples per step over all replicas (0: the
      training batch).
    first_eval_step: no evaluation before this step (MLPerf BERT: the step of
      3M samples), except at the end of the budget.
    eval_offset_steps: evaluations fall at eval_offset_steps + k *
      eval_every_steps (Google's v0.7 TF2 `eval_offset`: its v3-32 ResNet
      evaluates after 3 epochs, then every 4); 0: at multiples.
    checkpoint_every_steps: steps between checkpoints (0: only at the end).
    max_checkpoints: checkpoints kept.
    stop_at_target: stop at the first evaluation reaching the target.
  """
  global_batch_size: int
  steps_per_loop: int
  eval_every_steps: int
  train_steps: int = 0
  train_epochs: float = 0.0
  eval_batch_size: int = 0
  first_eval_step: int = 0
  eval_offset_steps: int = 0
  checkpoint_every_steps: int = 0
  max_checkpoints: int = 3
  stop_at_target: bool = True

  def total_steps(self, steps_per_epoch: float) -> int:
    """The step budget; epochs need the data's steps_per_epoch."""
    if self.train_steps:
      return self.train_steps
    if not (self.train_epochs and steps_per_epoch):
      raise ValueError('Set `train_steps` (gin macro TRAIN_STEPS), or '
                       '`train_epochs` (TRAIN_EPOCHS) for data that knows its '
                       'epoch size.')
    return max(1, math.ceil(self.train_epochs * steps_per_epoch))

  @property
  def eval_batch(self) -> int:
    return self.eval_batch_size or self.global_batch_size

  def validate(self, total_steps: int) -> None:
    for name in ('global_batch_size', 'steps_per_loop', 'eval_every_steps'):
      if getattr(self, name) <= 0:
        raise ValueError(f'`{name}` must be positive, got {getattr(self, name)}.')
    if total_steps <= 0:
      raise ValueError(f'The step budget must be positive, got {total_steps}.')
    if self.eval_every_steps % self.steps_per_loop:
      raise ValueError(
          f'`eval_every_steps` ({self.eval_every_steps}) must be a multiple of '
          f'`steps_per_loop` ({self.steps_per_loop}).')
    if self.eval_offset_steps % self.steps_per_loop or not (
        0 <= self.eval_offset_steps < self.eval_every_steps):
      raise ValueError(
          f'`eval_offset_steps` ({self.eval_offset_steps}) must be a multiple '
          f'of `steps_per_loop` ({self.steps_per_loop}) below '
          f'`eval_every_steps` ({self.eval_every_steps}).')
    if self.checkpoint_every_steps % self.steps_per_loop:
      raise ValueError(
          f'`checkpoint_every_steps` ({self.checkpoint_every_steps}) must be a '
          f'multiple of `steps_per_loop` ({self.steps_per_loop}).')

  def evaluates_at(self, step: int, total_steps: int) -> bool:
    """Every eval_every_steps (from eval_offset_steps) from first_eval_step
    on, and at the end."""
    return step == total_steps or (
        step > 0 and (step - self.eval_offset_steps) % self.eval_every_steps
        == 0 and step >= self.first_eval_step)

  def next_eval_step(self, step: int, total_steps: int) -> int:
    """The end of the eval interval holding `step` (MLPerf block end)."""
    k = (step - self.eval_offset_steps) // self.eval_every_steps + 1
    return min(self.eval_offset_steps + k * self.eval_every_steps,
               total_steps)


@dataclasses.dataclass
class Result:
  status: str  # 'success' or 'aborted' (MLPerf run_stop statuses).
  step: int
  quality: float | None
  time_to_train: float  # seconds from run_start to run_stop.
  evals: list  # (step, epoch, quality, metrics) of each evaluation.
  preempted: bool = False  # Stopped by a signal, state saved: resume it.
  model: object = dataclasses.field(default=None, repr=False)


class Controller:
  """Runs the schedule of one run: restore, loops, evaluations, final save."""

  def __init__(self, *, train_loop: Callable, make_train_iterator: Callable,
               evaluator, step: tf.Variable, schedule: RunSchedule,
               total_steps: int, steps_per_epoch: float, checkpointer,
               actions: Sequence[ev.Action], learning_rate: Callable,
               explain_input_error: Callable = lambda e: None,
               check_start: Callable[[int], None] = lambda step: None,
               watchdog: watchdog_lib.Watchdog | None = None,
               generations=None):
    """Args:
      train_loop: train_loop(iterator, num_steps) -> mean loss (step.py).
      make_train_iterator: start_step -> the training iterator there.
      evaluator: an Evaluator (training/evaluator.py: compile(), start(step),
        results(wait) -> EvalResults in order, cancel(), asynchronous).
      step: the global step variable (advanced by the train loop).
      schedule: the run's schedule.
      total_steps: the step budget.
      steps_per_epoch: for the epoch of each evaluation (0: unknown).
      checkpointer: restore_latest() -> checkpoints.Restored, save(step),
        last_saved_step; for asynchronous evaluations hold(step) -> path
        (saved and kept out of rotation) and release(path).
      actions: called with every event, in order.
      learning_rate: the schedule, for the progress line.
      explain_input_error: an input error -> a message naming the bad input.
      check_start: called with the restored step; raises if the workers of
        a multi-worker run restored different steps.
      watchdog: names an evaluation that stalls (a read held by storage).
      generations: for a task whose model makes its own training data
        (training.task.Generations): `steps_per_generation` and
        `produce(step) -> dict`, which makes the data of the generation
        the weights of `step` start (on every worker; returns the MLPerf
        keys to average). The training input is made anew after it.
    """
    schedule.validate(total_steps)
    if generations and generations.steps_per_generation % (
        schedule.steps_per_loop):
      raise ValueError(
          f'`steps_per_generation` ({generations.steps_per_generation}) must '
          f'be a multiple of `steps_per_loop` ({schedule.steps_per_loop}).')
    self.generations = generations
    self.produced = {}  # What making the current generation's data reported.
    self.target_as_of = None  # EvalEnd.as_of of the result that met it.
    self.train_loop, self.evaluator = train_loop, evaluator
    self.make_train_iterator = make_train_iterator
    self.step, self.schedule, self.total_steps = step, schedule, total_steps
    self.steps_per_epoch = steps_per_epoch
    self.checkpointer, self.actions = checkpointer, list(actions)
    self.learning_rate = learning_rate
    self.explain_input_error = explain_input_error
    self.check_start = check_start
    self._watch = (watchdog or watchdog_lib.Watchdog(warn_after=0)).watch
    self.train_iterator = None
    self.resumed_from = None
    self.snapshots = {}  # Step -> checkpoint of an asynchronous evaluation.

  def _notify(self, event) -> list[ev.Decision]:
    return ev.notify(self.actions, event)

  def _explained(self, fn, *args):
    """Runs a loop; an input error comes back naming the file and record."""
    try:
      return fn(*args)
    except (tf.errors.InvalidArgumentError, tf.errors.DataLossError) as e:
      message = self.explain_input_error(e)
      if message:
        raise ValueError(message) from e
      raise

  def restore_and_compile(self) -> int:
    """Restores the latest checkpoint, positions the input, compiles both
    loops by running them with 0 steps (no state changes). Returns the step.
    """
    restored = self.checkpointer.restore_latest()
    for line in restored.skipped:
      print(f'skipped checkpoint {line}', flush=True)
    start = int(self.step.numpy())
    self.check_start(start)
    self.resumed_from = restored.path
    if restored.path:
      print(f'resumed from {restored.path} at step {start}', flush=True)
    if self.generations:  # The data the restored weights train on.
      self.produced = self.generations.produce(start)
    self.train_iterator = self.make_train_iterator(start)
    self.train_loop(self.train_iterator, tf.constant(0))
    self.evaluator.compile()
    return start

  def run(self) -> Result:
    """Trains to the target or the step budget, whichever comes first.

    Any exception notifies RunEnd with status 'aborted' before it
    propagates. The final state is saved whatever the outcome except an
    exception (a NaN loss keeps the last good checkpoint instead).
    """
    start = self.restore_and_compile()
    self._notify(ev.InitEnd(step=start, resumed_from=self.resumed_from))
    self._notify(ev.RunStart(step=start))
    run_start = time.time()
    if self.generations:
      self._notify(ev.GenerationStart(
          step=start, generation=self._generation(start) + 1,
          produced=self.produced))
    try:
      status, quality, evals, preempted = self._loop()
    except BaseException:
      self._drop_pending('the run stopped with an error')
      self._notify(ev.RunEnd(step=int(self.step.numpy()), status='aborted',
                             quality=None,
                             time_to_train=time.time() - run_start,
                             error=True))
      raise
    as_of = self.target_as_of if status == 'success' else None
    time_to_train = (as_of or time.time()) - run_start
    step = int(self.step.numpy())
    self._notify(ev.RunEnd(step=step, status=status, quality=quality,
                           time_to_train=time_to_train, as_of=as_of))
    if self.checkpointer.last_saved_step != step:
      self.checkpointer.save(step)
    return Result(status=status, step=step, quality=quality,
                  time_to_train=time_to_train, evals=evals,
                  preempted=preempted)

  def _loop(self):
    """The training loop; returns (status, last quality, evals, preempted)."""
    s, total = self.schedule, self.total_steps
    evals, quality, status = [], None, 'aborted'
    step = int(self.step.numpy())
    last_time, last_step = time.time(), step
    while step < total:
      self._notify(ev.LoopStart(step=step,
                                next_eval_step=s.next_eval_step(step, total)))
      loss = float(self._explained(
          self.train_loop, self.train_iterator,
          tf.constant(min(s.steps_per_loop, total - step))))
      step = int(self.step.numpy())
      now = time.time()
      examples_per_second = ((step - last_step) * s.global_batch_size /
                             max(now - last_time, 1e-9))
      last_time, last_step = now, step
      decisions = self._notify(ev.LoopEnd(
          step=step, total_steps=total, loss=loss,
          learning_rate=float(self.learning_rate(step)),
          examples_per_second=examples_per_second))
      stopping = any(d.stop for d in decisions)  # Preempted: no new eval.
      at_generation_end = bool(self.generations) and (
          step % self.generations.steps_per_generation == 0)
      if at_generation_end:
        self._notify(ev.GenerationEnd(step=step,
                                      generation=self._generation(step)))
      if s.evaluates_at(step, total) and not stopping:
        self._notify(ev.EvalStart(step=step))
        if self.evaluator.asynchronous:
          # Training moves on before the result: keep these weights.
          self.snapshots[step] = self.checkpointer.hold(step)
        with self._watch(f'the evaluation at step {step}'):
          self._explained(self.evaluator.start, step)
      wait = step >= total and not stopping
      waiting = (self._watch(f'the evaluations pending at step {step}')
                 if wait else contextlib.nullcontext())
      with waiting:
        results = self.evaluator.results(wait=wait)
      for i, result in enumerate(results):
        quality = result.quality
        epoch = (round(result.step / self.steps_per_epoch, 4)
                 if self.steps_per_epoch else None)
        evals.append((result.step, epoch, quality, result.metrics))
        decided = self._notify(ev.EvalEnd(
            step=result.step, quality=quality, metrics=result.metrics,
            checkpoint=self.snapshots.get(result.step), known_at_step=step,
            as_of=result.as_of))
        if any(d.status == 'success' for d in decided):
          self.target_as_of = result.as_of
        # Its snapshot is kept (met the target) or released.
        self._release_snapshot(result.step, decided)
        decisions += decided
        if any(d.stop for d in decided):
          unread = [r.step for r in results[i + 1:]]
          break
      else:
        unread = []
      for d in decisions:
        status = d.status or status
      if any(d.stop for d in decisions):
        self._drop_pending(f'the run stopped at step {step}', unread)
        return status, quality, evals, any(d.preempted for d in decisions)
      if at_generation_end and step < total:
        self._next_generation(step)
      # Loop timing restarts after evaluations and saves.
      last_time = time.time()
    return status, quality, evals, False

  def _generation(self, step: int) -> int:
    """The model the weights of `step` are (generation boundaries: whole
    generations trained so far)."""
    return step // self.generations.steps_per_generation

  def _next_generation(self, step: int) -> None:
    """Saves the generation just trained (a killed run resumes here), has
    it make the next generation's data, and reads the input anew."""
    if self.checkpointer.last_saved_step != step:
      self.checkpointer.save(step)
    self.produced = self.generations.produce(step)
    self.train_iterator = self.make_train_iterator(step)
    self._notify(ev.GenerationStart(step=step,
                                    generation=self._generation(step) + 1,
                                    produced=self.produced))

  def _release_snapshot(self, step: int, decisions) -> None:
    """An asynchronous evaluation's weights stay on disk if they met the
    target; otherwise they return to the usual rotation."""
    path = self.snapshots.pop(step, None)
    if path is None:
      return
    if any(d.status == 'success' for d in decisions):
      print(f'the weights that met the target: {path}', flush=True)
    else:
      self.checkpointer.release(path)

  def _drop_pending(self, why: str, unread=()) -> None:
    steps = [*unread, *self.evaluator.cancel()]
    if steps:
      print(f'dropped the evaluations still computing (steps '
            f'{", ".join(map(str, steps))}): {why}.', flush=True)
    for step in steps:
      self._release_snapshot(step, ())
