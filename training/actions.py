"""The run's actions: plain callables `(event) -> Decision | None`.

The runtime always runs, in this order: the NaN guard, the progress line,
TensorBoard scalars, the target test, the MLPerf log
(training/mlperf_log.py) and the periodic checkpoint saver. Users add more
from gin without touching the Controller:

  train.train.actions = [@training.actions.KeepBestCheckpoint,
                         @training.actions.ExportSavedModel]

Each entry there is a factory the runtime calls with `context=RunContext(...)`
(gin supplies the other arguments), so an action can reach the model and the
run's folder.
"""

import dataclasses
import json
import math
import os
import time

import tensorflow as tf

from training import checkpoints
from training import events as ev
from training import export
from training import faults
from training import run_lock
from training.task import reaches
from training import time_to_accuracy
from training import uploads as uploads_lib


@dataclasses.dataclass(frozen=True)
class RunContext:
  """What a user action may use of the run."""
  model_dir: str
  model: object
  task: object
  chief: bool
  worker_id: int
  # A remote model_dir's background writer (training/uploads.py) and a
  # local folder for the action's own staging; None: write directly.
  uploads: uploads_lib.Uploader | None = None
  staging: str | None = None


def format_eta(seconds: float) -> str:
  if not math.isfinite(seconds):
    return '?'
  seconds = int(seconds)
  return f'{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}'


class NanGuard:
  """Stops the run at a non-finite loss, before anything saves that state."""

  def __init__(self, checkpointer):
    self.checkpointer = checkpointer

  def __call__(self, event):
    if isinstance(event, ev.LoopEnd) and not math.isfinite(event.loss):
      latest = self.checkpointer.latest()
      raise FloatingPointError(
          f'The training loss became {event.loss} in the loop ending at step '
          f'{event.step}. Stopped; the last good checkpoint is kept '
          f'({latest or "none saved yet"}). Lower the learning rate or '
          'lengthen the warmup, then rerun to resume from it.')


class ProgressLine:
  """Prints a line per loop (step, loss, lr, throughput, time to the step
  budget), one as each evaluation starts and one with its result."""

  def __init__(self, *, global_batch_size: int, target: float,
               quality_name: str, stop_at_target: bool = True, detail=None):
    """Args:
      detail: an evaluation's metrics -> words printed after its quality
        (a task's `quality_detail`), or None.
    """
    self.global_batch_size, self.target = global_batch_size, target
    self.quality_name = quality_name
    self.stop_at_target = stop_at_target
    self.detail = detail

  def __call__(self, event):
    if isinstance(event, ev.RunStart):
      until = (f'until {self.quality_name} {self.target:g} or ' if
               self.stop_at_target else 'to ')
      print(f'training from step {event.step} {until}the step budget; ETA '
            'is the time to the budget\'s last step.', flush=True)
    elif isinstance(event, ev.LoopEnd):
      steps_per_second = max(event.examples_per_second /
                             self.global_batch_size, 1e-9)
      eta = (event.total_steps - event.step) / steps_per_second
      print(f'step {event.step}/{event.total_steps}  loss {event.loss:.4f}  '
            f'lr {event.learning_rate:.5g}  '
            f'{event.examples_per_second:.1f} examples/s  '
            f'ETA {format_eta(eta)}', flush=True)
    elif isinstance(event, ev.EvalStart):
      print(f'evaluating at step {event.step} ...', flush=True)
    elif isinstance(event, ev.EvalEnd):
      late = (f', known at step {event.known_at_step}'
              if event.known_at_step not in (None, event.step) else '')
      detail = f'; {self.detail(event.metrics)}' if self.detail else ''
      print(f'eval at step {event.step}: quality {event.quality:.4f} '
            f'(target {self.target}{late}){detail}', flush=True)
    elif isinstance(event, ev.RunEnd) and event.error:
      # Not a quality result: the error's own line follows.
      print(f'run stopped by an error at step {event.step}, after '
            f'{event.time_to_train:.1f} s (below).', flush=True)
    elif isinstance(event, ev.RunEnd):
      quality = event.quality if event.quality is not None else float('nan')
      print(f'run {event.status}: {self.quality_name} {quality:.4f} at step '
            f'{event.step}; time to train {event.time_to_train:.1f} s',
            flush=True)


class Summaries:
  """TensorBoard: per loop the training loss, learning rate, examples/s,
  steps/s, step time and epoch; per evaluation the task's quality under
  its own tag (`top1_accuracy`, `mlm_accuracy`, `bleu`, `mAP`, `auc`), the
  eval loss where the task sums one, and the epoch.

  Writes `<model_dir>/train` and `<model_dir>/eval` on the chief only, and
  the gin config as text at the start (gin's aliased module names, e.g.
  `training7`, replaced by the real ones: core/config.py).
  """

  SYNC_SECONDS = 60.0  # With a local copy: uploads between evaluations.

  def __init__(self, *, model_dir: str, chief: bool, config_text: str = '',
               quality_tag: str = 'quality', global_batch_size: int = 0,
               steps_per_epoch: float = 0.0,
               uploads: uploads_lib.Uploader | None = None,
               staging: str | None = None):
    """Args (besides the obvious):
      uploads, staging: with a remote model_dir the event files are
        written in `staging` and copied to model_dir by `uploads` at each
        evaluation, at the end and at most every SYNC_SECONDS between.
    """
    local = staging if uploads else model_dir
    if chief:
      self.train_writer = tf.summary.create_file_writer(
          os.path.join(local, 'train'))
      self.eval_writer = tf.summary.create_file_writer(
          os.path.join(local, 'eval'))
    else:
      self.train_writer = self.eval_writer = tf.summary.create_noop_writer()
    self._syncs = []
    if chief and uploads:
      files = uploads_lib.Files(uploads)
      self._syncs = [files.mirror(os.path.join(local, name),
                                  os.path.join(model_dir, name))
                     for name in ('train', 'eval')]
    self._synced = time.monotonic()
    self.config_text, self.quality_tag = config_text, quality_tag
    self.global_batch_size = global_batch_size
    self.steps_per_epoch = steps_per_epoch

  def _epoch(self, step: int) -> None:
    if self.steps_per_epoch:
      tf.summary.scalar('epoch', step / self.steps_per_epoch)

  def __call__(self, event):
    if isinstance(event, ev.RunStart) and self.config_text:
      with self.train_writer.as_default(step=event.step):
        tf.summary.text('gin/config', '    ' + self.config_text.replace(
            '\n', '\n    '))
    elif isinstance(event, ev.LoopEnd):
      with self.train_writer.as_default(step=event.step):
        tf.summary.scalar('loss', event.loss)
        tf.summary.scalar('learning_rate', event.learning_rate)
        tf.summary.scalar('examples_per_second', event.examples_per_second)
        if self.global_batch_size and event.examples_per_second > 0:
          steps_per_second = event.examples_per_second / self.global_batch_size
          tf.summary.scalar('steps_per_second', steps_per_second)
          tf.summary.scalar('step_time_ms', 1000.0 / steps_per_second)
        self._epoch(event.step)
      if time.monotonic() - self._synced >= self.SYNC_SECONDS:
        self._sync()
    elif isinstance(event, ev.EvalEnd):
      with self.eval_writer.as_default(step=event.step):
        tf.summary.scalar(self.quality_tag, event.quality)
        metrics = event.metrics or {}
        if 'loss' in metrics and float(metrics.get('examples', 0)) > 0:
          tf.summary.scalar('loss', float(metrics['loss']) /
                            float(metrics['examples']))
        self._epoch(event.step)
      self._sync()
    elif isinstance(event, ev.RunEnd):
      self._sync()

  def _sync(self) -> None:
    self.train_writer.flush()
    self.eval_writer.flush()
    for sync in self._syncs:
      sync()
    self._synced = time.monotonic()


class TargetTest:
  """Marks the run a success at the first evaluation reaching the target.

  MLPerf: success also needs the minimum samples (first_eval_step) trained.
  Stops the run there when stop_at_target.
  """

  def __init__(self, *, target: float, higher_is_better: bool,
               first_eval_step: int = 0, stop_at_target: bool = True):
    self.target, self.higher_is_better = target, higher_is_better
    self.first_eval_step, self.stop_at_target = first_eval_step, stop_at_target

  def __call__(self, event):
    if (isinstance(event, ev.EvalEnd) and
        reaches(event.quality, self.target, self.higher_is_better) and
        event.step >= self.first_eval_step):
      return ev.Decision(status='success', stop=self.stop_at_target)
    return None


class ConfigFile:
  """Writes a record of the run (`<model_dir>/config.gin`, `source.json`)
  once it has started (InitEnd): a start that fails leaves the earlier file
  as it was."""

  def __init__(self, *, path: str | None, text: str,
               uploads: uploads_lib.Uploader | None = None):
    """Args:
      path: the file, or None on non-chief workers.
      text: the file's text.
      uploads: writes a remote path in the background.
    """
    self.path, self.text = path, text
    self.files = uploads_lib.Files(uploads)

  def __call__(self, event):
    if isinstance(event, ev.InitEnd) and self.path:
      self.files.put_text(self.path, self.text)


class LockGuard:
  """Stops every worker at the first loop end after the chief lost
  model_dir's lock (training/run_lock.py) to another run, before this run
  writes over that run's files."""

  def __init__(self, *, lock, worker_sum, on_lost):
    """Args:
      lock: the chief's lock (None on other workers).
      worker_sum: sums a host value over the workers
        (distribution.strategy.WorkerSum).
      on_lost: called first (the MLPerf log stops writing).
    """
    self.lock, self.worker_sum, self.on_lost = lock, worker_sum, on_lost

  def __call__(self, event):
    if not isinstance(event, ev.LoopEnd):
      return
    lost = self.lock.lost if self.lock else None
    if self.worker_sum(1.0 if lost else 0.0) > 0:
      self.on_lost()
      raise run_lock.ModelDirInUse(
          f'Stopped at step {event.step} without saving: '
          f'{lost or "the chief lost the lock of model_dir"}.')


class StorageGuard:
  """Stops every worker at the first loop end after a write of the run's
  files stayed undone past the outage budget (training/uploads.py), with
  the chief's line naming it; nothing to do with a local model_dir."""

  def __init__(self, *, uploads, worker_sum):
    """Args:
      uploads: this worker's Uploader (None: a local model_dir, the same
        on every worker).
      worker_sum: sums a host value over the workers.
    """
    self.uploads, self.worker_sum = uploads, worker_sum

  def __call__(self, event):
    if not (isinstance(event, ev.LoopEnd) and self.uploads):
      return
    fault = None
    try:
      self.uploads.check()
    except Exception as e:  # pylint: disable=broad-except
      fault = e
    if self.worker_sum(1.0 if fault else 0.0) > 0:
      if fault:
        raise fault
      raise faults.StorageUnavailable(
          f'Stopped at step {event.step} with the chief, whose writes to '
          'storage stayed undone past the outage budget (its log names '
          'them).')


class Profiler:
  """Traces whole device loops, from the first one starting at or after
  `first_step` to the one ending at or past `last_step`, into
  `<model_dir>/plugins/profile/`, which TensorBoard's profile plugin opens
  (`tensorboard --logdir <model_dir>`). Every worker traces its own host."""

  def __init__(self, *, logdir: str, first_step: int, last_step: int):
    if not 0 <= first_step <= last_step:
      raise ValueError(f'`profile_steps` ({first_step}, {last_step}) must be '
                       '(first, last) with 0 <= first <= last.')
    self.logdir, self.first, self.last = logdir, first_step, last_step
    self.tracing, self.done = False, False

  def _stop(self):
    if self.tracing:
      tf.profiler.experimental.stop()
      self.tracing, self.done = False, True
      print(f'profile written to {self.logdir}/plugins/profile', flush=True)

  def __call__(self, event):
    if (isinstance(event, ev.LoopStart) and not (self.tracing or self.done)
        and self.first <= event.step <= self.last):
      tf.profiler.experimental.start(self.logdir)
      self.tracing = True
    elif isinstance(event, ev.LoopEnd) and event.step >= self.last:
      self._stop()
    elif isinstance(event, ev.RunEnd):
      self._stop()


class TimeToAccuracyPlot:
  """At the end of the run, draws `<model_dir>/time_to_accuracy.png` from
  its mlperf.log (training/time_to_accuracy.py). Never fails the run: a
  plot that cannot be drawn is a warning."""

  def __init__(self, *, log_path: str | None, png_path: str,
               uploads: uploads_lib.Uploader | None = None):
    """Args:
      log_path: the run's mlperf.log, or None on non-chief workers.
      png_path: where the plot goes.
      uploads: with a remote model_dir, the plot is drawn on the upload
        thread after the log's last line landed.
    """
    self.log_path, self.png_path = log_path, png_path
    self.uploads = uploads

  def __call__(self, event):
    if not (isinstance(event, ev.RunEnd) and self.log_path):
      return
    if self.uploads:
      self.uploads.submit(f'the plot {self.png_path}', self._plot)
    else:
      self._plot()

  def _plot(self) -> None:
    try:
      time_to_accuracy.plot([time_to_accuracy.read_log(self.log_path)],
                            self.png_path)
    except Exception as e:  # pylint: disable=broad-except
      print(f'warning: no time-to-accuracy plot ({type(e).__name__}: {e})',
            flush=True)


class CheckpointSaver:
  """Saves every `every_steps` steps, at the end of a loop (0: never)."""

  def __init__(self, checkpointer, every_steps: int):
    self.checkpointer, self.every_steps = checkpointer, every_steps

  def __call__(self, event):
    if (isinstance(event, ev.LoopEnd) and self.every_steps and
        event.step % self.every_steps == 0):
      self.checkpointer.save(event.step)


class KeepBestCheckpoint:
  """Keeps the model weights of the best evaluation so far.

  Writes `<model_dir>/best/` (a checkpoint of the model) and
  `<model_dir>/best/best.json` ({"step", "quality"}), in the task's direction
  (higher or lower is better). Every worker takes part in the save; only
  the chief writes into model_dir.
  """

  def __init__(self, *, context: RunContext, folder: str = 'best'):
    self.higher_is_better = context.task.higher_is_better
    self.best = None
    self.checkpointer = checkpoints.Checkpointer(
        model_dir=context.model_dir, chief=context.chief,
        worker_id=context.worker_id, max_to_keep=1, folder=folder,
        uploads=context.uploads, resumable=False,
        staging=(os.path.join(context.staging, folder) if context.staging
                 else None),
        model=context.model)
    self.files = uploads_lib.Files(context.uploads)
    self.chief = context.chief
    self.record = os.path.join(context.model_dir, folder, 'best.json')
    if tf.io.gfile.exists(self.record):  # A resumed run keeps its best.
      with tf.io.gfile.GFile(self.record) as f:
        self.best = json.load(f)['quality']

  def __call__(self, event):
    if not isinstance(event, ev.EvalEnd):
      return
    better = self.best is None or (
        event.quality > self.best if self.higher_is_better else
        event.quality < self.best)
    if not better:
      return
    self.best = event.quality
    # An asynchronous evaluation's weights are in its checkpoint; the
    # model has moved on.
    path = (self.checkpointer.adopt(event.checkpoint, event.step)
            if event.checkpoint else self.checkpointer.save(event.step))
    if self.chief:
      self.files.put_text(self.record, json.dumps({
          'step': event.step, 'quality': event.quality, 'checkpoint': path}))


class ExportSavedModel:
  """At the end of the run, exports the task's serving signature.

  Writes `<model_dir>/<folder>` on the chief (the same SavedModel
  tools/export_savedmodel.py writes from a checkpoint).
  """

  def __init__(self, *, context: RunContext, folder: str = 'export'):
    self.context, self.folder = context, folder

  def __call__(self, event):
    if isinstance(event, ev.RunEnd) and self.context.chief:
      export.save_serving(self.context.model, self.context.task,
                          os.path.join(self.context.model_dir, self.folder))
