"""Names an operation that stalls (a storage request held, a peer that does
not answer): after `warn_after` seconds inside `watch(what)` one line says
what is waiting and for how long, and again every `warn_after` seconds, so
a hang is never silent. The operation itself goes on: TensorFlow retries
storage requests, and faults past its retries end the run as named faults
(training/faults.py)."""

import contextlib
import threading
import time
from typing import Callable


class Watchdog:
  """Watches one operation at a time per `watch` call (thread-safe).

  Args:
    warn_after: seconds before the first line and between lines; 0 turns
      the watchdog off.
    say: where the lines go (print).
  """

  def __init__(self, *, warn_after: float, say: Callable[[str], None] = None):
    if warn_after < 0:
      raise ValueError(f'stall_warning_seconds ({warn_after}) must be >= 0 '
                       '(0: off).')
    self.warn_after = warn_after
    self._say = say or (lambda line: print(line, flush=True))

  @contextlib.contextmanager
  def watch(self, what: str):
    if not self.warn_after:
      yield
      return
    done = threading.Event()
    start = time.monotonic()

    def warn():
      while not done.wait(self.warn_after):
        self._say(f'stalled: {what} has taken {time.monotonic() - start:.0f} '
                  's; still waiting (storage requests are retried within the '
                  'outage budget, core.storage.StorageOptions).')

    thread = threading.Thread(target=warn, daemon=True,
                              name='watchdog: ' + what[:40])
    thread.start()
    try:
      yield
    finally:
      done.set()
      thread.join()
