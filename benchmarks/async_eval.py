"""Benchmark: time to train with the host metric beside training or not.

  python -m benchmarks.async_eval \
      --gin_file=gin/transformer_quickstart.gin \
      --data_dir=data/transformer_quickstart [--rounds=1] \
      [--gin_param=FIRST_EVAL_STEP=150 ...] \
      [--variant=sync:ASYNC_EVAL=False --variant=async:ASYNC_EVAL=True ...]

Runs `train.py` on the same deterministic configuration once per variant
(its name, then gin bindings separated by commas; default: ASYNC_EVAL False
and True), in separate processes interleaved round by round, and reads
each run's mlperf.log: time to train (run_start to run_stop), the step of
the evaluation that met the target (the same weights every way: the
schedule and the data order do not depend on the mode), the step where the
run stopped, and the wall time of each evaluation (eval_start to eval_stop:
synchronous, the devices wait all of it; asynchronous, training goes on
meanwhile). Prints the medians and their ratios to the first variant.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile

from absl import app
from absl import flags

from benchmarks import common
from core import entry_point
from training import time_to_accuracy

ROOT = common.ROOT
FLAGS = flags.FLAGS
MLLOG = time_to_accuracy.MLLOG_PREFIX


def run(gin_file: str, data_dir: str, model_dir: str, params) -> dict:
  done = subprocess.run(
      [sys.executable, os.path.join(ROOT, 'train.py'),
       f'--gin_file={gin_file}', f'--model_dir={model_dir}',
       f"--gin.DATA_DIR='{data_dir}'", '--gin.DETERMINISTIC=True',
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


def parse_variants(texts) -> dict:
  """'name:A=1,B=2' -> {name: ['A=1', 'B=2']}."""
  variants = {}
  for text in texts:
    name, _, bindings = text.partition(':')
    if not name or name in variants:
      raise app.UsageError(f'--variant {text!r}: give each a new name, '
                           'then a colon and its bindings.')
    variants[name] = [b for b in bindings.split(',') if b]
  return variants


def main(argv):
  del argv
  variants = parse_variants(FLAGS.variant)
  results = {name: [] for name in variants}
  with tempfile.TemporaryDirectory() as tmp:
    for r in range(FLAGS.rounds):
      for name, bindings in variants.items():
        out = run(FLAGS.gin_file, FLAGS.data_dir,
                  os.path.join(tmp, f'{r}_{name}'),
                  [*FLAGS.gin_param, *bindings])
        results[name].append(out)
        print(f'round {r} {name}: {out["seconds"]:.1f} s to train, '
              f'success {out["success"]}, stopped at step {out["stop_step"]}'
              f', evals (epoch, quality) {out["evals"]}, eval wall times '
              f'{[round(s, 1) for s in out["eval_seconds"]]} s', flush=True)
  first = next(iter(variants))
  base = statistics.median(o['seconds'] for o in results[first])
  rows = []
  for name, outs in results.items():
    seconds = statistics.median(o['seconds'] for o in outs)
    evals = statistics.median(sum(o['eval_seconds']) for o in outs)
    same = all(a['evals'][-1] == b['evals'][-1]
               for a, b in zip(outs, results[first]))
    print(f'{name}: time to train {seconds:.1f} s ({seconds / base:.2f} of '
          f'{first}), eval_start to eval_stop {evals:.1f} s in all '
          f'({evals / seconds:.0%} of its time to train); the same last '
          f'eval (epoch, quality) as {first}: {same}')
    if name != first:
      rows.append((f'evaluation, {name}, {os.path.basename(FLAGS.gin_file)}',
                   f'{seconds:.1f} s to train ({evals / seconds:.0%} '
                   'evaluating)', f'{first} {base:.1f} s',
                   f'{seconds / base:.2f}x'))
  print(common.page_rows(rows))


if __name__ == '__main__':
  flags.DEFINE_string('gin_file', 'gin/transformer_quickstart.gin',
                      'Experiment file.')
  flags.DEFINE_string('data_dir', 'data/transformer_quickstart', 'DATA_DIR.')
  flags.DEFINE_integer('rounds', 1, 'Rounds of every variant.')
  flags.DEFINE_multi_string('gin_param', [], 'Extra gin bindings.')
  flags.DEFINE_multi_string(
      'variant', ['sync:ASYNC_EVAL=False', 'async:ASYNC_EVAL=True'],
      'NAME:BINDING,BINDING...; ratios are to the first.')
  entry_point.parse_flags_early(lambda: None)  # Flag errors: exit 2.
  app.run(entry_point.tool_main(main))
