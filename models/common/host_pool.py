"""A pool of host processes for a metric, started on first use.

Spawned (not forked: the training process holds TensorFlow's threads), so the
work functions must live in modules that import no TensorFlow
(models/common/bleu.py, models/common/coco_metric.py). Stopped at interpreter
exit, or by `close`.

A worker that dies (killed by a signal, the kernel's OOM killer, a crash in
C code) fails the `map` it was working on at once with HostPoolError naming
its exit, and the next `map` starts fresh processes: concurrent.futures
notices a dead worker, where multiprocessing.Pool replaces it and waits
forever for the work it took.

The processes start without the parent's main module: spawn would import
it again in each (train.py: TensorFlow, seconds and ~600 MB a process),
and the work needs only its own module. They start with one BLAS thread
each (OPENBLAS_NUM_THREADS and the like, unless set): the pool already runs
a process a core, and NumPy's products in each, threaded, fight over the
cores (MiniGo's network: 3x slower a product, docs/minigo.md).

A worker whose owner dies without stopping it (SIGKILL after a preemption's
grace, the OOM killer) exits within ORPHAN_POLL_SECONDS: it would otherwise
wait on its queue for ever, holding its memory.
"""

import atexit
import contextlib
import concurrent.futures
from concurrent.futures import process as futures_process
import multiprocessing
import os
import sys
import threading
import time
from typing import Callable, Sequence

ORPHAN_POLL_SECONDS = 1.0


class HostPoolError(RuntimeError):
  """A process of the pool died while it held work."""


class HostPool:
  """`map(fn, work)` over `processes` spawned processes."""

  def __init__(self, processes: int, initializer: Callable | None = None,
               initargs: tuple = ()):
    self.processes = processes
    self._initializer, self._initargs = initializer, initargs
    self._executor = None
    self._registered = False

  def map(self, fn: Callable, work: Sequence) -> list:
    """[fn(w) for w in work], in order, over the pool's processes.

    Raises:
      HostPoolError: if a process died before all the work was done (the
        pool's processes are then stopped; the next call starts new ones).
    """
    if self._executor is None:
      self._executor = concurrent.futures.ProcessPoolExecutor(
          self.processes, mp_context=multiprocessing.get_context('spawn'),
          initializer=_start_worker,
          initargs=(os.getpid(), self._initializer, self._initargs))
      if not self._registered:
        _at_exit(self.close)
        self._registered = True
    try:
      with _without_main_module():  # Processes start as work is submitted.
        results = self._executor.map(fn, work)
      return list(results)
    except futures_process.BrokenProcessPool as e:
      # The executor stops the others with SIGTERM (-15) once one is dead.
      codes = sorted({p.exitcode for p in _processes(self._executor)
                      if p.exitcode})
      self.close()
      raise HostPoolError(
          f'A metric process running {fn.__module__}.{fn.__qualname__} '
          f'died before its work was done (exit codes of the pool: '
          f'{codes or "unknown"}; negative is the signal that ended it, -9 '
          'often the out-of-memory killer).') from e

  def close(self) -> None:
    """Stops the pool's processes, busy or not (a metric that hangs must
    not keep the process from exiting)."""
    if self._executor is None:
      return
    executor, self._executor = self._executor, None
    for p in _processes(executor):
      if p.is_alive():
        p.kill()
    executor.shutdown(wait=True, cancel_futures=True)

  def __del__(self):
    self.close()


_MAIN_LOCK = threading.Lock()
_BLAS_THREADS = ('OPENBLAS_NUM_THREADS', 'OMP_NUM_THREADS', 'MKL_NUM_THREADS')


@contextlib.contextmanager
def _without_main_module():
  """Inside, __main__ has no file or spec, so processes spawned here do not
  import it (multiprocessing.spawn.get_preparation_data), and the BLAS
  thread variables not set are 1."""
  main = sys.modules.get('__main__')
  with _MAIN_LOCK:
    saved = {k: main.__dict__[k] for k in ('__file__', '__spec__')
             if main is not None and k in main.__dict__}
    threads = [k for k in _BLAS_THREADS if k not in os.environ]
    try:
      if main is not None:
        main.__dict__.pop('__file__', None)
        main.__spec__ = None
      os.environ.update({k: '1' for k in threads})
      yield
    finally:
      for k in threads:
        os.environ.pop(k, None)
      if main is not None:
        main.__dict__.update(saved)
        if '__spec__' not in saved:
          del main.__spec__


def _start_worker(owner: int, initializer, initargs) -> None:
  """In each worker: exit when the owner is gone, then the pool's own
  initializer."""
  threading.Thread(target=_exit_when_orphaned, args=(owner,),
                   daemon=True).start()
  if initializer is not None:
    initializer(*initargs)


def _exit_when_orphaned(owner: int) -> None:
  while os.getppid() == owner:
    time.sleep(ORPHAN_POLL_SECONDS)
  os._exit(0)  # pylint: disable=protected-access


def _at_exit(fn) -> None:
  """Runs fn at interpreter exit before concurrent.futures joins its
  executors' threads, which wait for every busy worker: a metric that hangs
  would hang the exit. threading's exit hooks run newest first, so one
  registered after concurrent.futures' own runs before it (private, there
  since Python 3.9; plain atexit, after it, otherwise)."""
  register = getattr(threading, '_register_atexit', None)
  if register is None:
    atexit.register(fn)
  else:
    register(fn)


def _processes(executor) -> list:
  """The executor's worker processes: its own table (a private attribute,
  there since Python 3.2; Python 3.14's terminate_workers is the public
  form)."""
  return list((getattr(executor, '_processes', None) or {}).values())
