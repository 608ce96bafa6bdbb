"""GNMT's LSTM layer (models/gnmt/lstm.lstm_layer: their build_rnn loop with
its gradient written out, the input's share of the gates computed for all
steps at once) against Keras' `LSTM` layer at the same shapes: one layer's
forward and gradients (of the weights and the input), interleaved medians
and their ratio.

    python -m benchmarks.gnmt_lstm [--batch=64] [--units=128,256]
        [--length=18,48] [--rounds=11]

Keras' layer is the one users pick instead (with unit_forget_bias=False,
as GNMT's forget bias 0); on a CPU both run a while loop of small matmuls.
"""

from absl import app
from absl import flags

from benchmarks import common
from core import entry_point

FLAGS = flags.FLAGS


def runners(batch: int, length: int, units: int) -> dict:
  import keras  # pylint: disable=import-outside-toplevel
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  # pylint: disable-next=import-outside-toplevel
  from models.gnmt import model as gnmt
  x = tf.random.normal([length, batch, units])
  input_kernel = tf.Variable(tf.random.uniform([units, 4 * units], -.1, .1))
  kernel = tf.Variable(tf.random.uniform([units, 4 * units], -.1, .1))
  bias = tf.Variable(tf.zeros([4 * units]))

  @tf.function
  def ours():
    with tf.GradientTape() as tape:
      tape.watch(x)
      h = gnmt.lstm_layer(x, input_kernel, kernel, bias, tf.constant(length))
      loss = tf.reduce_sum(h)
    grads = tape.gradient(loss, [x, input_kernel, kernel, bias])
    return tf.add_n([tf.reduce_sum(g) for g in grads])

  layer = keras.layers.LSTM(units, return_sequences=True,
                            unit_forget_bias=False)
  batch_major = tf.transpose(x, [1, 0, 2])
  layer(batch_major)

  @tf.function
  def theirs():
    with tf.GradientTape() as tape:
      tape.watch(batch_major)
      loss = tf.reduce_sum(layer(batch_major))
    grads = tape.gradient(loss, [batch_major, *layer.trainable_variables])
    return tf.add_n([tf.reduce_sum(g) for g in grads])

  return {'ours': lambda: ours().numpy(), 'keras': lambda: theirs().numpy()}


def main(argv):
  del argv
  from core import startup  # pylint: disable=import-outside-toplevel
  startup.import_tensorflow()
  print(f'batch {FLAGS.batch}, float32, {FLAGS.rounds} rounds; median ms '
        'of one layer forward + gradients')
  rows = []
  for units in (int(u) for u in FLAGS.units):
    for length in (int(t) for t in FLAGS.length):
      med = common.interleaved_medians(
          runners(FLAGS.batch, length, units), FLAGS.rounds)
      ratio = med['keras'] / med['ours']
      print(f'units {units}, {length} steps: ours {med["ours"] * 1e3:8.2f}  '
            f'keras {med["keras"] * 1e3:8.2f}  keras/ours {ratio:.2f}',
            flush=True)
      rows.append((f'GNMT LSTM layer, {units} units, {length} steps, batch '
                   f'{FLAGS.batch}, float32', f'{med["ours"] * 1e3:.1f} ms',
                   f'Keras LSTM {med["keras"] * 1e3:.1f} ms',
                   f'{ratio:.2f}x'))
  print(common.page_rows(rows))


if __name__ == '__main__':
  flags.DEFINE_integer('batch', 64, 'Sequences a batch.')
  flags.DEFINE_list('units', ['128', '256'], 'Layer widths.')
  flags.DEFINE_list('length', ['18', '48'], 'Steps (bucket lengths).')
  flags.DEFINE_integer('rounds', 11, 'Interleaved rounds.')
  entry_point.parse_flags_early(lambda: None)  # Flag errors: exit 2.
  app.run(entry_point.tool_main(main))
