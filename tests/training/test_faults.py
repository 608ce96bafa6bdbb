"""A lost peer and unreachable storage are named infrastructure faults
(training/faults.py), told apart from crashes by TensorFlow's own texts."""

import json

import tensorflow as tf

from core import exit_codes
from training import faults

# As TF 2.21's coordination service raised it into worker 0's collective
# when worker 1 was stopped with SIGSTOP (2026-12-04).
PEER = ('Collective ops is aborted by: Error reported from /job:worker/task:1:'
        ' The following tasks are unhealthy (stopped sending heartbeats):\n'
        '/job:worker/replica:0/task:1\nThe tasks have crashed. Check the task '
        'logs for an earlier error, or scheduler events (e.g. preemption, '
        'eviction) to debug further.')
# TensorFlow's GCS file system after its retries.
STORAGE = ('All 10 retry attempts failed. The last failure: Error executing '
           'an HTTP request: HTTP response code 503 with body \'Service '
           'Unavailable\' when uploading gs://b/run/checkpoints/ckpt-4.index')


def test_a_lost_peer_is_named_with_its_task_and_code():
  error = tf.errors.UnavailableError(None, None, PEER)
  fault = faults.classify(error)
  assert fault.code == exit_codes.PEER_LOST
  assert fault.line.startswith('a peer was lost: /job:worker/replica:0/task:1 '
                               'stopped sending heartbeats')
  assert 'Rerun the job: it resumes from its last checkpoint (exit 69)' in (
      fault.line)
  assert '\n' not in fault.line


def test_the_line_names_the_checkpoint_a_rerun_resumes_from():
  error = tf.errors.UnavailableError(None, None, PEER)
  faults.note_last_checkpoint(error, 'gs://b/run/checkpoints/ckpt-8')
  assert faults.classify(error).line.endswith(
      'Rerun the job: it resumes from its last checkpoint, '
      'gs://b/run/checkpoints/ckpt-8 (exit 69).')
  wrapped = RuntimeError('saving failed')
  wrapped.__cause__ = tf.errors.AbortedError(None, None, STORAGE)
  faults.note_last_checkpoint(wrapped, None)
  assert faults.classify(wrapped).line.endswith(
      'Rerun when it answers: it starts over (no checkpoint was written '
      'yet) (exit 74).')


def test_unreachable_storage_is_named_also_as_a_cause():
  try:
    try:
      raise tf.errors.UnavailableError(None, None, STORAGE)
    except tf.errors.UnavailableError as e:
      raise RuntimeError('saving the checkpoint failed') from e
  except RuntimeError as wrapped:
    fault = faults.classify(wrapped)
  assert fault.code == exit_codes.STORAGE_UNAVAILABLE
  assert fault.line.startswith('storage stayed unreachable: All 10 retry '
                               'attempts failed.')
  assert 'gs://b/run/checkpoints/ckpt-4.index' in fault.line


def test_anything_else_is_a_crash():
  assert faults.classify(ValueError('x')) is None
  assert faults.classify(tf.errors.UnavailableError(None, None, 'socket')) is (
      None)


def test_the_launcher_reruns_them_as_it_reruns_a_preemption():
  from tools.launcher import execute as launch_execute
  for code in (exit_codes.PEER_LOST, exit_codes.STORAGE_UNAVAILABLE):
    assert launch_execute.next_step(exit_code=code, node_state='READY',
                                    timed=True, retry=0,
                                    max_retries=3) == ('rerun', 1)


def test_a_worker_that_cannot_listen_on_its_address_is_a_configuration_error(
    monkeypatch):
  # TF 2.21's words when the port of the worker's own TF_CONFIG address is
  # held by another process (2026-12-06, a held socket).
  error = tf.errors.UnknownError(None, None, 'Could not start gRPC server')
  monkeypatch.setenv('TF_CONFIG', json.dumps(
      {'cluster': {'worker': ['127.0.0.1:4001', '127.0.0.1:4002']},
       'task': {'type': 'worker', 'index': 1}}))
  fault = faults.classify(error)
  assert fault.code == exit_codes.USER_ERROR
  assert fault.line.startswith(
      "this worker could not start its server at 127.0.0.1:4002 (TF_CONFIG's"
      " worker 1): another process holds that port")
  monkeypatch.delenv('TF_CONFIG')
  assert 'at its TF_CONFIG address' in faults.classify(error).line
