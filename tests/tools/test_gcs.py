"""gs:// model_dir and data through a real GCS emulator (tools/gcs_emulator.py)."""

import json
import os
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
  # Exit 1 = ran to the step budget without reaching the target.
  assert report['exit_codes'] == [1, 1], report['stderr_tail']
  assert 'resumed from gs://test/run/checkpoints/ckpt-4 at step 4' in (
      report['stdout'][1])
  for name in ('config.gin', 'operative_config.gin', 'mlperf.log',
               'mlperf.log.1'):
    assert name in report['files']
  assert 'ckpt-8.index' in report['checkpoints']
  # The held save was named while it waited, and the run went on.
  assert report['stalled'] and report['stalled'][0].startswith(
      'stalled: saving checkpoint gs://test/run/checkpoints/ckpt-6 has taken ')
  # Each attempt has its own log; the resumed one says so. The runs took
  # and released the gs:// lock.
  assert report['run_stops'] == 1 and report['resumed'] == 1
  assert not report['lock_left']
