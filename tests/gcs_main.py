"""Driver for the gs:// test; runs inside tools/gcs_emulator.py.

  python -m tests.gcs_main LOCAL_DATA_DIR
Uploads the data to gs://test/data, trains with model_dir gs://test/run, and
then, with faults injected by the emulator's proxy (tools/gcs_emulator.Faults):
- resumes from the gs:// checkpoint through a 12 s outage of every request
  that starts as the run begins its mlperf.log (reads wait; writes land
  late while training goes on), a request of ckpt-8 held 5 s and five
  writes that fail at a steady rate;
- runs on with an outage of writes longer than a 6 s budget (gin), which
  stops the run with exit 74 naming the last durable checkpoint.
Prints a JSON report.
"""

import json
import os
import subprocess
import sys

from core import startup

startup.import_tensorflow()  # First: TensorFlow without Keras.
# pylint: disable=wrong-import-position
import tensorflow as tf

from tests import helpers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def train(steps, *extra):
  return subprocess.run(
      [sys.executable, os.path.join(ROOT, 'train.py'),
       '--gin_file=gin/resnet_quickstart.gin', '--model_dir=gs://test/run',
       "--gin.DATA_DIR='gs://test/data'", f'--gin.{helpers.SMALL_RESNET}',
       f'--gin.TRAIN_STEPS={steps}',
       '--gin.STEPS_PER_LOOP=2', '--gin.EVAL_EVERY_STEPS=4',
       '--gin.CHECKPOINT_EVERY_STEPS=2',
       '--gin.training.schedules.PolynomialWarmup.warmup_epochs=0.01',
       *extra],
      capture_output=True, text=True, cwd=ROOT, timeout=600)


def main(local_data):
  tf.io.gfile.makedirs('gs://test/data')
  for name in os.listdir(local_data):
    if name.startswith(('train-', 'validation-')):
      tf.io.gfile.copy(os.path.join(local_data, name), f'gs://test/data/{name}')
  first = train(4)
  faults = os.environ['GCS_FAULTS_FILE']
  with open(faults, 'w') as f:
    json.dump([
        # An outage across the run's saves and reads: from the first
        # request about mlperf.log on, every request fails for 12 s.
        {'path': 'mlperf.log', 'status': 503, 'outage_seconds': 12,
         'times': 1},
        # A held request: the watchdog names the upload while it waits.
        {'path': 'ckpt-8', 'hang_seconds': 5, 'times': 1},
        # Writes fail at a steady rate (1 in 8; 5 of them, each costing a
        # retry's delay).
        {'method': ['POST', 'PUT'], 'status': 503, 'rate': 0.125,
         'times': 5}], f)
  second = train(8, '--gin.training.run_options.RunOptions.'
                 'stall_warning_seconds=2')
  log = tf.io.gfile.GFile('gs://test/run/mlperf.log').read()
  checkpoints = sorted(tf.io.gfile.listdir('gs://test/run/checkpoints'))
  # Writes fail past a 6 s budget from the start: the run stops (exit 74),
  # naming the last durable checkpoint; nothing durable is lost.
  with open(faults, 'w') as f:
    json.dump([{'method': ['POST', 'PUT'], 'path': 'mlperf.log',
                'status': 503, 'outage_seconds': 120, 'times': 1}], f)
  third = train(12, '--gin.core.storage.StorageOptions.'
                'outage_budget_seconds=6')
  with open(faults, 'w') as f:
    json.dump([], f)
  print(json.dumps({
      'exit_codes': [first.returncode, second.returncode, third.returncode],
      'stdout': [first.stdout[-2000:], second.stdout[-3000:],
                 third.stdout[-3000:]],
      'resumed_lines': [[l for l in run.stdout.splitlines()
                         if l.startswith('resumed from')]
                        for run in (first, second, third)],
      'stalled': [l for l in second.stdout.splitlines()
                  if l.startswith('stalled:')],
      'stderr_tail': [first.stderr[-3000:], second.stderr[-3000:],
                      third.stderr[-3000:]],
      'third_error': [l for l in third.stderr.splitlines()
                      if l.startswith('error:')],
      'third_restart': [l for l in third.stdout.splitlines()
                        if l.startswith('restarting once')],
      'checkpoints_after_outage': checkpoints,
      'fault_log': open(faults + '.log').read().count('outage 503'),
      'rate_faults': open(faults + '.log').read().count('rate'),
      'files': sorted(tf.io.gfile.listdir('gs://test/run')),
      'checkpoints': sorted(tf.io.gfile.listdir('gs://test/run/checkpoints')),
      'run_stops': log.count('"key": "run_stop"'),
      'resumed': log.count('"key": "resumed_from_checkpoint"'),
      'lock_left': tf.io.gfile.exists('gs://test/run/RUN_LOCK'),
  }))


if __name__ == '__main__':
  main(sys.argv[1])
