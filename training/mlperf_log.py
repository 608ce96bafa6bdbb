"""MLPerf compliance logging (`:::MLLOG` lines) as one action of the run.

`MlperfLog` receives the run's events (training/events.py) and writes
`<model_dir>/mlperf.log` through `mlperf_logging.mllog`: submission info and
init_start at InitStart; the hyper-parameters and init_stop at InitEnd;
run_start; block_start/stop around the training between evaluations;
eval_start, eval_accuracy and eval_stop; run_stop with its status. The file is
appended to, so a resumed run keeps the earlier lines. Only the chief writes.
"""

import dataclasses
import logging

from mlperf_logging.mllog import constants as mlc
from mlperf_logging.mllog import mllog
import tensorflow as tf

from training import events as ev


@dataclasses.dataclass(frozen=True)
class Submission:
  """MLPerf submission_* keys (gin: `train.train.submission`).

  Attributes:
    org: submission_org.
    platform: submission_platform (set by the hardware gin file).
    division: 'closed' or 'open'.
    status: 'cloud', 'onprem', 'preview' or 'research'.
  """
  org: str = 'reference'
  platform: str = 'cpu'
  division: str = 'closed'
  status: str = 'research'


class _GFileHandler(logging.StreamHandler):
  """A logging handler appending to a local or gs:// file, flushed per line."""

  def __init__(self, path: str):
    super().__init__(tf.io.gfile.GFile(path, 'a'))

  def emit(self, record):
    super().emit(record)
    self.flush()


class MlperfLogger:
  """Writes MLPerf events; a no-op on non-chief workers."""

  def __init__(self, *, path: str | None):
    """Args:
      path: the log file, or None to log nothing (non-chief workers).
    """
    self._logger = logging.getLogger(f'mlperf.{id(self)}')
    self._logger.propagate = False
    self._logger.setLevel(logging.INFO)
    self._handler = _GFileHandler(path) if path else logging.NullHandler()
    self._logger.addHandler(self._handler)
    self._mllog = mllog.MLLogger(logger=self._logger, default_stack_offset=2)

  def event(self, key: str, value=None, metadata: dict | None = None):
    self._mllog.event(key=key, value=value, metadata=metadata)

  def start(self, key: str, value=None, metadata: dict | None = None):
    self._mllog.start(key=key, value=value, metadata=metadata)

  def end(self, key: str, value=None, metadata: dict | None = None):
    self._mllog.end(key=key, value=value, metadata=metadata)

  def close(self):
    self._logger.removeHandler(self._handler)
    self._handler.close()


class MlperfLog:
  """The MLPerf log of one run, driven by the run's events."""

  def __init__(self, *, path: str | None, benchmark: str,
               submission: Submission, epoch_num):
    """Args:
      path: the log file, or None on non-chief workers.
      benchmark: submission_benchmark ('resnet', 'bert').
      submission: the submission_* values.
      epoch_num: step -> MLPerf epoch_num (the task's mlperf_epoch_num with
        the global batch bound).

    Set `hyperparameters` (see `hyperparameters()` below) before InitEnd:
    they are logged before init_stop.
    """
    self.logger = MlperfLogger(path=path)
    self.benchmark, self.submission = benchmark, submission
    self.epoch = epoch_num
    self.hyperparameters = {}
    self.block_open = None  # The open block's metadata.

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
      for key, value in self.hyperparameters.items():
        log.event(key, value)
      log.end(mlc.INIT_STOP)
    elif isinstance(event, ev.RunStart):
      log.start(mlc.RUN_START)
    elif isinstance(event, ev.LoopStart) and not self.block_open:
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
      log.event(mlc.EVAL_ACCURACY, event.quality, metadata={'epoch_num': epoch})
      log.end(mlc.EVAL_STOP, metadata={'epoch_num': epoch})
    elif isinstance(event, ev.RunEnd):
      log.end(mlc.RUN_STOP, metadata={'status': event.status})
      log.close()

  def close(self):
    self.logger.close()


def hyperparameters(*, task, optimizer, learning_rate, global_batch_size: int,
                    num_replicas: int, num_eval_examples: int,
                    total_steps: int) -> dict:
  """The keys MLPerf wants before init_stop: batch, samples, optimizer, task.

  train_samples is the data's epoch when it knows it (ResNet: 1,281,167),
  else the samples the step budget trains (Google's v0.7 BERT logs
  560 x 8192).
  """
  per_replica = global_batch_size // num_replicas
  return {
      mlc.GLOBAL_BATCH_SIZE: global_batch_size,
      mlc.GRADIENT_ACCUMULATION_STEPS: 1,
      mlc.TRAIN_SAMPLES: (task.data.num_train_examples or
                          total_steps * global_batch_size),
      mlc.EVAL_SAMPLES: num_eval_examples,
      **optimizer.mlperf_params(learning_rate),
      **task.mlperf_params(per_replica_batch_size=per_replica,
                           num_replicas=num_replicas),
  }
