"""Benchmark: our ResNet-50 training step vs Keras, and model FLOPs utilisation.

  python -m benchmarks.resnet_step [--batch=8] [--rounds=5] [--steps=4]

Side by side in one process, interleaved round by round (these machines are
noisy, so only ratios are reported):
  (a) our ResNet-50 v1.5 train step (runtime loop, LARS, synthetic 224x224
      data) vs `keras.applications.ResNet50` trained with `model.fit` at the
      same batch and precision (SGD momentum; Keras default compile and
      jit_compile=False, the faster of the two counts);
  (b) MFU: 3 x forward FLOPs x batch / step time, against a 4096x4096 matmul
      of the same dtype timed in the same rounds.
"""


from absl import app
from absl import flags
import keras
import tensorflow as tf

from benchmarks import common
from benchmarks.common import interleaved_medians
from benchmarks.common import matmul_peak
from core import entry_point
from input_pipeline.imagenet import ImageNetInput
from models.common.layers import is_decay_exempt
from models.common.resnet import ResNet
from training import losses
from training import optimizers
from training import schedules
from training import step as step_lib

FLAGS = flags.FLAGS


class _Task:
  """The ResNet task's loss on synthetic data, without file inputs."""
  eval_sum_names = ()

  def loss_share(self, model, batch):
    logits, updates = model(batch['image'], training=True)
    return losses.share_of_global_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(batch['label'],
                                                       logits)), updates


def ours(dtype: str, batch: int, steps: int, optimizer=optimizers.Lars):
  """A callable running `steps` steps of our train loop; and its model.
  `optimizer`: a training/optimizers.py class (LARS, as the MLPerf runs)."""
  strategy = tf.distribute.get_strategy()
  model = ResNet(depth=50, compute_dtype=dtype)
  opt = optimizer(exclude=is_decay_exempt)
  step = tf.Variable(0, dtype=tf.int64)
  opt.build(model.trainable_variables)
  data = ImageNetInput(synthetic=True, image_size=224)
  ds = data.train_dataset(tf.distribute.InputContext(), global_batch_size=batch)
  iterator = iter(strategy.experimental_distribute_dataset(ds))
  loop = step_lib.make_train_loop(
      strategy=strategy, model=model, optimizer=opt,
      learning_rate=schedules.PolynomialWarmup(
          base=1.0, warmup_steps=10, total_steps=10**6),
      task=_Task(), step=step)
  n = tf.constant(steps)
  return (lambda: float(loop(iterator, n))), model


def keras_fit(dtype: str, batch: int, steps: int, jit):
  keras.mixed_precision.set_global_policy(
      'mixed_bfloat16' if dtype == 'bfloat16' else 'float32')
  try:
    model = keras.applications.ResNet50(weights=None)
    model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
                  loss='sparse_categorical_crossentropy', jit_compile=jit)
  finally:
    keras.mixed_precision.set_global_policy('float32')
  ds = ImageNetInput(synthetic=True, image_size=224).train_dataset(
      tf.distribute.InputContext(), global_batch_size=batch)
  ds = ds.map(lambda b: (b['image'], b['label']))
  return lambda: model.fit(ds, epochs=1, steps_per_epoch=steps, verbose=0)


def main(argv):
  del argv
  batch, steps, rounds = FLAGS.batch, FLAGS.steps, FLAGS.rounds
  rows = []
  for dtype in FLAGS.dtypes:
    runners = {}
    our_run, model = ours(dtype, batch, steps)
    runners['ours'] = our_run
    runners['keras fit (default compile)'] = keras_fit(dtype, batch, steps,
                                                       'auto')
    runners['keras fit (jit_compile=False)'] = keras_fit(dtype, batch, steps,
                                                         False)
    mm, mm_flops = matmul_peak(dtype)
    runners['matmul'] = mm
    med = interleaved_medians(runners, rounds)
    step_time = {k: med[k] / steps for k in runners if k != 'matmul'}
    peak = mm_flops / med['matmul']
    train_flops = 3 * model.forward_flops(224) * batch
    keras_best = min(step_time['keras fit (default compile)'],
                     step_time['keras fit (jit_compile=False)'])
    print(f'--- {dtype}, batch {batch}, {rounds} interleaved rounds of '
          f'{steps} steps (medians)')
    for k, v in step_time.items():
      print(f'  {k:32s} {v:.3f} s/step  MFU {train_flops / v / peak:.3f}')
    print(f'  matmul 4096^2 {dtype}: {peak / 1e9:.0f} GFLOP/s')
    print(f'  speed-up vs best Keras: {keras_best / step_time["ours"]:.2f}x')
    print(f'  our MFU: {train_flops / step_time["ours"] / peak:.3f}')
    rows.append(common.step_row(
        'ResNet-50', dtype, batch, step_time['ours'], 'Keras fit',
        keras_best, mfu=train_flops / step_time['ours'] / peak))
  print(common.page_rows(rows))


if __name__ == '__main__':
  flags.DEFINE_integer('batch', 8, 'Global batch size.')
  flags.DEFINE_integer('steps', 4, 'Steps per timed call.')
  flags.DEFINE_integer('rounds', 5, 'Interleaved rounds.')
  flags.DEFINE_multi_string('dtypes', ['float32', 'bfloat16'], 'Precisions.')
  entry_point.parse_flags_early(lambda: None)  # Flag errors: exit 2.
  app.run(entry_point.tool_main(main))
