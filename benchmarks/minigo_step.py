"""Benchmark: our MiniGo training step vs Keras `fit` of the same network.

  python -m benchmarks.minigo_step [--rounds=5] [--steps=4]

Side by side in one process, interleaved round by round (only ratios are
reported): the runtime's train loop (models/minigo/task.py's loss: policy
cross-entropy + 0.5 x value MSE, SGD momentum 0.9 with L2 1e-4 off biases
and betas) against `keras.Model.fit` of the same network (dual_net.py's
tower: conv-BN-ReLU, residual blocks, the two heads; kernel and gamma L2
1e-4; the same losses and weights; SGD momentum 0.9), on one fixed
synthetic batch, for the quickstart's network (7x7, 3 blocks of 32, batch
128) and Google's v0.7 network (19x19, 6 blocks of 64; batch 64 here,
theirs 512 a core), float32 and bfloat16 (the v0.7 network only).

No better peer exists: TF Model Garden has no MiniGo, and the reference's
own trainer (mlcommons/training's minigo train.py) is a TF1 Estimator;
Keras `fit` is the floor.
"""

from absl import app
from absl import flags
import keras
import numpy as np
import tensorflow as tf

from benchmarks import common
from benchmarks.common import interleaved_medians
from core import entry_point
from models.minigo import model as minigo
from models.minigo import data as minigo_data
from models.minigo import task as minigo_task
from training import optimizers
from training import schedules
from training import step as step_lib

FLAGS = flags.FLAGS
# label: (board, blocks, width, batch, dtypes)
NETWORKS = {
    'MiniGo quickstart 7x7 3x32': (7, 3, 32, 128, ('float32',)),
    'MiniGo v0.7 19x19 6x64': (19, 6, 64, 64, ('float32', 'bfloat16')),
}


def batch_of(size: int, batch: int) -> dict:
  rng = np.random.default_rng(0)
  pi = rng.random((batch, size * size + 1)).astype(np.float32)
  return {'x': rng.integers(0, 2, (batch, size, size, 13)).astype(np.uint8),
          'pi': pi / pi.sum(1, keepdims=True),
          'outcome': rng.choice([-1.0, 1.0], batch).astype(np.float32)}


def ours(size, blocks, width, batch, dtype, steps):
  strategy = tf.distribute.get_strategy()
  data = minigo_data.MiniGoData(board_size=size)
  task = minigo_task.MiniGoTask(
      model=lambda **k: minigo.DualNet(trunk_layers=blocks, conv_width=width,
                                       fc_width=width, compute_dtype=dtype,
                                       **k), data=data)
  model = task.build_model()
  opt = optimizers.SgdMomentum(exclude=minigo_task.is_l2_exempt,
                               mlperf_keys='minigo')
  opt.build(model.trainable_variables)
  loop = step_lib.make_train_loop(
      strategy=strategy, model=model, optimizer=opt,
      learning_rate=schedules.PiecewiseConstantSteps(
          boundaries=(128,), values=(0.01, 0.01)),
      task=task, step=tf.Variable(0, dtype=tf.int64))
  ds = tf.data.Dataset.from_tensors(batch_of(size, batch)).repeat()
  iterator = iter(strategy.experimental_distribute_dataset(ds))
  n = tf.constant(steps)
  return lambda: float(loop(iterator, n))


def keras_dualnet(size, blocks, width):
  l2 = keras.regularizers.L2(1e-4)

  def conv_bn(x, filters, k, scaled=True):
    x = keras.layers.Conv2D(filters, k, padding='same', use_bias=False,
                            kernel_regularizer=l2)(x)
    return keras.layers.BatchNormalization(
        momentum=0.95, epsilon=1e-5, center=scaled, scale=scaled,
        gamma_regularizer=l2 if scaled else None)(x)

  inputs = keras.Input((size, size, 13))
  x = keras.layers.ReLU()(conv_bn(inputs, width, 3))
  for _ in range(blocks):
    y = keras.layers.ReLU()(conv_bn(x, width, 3))
    x = keras.layers.ReLU()(keras.layers.Add()([x, conv_bn(y, width, 3)]))
  policy = keras.layers.Flatten()(keras.layers.ReLU()(
      conv_bn(x, 2, 1, scaled=False)))
  policy = keras.layers.Dense(size * size + 1, kernel_regularizer=l2,
                              name='policy', dtype='float32')(policy)
  value = keras.layers.Flatten()(keras.layers.ReLU()(
      conv_bn(x, 1, 1, scaled=False)))
  value = keras.layers.Dense(width, activation='relu',
                             kernel_regularizer=l2)(value)
  value = keras.layers.Dense(1, activation='tanh', kernel_regularizer=l2,
                             name='value', dtype='float32')(value)
  return keras.Model(inputs, {'policy': policy, 'value': value})


def keras_fit(size, blocks, width, batch, dtype, steps, jit):
  keras.mixed_precision.set_global_policy(
      'mixed_bfloat16' if dtype == 'bfloat16' else 'float32')
  try:
    model = keras_dualnet(size, blocks, width)
  finally:
    keras.mixed_precision.set_global_policy('float32')
  model.compile(
      optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
      loss={'policy': keras.losses.CategoricalCrossentropy(from_logits=True),
            'value': 'mse'},
      loss_weights={'policy': 1.0, 'value': 0.5}, jit_compile=jit)
  b = batch_of(size, batch)
  ds = tf.data.Dataset.from_tensors((
      b['x'].astype(np.float32),
      {'policy': b['pi'], 'value': b['outcome'][:, None]})).repeat()
  return lambda: model.fit(ds, epochs=1, steps_per_epoch=steps, verbose=0)


def main(argv):
  del argv
  rows = []
  for label, (size, blocks, width, batch, dtypes) in NETWORKS.items():
    for dtype in dtypes:
      shape = (size, blocks, width, batch, dtype, FLAGS.steps)
      runners = {
          'ours': ours(*shape),
          'keras fit (default compile)': keras_fit(*shape, 'auto'),
          'keras fit (jit_compile=False)': keras_fit(*shape, False)}
      med = interleaved_medians(runners, FLAGS.rounds)
      step = {k: v / FLAGS.steps for k, v in med.items()}
      keras_best = min(v for k, v in step.items() if k != 'ours')
      print(f'--- {label}, {dtype}, batch {batch}, {FLAGS.rounds} '
            f'interleaved rounds of {FLAGS.steps} steps (medians)')
      for k, v in step.items():
        print(f'  {k:32s} {v * 1e3:8.1f} ms/step  {batch / v:8.0f} '
              'examples/s')
      print(f'  speed-up vs best Keras: {keras_best / step["ours"]:.2f}x')
      rows.append(common.step_row(label, dtype, batch, step['ours'],
                                  'Keras fit', keras_best, unit='ms',
                                  digits=1))
  print(common.page_rows(rows))


if __name__ == '__main__':
  flags.DEFINE_integer('steps', 4, 'Steps per timed call.')
  flags.DEFINE_integer('rounds', 5, 'Interleaved rounds.')
  entry_point.parse_flags_early(lambda: None)  # Flag errors: exit 2.
  app.run(entry_point.tool_main(main))
