"""MobileNet-v1 (Howard et al. 2017) as TF-slim's `mobilenet_v1` builds it,
the network of MLPerf Inference v0.5's `mobilenet` benchmark
(`mobilenet_v1_1.0_224`, 71.676% top-1) and the backbone of its
SSD-MobileNet-v1.

- A 3x3 stride-2 convolution of 32 channels, then 13 depthwise-separable
  blocks (a 3x3 depthwise convolution, then a 1x1 pointwise one), each
  convolution followed by batch norm and ReLU6; channels and strides as
  CONV_DEFS. Every channel count x width_multiplier, at least 8 (slim's
  `depth_multiplier`, `min_depth`).
- 'SAME' padding everywhere (slim's default, `use_explicit_padding`
  False): a stride-2 window pads one row below, none above, on even maps.
- Batch norm: decay 0.9997, epsilon 0.001, no bias on the convolutions.
- Head: the global average, dropout (keep 0.999), a 1x1 convolution with a
  bias to the logits.
- Initialisation: truncated normal of stddev 0.09 (slim's
  `mobilenet_v1_arg_scope`).

Classes are the data's (1,000 for ImageNet): slim's 1,001 held a background
class, its label offset the reference harness undoes.
"""

import tensorflow as tf

from models.common import layers

# (kind, channels, stride) of slim's MOBILENETV1_CONV_DEFS.
CONV_DEFS = (('conv', 32, 2),
             ('separable', 64, 1), ('separable', 128, 2),
             ('separable', 128, 1), ('separable', 256, 2),
             ('separable', 256, 1), ('separable', 512, 2),
             ('separable', 512, 1), ('separable', 512, 1),
             ('separable', 512, 1), ('separable', 512, 1),
             ('separable', 512, 1), ('separable', 1024, 2),
             ('separable', 1024, 1))
INIT_STDDEV = 0.09


class MobileNetV1(tf.Module):
  """Logits of [B, H, W, 3] images, or the feature maps of its blocks.

  Variables live in `params` (trainable) and `state` (batch-norm moving
  statistics) by path name, `mobilenet/conv{i}/...`: block i's depthwise
  convolution under `conv{i}/depthwise`, its pointwise one under
  `conv{i}/pointwise` (slim's Conv2d_{i}_depthwise, Conv2d_{i}_pointwise).
  """

  def __init__(self, *, num_classes: int = 1000,
               width_multiplier: float = 1.0, min_depth: int = 8,
               classifier: bool = True, dropout_keep: float = 0.999,
               bn_momentum: float = 0.9997, bn_epsilon: float = 0.001,
               bn_group_size: int = 0, spatial_partitions: int = 1,
               compute_dtype: str = 'float32',
               quantization_aware: bool = False, seed: int = 0):
    """Args:
      num_classes: the classifier's classes.
      width_multiplier: slim's depth_multiplier (0.25, 0.5, 0.75, 1.0).
      min_depth: the fewest channels a layer keeps.
      classifier: with the pooled head (False: a backbone, `features`).
      dropout_keep: the head's dropout keep probability in training.
      bn_momentum, bn_epsilon: batch norm's (slim's decay and epsilon).
      bn_group_size: replicas whose batch statistics are combined (0: all).
      spatial_partitions: must be 1 (no spatial partitioning).
      compute_dtype: 'float32' or 'bfloat16'.
      quantization_aware: compute with every convolution kernel rounded to
        its INT8 grid (layers.int8_kernel): quantization-aware training of
        the blocks (SSD-MobileNet's backbone; the classifier stays float).
      seed: the initialisation's.
    """
    super().__init__(name='mobilenet')
    if spatial_partitions != 1:
      raise ValueError(
          f'MobileNet-v1 has no spatial partitioning: SPATIAL_PARTITIONS is '
          f'{spatial_partitions}; set it to 1.')
    if width_multiplier <= 0:
      raise ValueError('models.common.mobilenet.MobileNetV1.width_multiplier '
                       f'must be > 0, got {width_multiplier}.')
    self.num_classes = num_classes
    self.dtype = layers.compute_dtype(compute_dtype)
    self.quantization_aware = quantization_aware
    self.bn_momentum, self.bn_epsilon = bn_momentum, bn_epsilon
    self.bn_sync = layers.BatchNormSync(bn_group_size)
    self.classifier = classifier
    self._dropout = layers.Dropout(1.0 - dropout_keep, seed + 1)
    self._seed, self._counter = seed, 0
    self.params, self.state = {}, {}
    self.channels = []  # Each block's output channels.
    cin = 3
    for i, (kind, channels, _) in enumerate(CONV_DEFS):
      cout = max(int(channels * width_multiplier), min_depth)
      if kind == 'conv':
        self._make_kernel(f'conv{i}/kernel', [3, 3, cin, cout])
        self._bn(f'conv{i}/bn', cout)
      else:
        self._make_kernel(f'conv{i}/depthwise/kernel', [3, 3, cin, 1])
        self._bn(f'conv{i}/depthwise/bn', cin)
        self._make_kernel(f'conv{i}/pointwise/kernel', [1, 1, cin, cout])
        self._bn(f'conv{i}/pointwise/bn', cout)
      self.channels.append(cout)
      cin = cout
    self.out_channels = cin
    if classifier:
      self._make_kernel('logits/kernel', [1, 1, cin, num_classes])
      self.params['mobilenet/logits/bias'] = tf.Variable(
          tf.zeros([num_classes]), name='mobilenet/logits/bias')

  # -- Variables --------------------------------------------------------------

  def _make_kernel(self, name, shape):
    self._counter += 1
    name = f'mobilenet/{name}'
    self.params[name] = tf.Variable(tf.random.stateless_truncated_normal(
        shape, [self._seed, self._counter], stddev=INIT_STDDEV), name=name)

  def _bn(self, name, c):
    name = f'mobilenet/{name}'
    for key, value in (('gamma', tf.ones([c])), ('beta', tf.zeros([c]))):
      self.params[f'{name}/{key}'] = tf.Variable(value, name=f'{name}/{key}')
    for key, value in (('moving_mean', tf.zeros([c])),
                       ('moving_variance', tf.ones([c]))):
      self.state[f'{name}/{key}'] = tf.Variable(
          value, name=f'{name}/{key}', trainable=False)

  # -- Forward ----------------------------------------------------------------

  def kernel(self, name: str, channel_axis: int = -1) -> tf.Tensor:
    """Convolution `{name}/kernel` in the compute dtype (on its INT8 grid
    when quantization-aware)."""
    return layers.compute_kernel(self.params[f'{name}/kernel'], self.dtype,
                                 int8=self.quantization_aware,
                                 channel_axis=channel_axis)

  def __call__(self, images, *, training: bool):
    """(float32 logits [B, classes], the new moving statistics: {} in
    eval)."""
    if not self.classifier:
      raise ValueError('This MobileNetV1 was built without its classifier '
                       '(classifier=False): call `features`.')
    maps, updates = self.features(images, training=training)
    x = tf.reduce_mean(maps[-1], axis=[1, 2])
    x = self._dropout(x, training)
    # A FullyConnected op in TFLite, not a convolution: not rounded.
    kernel = tf.cast(self.params['mobilenet/logits/kernel'], self.dtype)
    logits = tf.matmul(x, kernel[0, 0])
    return (tf.cast(logits, tf.float32) + self.params['mobilenet/logits/bias'],
            updates)

  def features(self, images, *, training: bool) -> tuple[list, dict]:
    """([each block's output, in the compute dtype], the new moving
    statistics). Block 11's (stride 16) and block 13's (stride 32) are
    SSD-MobileNet-v1's first two feature maps."""
    x = tf.cast(images, self.dtype)
    updates, maps = {}, []

    def bn(x, name):
      return tf.nn.relu6(layers.named_batch_norm(
          x, name, self.params, self.state, updates, training=training,
          sync=self.bn_sync, momentum=self.bn_momentum,
          epsilon=self.bn_epsilon))

    for i, (kind, _, stride) in enumerate(CONV_DEFS):
      name = f'mobilenet/conv{i}'
      if kind == 'conv':
        x = bn(tf.nn.conv2d(x, self.kernel(name), stride, 'SAME'),
               f'{name}/bn')
      else:
        x = bn(tf.nn.depthwise_conv2d(x, self.kernel(f'{name}/depthwise', 2),
                                      [1, stride, stride, 1], 'SAME'),
               f'{name}/depthwise/bn')
        x = bn(tf.nn.conv2d(x, self.kernel(f'{name}/pointwise'), 1, 'SAME'),
               f'{name}/pointwise/bn')
      maps.append(x)
    return maps, updates
