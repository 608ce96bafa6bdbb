"""models.minigo.host_inference: a function of the training process served to
spawned host processes. Each process gets exactly its own rows back,
whatever it was batched with; an error in the function reaches every
process and its owner, named; a process that never comes or dies does not
hang the server.

The work functions live here: the pool's spawned processes import this
module (no TensorFlow) to find them.
"""

import os
import threading

import numpy as np
import pytest

from models.minigo import host_inference
from models.common import host_pool


def double_and_sum(x):
  return 2 * x, x.sum(axis=1)


def fail_on_13(x):
  if (x == 13).any():
    raise ValueError('row with 13 in it')
  return double_and_sum(x)


def ask(work):
  """Sends batches of `sizes` rows (values from `offset` on); True for
  each answer that is exactly this process's rows doubled and summed."""
  endpoint, sizes, offset = work
  client = host_inference.Client(endpoint)
  try:
    answers = []
    for n in sizes:
      x = offset + np.arange(n * 3, dtype=np.int64).reshape(n, 3)
      offset += n * 3
      doubled, summed = client(x)
      answers.append(bool(np.array_equal(doubled, 2 * x)
                          and np.array_equal(summed, x.sum(axis=1))))
    return answers
  finally:
    client.close()


def connect_then_die(endpoint):
  client = host_inference.Client(endpoint)
  client(np.zeros((1, 3), np.int64))
  os._exit(3)  # pylint: disable=protected-access


def test_each_process_gets_its_own_rows_back():
  pool = host_pool.HostPool(3)
  sizes = [[5, 1, 7, 2, 9, 3], [4, 4, 4, 4], [1, 2, 3, 4, 5, 6, 7]]
  try:
    with host_inference.Server(double_and_sum, clients=3) as server:
      answers = pool.map(ask, [(server.endpoint, s, 10_000 * i)
                               for i, s in enumerate(sizes)])
  finally:
    pool.close()
  assert answers == [[True] * len(s) for s in sizes]
  assert server.counts.rows == sum(map(sum, sizes))
  assert server.counts.calls <= sum(map(len, sizes))
  assert server.error is None


def test_an_error_in_the_function_reaches_every_process_and_the_owner():
  pool = host_pool.HostPool(2)
  try:
    with host_inference.Server(fail_on_13, clients=2) as server:
      # Process 0's rows hold 13 in its third batch; process 1 asks on.
      with pytest.raises(host_inference.InferenceError,
                         match='ValueError: row with 13 in it'):
        pool.map(ask, [(server.endpoint, [1, 2, 3, 4], 0),
                       (server.endpoint, [1] * 50, 100)])
  finally:
    pool.close()
  assert isinstance(server.error, ValueError)


def test_a_dead_or_missing_process_does_not_hang_the_server():
  pool = host_pool.HostPool(1)
  finished = threading.Event()

  def serve_one_that_dies():
    # Two clients expected, one comes and dies: the map fails, the
    # server's exit returns.
    with host_inference.Server(double_and_sum, clients=2) as server:
      with pytest.raises(host_pool.HostPoolError):
        pool.map(connect_then_die, [server.endpoint])
    with host_inference.Server(double_and_sum, clients=2):
      pass  # Nobody comes at all.
    finished.set()

  thread = threading.Thread(target=serve_one_that_dies, daemon=True)
  try:
    thread.start()
    thread.join(120)
  finally:
    pool.close()
  assert finished.is_set(), 'the server waits for a process that is gone'
