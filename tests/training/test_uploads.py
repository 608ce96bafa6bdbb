"""The background writer of a remote model_dir (training/uploads.py) and
checkpoints uploaded through it (training/checkpoints.py)."""

import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import tensorflow as tf

from core import storage
from tests import helpers
from training import checkpoints
from training import faults
from training import uploads


def _unavailable(what='503 Service Unavailable'):
  return tf.errors.UnavailableError(None, None, what)


class Flaky:
  """Fails `times` times with a storage error, then records its calls."""

  def __init__(self, times, error=None):
    self.left, self.done = times, 0
    self.error = error or _unavailable()

  def __call__(self):
    if self.left:
      self.left -= 1
      raise self.error
    self.done += 1


def _uploader(budget=60.0, lines=None):
  return uploads.Uploader(budget_seconds=budget, first_delay_seconds=0.01,
                          max_delay_seconds=0.02,
                          say=(lines.append if lines is not None else
                               lambda line: None))


def test_a_failed_write_is_retried_and_named_once():
  lines = []
  up = _uploader(lines=lines)
  task = Flaky(3)
  up.submit('the write of gs://b/run/mlperf.log', task)
  assert up.close(timeout=30)
  assert task.done == 1
  assert lines[0].startswith('storage: the write of gs://b/run/mlperf.log '
                             'failed after ')
  assert '503 Service Unavailable' in lines[0]
  assert lines[-1].startswith('storage answers again: the write of '
                              'gs://b/run/mlperf.log is done')
  assert len(lines) == 2  # One line per minute of failures, not per try.


def test_a_write_undone_past_the_budget_stops_the_run_naming_it():
  up = _uploader(budget=0.3)
  up.note_durable('gs://b/run/checkpoints/ckpt-4 (step 4)')
  up.submit('the upload of checkpoint gs://b/run/checkpoints/ckpt-6',
            Flaky(10 ** 6))
  with pytest.raises(faults.StorageUnavailable) as raised:
    up.flush(timeout=30)
  line = str(raised.value)
  assert line.startswith('storage stayed unreachable for ')
  assert ('the upload of checkpoint gs://b/run/checkpoints/ckpt-6 is not '
          'done') in line
  assert '503 Service Unavailable' in line
  assert ('The last durable checkpoint is gs://b/run/checkpoints/ckpt-4 '
          '(step 4), written ') in line
  assert 'outage_budget_seconds' in line
  # The launcher reruns it as an infrastructure fault.
  fault = faults.classify(raised.value)
  assert fault.code == 74 and fault.line.startswith('storage stayed')
  with pytest.raises(faults.StorageUnavailable):
    up.check()  # Every later check says the same.
  # A later write (mlperf.log's run_stop, from a logging handler) queues
  # without raising: only check() stops the run.
  up.submit('the write of gs://b/run/mlperf.log', lambda: None)
  assert up.pending() == 2


def test_a_held_write_past_the_budget_is_caught_by_check_alone():
  release = threading.Event()
  up = _uploader(budget=0.2)
  up.submit('the write of gs://b/run/config.gin', release.wait)
  with pytest.raises(faults.StorageUnavailable) as raised:
    up.flush(timeout=30)
  release.set()
  assert 'no error back yet' in str(raised.value)
  assert str(raised.value).endswith(
      'No checkpoint of this run reached storage; rerun when storage '
      'answers (the run starts over).')


def test_a_permission_error_stops_the_run_at_once_as_itself():
  up = _uploader()
  denied = tf.errors.PermissionDeniedError(None, None, '403 Forbidden')
  up.submit('the write of gs://b/run/config.gin', Flaky(1, denied))
  with pytest.raises(tf.errors.PermissionDeniedError):
    up.flush(timeout=30)


def test_a_stuck_upload_thread_does_not_hide_the_exit_code():
  """The process ends with its own code and its last line even while an
  upload thread is still busy (here asleep; in a run, inside TensorFlow)."""
  program = (
      'import threading, time\n'
      'from training import uploads\n'
      'threading.Thread(target=time.sleep, args=(600,), daemon=True,\n'
      '                 name=uploads.THREAD_NAME).start()\n'
      'print("error: storage stayed unreachable", flush=False)\n'
      'uploads.end_process_if_stuck(74)\n'
      'print("not reached")\n')
  done = subprocess.run([sys.executable, '-c', program], capture_output=True,
                        text=True, timeout=120, cwd=helpers.ROOT,
                        env=dict(os.environ, PYTHONPATH=helpers.ROOT))
  assert done.returncode == 74, done.stderr[-2000:]
  assert done.stdout.splitlines() == ['error: storage stayed unreachable']


def test_a_newer_task_of_a_key_replaces_a_queued_one_that_lets_go():
  gate, order, kept = threading.Event(), [], []
  up = _uploader()
  up.submit('first', gate.wait)
  up.submit('log 1', lambda: order.append(1), key='log')
  up.submit('log 2', lambda: order.append(2), key='log')
  up.submit('ckpt 1', lambda: order.append('c1'), key='ckpt',
            drop=lambda: kept.append('c1') and False)  # Declines.
  up.submit('ckpt 2', lambda: order.append('c2'), key='ckpt')
  gate.set()
  assert up.close(timeout=30)
  assert order == [2, 'c1', 'c2']


def test_storage_options_make_tensorflow_retries_span_the_budget():
  options = storage.StorageOptions(outage_budget_seconds=1800)
  env = options.tf_environment()
  retries = int(env['GCS_RETRY_CONFIG_MAX_RETRIES'])
  delays = [min(2 ** k, 32) for k in range(retries)]
  assert sum(delays) >= 1800 > sum(delays[:-1])
  assert env['GCS_REQUEST_IDLE_TIMEOUT_SECS'] == '60'
  # The user's own setting wins; defaults are noted, and gin's other values
  # ask for a restart only of what was defaulted.
  environ = {'GCS_REQUEST_IDLE_TIMEOUT_SECS': '5'}
  storage.StorageOptions().apply(environ)
  assert environ['GCS_REQUEST_IDLE_TIMEOUT_SECS'] == '5'
  assert 'GCS_REQUEST_IDLE_TIMEOUT_SECS' not in environ[storage.DEFAULTED]
  assert storage.StorageOptions().restart_environment(environ) == {}
  shorter = storage.StorageOptions(outage_budget_seconds=60,
                                   request_idle_timeout_seconds=9)
  assert shorter.restart_environment(environ) == {
      'GCS_RETRY_CONFIG_MAX_RETRIES': '6'}
  # The restarted process runs with them, as chosen: no second restart.
  assert shorter.set_for_restart(environ) == {
      'GCS_RETRY_CONFIG_MAX_RETRIES': '6'}
  assert environ['GCS_RETRY_CONFIG_MAX_RETRIES'] == '6'
  assert shorter.restart_environment(environ) == {}
  assert 'GCS_RETRY_CONFIG_MAX_RETRIES' not in environ[storage.DEFAULTED]
  with pytest.raises(ValueError, match='outage_budget_seconds'):
    storage.StorageOptions(outage_budget_seconds=0)


def _model():
  return tf.Variable(np.arange(4, dtype=np.float32))


def test_checkpoints_upload_in_the_background_through_storage_faults(
    tmp_path, monkeypatch):
  """A copy that fails twice (storage unavailable) is retried: every
  checkpoint lands whole, rotation keeps max_to_keep, staging ends empty."""
  real_copy, failures = tf.io.gfile.copy, [2]

  def flaky_copy(source, target, overwrite=False):
    if failures[0]:
      failures[0] -= 1
      raise _unavailable()
    return real_copy(source, target, overwrite=overwrite)

  monkeypatch.setattr(tf.io.gfile, 'copy', flaky_copy)
  up = _uploader()
  weights = _model()
  saver = checkpoints.Checkpointer(
      model_dir=str(tmp_path / 'run'), chief=True, max_to_keep=2,
      uploads=up, staging=str(tmp_path / 'staging'), weights=weights)
  for step in (2, 4, 6):
    weights.assign_add(tf.ones(4))
    saver.save(step)  # Returns before the upload (which fails twice).
    assert up.flush(timeout=60)
  folder = tmp_path / 'run' / 'checkpoints'
  assert sorted(n for n in os.listdir(folder) if n.endswith('.index')) == [
      'ckpt-4.index', 'ckpt-6.index']
  assert tf.train.latest_checkpoint(str(folder)).endswith('ckpt-6')
  assert os.listdir(tmp_path / 'staging') == []
  restored = _model()
  reader = checkpoints.Checkpointer(model_dir=str(tmp_path / 'run'),
                                    chief=True, weights=restored)
  assert reader.restore_latest().path.endswith('ckpt-6')
  np.testing.assert_array_equal(restored.numpy(), weights.numpy())
  assert up.durable[0].endswith('ckpt-6 (step 6)')


def test_a_held_checkpoint_is_never_replaced_before_its_upload(tmp_path):
  gate = threading.Event()
  up = _uploader()
  up.submit('a held request', gate.wait)  # Everything after it waits.
  weights = _model()
  saver = checkpoints.Checkpointer(
      model_dir=str(tmp_path / 'run'), chief=True, max_to_keep=1,
      uploads=up, staging=str(tmp_path / 'staging'), weights=weights)
  saver.save(2)
  held = saver.hold(2)  # An asynchronous evaluation's weights.
  saver.save(4)
  saver.save(6)  # Replaces 4's upload, still queued: its staging goes.
  assert sorted(os.listdir(tmp_path / 'staging')) == sorted(
      f'ckpt-{s}.{e}' for s in (2, 6)
      for e in ('index', 'data-00000-of-00001'))
  gate.set()
  assert up.flush(timeout=60)
  names = os.listdir(tmp_path / 'run' / 'checkpoints')
  assert 'ckpt-2.index' in names and 'ckpt-6.index' in names
  assert 'ckpt-4.index' not in names
  saver.release(held)
  assert up.close(timeout=60)
  names = os.listdir(tmp_path / 'run' / 'checkpoints')
  assert 'ckpt-2.index' not in names and 'ckpt-6.index' in names
