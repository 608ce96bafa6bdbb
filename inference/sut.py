"""The system under test: LoadGen's queries in, batched predictions out.

SingleStream queries are answered inline on LoadGen's thread (no hand-off
latency). Offline, MultiStream and Server samples go to a queue that worker
threads drain in batches of up to `max_batch`; a worker that has some samples
waits at most `batch_timeout_ms` for more, which bounds Server latency while
letting concurrent queries share a batch.
"""

import queue
import threading
import time

import mlperf_loadgen as lg
import numpy as np


class SystemUnderTest:
  """Answers LoadGen queries with a backend over a sample library."""

  def __init__(self, *, backend, library, output_key: str, inline: bool,
               max_batch: int = 32, batch_timeout_ms: float = 2.0,
               workers: int = 1):
    self.backend, self.library, self.output_key = backend, library, output_key
    self.inline, self.max_batch = inline, max_batch
    self.batch_timeout = batch_timeout_ms / 1000.0
    self._queue = queue.Queue()
    self._stop = threading.Event()
    self.error = None  # The first failure; run_benchmark raises it after.
    self._workers = [] if inline else [
        threading.Thread(target=self._work, daemon=True)
        for _ in range(workers)]
    for w in self._workers:
      w.start()

  def issue_queries(self, samples) -> None:
    if self.inline:
      self._answer_or_fail(list(samples))
      return
    for s in samples:
      self._queue.put(s)

  def flush_queries(self) -> None:
    pass  # Workers never hold samples back beyond batch_timeout.

  def _answer(self, samples) -> None:
    outputs = self.backend.predict(self.library.get([s.index for s in samples]))
    values = np.ascontiguousarray(outputs[self.output_key])
    # Each response points into `rows`; they stay alive until
    # QuerySamplesComplete has copied what it needs and returned.
    rows = [np.ascontiguousarray(values[i]) for i in range(len(samples))]
    responses = [lg.QuerySampleResponse(s.id, r.ctypes.data, r.nbytes)
                 for s, r in zip(samples, rows)]
    lg.QuerySamplesComplete(responses)

  def _work(self) -> None:
    while not self._stop.is_set():
      try:
        first = self._queue.get(timeout=0.1)
      except queue.Empty:
        continue
      batch = [first]
      deadline = time.monotonic() + self.batch_timeout
      while len(batch) < self.max_batch:
        remaining = deadline - time.monotonic()
        try:
          batch.append(self._queue.get(timeout=max(remaining, 0)) if
                       remaining > 0 else self._queue.get_nowait())
        except queue.Empty:
          break
      self._answer_or_fail(batch)

  def _answer_or_fail(self, samples) -> None:
    """Answers; on failure completes the samples empty so LoadGen ends."""
    try:
      self._answer(samples)
    except Exception as e:  # pylint: disable=broad-except
      if self.error is None:
        self.error = e
      lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, 0, 0)
                               for s in samples])

  def close(self) -> None:
    self._stop.set()
    for w in self._workers:
      w.join()
