"""gs:// model_dir and data through a real GCS emulator (tools/gcs_emulator.py)."""

import json
import os
import re
import shutil
import subprocess

import pytest

from tests import helpers

pytestmark = pytest.mark.slow  # End-to-end: real runs and processes.

needs_namespaces = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which('unshare') or not shutil.which(
        'openssl'),
    reason='needs root, unshare and openssl for a private network namespace')


@needs_namespaces
def test_training_reads_and_writes_gs_and_resumes_from_it(quickstart_data):
  done = subprocess.run(
      ['unshare', '-mn', helpers.PYTHON, '-m', 'tools.gcs_emulator',
       '--bucket=test', '--', helpers.PYTHON, '-m', 'tests.gcs_main',
       quickstart_data],
      capture_output=True, text=True, cwd=helpers.ROOT, timeout=900,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2',
               PYTHONPATH=helpers.ROOT))
  assert done.returncode == 0, done.stderr[-3000:]
  report = json.loads(done.stdout.strip().splitlines()[-1])
  # Exit 1 = ran to the step budget without reaching the target; through a
  # 12 s outage as without one.
  assert report['exit_codes'][:2] == [1, 1], report['stderr_tail']
  assert report['resumed_lines'] == [
      [], ['resumed from gs://test/run/checkpoints/ckpt-4 at step 4'],
      ['resumed from gs://test/run/checkpoints/ckpt-8 at step 8']]
  assert report['fault_log'] >= 5  # The outage met the run's requests.
  assert report['rate_faults'] == 5  # And so did the steady 503s.
  for name in ('config.gin', 'operative_config.gin', 'mlperf.log',
               'mlperf.log.1', 'train/', 'eval/'):
    assert name in report['files']
  assert 'ckpt-8.index' in report['checkpoints_after_outage']
  # The writes held by the outage and the held upload were named while
  # they waited, and the run went on.
  # (A restore slow on a busy machine may be named first: any line may
  # come first, but one names a write the outage held.)
  assert any(re.match(r'stalled: the (rotation|write|upload) of '
                      r'(checkpoint )?gs://test/run/\S+ has taken \d+ s; '
                      r'still waiting', line)
             for line in report['stalled']), report['stalled']
  assert any(l.startswith('stalled: the upload of checkpoint '
                          'gs://test/run/checkpoints/ckpt-8 has taken ')
             for l in report['stalled'])
  # Each attempt has its own log, complete; the resumed one says so. The
  # runs took and released the gs:// lock.
  assert report['run_stops'] == 1 and report['resumed'] == 1
  assert not report['lock_left']
  # Writes undone past a 6 s budget (gin, which restarts the process once
  # with TensorFlow's matching retries): one line, exit 74, no traceback,
  # naming the last durable checkpoint, which is still there.
  assert report['third_restart'] == [
      "restarting once with TensorFlow's storage settings from gin: "
      'GCS_RETRY_CONFIG_MAX_RETRIES=3']
  assert report['exit_codes'][2] == 74, report['stderr_tail'][2]
  assert 'Traceback' not in report['stderr_tail'][2]
  [line] = report['third_error']
  assert line.startswith('error: storage stayed unreachable for ')
  assert ('The last durable checkpoint is gs://test/run/checkpoints/ckpt-8 '
          '(step 8, restored at the start)') in line
  assert line.endswith('(exit 74)')
  assert 'ckpt-8.index' in report['checkpoints']
