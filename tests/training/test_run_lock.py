"""The model_dir lock: flock on local disks (a real second process, a real
kill), generation preconditions on gs:// (the GCS emulator, Python client)."""

import json
import os
import signal
import subprocess
import time

import pytest

from tests import helpers
from tools import gcs_emulator
from training import actions
from training import events as ev
from training import run_lock

HOLDER = '''
import sys, time
from training import run_lock
lock = run_lock.LocalLock(sys.argv[1])
lock.acquire()
print('held', flush=True)
time.sleep(600)
'''


def start_holder(model_dir):
  proc = subprocess.Popen(
      [helpers.PYTHON, '-c', HOLDER, str(model_dir)], stdout=subprocess.PIPE,
      text=True, cwd=helpers.ROOT, env=dict(os.environ,
                                            PYTHONPATH=helpers.ROOT))
  assert proc.stdout.readline().strip() == 'held'
  return proc


def test_a_live_local_holder_refuses_others_and_a_killed_one_does_not(
    tmp_path):
  holder = start_holder(tmp_path)
  try:
    with pytest.raises(run_lock.ModelDirInUse) as e:
      run_lock.LocalLock(str(tmp_path)).acquire()
    assert f'pid {holder.pid}, started ' in str(e.value)
    assert f'--model_dir={tmp_path} is in use by another run' in str(e.value)
  finally:
    holder.send_signal(signal.SIGKILL)
    holder.wait()
  lock = run_lock.LocalLock(str(tmp_path))
  lock.acquire()  # The kernel released the dead holder's lock.
  owner = json.loads((tmp_path / 'RUN_LOCK').read_text())
  assert owner['pid'] == os.getpid()
  lock.release()
  assert not (tmp_path / 'RUN_LOCK').exists()
  again = run_lock.LocalLock(str(tmp_path))
  again.acquire()
  again.release()


def test_other_storage_gets_no_lock_but_a_warning(capsys):
  lock = run_lock.for_model_dir('hdfs://namenode/run')
  lock.acquire()
  assert 'no run lock' in capsys.readouterr().out
  assert isinstance(run_lock.for_model_dir('/tmp/x'), run_lock.LocalLock)


@pytest.fixture
def gcs(monkeypatch):
  server, port = gcs_emulator.start_emulator('test')
  monkeypatch.setenv('STORAGE_EMULATOR_HOST', f'http://127.0.0.1:{port}')
  yield
  server.stop()


def test_a_gs_lock_refuses_a_second_run_until_released(gcs):
  first = run_lock.GcsLock('gs://test/run', heartbeat_seconds=3600)
  first.acquire()
  with pytest.raises(run_lock.ModelDirInUse,
                     match=r'pid \d+, started .*, last heartbeat \d+ s ago'):
    run_lock.GcsLock('gs://test/run').acquire()
  first.heartbeat()
  assert first.lost is None
  first.release()
  assert first.blob.bucket.get_blob('run/RUN_LOCK') is None
  second = run_lock.GcsLock('gs://test/run')
  second.acquire()
  second.release()


def test_a_stale_gs_lock_is_taken_over_and_its_owner_learns_it(gcs, capsys):
  dead = run_lock.GcsLock('gs://test/run', heartbeat_seconds=3600)
  dead.acquire()
  time.sleep(1.5)  # Older than the 1 s stale limit below, however busy.
  taker = run_lock.GcsLock('gs://test/run', stale_after_seconds=1,
                           heartbeat_seconds=3600)
  taker.acquire()
  assert 'taking over the lock of --model_dir=gs://test/run' in (
      capsys.readouterr().out)
  dead.heartbeat()  # Its conditional rewrite fails: it lost the lock.
  assert dead.lost and 'another run took over' in dead.lost
  dead.release()  # Does not delete the new owner's lock.
  held = taker.blob.bucket.get_blob('run/RUN_LOCK')
  assert held is not None and held.generation == taker.generation
  taker.release()


def test_the_lock_guard_stops_the_run_once_the_lock_is_lost():
  class Lost:
    lost = 'another run took over the lock of --model_dir=x (host h)'
  closed = []
  guard = actions.LockGuard(lock=Lost(), worker_sum=lambda v: v,
                            on_lost=lambda: closed.append(True))
  loop_end = ev.LoopEnd(step=40, total_steps=100, loss=1.0,
                        learning_rate=0.1, examples_per_second=1.0)
  with pytest.raises(run_lock.ModelDirInUse,
                     match='Stopped at step 40 without saving: another run'):
    guard(loop_end)
  assert closed == [True]
  assert actions.LockGuard(lock=None, worker_sum=lambda v: v,
                           on_lost=None)(loop_end) is None


def test_a_gs_lock_of_an_ended_process_on_this_host_is_taken_at_once(
    gcs, capsys):
  ended = subprocess.Popen([helpers.PYTHON, '-c', 'pass'])
  ended.wait()  # Its pid names no process now.
  dead = run_lock.GcsLock('gs://test/run', heartbeat_seconds=3600)
  dead.owner = {**dead.owner, 'pid': ended.pid}
  dead.acquire()
  taker = run_lock.GcsLock('gs://test/run')  # Stale only after 600 s.
  taker.acquire()
  assert 'whose process on this host has ended' in capsys.readouterr().out
  taker.release()
  dead._stop.set()  # pylint: disable=protected-access
