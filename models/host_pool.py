"""A pool of host processes for a metric, started on first use.

Spawned (not forked: the training process holds TensorFlow's threads), so
the work functions must live in modules that import no TensorFlow
(models/bleu.py, models/coco_metric.py). Stopped at interpreter exit, or by
`close`.
"""

import atexit
import multiprocessing
from typing import Callable, Sequence


class HostPool:
  """`map(fn, work)` over `processes` spawned processes."""

  def __init__(self, processes: int, initializer: Callable | None = None,
               initargs: tuple = ()):
    self.processes = processes
    self._initializer, self._initargs = initializer, initargs
    self._pool = None

  def map(self, fn: Callable, work: Sequence) -> list:
    if self._pool is None:
      self._pool = multiprocessing.get_context('spawn').Pool(
          self.processes, initializer=self._initializer,
          initargs=self._initargs)
      atexit.register(self.close)  # Before the interpreter's own teardown.
    return self._pool.map(fn, work)

  def close(self) -> None:
    """Stops the pool's processes."""
    if self._pool is not None:
      self._pool.terminate()
      self._pool.join()
      self._pool = None

  def __del__(self):
    self.close()
