"""A function of the training process, served to host processes.

MiniGo's self-play searches in host processes (Python trees) and needs the
network many times a move. `Server` runs in the training process and
serves `fn` (the model on the devices: training/device_inference.py) to
them: each process sends a batch (all its games' leaves) and waits; the
server gathers every batch waiting when the devices are free into one call
and answers each process with its rows. That is Google's v0.7 self-play
(cc/concurrent_selfplay.cc: many games' leaves, one inference on the TPU),
with processes in place of their C++ threads.

Batching is greedy: a call takes what is waiting, without waiting for the
rest (a process still searching is not a batch-mate to wait for; it joins
the next call). No TensorFlow here: host processes import this module.

Transport: multiprocessing.connection over a Unix socket in a folder only
this user can open (multiprocessing's own temporary folder, mode 0700); its
address travels in the work item. A process that dies closes its
connection and is dropped; an error in `fn` is sent to every process
waiting and raised there, naming it.
"""

import dataclasses
import threading
from multiprocessing import connection
from typing import Callable

import numpy as np

# x [B, ...] -> arrays [B, ...], one per output.
Function = Callable[[np.ndarray], tuple[np.ndarray, ...]]


class InferenceError(RuntimeError):
  """The served function failed in the training process."""


@dataclasses.dataclass(frozen=True)
class Endpoint:
  """Where a Server listens (picklable: it goes with the work)."""
  address: str


@dataclasses.dataclass
class Counts:
  calls: int = 0  # Calls of fn.
  rows: int = 0  # Rows evaluated.
  largest: int = 0  # Rows in the largest call.


class Server:
  """Serves `fn` to `clients` processes while open (a context manager)."""

  def __init__(self, fn: Function, *, clients: int):
    """Args:
      fn: a batch -> its outputs, each [B, ...] (called in the server's
        thread only).
      clients: processes that will connect; serving ends once all have
        come and gone (said goodbye, or died).
    """
    if clients < 1:
      raise ValueError(f'A Server needs at least one client, got {clients}.')
    self.fn, self.clients = fn, clients
    self.counts = Counts()
    self.error: BaseException | None = None
    self._listener = None
    self._threads = []
    self._arrived = []  # Accepted, not yet served (the accept thread's).
    self._lock = threading.Lock()
    self._stopping = False
    self._wake_reader, self._wake_writer = None, None

  @property
  def endpoint(self) -> Endpoint:
    return Endpoint(self._listener.address)

  def __enter__(self) -> 'Server':
    self._listener = connection.Listener(family='AF_UNIX')
    self._wake_reader, self._wake_writer = connection.Pipe(duplex=False)
    self._threads = [
        threading.Thread(target=target, daemon=True, name=name)
        for target, name in ((self._accept, 'host-inference-accept'),
                             (self._serve, 'host-inference'))]
    for thread in self._threads:
      thread.start()
    return self

  def __exit__(self, *exc) -> None:
    with self._lock:
      self._stopping = True
    self._wake_writer.send(None)
    if self._threads[0].is_alive():
      try:  # Wakes an accept() waiting for a process that never came.
        connection.Client(self._listener.address, family='AF_UNIX').close()
      except OSError:
        pass
    for thread in self._threads:
      thread.join()
    self._listener.close()
    self._wake_reader.close()
    self._wake_writer.close()

  # -- The server's threads ---------------------------------------------

  def _accept(self) -> None:
    for _ in range(self.clients):
      try:
        conn = self._listener.accept()
      except OSError:
        return
      with self._lock:
        if self._stopping:
          conn.close()
          return
        self._arrived.append(conn)
      self._wake_writer.send(None)

  def _serve(self) -> None:
    active, gone = [], 0
    try:
      while gone < self.clients:
        waiting = {}
        ready = connection.wait(active + [self._wake_reader])
        while ready:
          for conn in ready:
            if conn is self._wake_reader:
              conn.recv()
              with self._lock:
                if self._stopping:
                  return
                active += self._arrived
                self._arrived.clear()
              continue
            message = _receive(conn)
            if message is None:  # Goodbye, or the process is gone.
              active.remove(conn)
              conn.close()
              gone += 1
            else:
              waiting[conn] = message
          # Whatever else is ready now joins this call.
          ready = connection.wait(
              [c for c in active if c not in waiting], timeout=0)
        if waiting:
          self._answer(waiting)
    finally:
      with self._lock:
        active += self._arrived
      for conn in active:
        conn.close()

  def _answer(self, waiting: dict) -> None:
    conns = list(waiting)
    sizes = [len(waiting[c]) for c in conns]
    if self.error is None:
      try:
        outputs = self.fn(np.concatenate([waiting[c] for c in conns]))
        self.counts.calls += 1
        self.counts.rows += sum(sizes)
        self.counts.largest = max(self.counts.largest, sum(sizes))
      except Exception as e:  # pylint: disable=broad-except
        self.error = e  # Sent to every process, then on to their owner.
    start = 0
    for conn, size in zip(conns, sizes):
      if self.error is None:
        reply = tuple(o[start:start + size] for o in outputs)
      else:
        reply = (f'inference in the training process failed: '
                 f'{type(self.error).__name__}: {self.error}')
      start += size
      try:
        conn.send(reply)
      except OSError:
        pass  # The process is gone; its EOF comes next.


def _receive(conn):
  try:
    return conn.recv()
  except (EOFError, OSError):
    return None


class Client:
  """`fn` of the training process, called from a host process."""

  def __init__(self, endpoint: Endpoint):
    self._conn = connection.Client(endpoint.address, family='AF_UNIX')

  def __call__(self, x: np.ndarray) -> tuple[np.ndarray, ...]:
    self._conn.send(np.ascontiguousarray(x))
    reply = self._conn.recv()
    if isinstance(reply, str):
      raise InferenceError(reply)
    return reply

  def close(self) -> None:
    try:
      self._conn.send(None)  # Goodbye.
    except OSError:
      pass  # The server is gone already (its owner's error says why).
    finally:
      self._conn.close()
