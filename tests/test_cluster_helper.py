"""tests/helpers.run_cluster: a worker whose port another process took
(between free_port() and its start) fails the cluster at once, not after
the hang guard, and the cluster starts again on fresh ports."""

import socket
import subprocess

import pytest

from tests import helpers

# One MultiWorkerMirrored all-reduce: 1 + 2 over two workers.
WORKER = '''
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
task = strategy.cluster_resolver.task_id
total = strategy.reduce('SUM', strategy.run(
    lambda: tf.constant(float(task + 1))), axis=None)
print('sum', float(total))
'''


@pytest.mark.slow
def test_a_taken_port_restarts_the_cluster_on_fresh_ports():
  held = socket.socket()
  held.bind(('127.0.0.1', 0))
  held.listen(1)
  starts = []

  def start():
    ports = [helpers.free_port() for _ in range(2)]
    if not starts:  # The first cluster's second worker: a taken port.
      ports[1] = held.getsockname()[1]
    starts.append(ports)
    workers = [f'127.0.0.1:{p}' for p in ports]
    return [subprocess.Popen(
        [helpers.PYTHON, '-c', WORKER], cwd=helpers.ROOT,
        env=helpers.worker_env(workers, i),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for i in range(2)]

  try:
    procs, outputs = helpers.run_cluster(start)
  finally:
    held.close()
  assert len(starts) == 2
  for p, out in zip(procs, outputs):
    assert p.returncode == 0 and 'sum 3.0' in out, out[-3000:]
