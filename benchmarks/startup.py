"""Benchmark: a run's start-up, before and after this suite's two start-up
changes (docs/benchmarks-history.md, "Start-up").

  python -m benchmarks.startup --data_dir=<quickstart data> \
      [--gin_file=gin/resnet_quickstart.gin] [--gin_param=NAME=VALUE ...] \
      [--rounds=3] [--steps=60]

Runs `train.py` in fresh processes, in turn round by round:
- "before": TensorFlow imported as `import tensorflow` does (all of Keras 3
  and scikit-learn with it), and AutoGraph converting every function a
  step and an input pipeline call (`tf.autograph.experimental.
  do_not_convert` made a no-op), as the suite did before 2026-12-01;
- "after": train.py as it is (core/startup.py; AutoGraph only on the
  device loops).
It prints the medians of the process's wall and CPU time, the time to
`init_start` (the imports), from `init_start` to `run_start` (building,
tracing and compiling the loops, reading the data's metadata), and the
training time, with their ratios. Both variants trace the same ops: their
losses must be equal, or the benchmark stops.
"""

import json
import os
import re
import resource
import subprocess
import sys
import time

from absl import app
from absl import flags

from benchmarks import common
from core import entry_point

FLAGS = flags.FLAGS
ROOT = common.ROOT

# Both variants start train.py through runpy, the "before" one after this.
BEFORE = """
import tensorflow as tf
tf.autograph.experimental.do_not_convert = lambda func=None: func
"""
LAUNCH = """
import runpy, sys
sys.argv = [{train!r}] + {args!r}
sys.path.insert(0, {root!r})
runpy.run_path({train!r}, run_name='__main__')
"""


def mlperf_times(path: str) -> dict:
  times = {}
  with open(path) as f:
    for line in f:
      if line.startswith(':::MLLOG'):
        event = json.loads(line[len(':::MLLOG'):])
        times.setdefault(event['key'], event['time_ms'] / 1000)
  return times


def one_run(before: bool, model_dir: str) -> dict:
  f = FLAGS
  args = [*(f'--gin_file={g}' for g in f.gin_file),
          f'--model_dir={model_dir}', f"--gin.DATA_DIR='{f.data_dir}'",
          f'--gin.TRAIN_STEPS={f.steps}', f'--gin.EVAL_EVERY_STEPS={f.steps}',
          f'--gin.STEPS_PER_LOOP={f.steps // 2}',
          '--gin.CHECKPOINT_EVERY_STEPS=0', '--gin.STOP_AT_TARGET=False',
          '--gin.DETERMINISTIC=True', *(f'--gin.{p}' for p in f.gin_param)]
  program = (BEFORE if before else '') + LAUNCH.format(
      train=os.path.join(ROOT, 'train.py'), args=args, root=ROOT)
  env = {**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '2'}
  usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  started = time.time()
  done = subprocess.run([sys.executable, '-c', program], env=env, cwd=ROOT,
                        capture_output=True, text=True)
  wall = time.time() - started
  after = resource.getrusage(resource.RUSAGE_CHILDREN)
  losses = re.findall(r'^step \d+/\d+  loss ([\d.]+)', done.stdout, re.M)
  log = os.path.join(model_dir, 'mlperf.log')
  if done.returncode not in (0, 1) or not losses or not os.path.exists(log):
    raise SystemExit(f'the run failed:\n{done.stdout[-2000:]}'
                     f'{done.stderr[-2000:]}')
  times = mlperf_times(log)
  return {'wall': wall,
          'cpu': (after.ru_utime + after.ru_stime - usage.ru_utime -
                  usage.ru_stime),
          'to init_start': times['init_start'] - started,
          'init to run_start': times['run_start'] - times['init_start'],
          'training': times['run_stop'] - times['run_start'],
          'loss': losses[-1]}


def main(argv):
  del argv
  results = common.interleaved_runs({'before': True, 'after': False},
                                    FLAGS.rounds, one_run)
  print(f'{" ".join(FLAGS.gin_file)}, {FLAGS.steps} steps, {FLAGS.rounds} '
        f'rounds, final loss {results["after"][0]["loss"]} in every run; '
        'medians (before / after):')
  medians = common.print_median_ratios(
      results['before'], results['after'],
      ('wall', 'cpu', 'to init_start', 'init to run_start', 'training'))
  print(common.page_rows([
      (f'{what}, {FLAGS.steps} steps', f'{medians[key][1]:.1f} s',
       f'plain `import tensorflow`, AutoGraph everywhere '
       f'{medians[key][0]:.1f} s', f'{medians[key][0] / medians[key][1]:.2f}x')
      for what, key in (('start to `init_start` (imports)', 'to init_start'),
                        ('`init_start` to `run_start` (build, compile)',
                         'init to run_start'))]))


if __name__ == '__main__':
  flags.DEFINE_string('data_dir', None, "the experiment's DATA_DIR")
  flags.DEFINE_multi_string('gin_file', ['gin/resnet_quickstart.gin'],
                            'experiment files, in order')
  flags.DEFINE_multi_string('gin_param', [], 'more bindings, NAME=VALUE')
  flags.DEFINE_integer('rounds', 3, 'runs of each variant, in turn')
  flags.DEFINE_integer('steps', 60, 'training steps (past the warm-up)')
  flags.mark_flag_as_required('data_dir')
  entry_point.parse_flags_early(lambda: None)  # Flag errors: exit 2.
  app.run(entry_point.tool_main(main))
