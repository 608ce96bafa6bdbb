"""models.common.host_pool: a metric process killed mid-work fails the
evaluation at once (not an hour later at the evaluator's timeout), and the pool
recovers.

The work functions live here: the pool's spawned processes import this
module (no TensorFlow) to find them.
"""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from models.common import host_pool
from tests import helpers


def square(x):
  return x * x


def write_pid_then_sleep(path):
  """Announces this process, then works 'forever' (10 minutes)."""
  with open(path + '.tmp', 'w') as f:
    f.write(str(os.getpid()))
  os.replace(path + '.tmp', path)  # Whole, or not there.
  time.sleep(600)
  return path


def map_in_thread(pool, fn, work):
  """pool.map(fn, work) in a thread; a dict that gets its 'result' or
  'error', and the thread."""
  outcome = {}

  def run():
    try:
      outcome['result'] = pool.map(fn, work)
    except Exception as e:  # pylint: disable=broad-except
      outcome['error'] = e

  thread = threading.Thread(target=run, daemon=True)
  thread.start()
  return outcome, thread


def wait_for_file(path, thread, seconds=300):
  deadline = time.monotonic() + seconds
  while not os.path.exists(path):
    assert thread.is_alive(), 'the map ended before its work started'
    assert time.monotonic() < deadline, f'{path} never appeared'
    time.sleep(0.05)
  with open(path) as f:
    return int(f.read())


@pytest.mark.slow  # Spawns processes (about 2 s each without TensorFlow).
def test_a_killed_metric_process_fails_the_map_and_the_pool_recovers(
    tmp_path):
  pool = host_pool.HostPool(2)
  try:
    assert pool.map(square, range(6)) == [0, 1, 4, 9, 16, 25]
    outcome, thread = map_in_thread(
        pool, write_pid_then_sleep, [str(tmp_path / 'a'), str(tmp_path / 'b')])
    victim = wait_for_file(str(tmp_path / 'a'), thread)
    os.kill(victim, signal.SIGKILL)  # As the out-of-memory killer does.
    # Long before the other process's 600 s of work would end.
    thread.join(120)
    assert not thread.is_alive(), 'the map waits for the killed process'
    error = outcome['error']
    assert isinstance(error, host_pool.HostPoolError), repr(error)
    assert '-9' in str(error) and 'write_pid_then_sleep' in str(error)
    # Fresh processes for the next evaluation.
    assert pool.map(square, range(4)) == [0, 1, 4, 9]
  finally:
    pool.close()


@pytest.mark.slow
def test_close_stops_a_pool_whose_work_hangs(tmp_path):
  pool = host_pool.HostPool(1)
  outcome, thread = map_in_thread(pool, write_pid_then_sleep,
                                  [str(tmp_path / 'a')])
  worker = wait_for_file(str(tmp_path / 'a'), thread)
  pool.close()  # What the evaluator's timeout and the exit handler do.
  thread.join(120)
  assert not thread.is_alive()
  assert isinstance(outcome['error'], host_pool.HostPoolError)
  with pytest.raises(ProcessLookupError):
    os.kill(worker, 0)  # Gone (and reaped: not a zombie).


EXIT_SCRIPT = '''
import os, sys, threading, time
from models.common import host_pool
from tests.models.common import test_host_pool

if __name__ == '__main__':
  pool = host_pool.HostPool(1)
  threading.Thread(target=pool.map, daemon=True, args=(
      test_host_pool.write_pid_then_sleep, [sys.argv[1]])).start()
  while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
  # Exit with the metric still working (the evaluator's thread is a daemon).
'''


@pytest.mark.slow
def test_exit_does_not_wait_for_a_hung_metric_process(tmp_path):
  # concurrent.futures joins busy workers at exit: without the pool's own
  # exit hook this process waits out the 600 s of work.
  pid_file = str(tmp_path / 'worker')
  done = subprocess.run([sys.executable, '-c', EXIT_SCRIPT, pid_file],
                        cwd=helpers.ROOT, timeout=120, capture_output=True,
                        text=True, env=dict(os.environ, PYTHONPATH=helpers.ROOT))
  assert done.returncode == 0, done.stderr[-2000:]
  with open(pid_file) as f:
    worker = int(f.read())
  with pytest.raises(ProcessLookupError):
    os.kill(worker, 0)


OWNER_SCRIPT = '''
import os, sys, threading, time
from models.common import host_pool
from tests.models.common import test_host_pool

if __name__ == '__main__':
  pool = host_pool.HostPool(2)
  pool.map(test_host_pool.square, range(4))  # Both workers started.
  threading.Thread(target=pool.map, daemon=True, args=(
      test_host_pool.write_pid_then_sleep, [sys.argv[1]])).start()
  time.sleep(600)
'''


@pytest.mark.slow
def test_workers_exit_when_their_owner_is_killed(tmp_path):
  # SIGKILL (a preemption's grace run out) runs no exit hook: the workers
  # must notice on their own, not wait on their queue for ever.
  pid_file = str(tmp_path / 'worker')
  owner = subprocess.Popen([sys.executable, '-c', OWNER_SCRIPT, pid_file],
                           cwd=helpers.ROOT,
                           env=dict(os.environ, PYTHONPATH=helpers.ROOT))
  try:
    deadline = time.monotonic() + 120
    while not os.path.exists(pid_file):
      assert owner.poll() is None and time.monotonic() < deadline
      time.sleep(0.05)
    with open(pid_file) as f:
      busy = int(f.read())
    workers = [int(p) for p in subprocess.run(
        ['pgrep', '-P', str(owner.pid)], capture_output=True,
        text=True).stdout.split()]
    assert busy in workers
  finally:
    owner.kill()
    owner.wait()
  # The idle worker and the busy one both go (reparented, they see it).
  deadline = time.monotonic() + 120
  alive = workers
  while alive and time.monotonic() < deadline:
    time.sleep(0.2)
    alive = [w for w in workers if _running(w)]
  assert not alive, f'workers {alive} outlived their killed owner'


def _running(pid: int) -> bool:
  """Alive and not a zombie (an orphan's zombie is init's to reap)."""
  try:
    with open(f'/proc/{pid}/stat') as f:
      return f.read().split(') ', 1)[1][0] != 'Z'
  except FileNotFoundError:
    return False


def test_processes_start_without_the_programs_main_module_one_blas_thread(
    tmp_path):
  # train.py as the program imports TensorFlow at its top: spawned workers
  # must not run it again. Here the program notes each import of itself.
  marks = tmp_path / 'imports'
  program = tmp_path / 'program.py'
  program.write_text(
      'import os, sys\n'
      f'open({str(marks)!r}, "a").write("import\\n")\n'
      'if __name__ == "__main__":\n'
      f'  sys.path.insert(0, {helpers.ROOT!r})\n'
      '  from models.common import host_pool\n'
      '  pool = host_pool.HostPool(2)\n'
      '  assert pool.map(abs, [-1, -2, -3]) == [1, 2, 3]\n'
      '  # One BLAS thread a process, the parent\'s own setting untouched.\n'
      '  assert pool.map(os.getenv, ["OPENBLAS_NUM_THREADS"]) == ["1"]\n'
      '  assert "OPENBLAS_NUM_THREADS" not in os.environ\n'
      '  print(sys.modules["__main__"].__file__)\n')
  env = {k: v for k, v in os.environ.items() if k != 'OPENBLAS_NUM_THREADS'}
  done = subprocess.run([sys.executable, str(program)], capture_output=True,
                        text=True, timeout=120, env=env)
  assert done.returncode == 0, done.stderr
  assert done.stdout.strip() == str(program)  # Restored after the start.
  assert marks.read_text() == 'import\n'  # The program's own import only.
