"""MLPerf compliance logging (`:::MLLOG` lines) as one action of the run.

`MlperfLog` receives the run's events (training/events.py) and writes
`<model_dir>/mlperf.log` through `mlperf_logging.mllog`: submission info and
init_start at InitStart; the hyper-parameters and init_stop at InitEnd;
run_start; block_start/stop around the training between evaluations;
eval_start, eval_accuracy and eval_stop; run_stop with its status. Only the
chief writes.

Each `mlperf.log` is one run's attempt, so the compliance checker reads it
without duplicate keys: lines are held in memory until the run has started
(InitEnd), so a start that fails writes nothing; then an older `mlperf.log`
is renamed `mlperf.log.N` (1 the first attempt, 2 the next, ...) and the new
file begins. A resumed attempt logs `resumed_from_checkpoint` (the path, with
the step in its metadata): it is not a compliant timed run.
"""

import dataclasses
import logging

from mlperf_logging.mllog import constants as mlc
from mlperf_logging.mllog import mllog
import tensorflow as tf

from training import events as ev
from training import time_to_accuracy
from training import uploads as uploads_lib


@dataclasses.dataclass(frozen=True)
class Submission:
  """MLPerf submission_* keys (gin: `train.train.submission`).

  Attributes:
    org: submission_org.
    platform: submission_platform (set by the CPU/GPU hardware gin files;
      on a TPU always the slice, tpu-<ACCELERATOR>: train.py sets it).
    division: 'closed' or 'open'.
    status: 'cloud', 'onprem', 'preview' or 'research'.
  """
  org: str = 'reference'
  platform: str = 'cpu'
  division: str = 'closed'
  status: str = 'research'


RESUMED_FROM_CHECKPOINT = 'resumed_from_checkpoint'


@dataclasses.dataclass(frozen=True)
class Logged:
  """A hyper-parameter value with the metadata its key requires (e.g. the
  Transformer's max_sequence_length carries {'method': 'discard'})."""
  value: object
  metadata: dict


def rotate(path: str) -> str | None:
  """Renames an existing `path` to `path.N`, N one more than any taken."""
  if not tf.io.gfile.exists(path):
    return None
  taken = [name[len(path) + 1:] for name in tf.io.gfile.glob(path + '.*')]
  n = 1 + max([int(t) for t in taken if t.isdigit()], default=0)
  tf.io.gfile.rename(path, f'{path}.{n}')
  return f'{path}.{n}'


class _RunLogHandler(logging.Handler):
  """Holds lines until `begin()`, then writes a fresh file, flushed per
  line; with uploads (a remote model_dir) the whole text so far is
  rewritten from memory in the background, so storage never holds a part
  of a line and an outage never stops the run."""

  def __init__(self, path: str,
               uploads: uploads_lib.Uploader | None = None):
    super().__init__()
    self.path, self.held, self.file = path, [], None
    self.files = uploads_lib.Files(uploads) if uploads else None
    self.lines = None  # With uploads: every line since begin().

  def emit(self, record):
    line = self.format(record) + '\n'
    if self.lines is not None:
      self.lines.append(line)
      self.files.put_text(self.path, lambda: ''.join(self.lines))
    elif self.file is None:
      self.held.append(line)
    else:
      self.file.write(line)
      self.file.flush()

  def begin(self) -> str | None:
    """Rotates an older log away and writes the held lines; returns where
    the older log went (with uploads: the upload thread says it)."""
    if self.files:
      def rotated():
        older = rotate(self.path)
        if older:
          print(f'the earlier mlperf.log is now {older}', flush=True)
      self.files.uploads.submit(f'the rotation of {self.path}', rotated)
      self.lines, self.held = self.held, []
      self.files.put_text(self.path, lambda: ''.join(self.lines))
      return None
    older = rotate(self.path)
    self.file = tf.io.gfile.GFile(self.path, 'w')
    self.file.write(''.join(self.held))
    self.file.flush()
    self.held = []
    return older

  def close(self):
    if self.file is not None:
      self.file.close()
      self.file = None
    self.held = []
    super().close()


class MlperfLogger:
  """Writes MLPerf events; a no-op on non-chief workers."""

  def __init__(self, *, path: str | None,
               uploads: uploads_lib.Uploader | None = None):
    """Args:
      path: the log file, or None to log nothing (non-chief workers).
      uploads: a training/uploads.Uploader writing a remote path.
    """
    self._logger = logging.getLogger(f'mlperf.{id(self)}')
    self._logger.propagate = False
    self._logger.setLevel(logging.INFO)
    self._handler = _RunLogHandler(path, uploads) if path else None
    self._logger.addHandler(self._handler or logging.NullHandler())
    self._mllog = mllog.MLLogger(logger=self._logger, default_stack_offset=2)

  def event(self, key: str, value=None, metadata: dict | None = None,
            time_ms: float | None = None):
    self._mllog.event(key=key, value=value, metadata=metadata,
                      time_ms=time_ms)

  def start(self, key: str, value=None, metadata: dict | None = None):
    self._mllog.start(key=key, value=value, metadata=metadata)

  def end(self, key: str, value=None, metadata: dict | None = None,
          time_ms: float | None = None):
    self._mllog.end(key=key, value=value, metadata=metadata, time_ms=time_ms)

  def begin(self) -> str | None:
    """Starts the file (held lines first); returns where an older log went."""
    return self._handler.begin() if self._handler else None

  def close(self):
    """Ends the file; later events are dropped. Never begun: nothing written."""
    if self._handler:
      self._logger.removeHandler(self._handler)
      self._handler.close()
      self._handler = None


class MlperfLog:
  """The MLPerf log of one run, driven by the run's events."""

  def __init__(self, *, path: str | None, benchmark: str,
               submission: Submission, epoch_num,
               target: float | dict | None = None,
               uploads: uploads_lib.Uploader | None = None,
               accuracy=None):
    """Args:
      path: the log file, or None on non-chief workers.
      benchmark: submission_benchmark ('resnet', 'bert').
      submission: the submission_* values.
      epoch_num: step -> MLPerf epoch_num (the task's mlperf_epoch_num with
        the global batch bound).
      target: the run's quality target, logged as `quality_target` (not an
        MLPerf key; the checker ignores it) so plots and scores read it; a
        dict for a benchmark of several targets (Mask R-CNN's {"BBOX",
        "SEGM"}).
      uploads: a training/uploads.Uploader for a remote path.
      accuracy: an evaluation's metrics -> the `eval_accuracy` value (a
        task's `mlperf_eval_accuracy`); None logs the quality.

    Set `hyperparameters` (see `hyperparameters()` below) before InitEnd:
    they are logged before init_stop.
    """
    self.logger = MlperfLogger(path=path, uploads=uploads)
    self.benchmark, self.submission = benchmark, submission
    self.epoch, self.target = epoch_num, target
    self.accuracy = accuracy
    self.hyperparameters = {}
    self.block_open = None  # The open block's metadata.
    # A run in generations (events.GenerationStart) logs epoch_start,
    # epoch_stop and save_model per generation instead of blocks, as
    # Google's MiniGo; `produced` keys are averaged and logged at the end.
    self.generational = False
    self.produced = []

  def __call__(self, event):
    log = self.logger
    if isinstance(event, ev.InitStart):
      s = self.submission
      log.event(mlc.SUBMISSION_BENCHMARK, self.benchmark)
      log.event(mlc.SUBMISSION_ORG, s.org)
      log.event(mlc.SUBMISSION_DIVISION, s.division)
      log.event(mlc.SUBMISSION_STATUS, s.status)
      log.event(mlc.SUBMISSION_PLATFORM, s.platform)
      log.event(mlc.CACHE_CLEAR, True)
      log.start(mlc.INIT_START)
    elif isinstance(event, ev.InitEnd):
      if event.resumed_from:
        log.event(RESUMED_FROM_CHECKPOINT, event.resumed_from,
                  metadata={'step': event.step})
      if self.target is not None:
        log.event(time_to_accuracy.QUALITY_TARGET, self.target)
      for key, value in self.hyperparameters.items():
        if isinstance(value, Logged):
          log.event(key, value.value, metadata=dict(value.metadata))
        else:
          log.event(key, value)
      log.end(mlc.INIT_STOP)
      older = log.begin()
      if older:
        print(f'the earlier mlperf.log is now {older}', flush=True)
    elif isinstance(event, ev.RunStart):
      log.start(mlc.RUN_START)
    elif isinstance(event, ev.GenerationStart):
      self.generational = True
      if event.produced:
        self.produced.append(event.produced)
      log.start(mlc.EPOCH_START, metadata={'epoch_num': event.generation})
    elif isinstance(event, ev.GenerationEnd):
      log.end(mlc.EPOCH_STOP, metadata={'epoch_num': event.generation})
      log.event('save_model', f'{{iteration_num: {event.generation} }}')
    elif (isinstance(event, ev.LoopStart) and not self.block_open
          and not self.generational):
      first = self.epoch(event.step)
      self.block_open = {
          'first_epoch_num': first,
          'epoch_count': max(self.epoch(event.next_eval_step) - first, 1e-4)}
      log.start(mlc.BLOCK_START, metadata=dict(self.block_open))
    elif isinstance(event, ev.EvalStart):
      if self.block_open:
        log.end(mlc.BLOCK_STOP, metadata=dict(self.block_open))
        self.block_open = None
      log.start(mlc.EVAL_START, metadata={'epoch_num': self.epoch(event.step)})
    elif isinstance(event, ev.EvalEnd):
      epoch = self.epoch(event.step)
      value = (self.accuracy(event.metrics) if self.accuracy else
               event.quality)
      # A quality judged after the clock carries the time of its weights
      # (Google's MiniGo log: eval_accuracy at the model's time).
      log.event(mlc.EVAL_ACCURACY, value, metadata={'epoch_num': epoch},
                time_ms=_ms(event.as_of))
      log.end(mlc.EVAL_STOP, metadata={'epoch_num': epoch})
    elif isinstance(event, ev.RunEnd):
      for key in (self.produced[0] if self.produced else {}):
        values = [p[key] for p in self.produced if key in p]
        log.event(key, round(sum(values) / len(values)))
      log.end(mlc.RUN_STOP, metadata={'status': event.status},
              time_ms=_ms(event.as_of))
      log.close()

  def close(self):
    self.logger.close()


def _ms(seconds: float | None) -> int | None:
  return None if seconds is None else round(seconds * 1000)


def hyperparameters(*, task, optimizer, learning_rate, global_batch_size: int,
                    num_replicas: int, num_eval_examples: int,
                    total_steps: int, seed: int | None = None) -> dict:
  """The keys MLPerf wants before init_stop: seed, batch, samples, optimizer,
  task.

  train_samples is the data's epoch when it knows it (ResNet: 1,281,167),
  else the samples the step budget trains (Google's v0.7 BERT logs
  560 x 8192).
  """
  per_replica = global_batch_size // num_replicas
  return {
      **({mlc.SEED: seed} if seed is not None else {}),
      mlc.GLOBAL_BATCH_SIZE: global_batch_size,
      mlc.GRADIENT_ACCUMULATION_STEPS: 1,
      mlc.TRAIN_SAMPLES: (task.data.num_train_examples or
                          total_steps * global_batch_size),
      mlc.EVAL_SAMPLES: num_eval_examples,
      **optimizer.mlperf_params(learning_rate),
      **task.mlperf_params(per_replica_batch_size=per_replica,
                           num_replicas=num_replicas),
  }
