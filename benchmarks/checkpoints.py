"""Benchmark: what trustworthy checkpoints and input checks cost.

  python -m benchmarks.checkpoints [--rounds=5] [--files=256]

1. Saving ResNet-50's training state (weights, LARS momentum, step; ~200 MB)
   with training.checkpoints.Checkpointer (write, state file, read-back of the
   index, rotation) against tf.train.CheckpointManager.save (write, state
   file, rotation), interleaved round by round, max_to_keep 3 for both.
   Ratio ours / manager's; target <= 1.10.
2. Restoring it with Checkpointer.restore_latest (a fresh Checkpoint, the
   state file and a glob) against tf.train.Checkpoint.restore, interleaved.
3. The start-up check of every input file (records.check_record_files: the
   first record of each file, 32 threads) on `--files` local shards, against
   the old check of the first file only; seconds per file.
"""

import os
import shutil
import tempfile

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

from benchmarks import common
from core import entry_point
from input_pipeline import records
from models.common.resnet import ResNet
from training import checkpoints

FLAGS = flags.FLAGS


def training_state():
  model = ResNet(depth=50, num_classes=1000)
  model(tf.zeros([1, 224, 224, 3]), training=False)
  momentum = [tf.Variable(tf.zeros_like(v)) for v in model.trainable_variables]
  step = tf.Variable(0, dtype=tf.int64)
  return {'model': model, 'optimizer': momentum, 'step': step}


def main(argv):
  del argv
  work = tempfile.mkdtemp()
  try:
    state = training_state()
    size = sum(int(np.prod(v.shape)) * 4 for v in
               state['model'].variables) + sum(
                   int(np.prod(v.shape)) * 4 for v in state['optimizer'])
    ours = checkpoints.Checkpointer(model_dir=os.path.join(work, 'ours'),
                                    chief=True, **state)
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(**state), os.path.join(work, 'manager'),
        max_to_keep=3)
    counter = {'ours': 0, 'manager': 0}

    def save_ours():
      counter['ours'] += 1
      ours.save(counter['ours'])

    def save_manager():
      counter['manager'] += 1
      manager.save(checkpoint_number=counter['manager'])

    saves = common.interleaved_medians(
        {'Checkpointer.save': save_ours, 'CheckpointManager.save': save_manager},
        FLAGS.rounds)
    print(f'training state {size / 1e6:.0f} MB')
    for name, seconds in saves.items():
      print(f'  {name:28s} {seconds:.3f} s')
    print(f'  save ratio ours / manager: '
          f'{saves["Checkpointer.save"] / saves["CheckpointManager.save"]:.3f}'
          ' (target <= 1.10)')

    latest = manager.latest_checkpoint
    restores = common.interleaved_medians({
        'Checkpointer.restore_latest': lambda: checkpoints.Checkpointer(
            model_dir=os.path.join(work, 'ours'), chief=True,
            **state).restore_latest(),
        'Checkpoint.restore': lambda: tf.train.Checkpoint(**state).restore(
            latest).assert_consumed(),
    }, FLAGS.rounds)
    for name, seconds in restores.items():
      print(f'  {name:28s} {seconds:.3f} s')
    print('  restore ratio ours / plain: '
          f'{restores["Checkpointer.restore_latest"] / restores["Checkpoint.restore"]:.3f}')

    shards = os.path.join(work, 'shards')
    os.makedirs(shards)
    files = []
    for i in range(FLAGS.files):
      path = os.path.join(shards, f'train-{i:05d}-of-{FLAGS.files:05d}')
      with tf.io.TFRecordWriter(path) as w:
        for _ in range(20):  # ImageNet-sized records.
          w.write(tf.train.Example(features=tf.train.Features(feature={
              'image/encoded': tf.train.Feature(bytes_list=tf.train.BytesList(
                  value=[os.urandom(100_000)]))})).SerializeToString())
      files.append(path)
    checks = common.interleaved_medians({
        'every file': lambda: records.check_record_files(files),
        'first file only': lambda: records.check_features(
            files[0], {}, fix=''),
    }, FLAGS.rounds)
    print(f'input check over {FLAGS.files} local files:')
    for name, seconds in checks.items():
      print(f'  {name:28s} {seconds:.3f} s')
    print(f'  per file: {checks["every file"] / FLAGS.files * 1e3:.2f} ms')
    ours, manager = saves['Checkpointer.save'], saves['CheckpointManager.save']
    mine, plain = (restores['Checkpointer.restore_latest'],
                   restores['Checkpoint.restore'])
    print(common.page_rows([
        (f'checkpoint save, {size / 1e6:.0f} MB', f'{ours:.3f} s',
         f'`tf.train.CheckpointManager` {manager:.3f} s',
         f'**{ours / manager:.2f}** (<= 1.10)'),
        ('checkpoint restore', f'{mine:.3f} s',
         f'plain `tf.train.Checkpoint.restore` {plain:.3f} s',
         f'**{mine / plain:.2f}** (<= 1.10)')]))
  finally:
    shutil.rmtree(work)


if __name__ == '__main__':
  flags.DEFINE_integer('rounds', 5, 'Interleaved rounds.')
  flags.DEFINE_integer('files', 256, 'Input files for the check.')
  entry_point.parse_flags_early(lambda: None)  # Flag errors: exit 2.
  app.run(entry_point.tool_main(main))
