"""Benchmark: a CPU training run with glibc malloc's defaults and with the
settings the Makefile and the tests use.

  python -m benchmarks.malloc_env --data_dir=<quickstart data> \
      [--rounds=3] [--replicas=2] [--depth=10] [--steps=100]

Runs `train.py` on the ResNet quickstart (`--replicas` logical CPU
devices, deterministic, no stop at the target) with and without
MALLOC_TRIM_THRESHOLD_ / MALLOC_TOP_PAD_ (the Makefile's values), in
turn round by round, each in a fresh process, and prints the medians of
the process's wall, user and system time and of the run's time to train,
with their ratios. The weights do not depend on the setting: both print
the same final loss, or the benchmark stops.
"""

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

# The Makefile's and tests/conftest.py's values.
SETTINGS = {'MALLOC_TRIM_THRESHOLD_': str(4 << 30),
            'MALLOC_TOP_PAD_': str(256 << 20)}
ROOT = common.ROOT


def one_run(env: dict, model_dir: str) -> dict:
  f = FLAGS
  cmd = [sys.executable, os.path.join(ROOT, 'train.py'),
         '--gin_file=gin/resnet_quickstart.gin',
         '--gin_file=gin/hardware/cpu_mirrored.gin',
         f'--model_dir={model_dir}', f"--gin.DATA_DIR='{f.data_dir}'",
         f'--gin.CPU_REPLICAS={f.replicas}', f'--gin.DEPTH={f.depth}',
         f'--gin.TRAIN_STEPS={f.steps}', f'--gin.EVAL_EVERY_STEPS={f.steps}',
         '--gin.STEPS_PER_LOOP=10', '--gin.CHECKPOINT_EVERY_STEPS=0',
         '--gin.STOP_AT_TARGET=False', '--gin.DETERMINISTIC=True']
  before = resource.getrusage(resource.RUSAGE_CHILDREN)
  started = time.time()
  done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True,
                        text=True)
  wall = time.time() - started
  after = resource.getrusage(resource.RUSAGE_CHILDREN)
  ttt = re.search(r'time to train ([\d.]+) s', done.stdout)
  losses = re.findall(r'^step \d+/\d+  loss ([\d.]+)', done.stdout, re.M)
  if ttt is None or not losses:
    raise SystemExit(f'the run failed:\n{done.stdout[-2000:]}'
                     f'{done.stderr[-2000:]}')
  return {'wall': wall, 'user': after.ru_utime - before.ru_utime,
          'sys': after.ru_stime - before.ru_stime,
          'time to train': float(ttt.group(1)), 'loss': losses[-1]}


def main(argv):
  del argv
  base = {k: v for k, v in os.environ.items() if k not in SETTINGS}
  base.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  variants = {'glibc defaults': base, 'trim 4 GiB, pad 256 MiB':
              {**base, **SETTINGS}}
  results = common.interleaved_runs(variants, FLAGS.rounds, one_run)
  (_, plain), (_, tuned) = results.items()
  print(f'{FLAGS.replicas} replicas, ResNet-{FLAGS.depth}, {FLAGS.steps} '
        f'steps, {FLAGS.rounds} rounds; medians (defaults / tuned):')
  medians = common.print_median_ratios(
      plain, tuned, ('wall', 'user', 'sys', 'time to train'))
  print(common.page_rows([
      (f'glibc malloc settings (the Makefile\'s), {FLAGS.steps} steps, {what}',
       f'{medians[key][1]:.1f} s', f"glibc's defaults {medians[key][0]:.1f} s",
       f'{medians[key][0] / medians[key][1]:.2f}x')
      for what, key in (('process wall', 'wall'), ('system', 'sys'))]))


if __name__ == '__main__':
  flags.DEFINE_string('data_dir', None, 'the quickstart TFRecords')
  flags.DEFINE_integer('rounds', 3, 'runs of each setting, in turn')
  flags.DEFINE_integer('replicas', 2, 'logical CPU devices')
  flags.DEFINE_integer('depth', 10, 'ResNet depth')
  flags.DEFINE_integer('steps', 100, 'training steps')
  flags.mark_flag_as_required('data_dir')
  entry_point.parse_flags_early(lambda: None)  # Flag errors: exit 2.
  app.run(entry_point.tool_main(main))
