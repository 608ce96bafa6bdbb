"""Driver for the gs:// test; runs inside tools/gcs_emulator.py.

  python -m tests.gcs_main LOCAL_DATA_DIR
Uploads the data to gs://test/data, trains with model_dir gs://test/run, runs
again to resume from the gs:// checkpoint with the upload of one checkpoint
held by the proxy for 8 s (tools/gcs_emulator.Faults), and prints a JSON
report.
"""

import json
import os
import subprocess
import sys

from training import startup

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
  # A held request: the save of ckpt-6 waits 8 s; the watchdog names it.
  with open(os.environ['GCS_FAULTS_FILE'], 'w') as f:
    json.dump([{'path': 'ckpt-6', 'hang_seconds': 8, 'times': 1}], f)
  second = train(8, '--gin.training.run_options.RunOptions.'
                 'stall_warning_seconds=2')
  log = tf.io.gfile.GFile('gs://test/run/mlperf.log').read()
  print(json.dumps({
      'exit_codes': [first.returncode, second.returncode],
      'stdout': [first.stdout[-2000:], second.stdout[-2000:]],
      'stalled': [l for l in second.stdout.splitlines()
                  if l.startswith('stalled:')],
      'stderr_tail': [first.stderr[-3000:], second.stderr[-3000:]],
      'files': sorted(tf.io.gfile.listdir('gs://test/run')),
      'checkpoints': sorted(tf.io.gfile.listdir('gs://test/run/checkpoints')),
      'run_stops': log.count('"key": "run_stop"'),
      'resumed': log.count('"key": "resumed_from_checkpoint"'),
      'lock_left': tf.io.gfile.exists('gs://test/run/RUN_LOCK'),
  }))


if __name__ == '__main__':
  main(sys.argv[1])
