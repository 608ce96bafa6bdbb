"""The run's writes to remote storage, off the training thread.

With a gs:// model_dir the run writes its files (checkpoints, mlperf.log,
summaries, config) locally or in memory first; an `Uploader` thread copies
them to model_dir in the order they were submitted. A write that fails for a
storage reason (unreachable, timed out, throttled) is retried with backoff
while training goes on; one line names it at the first failure and about
once a minute after. The run learns of trouble at its next `check()` (every
save and loop end): only when a write has stayed undone for the outage
budget (core/storage.StorageOptions) does the run stop, with
`faults.StorageUnavailable` naming the write, the storage error and the last
durable checkpoint. A write that fails for another reason (permission, a
bad path) stops the run at once with that error.

A task submitted with a `key` replaces the queued task of the same key that
has not started: a newer checkpoint, or a newer copy of a growing file,
makes the older one pointless, and during an outage only the newest is kept.
"""

import collections
import dataclasses
import os
import shutil
import tempfile
import sys
import threading
import time
from typing import Callable

import tensorflow as tf

from core import error_text
from core import storage as storage_lib
from training import faults
from training import watchdog as watchdog_lib

# TensorFlow's codes for storage that did not answer, or answered "later".
# Its own retries end in ABORTED ("All N retry attempts failed").
_TRANSIENT = (tf.errors.UnavailableError, tf.errors.DeadlineExceededError,
              tf.errors.AbortedError, tf.errors.ResourceExhaustedError,
              tf.errors.InternalError)


def is_transient(error: BaseException) -> bool:
  """A storage error worth retrying (not a permission or a path error)."""
  return isinstance(error, (_TRANSIENT, ConnectionError, TimeoutError))


THREAD_NAME = 'uploads'


def end_process_if_stuck(code) -> None:
  """Ends the process with `code` at once if an upload thread is still
  alive: one stuck in TensorFlow's retries (storage unreachable past the
  budget) makes the interpreter's shutdown abort (SIGABRT, seen as exit
  -6 on a busy machine), which would hide the run's own exit code."""
  if any(t.name == THREAD_NAME and t.is_alive()
         for t in threading.enumerate()):
    sys.stdout.flush()
    sys.stderr.flush()
    # pylint: disable-next=protected-access
    os._exit(code if isinstance(code, int) else 1)


@dataclasses.dataclass
class _Task:
  what: str
  run: Callable[[], None]
  key: str | None
  drop: Callable[[], bool] | None
  since: float  # time.monotonic() at submit.


class Uploader:
  """One background thread running storage writes in order, retried within
  the outage budget.

  Args:
    budget_seconds: how long a write may stay undone before `check()`
      raises faults.StorageUnavailable.
    watchdog: names a single attempt that stalls (a held request).
    first_delay_seconds, max_delay_seconds: the backoff between attempts.
    say: where the lines go (print).
  """

  def __init__(self, *, budget_seconds: float,
               watchdog: watchdog_lib.Watchdog | None = None,
               first_delay_seconds: float = 1.0,
               max_delay_seconds: float = 60.0,
               say: Callable[[str], None] | None = None):
    self.budget_seconds = budget_seconds
    self._watch = (watchdog or watchdog_lib.Watchdog(warn_after=0)).watch
    self._first_delay, self._max_delay = first_delay_seconds, max_delay_seconds
    self._say = say or (lambda line: print(line, flush=True))
    self._queue = collections.deque()
    self._running = None
    self._error = None  # The last storage error of the running task.
    self._fault = None  # Raised at the next check().
    self._closing = False
    self._changed = threading.Condition()
    self._thread = None
    self.durable = None  # (what, time.time()) of the last durable checkpoint.

  # -- The training thread ----------------------------------------------------

  def submit(self, what: str, run: Callable[[], None], *,
             key: str | None = None,
             drop: Callable[[], bool] | None = None) -> None:
    """Queues `run` (named `what` in lines). A newer task of the same key
    replaces it before it starts if its `drop()` (cleaning up) returns
    True; without `drop` it is replaced. Never raises a fault: it may be
    called from a logging handler (mlperf.log's lines after the fault);
    the run learns of faults at `check()`."""
    with self._changed:
      if key is not None:
        for old in [t for t in self._queue if t.key == key]:
          if old.drop is None or old.drop():
            self._queue.remove(old)
      self._queue.append(_Task(what, run, key, drop, time.monotonic()))
      if self._thread is None:
        self._thread = threading.Thread(target=self._work, daemon=True,
                                        name=THREAD_NAME)
        self._thread.start()
      self._changed.notify_all()

  def note_durable(self, what: str, written: bool = True) -> None:
    """Records the newest checkpoint in storage (named in the stop line):
    one this run wrote just now, or (`written` False) one it restored."""
    self.durable = (what, time.time() if written else None)

  def pending(self) -> int:
    with self._changed:
      return len(self._queue) + (self._running is not None)

  def check(self) -> None:
    """Raises the fault that stops the run, if any (call between steps)."""
    with self._changed:
      if self._fault is not None:
        raise self._fault
      oldest = self._running or (self._queue[0] if self._queue else None)
      if oldest and time.monotonic() - oldest.since > self.budget_seconds:
        self._fault = faults.StorageUnavailable(self._stop_line(oldest))
        raise self._fault

  def flush(self, timeout: float | None = None) -> bool:
    """Waits until every submitted write is done (True), or `timeout`
    seconds passed (False). Raises the fault that stops the run, if any."""
    end = None if timeout is None else time.monotonic() + timeout
    while True:
      self.check()
      with self._changed:
        if not self._queue and self._running is None:
          return True
        left = None if end is None else end - time.monotonic()
        if left is not None and left <= 0:
          return False
        self._changed.wait(1.0 if left is None else min(left, 1.0))

  def close(self, timeout: float | None = None) -> bool:
    """Flushes, then stops the thread. Returns whether everything landed."""
    try:
      return self.flush(timeout)
    finally:
      with self._changed:
        self._closing = True
        self._changed.notify_all()

  # -- The upload thread ------------------------------------------------------

  def _stop_line(self, task: _Task) -> str:
    waited = time.monotonic() - task.since
    error = (error_text.one_line(self._error, limit=300) if self._error
             else 'no error back yet: its requests are still retried or held')
    if self.durable:
      what, when = self.durable
      last = (f'The last durable checkpoint is {what}' + (
          f', written {time.time() - when:.0f} s ago' if when else '') +
              '; rerun when storage answers and the run resumes from it.')
    else:
      last = ('No checkpoint of this run reached storage; rerun when storage '
              'answers (the run starts over).')
    return (f'storage stayed unreachable for {waited:.0f} s, past the budget '
            f'of {self.budget_seconds:.0f} s '
            '(core.storage.StorageOptions.outage_budget_seconds): '
            f'{task.what} is not done: {error}. {last}')

  def _next(self) -> _Task | None:
    with self._changed:
      while not self._queue and not self._closing:
        self._changed.wait()
      if not self._queue:
        return None
      self._running, self._error = self._queue.popleft(), None
      return self._running

  def _work(self) -> None:
    while True:
      task = self._next()
      if task is None:
        return
      if not self._attempt(task):
        return  # A fault: the run stops at its next check.
      with self._changed:
        self._running = None
        self._changed.notify_all()

  def _attempt(self, task: _Task) -> bool:
    delay, said = self._first_delay, None
    while True:
      try:
        with self._watch(task.what):
          task.run()
        if said is not None:
          self._say(f'storage answers again: {task.what} is done, '
                    f'{time.monotonic() - task.since:.0f} s after it was '
                    'queued.')
        return True
      except Exception as e:  # pylint: disable=broad-except
        with self._changed:
          if not is_transient(e):
            self._fault = e
            self._changed.notify_all()
            return False
          self._error = e
          waited = time.monotonic() - task.since
          if waited > self.budget_seconds:
            self._fault = faults.StorageUnavailable(self._stop_line(task))
            self._changed.notify_all()
            return False
        if said is None or time.monotonic() - said >= 60:
          said = time.monotonic()
          self._say(f'storage: {task.what} failed after {waited:.0f} s '
                    f'({error_text.one_line(e, limit=200)}); retrying while '
                    f'training goes on (budget {self.budget_seconds:.0f} s).')
        time.sleep(min(delay, max(self.budget_seconds - waited, 0) + 0.1))
        delay = min(2 * delay, self._max_delay)


def write_text(path: str, text: str) -> None:
  """Writes a whole file (an object store's objects appear whole)."""
  with tf.io.gfile.GFile(path, 'w') as f:
    f.write(text)


class Files:
  """How the run writes its small files: through the uploader with a
  remote model_dir (the newest text of a path replaces an older one still
  queued), directly otherwise."""

  def __init__(self, uploads: Uploader | None):
    self.uploads = uploads

  def put_text(self, path: str, text: str | Callable[[], str]) -> None:
    """Writes `text` (or what `text()` returns when the write runs) to
    `path`."""
    def write():
      write_text(path, text() if callable(text) else text)
    if self.uploads:
      self.uploads.submit(f'the write of {path}', write, key=path)
    else:
      write()

  def mirror(self, local: str, remote: str) -> Callable[[], None]:
    """A function that copies the files of the local folder `local` that
    changed since the last call to `remote` (summaries' event files)."""
    sent = {}

    def copy():
      tf.io.gfile.makedirs(remote)
      for name in sorted(tf.io.gfile.listdir(local)):
        size = tf.io.gfile.stat(os.path.join(local, name)).length
        if sent.get(name) != size:
          tf.io.gfile.copy(os.path.join(local, name),
                           os.path.join(remote, name), overwrite=True)
          sent[name] = size

    def sync():
      if self.uploads:
        self.uploads.submit(f'the upload of {remote}', copy,
                            key=f'folder {remote}')
      else:
        copy()
    return sync


class RemoteWrites:
  """A run's writes to a remote model_dir: its Uploader and its local
  staging folder (both None for a local model_dir), set up at the start
  and finished (flushed, staging removed) at the end, once."""

  # After a failure, how long the run waits to land what it wrote (the
  # last lines of mlperf.log) before it exits.
  FAILED_FLUSH_SECONDS = 60.0

  def __init__(self, model_dir: str, storage: storage_lib.StorageOptions,
               stall_warning_seconds: float):
    self.uploads = self.staging = None
    self.finished = False
    if storage_lib.is_remote(model_dir):
      self.staging = tempfile.mkdtemp(prefix='run-staging-',
                                      dir=storage.staging_root())
      self.uploads = Uploader(
          budget_seconds=storage.outage_budget_seconds,
          watchdog=watchdog_lib.Watchdog(
              warn_after=stall_warning_seconds))

  def finish(self, failed: bool = False) -> None:
    """Waits for every queued write (at most FAILED_FLUSH_SECONDS after a
    failure, whose own error is the one reported), then removes the
    staging folder; one that did not land is kept and named. Once."""
    if not self.uploads or self.finished:
      return
    self.finished, done = True, False
    try:
      done = self.uploads.close(
          self.FAILED_FLUSH_SECONDS if failed else None)
    except Exception:  # pylint: disable=broad-except
      if not failed:
        raise
    finally:
      if done:
        shutil.rmtree(self.staging, ignore_errors=True)
      else:
        print(f'warning: {self.uploads.pending()} writes did not reach '
              f'storage; their staged files are in {self.staging}.',
              flush=True)
