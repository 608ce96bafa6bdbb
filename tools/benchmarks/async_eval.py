"""Benchmark: time to train with the host metric beside training or not.

  python -m tools.benchmarks.async_eval \
      --gin_file=gin/transformer_quickstart.gin \
      --data_dir=data/transformer_quickstart [--rounds=1] \
      [--gin_param=FIRST_EVAL_STEP=150 ...]

Runs `train.py` on the same deterministic configuration with ASYNC_EVAL
False and True, in separate processes interleaved round by round, and reads
each run's mlperf.log: time to train (run_start to run_stop), the step of
the evaluation that met the target (the same weights either way: the
schedule and the data order do not depend on the mode), the step where the
run stopped, and the wall time of each evaluation (eval_start to eval_stop:
synchronous, the devices wait all of it; asynchronous, training goes on
meanwhile). Prints the medians and their ratio (async / sync).
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile

from absl import app
from absl import flags

from training import time_to_accuracy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
FLAGS = flags.FLAGS
MLLOG = time_to_accuracy.MLLOG_PREFIX


def run(gin_file: str, data_dir: str, model_dir: str, asynchronous: bool,
        params) -> dict:
  done = subprocess.run(
      [sys.executable, os.path.join(ROOT, 'train.py'),
       f'--gin_file={gin_file}', f'--model_dir={model_dir}',
       f"--gin.DATA_DIR='{data_dir}'", '--gin.DETERMINISTIC=True',
       f'--gin.ASYNC_EVAL={asynchronous}',
       *(f'--gin_param={p}' for p in params)],
      capture_output=True, text=True, cwd=ROOT,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'))
  if done.returncode not in (0, 1):
    raise RuntimeError(f'train.py exited {done.returncode}:\n'
                       f'{done.stderr[-3000:]}')
  log = os.path.join(model_dir, 'mlperf.log')
  run_log = time_to_accuracy.read_log(log)
  # read_log has no eval_start / eval_stop: their spans are read here.
  starts, eval_seconds = {}, []
  with open(log) as f:
    for line in f:
      if MLLOG not in line:
        continue
      entry = json.loads(line.split(MLLOG, 1)[1])
      epoch = entry.get('metadata', {}).get('epoch_num')
      if entry['key'] == 'eval_start':
        starts[epoch] = entry['time_ms']
      elif entry['key'] == 'eval_stop':
        eval_seconds.append((entry['time_ms'] - starts[epoch]) / 1000)
  last_step = None
  for text in done.stdout.splitlines():
    if text.startswith('run '):
      last_step = int(text.rsplit(' at step ', 1)[1].split(';')[0])
  return {'seconds': run_log.minutes * 60,
          'evals': [(epoch, quality) for _, epoch, quality in run_log.evals],
          'eval_seconds': eval_seconds,
          'stop_step': last_step, 'success': done.returncode == 0}


def main(argv):
  del argv
  results = {False: [], True: []}
  with tempfile.TemporaryDirectory() as tmp:
    for r in range(FLAGS.rounds):
      for asynchronous in (False, True):
        out = run(FLAGS.gin_file, FLAGS.data_dir,
                  os.path.join(tmp, f'{r}_{asynchronous}'), asynchronous,
                  FLAGS.gin_param)
        results[asynchronous].append(out)
        mode = 'async' if asynchronous else 'sync'
        print(f'round {r} {mode}: {out["seconds"]:.1f} s to train, '
              f'success {out["success"]}, stopped at step {out["stop_step"]}'
              f', evals (epoch, quality) {out["evals"]}, eval wall times '
              f'{[round(s, 1) for s in out["eval_seconds"]]} s', flush=True)
  sync = statistics.median(o['seconds'] for o in results[False])
  asyn = statistics.median(o['seconds'] for o in results[True])
  share = statistics.median(sum(o['eval_seconds']) / o['seconds']
                            for o in results[False])
  same = all(a['evals'][-1] == s['evals'][-1] for a, s in
             zip(results[True], results[False]))
  print(f'time to train: sync {sync:.1f} s, async {asyn:.1f} s, ratio '
        f'{asyn / sync:.2f}; synchronous evals took {share:.0%} of the '
        f'time to train; the same last eval (epoch, quality) both ways: '
        f'{same}')


if __name__ == '__main__':
  flags.DEFINE_string('gin_file', 'gin/transformer_quickstart.gin',
                      'Experiment file.')
  flags.DEFINE_string('data_dir', 'data/transformer_quickstart', 'DATA_DIR.')
  flags.DEFINE_integer('rounds', 1, 'Rounds of (sync, async).')
  flags.DEFINE_multi_string('gin_param', [], 'Extra gin bindings.')
  app.run(main)
