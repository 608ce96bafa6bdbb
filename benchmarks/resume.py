"""Benchmark: resuming late costs what resuming early costs.

  python -m benchmarks.resume --data_dir=data/quickstart [--rounds=3]

Trains the ResNet quickstart (deterministic) past step 2,000, keeping the
checkpoints of steps 20 and 2,000, then times `train.py` resumed from each
(same configuration), from process start to its first training loop's
progress line, interleaved round by round (each round resumes from a fresh
copy). Prints the medians and
their ratio (late / early; target <= 1.5).

Then, in process, the input positioning alone: time to the first batch of
the quickstart's `train_dataset(start_step=s)` for s from 20 to 200,000,
interleaved, as a ratio to s = 20. This is where resuming used to grow with
the step (every record consumed before the checkpoint was read again).
"""

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags
from benchmarks import common
from core import entry_point

ROOT = common.ROOT
FLAGS = flags.FLAGS


def train_cmd(data_dir: str, model_dir: str, *params: str) -> list[str]:
  return [sys.executable, os.path.join(ROOT, 'train.py'),
          '--gin_file=gin/resnet_quickstart.gin', f'--model_dir={model_dir}',
          f"--gin.DATA_DIR='{data_dir}'", '--gin.DETERMINISTIC=True',
          '--gin.STOP_AT_TARGET=False', *params]


def env():
  return dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL='2')


def prepare(data_dir: str, work: str, late: int, early: int, total: int,
            steps_per_loop: int) -> dict:
  """Model dirs holding exactly the checkpoint at `early` and at `late`."""
  source = os.path.join(work, 'source')
  subprocess.run(train_cmd(
      data_dir, source, f'--gin.TRAIN_STEPS={total}',
      f'--gin.STEPS_PER_LOOP={steps_per_loop}',
      f'--gin.EVAL_EVERY_STEPS={total}',
      f'--gin.CHECKPOINT_EVERY_STEPS={early}',
      f'--gin.MAX_CHECKPOINTS={total // early}'), check=True, env=env(),
                 cwd=ROOT, capture_output=True)
  dirs = {}
  for step in (early, late):
    target = os.path.join(work, f'at_{step}')
    os.makedirs(os.path.join(target, 'checkpoints'))
    for name in os.listdir(os.path.join(source, 'checkpoints')):
      if name.startswith(f'ckpt-{step}.'):
        shutil.copy(os.path.join(source, 'checkpoints', name),
                    os.path.join(target, 'checkpoints', name))
    with open(os.path.join(target, 'checkpoints', 'checkpoint'), 'w') as f:
      f.write(f'model_checkpoint_path: "ckpt-{step}"\n')
    dirs[step] = target
  return dirs


def time_to_first_step(data_dir: str, model_dir: str, start: int,
                       total: int, steps_per_loop: int) -> float:
  """Seconds from process start to the first loop's progress line; the run
  (configured as the one that wrote the checkpoint) is stopped there."""
  began = time.time()
  proc = subprocess.Popen(
      train_cmd(data_dir, model_dir, f'--gin.TRAIN_STEPS={total}',
                f'--gin.STEPS_PER_LOOP={steps_per_loop}',
                f'--gin.EVAL_EVERY_STEPS={total}',
                '--gin.CHECKPOINT_EVERY_STEPS=0'),
      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env(),
      cwd=ROOT)
  pattern = re.compile(rf'^step {start + steps_per_loop}/')
  elapsed = None
  for line in proc.stdout:
    if pattern.match(line):
      elapsed = time.time() - began
      break
  proc.kill()
  proc.wait()
  if elapsed is None:
    raise RuntimeError(f'The run resumed at {start} printed no progress line.')
  return elapsed


def time_to_first_batch(data_dir: str, start_step: int) -> float:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from input_pipeline.imagenet import ImageNetInput  # pylint: disable=g-import-not-at-top
  data = ImageNetInput(data_dir=data_dir, image_size=32, num_classes=10,
                       num_train_examples=1437, deterministic=True,
                       shuffle_buffer=1500, interleave_cycle=4)
  began = time.time()
  ds = data.train_dataset(tf.distribute.InputContext(), global_batch_size=64,
                          start_step=start_step)
  next(iter(ds))
  return time.time() - began


def positioning(data_dir: str, steps, rounds: int) -> tuple:
  """Prints the time to the first batch at each step; returns the last
  step's median and the first's."""
  times = {s: [] for s in steps}
  for _ in range(rounds):
    for s in steps:
      times[s].append(time_to_first_batch(data_dir, s))
  base = statistics.median(times[steps[0]])
  for s in steps:
    m = statistics.median(times[s])
    print(f'input positioned at step {s:6d}: first batch after {m:.3f} s '
          f'({m / base:.2f}x step {steps[0]})')
  return m, base


def main(argv):
  del argv
  late_input, early_input = positioning(
      FLAGS.data_dir, [20, 2000, 20000, 200000], FLAGS.rounds)
  rows = [('input positioned at step 200,000', f'{late_input:.3f} s',
           f'at step 20: {early_input:.3f} s',
           f'**{late_input / early_input:.2f}** (flat)')]
  if FLAGS.positions_only:
    print(common.page_rows(rows))
    return
  work = tempfile.mkdtemp(prefix='resume_bench_')
  late, early, spl = FLAGS.late_step, FLAGS.early_step, FLAGS.steps_per_loop
  total = late + 10 * spl  # The runs' budget: both checkpoints lie inside.
  dirs = prepare(FLAGS.data_dir, work, late, early, total, spl)
  times = {early: [], late: []}
  for _ in range(FLAGS.rounds):
    for step in (early, late):
      copy = os.path.join(work, f'round_{step}')
      shutil.rmtree(copy, ignore_errors=True)
      shutil.copytree(dirs[step], copy)
      times[step].append(time_to_first_step(FLAGS.data_dir, copy, step, total,
                                             spl))
  medians = {k: statistics.median(v) for k, v in times.items()}
  for step, values in times.items():
    print(f'resume at step {step:5d}: time to first loop '
          f'{medians[step]:.2f} s (rounds: '
          f'{", ".join(f"{v:.2f}" for v in values)})')
  print(f'ratio late / early: {medians[late] / medians[early]:.3f} '
        '(target <= 1.5)')
  rows.insert(0, (f'resume at step {late:,}: time to the first loop',
                  f'{medians[late]:.2f} s',
                  f'resumed at step {early}: {medians[early]:.2f} s',
                  f'**{medians[late] / medians[early]:.2f}** (<= 1.5)'))
  print(common.page_rows(rows))
  shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
  flags.DEFINE_string('data_dir', 'data/quickstart', 'Quickstart TFRecords.')
  flags.DEFINE_integer('late_step', 2000, 'The late checkpoint.')
  flags.DEFINE_integer('early_step', 20, 'The early checkpoint.')
  flags.DEFINE_integer('steps_per_loop', 10, 'Steps a device loop.')
  flags.DEFINE_integer('rounds', 3, 'Interleaved rounds.')
  flags.DEFINE_bool('positions_only', False, 'Only the input positioning.')
  entry_point.parse_flags_early(lambda: None)  # Flag errors: exit 2.
  app.run(entry_point.tool_main(main))
