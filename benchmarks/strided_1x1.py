"""A strided 1x1 convolution two ways: conv2d at the stride, and the
stride's subsample convolved at stride 1 (what models/common/layers.py does
below 16 input channels, where TF 2.21's oneDNN filter gradient of the first
crashes). Forward and both gradients at ResNet-50's three projection-
shortcut shapes and the SSD quickstart's 8-channel one; interleaved medians
and their ratio: why the subsample is kept to where the crash is.

    python -m benchmarks.strided_1x1 [--batch=32] [--dtype=bfloat16]

Even batches only: the strided form crashes at odd ones with < 16 channels.
"""

from absl import app
from absl import flags

from benchmarks import common
from core import entry_point

FLAGS = flags.FLAGS

# (height, input channels, output channels): ResNet-50's stage 2-4 entries
# (the 56x56x256 -> 28x28x512 shortcut, ...) and SSD quickstart's backbone.
SHAPES = ((56, 256, 512), (28, 512, 1024), (14, 1024, 2048), (40, 8, 16))


def step(form: str, batch: int, height: int, cin: int, cout: int,
         dtype: str):
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  dt = tf.bfloat16 if dtype == 'bfloat16' else tf.float32
  x = tf.cast(tf.random.normal([batch, height, height, cin]), dt)
  kernel = tf.Variable(tf.random.normal([1, 1, cin, cout]) * cin**-0.5)

  @tf.function
  def run():
    with tf.GradientTape() as tape:
      tape.watch(x)
      k = tf.cast(kernel, dt)
      if form == 'strided':
        y = tf.nn.conv2d(x, k, 2, 'VALID')
      else:
        y = tf.nn.conv2d(x[:, ::2, ::2, :], k, 1, 'VALID')
      loss = tf.reduce_sum(tf.cast(y, tf.float32))
    dx, dk = tape.gradient(loss, [x, kernel])
    return tf.reduce_sum(tf.cast(dx[:1, :1, :1, :1], tf.float32)) + dk[0, 0, 0, 0]

  return lambda: run().numpy()


def main(argv):
  del argv
  from core import startup  # pylint: disable=import-outside-toplevel
  startup.import_tensorflow()
  if FLAGS.batch % 2:
    raise app.UsageError('--batch must be even: the strided form corrupts '
                         'the heap at odd batches below 16 channels.')
  print(f'batch {FLAGS.batch}, {FLAGS.dtype}, {FLAGS.rounds} rounds; '
        'median ms of forward + both gradients')
  rows = []
  for height, cin, cout in SHAPES:
    runners = {form: step(form, FLAGS.batch, height, cin, cout, FLAGS.dtype)
               for form in ('strided', 'subsample')}
    med = common.interleaved_medians(runners, FLAGS.rounds)
    print(f'{height}x{height}x{cin} -> {cout}: strided '
          f'{med["strided"] * 1e3:8.2f}  subsample '
          f'{med["subsample"] * 1e3:8.2f}  subsample/strided '
          f'{med["subsample"] / med["strided"]:.2f}', flush=True)
    rows.append((f'strided 1x1 gradient as a subsample, {height}x{height}x'
                 f'{cin} -> {cout}, {FLAGS.dtype}',
                 f'{med["subsample"] * 1e3:.1f} ms',
                 f'the strided form {med["strided"] * 1e3:.1f} ms',
                 f'{med["subsample"] / med["strided"]:.2f}x'))
  print(common.page_rows(rows))


if __name__ == '__main__':
  flags.DEFINE_integer('batch', 32, 'Images (even).')
  flags.DEFINE_enum('dtype', 'float32', ['float32', 'bfloat16'], 'dtype.')
  flags.DEFINE_integer('rounds', 15, 'Interleaved rounds.')
  entry_point.parse_flags_early(lambda: None)  # Flag errors: exit 2.
  app.run(entry_point.tool_main(main))
