"""models.common.layers.int8_kernel: quantization-aware training's weights are
the INT8 weights TFLite's converter writes (tools/quantize_tflite.py), batch
norm folded in, and its gradient passes straight through."""

from ai_edge_litert import interpreter as litert
import numpy as np
import tensorflow as tf

from models.common import layers
from tools import quantize_tflite

EPSILON = 1e-3


def _bn(x, bn):
  y, *_ = tf.raw_ops.FusedBatchNormV3(
      x=x, scale=bn[0], offset=bn[1], mean=bn[2], variance=bn[3],
      epsilon=EPSILON, data_format='NHWC', is_training=False)
  return tf.nn.relu6(y)


class ConvBnNet(tf.Module):
  """conv 3x3 (4 -> 6), depthwise 3x3 (6), pointwise 1x1 (6 -> 5) with
  eval-mode batch norm, and a head with a bias: MobileNet's ops."""

  def __init__(self, rng):
    super().__init__()
    normal = lambda *s: tf.Variable(rng.normal(size=s).astype(np.float32))
    self.conv, self.depthwise = normal(3, 3, 4, 6), normal(3, 3, 6, 1)
    self.pointwise, self.head = normal(1, 1, 6, 5), normal(1, 1, 5, 7)
    self.bias = normal(7)
    # gamma (some negative), beta, moving mean, moving variance.
    self.bns = [[tf.Variable(rng.normal(size=c).astype(np.float32)),
                 tf.Variable(rng.normal(size=c).astype(np.float32)),
                 tf.Variable(rng.normal(size=c).astype(np.float32)),
                 tf.Variable(rng.uniform(0.1, 4.0, size=c).astype(np.float32))]
                for c in (6, 6, 5)]

  @tf.function(input_signature=[tf.TensorSpec([None, 12, 12, 4])])
  def __call__(self, x):
    x = _bn(tf.nn.conv2d(x, self.conv, 2, 'SAME'), self.bns[0])
    x = _bn(tf.nn.depthwise_conv2d(x, self.depthwise, [1, 1, 1, 1], 'SAME'),
            self.bns[1])
    x = _bn(tf.nn.conv2d(x, self.pointwise, 1, 'SAME'), self.bns[2])
    return {'y': tf.nn.conv2d(x, self.head, 1, 'SAME') + self.bias}


def _folded(kernel, bn, channel_axis):
  """The kernel with batch norm's per-channel factor folded in."""
  factor = bn[0].numpy() / np.sqrt(bn[3].numpy() + EPSILON)
  shape = [1] * kernel.ndim
  shape[channel_axis] = -1
  return kernel * factor.reshape(shape)


def test_int8_kernel_is_tflites_int8_weights_with_batch_norm_folded(tmp_path):
  rng = np.random.default_rng(7)
  net = ConvBnNet(rng)
  tf.saved_model.save(net, str(tmp_path / 'saved'),
                      signatures=net.__call__.get_concrete_function())
  calibration = [{'x': rng.uniform(-1, 1, [1, 12, 12, 4]).astype(np.float32)}
                 for _ in range(20)]
  quantize_tflite.convert(str(tmp_path / 'saved'), calibration, 'int8',
                          str(tmp_path / 'int8.tflite'))
  # Without XNNPACK, which takes the weights' buffers over.
  interpreter = litert.Interpreter(
      str(tmp_path / 'int8.tflite'), experimental_op_resolver_type=(
          litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES))
  interpreter.allocate_tensors()
  # TFLite's filters are [out, h, w, in] ([1, h, w, channels] depthwise).
  stored = {}
  for t in interpreter.get_tensor_details():
    if t['dtype'] == np.int8 and len(t['shape']) == 4:
      q = t['quantization_parameters']
      stored[tuple(t['shape'])] = (interpreter.get_tensor(t['index']),
                                   q['scales'])
  cases = (  # (kernel, batch norm, TF's channel axis, TFLite's shape)
      (net.conv, net.bns[0], 3, (6, 3, 3, 4)),
      (net.depthwise, net.bns[1], 2, (1, 3, 3, 6)),
      (net.pointwise, net.bns[2], 3, (5, 1, 1, 6)),
      (net.head, None, 3, (7, 1, 1, 5)))
  for kernel, bn, axis, shape in cases:
    assert shape in stored, (shape, sorted(stored))
    values, scales = stored[shape]
    assert len(scales) == shape[0 if axis == 3 else 3]  # Per channel.
    trained = layers.int8_kernel(kernel, axis).numpy()
    if bn is not None:
      trained = _folded(trained, bn, axis)
    # TFLite's layout back to TF's: [h, w, in, out] or [h, w, channels, 1].
    scale_shape = [1, 1, 1, 1]
    scale_shape[axis] = -1
    tflite = (values.transpose(1, 2, 3, 0).astype(np.float32) *
              scales.reshape(scale_shape))
    np.testing.assert_allclose(trained, tflite,
                               atol=1e-5 * np.abs(tflite).max())
    # And not merely close to the float kernel: rounding moved it.
    original = kernel.numpy() if bn is None else _folded(kernel.numpy(), bn,
                                                         axis)
    assert np.abs(original - tflite).max() > 1e-4 * np.abs(tflite).max()


def test_int8_kernel_grid_and_straight_through_gradient():
  rng = np.random.default_rng(3)
  kernel = tf.constant(rng.normal(size=[3, 3, 8, 16]).astype(np.float32))
  q = layers.int8_kernel(kernel).numpy()
  steps = np.abs(kernel.numpy()).max(axis=(0, 1, 2)) / 127
  units = q / steps
  np.testing.assert_allclose(units, np.round(units), atol=1e-3)
  np.testing.assert_allclose(np.abs(units).max(axis=(0, 1, 2)), 127, rtol=1e-5)
  # A per-channel factor (batch norm's) commutes with the rounding.
  factor = rng.uniform(-3, 3, size=16).astype(np.float32)
  np.testing.assert_allclose(layers.int8_kernel(kernel * factor).numpy(),
                             q * factor, rtol=1e-5, atol=1e-6)
  with tf.GradientTape() as tape:
    tape.watch(kernel)
    y = tf.reduce_sum(layers.int8_kernel(kernel) * 2.0)
  np.testing.assert_array_equal(tape.gradient(y, kernel).numpy(), 2.0)
  # An all-zero channel stays zero (no division by zero).
  zeros = tf.zeros([1, 1, 2, 3])
  np.testing.assert_array_equal(layers.int8_kernel(zeros).numpy(), 0.0)
