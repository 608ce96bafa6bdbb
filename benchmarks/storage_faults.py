"""Benchmark: a gs:// run through storage faults, against the same run
without them.

  unshare -mn python -m tools.gcs_emulator --bucket=bench -- \
      python -m benchmarks.storage_faults --data_dir=data/quickstart \
      [--steps=40] [--outage_seconds=240] [--hang_seconds=400]

Inside the GCS emulator (tools/gcs_emulator.py; its proxy injects the faults
from GCS_FAULTS_FILE), trains the ResNet quickstart at depth 10,
deterministically, with data and model_dir on gs://, checkpoints every 2
steps, three times in separate processes:
- fault-free;
- with an outage: from the first checkpoint upload on, every storage
  request answers 503 for --outage_seconds (the issue's 4 minutes);
- with one checkpoint upload request held --hang_seconds (400 s);
- with an outage of writes alone (uploads answer 503, reads go through) for
  --outage_seconds: training goes on at full speed meanwhile.
For each: exit code, wall time, whether a traceback was printed, the final
weights against the fault-free run's (max abs difference), mlperf.log's
run_stop count and status, and, timed as the lines arrive, when the first
`stalled:` line and the last training step's line came after the fault
began (the fault log's first entry). --runs picks some of them (the first,
fault-free, is the reference for the weights).
Prints one JSON line per run and a summary.
"""

import json
import os
import subprocess
import sys
import threading
import time

from absl import app
from absl import flags

from benchmarks import common
from core import entry_point

from core import startup

FLAGS = flags.FLAGS
ROOT = common.ROOT


def define_flags():
  flags.DEFINE_string('data_dir', None, 'The quickstart data (local).')
  flags.DEFINE_integer('steps', 40, 'Training steps per run.')
  flags.DEFINE_integer('outage_seconds', 240, 'The outage.')
  flags.DEFINE_integer('hang_seconds', 400, 'The held request.')
  flags.DEFINE_list('runs', ['fault-free', 'outage', 'hang', 'write-outage'],
                    'Which runs.')
  flags.mark_flag_as_required('data_dir')


def _train(model_dir: str, steps: int) -> dict:
  """Runs train.py, timestamping its output lines as they arrive."""
  command = [
      sys.executable, os.path.join(ROOT, 'train.py'),
      '--gin_file=gin/resnet_quickstart.gin', f'--model_dir={model_dir}',
      "--gin.DATA_DIR='gs://bench/data'", '--gin.DEPTH=10',
      '--gin.DETERMINISTIC=True', f'--gin.TRAIN_STEPS={steps}',
      '--gin.STEPS_PER_LOOP=2', f'--gin.EVAL_EVERY_STEPS={steps}',
      '--gin.CHECKPOINT_EVERY_STEPS=2',
      '--gin.training.schedules.PolynomialWarmup.warmup_epochs=0.01']
  start = time.time()
  process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
  lines, errors = [], []
  reader = threading.Thread(target=lambda: errors.extend(process.stderr))
  reader.start()
  for line in process.stdout:
    lines.append((time.time(), line.rstrip('\n')))
  process.wait()
  reader.join()
  return {'code': process.returncode, 'start': start,
          'seconds': time.time() - start, 'lines': lines,
          'stderr': ''.join(errors)}


def _weights(model_dir: str, step: int) -> dict:
  tf = startup.import_tensorflow()
  reader = tf.train.load_checkpoint(f'{model_dir}/checkpoints/ckpt-{step}')
  return {name: reader.get_tensor(name)
          for name in reader.get_variable_to_shape_map()
          if name.startswith('model/')}


def _report(name, run, model_dir, steps, baseline, faults_log):
  tf = startup.import_tensorflow()
  path = f'{model_dir}/mlperf.log'
  log = tf.io.gfile.GFile(path).read() if tf.io.gfile.exists(path) else ''
  stops = [json.loads(l.split(':::MLLOG ', 1)[1]) for l in log.splitlines()
           if '"key": "run_stop"' in l]
  began = None
  if os.path.exists(faults_log):
    with open(faults_log) as f:
      entries = [json.loads(l) for l in f]
    began = entries[0]['time'] if entries else None
  stalled = [t for t, l in run['lines'] if l.startswith('stalled:')]
  step_lines = [t for t, l in run['lines'] if l.startswith('step ')]
  weights = _weights(model_dir, steps) if run['code'] in (0, 1) else {}
  difference = (max(float(abs(weights[k] - baseline[k]).max())
                    for k in baseline) if weights and baseline else None)
  return {
      'run': name, 'exit_code': run['code'],
      'seconds': round(run['seconds'], 1),
      'traceback': 'Traceback' in run['stderr'],
      'error_lines': [l for l in run['stderr'].splitlines()
                      if l.startswith('error:')],
      'run_stop': [s['metadata'].get('status') for s in stops],
      'max_weight_difference': difference,
      'first_stalled_line_after_fault_s': (
          round(stalled[0] - began, 1) if stalled and began else None),
      'stalled_lines': len(stalled),
      'last_step_line_after_fault_s': (
          round(step_lines[-1] - began, 1) if step_lines and began else None),
      'stderr_tail': (run['stderr'][-1500:] if run['code'] not in (0, 1)
                      else ''),
      'storage_lines': [l for _, l in run['lines']
                        if l.startswith(('storage', 'stalled'))][:3],
  }


def main(argv):
  del argv
  tf = startup.import_tensorflow()
  faults = os.environ['GCS_FAULTS_FILE']
  tf.io.gfile.makedirs('gs://bench/data')
  for name in os.listdir(FLAGS.data_dir):
    if name.startswith(('train-', 'validation-')):
      tf.io.gfile.copy(os.path.join(FLAGS.data_dir, name),
                       f'gs://bench/data/{name}', overwrite=True)
  plans = [
      ('fault-free', 'fault-free', []),
      ('outage',
       f'outage {FLAGS.outage_seconds} s from the first checkpoint upload',
       [{'method': 'POST', 'path': 'ckpt-', 'status': 503,
         'outage_seconds': FLAGS.outage_seconds, 'times': 1}]),
      ('hang', f'one checkpoint upload request held {FLAGS.hang_seconds} s',
       [{'method': 'POST', 'path': 'ckpt-', 'hang_seconds': FLAGS.hang_seconds,
         'times': 1}]),
      ('write-outage',
       f'outage of writes {FLAGS.outage_seconds} s from the first checkpoint '
       'upload',
       [{'method': ['POST', 'PUT'], 'path': 'ckpt-', 'status': 503,
         'outage_seconds': FLAGS.outage_seconds, 'times': 1}]),
  ]
  plans = [p for p in plans if p[0] == 'fault-free' or p[0] in FLAGS.runs]
  reports, baseline = [], None
  for i, (_, name, rules) in enumerate(plans):
    with open(faults, 'w') as f:
      json.dump(rules, f)
    if os.path.exists(faults + '.log'):
      os.remove(faults + '.log')
    model_dir = f'gs://bench/run{i}'
    run = _train(model_dir, FLAGS.steps)
    with open(faults, 'w') as f:
      json.dump([], f)
    report = _report(name, run, model_dir, FLAGS.steps, baseline,
                     faults + '.log')
    if baseline is None and run['code'] in (0, 1):
      baseline = _weights(model_dir, FLAGS.steps)
    print(json.dumps(report), flush=True)
    reports.append(report)
  clean = reports[0]
  for r in reports[1:]:
    same = (r['exit_code'] == clean['exit_code'] and not r['traceback'] and
            r['run_stop'] == clean['run_stop'] and
            r['max_weight_difference'] == 0.0)
    print(f"{r['run']}: exit {r['exit_code']} (fault-free "
          f"{clean['exit_code']}), {r['seconds']} s ({clean['seconds']} s), "
          f"final weights {'identical' if same else 'DIFFERENT or missing'}, "
          f"first stalled line {r['first_stalled_line_after_fault_s']} s "
          f"and last step line {r['last_step_line_after_fault_s']} s after "
          'the fault began', flush=True)


if __name__ == '__main__':
  entry_point.parse_flags_early(define_flags)
  app.run(entry_point.tool_main(main))
