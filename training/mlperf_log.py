"""MLPerf compliance logging (`:::MLLOG` lines) through `mlperf_logging.mllog`.

Each run gets its own MLLogger writing `<model_dir>/mlperf.log` (appending, so
a resumed run keeps the earlier lines). Only the chief writes.
"""

import logging

from mlperf_logging.mllog import mllog
from mlperf_logging.mllog import constants
import tensorflow as tf


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

  def submission_info(self, *, benchmark: str, org: str, division: str,
                      status: str, platform: str):
    self.event(constants.SUBMISSION_BENCHMARK, benchmark)
    self.event(constants.SUBMISSION_ORG, org)
    self.event(constants.SUBMISSION_DIVISION, division)
    self.event(constants.SUBMISSION_STATUS, status)
    self.event(constants.SUBMISSION_PLATFORM, platform)

  def close(self):
    self._logger.removeHandler(self._handler)
    self._handler.close()
