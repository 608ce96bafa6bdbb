"""ResNet v1.5 (stride on the 3x3 convolution) as a plain tf.Module.

Depths 10/18/34 use basic blocks, 50/101 bottleneck blocks (10: one basic
block a stage, the small ResNet the runtime tests train). Weights are float32
variables; `compute_dtype='bfloat16'` casts them once per step and runs the
convolutions in bfloat16 (batch-norm statistics and the loss stay float32).
"""

import tensorflow as tf

from models.common import layers
from models.common import spatial as spatial_lib

STAGE_BLOCKS = {10: (1, 1, 1, 1), 18: (2, 2, 2, 2), 34: (3, 4, 6, 3), 50: (3, 4, 6, 3),
                101: (3, 4, 23, 3)}
BOTTLENECK_DEPTHS = (50, 101)


class ResNet(tf.Module):
  """ResNet v1.5 image classifier.

  Variables: `params` (trainable, by path name) and `state` (batch-norm moving
  statistics). `__call__` returns logits and, in training, the new moving
  statistics; the caller decides how to combine and assign them.
  """

  def __init__(self, *, depth: int = 50, width_multiplier: float = 1.0,
               num_classes: int = 1000, zero_init_last_bn_gamma: bool = True,
               bn_momentum: float = 0.9, bn_epsilon: float = 1e-5,
               bn_group_size: int = 0, compute_dtype: str = 'float32',
               kernel_init_scale: float = 1.0, spatial_partitions: int = 1,
               spatial_height: int = 0, spatial_row_multiple: int = 1,
               stage_strides: tuple = (1, 2, 2, 2), classifier: bool = True,
               frozen: tuple = (), frozen_batch_norm: bool = False,
               seed: int = 0):
    """Args:
      depth: 10, 18, 34, 50 or 101.
      width_multiplier: scales every layer's channel count.
      num_classes: size of the classifier.
      zero_init_last_bn_gamma: start each residual branch as identity.
      bn_momentum: moving-statistics decay.
      bn_epsilon: batch-norm epsilon.
      bn_group_size: replicas whose batch-norm statistics are combined
        (0: all replicas; 1: per replica).
      compute_dtype: 'float32' or 'bfloat16'.
      kernel_init_scale: convolution kernels start with variance
        kernel_init_scale / fan_in: 1.0 as Google's v0.7 code
        (`tf.variance_scaling_initializer()`), 2.0 for He et al.'s. Batch
        norm hides the scale in the forward pass, not in LARS's trust ratio,
        whose weight-decay term grows with |w|^2.
      spatial_partitions: in training, each image arrives split along its
        height over this many consecutive replicas (models/common/spatial.py;
        the runtime's input does the split); evaluation sees whole images.
      spatial_height, spatial_row_multiple: uneven partitioning
        (models/common/spatial.py): the image height, and the multiple of the
        slices' rows, when the slices hold padding rows (0: even slices).
      stage_strides: the first block's stride in each stage; fewer entries
        build fewer stages (SSD's backbone: (1, 2, 1), three stages, the
        third at stride 1).
      classifier: build the pooled classifier (`resnet/fc`); without it the
        model is a backbone and only `features` is called.
      frozen: name prefixes of variables that do not train (Mask R-CNN's
        backbone: ('resnet/stem/', 'resnet/stage1/'), as Google's freezes
        the stem and the first stage).
      frozen_batch_norm: every batch norm normalizes by its moving
        statistics, in training too, and its gamma and beta do not train
        (Mask R-CNN's `is_training_bn=False`).
      seed: initialisation seed.
    """
    super().__init__(name='resnet')
    if depth not in STAGE_BLOCKS:
      raise ValueError(f'ResNet `depth` must be one of {sorted(STAGE_BLOCKS)}, '
                       f'got {depth}.')
    if not 1 <= len(stage_strides) <= 4:
      raise ValueError(f'ResNet `stage_strides` needs 1 to 4 stages, got '
                       f'{stage_strides}.')
    self.depth, self.num_classes = depth, num_classes
    self.dtype = layers.compute_dtype(compute_dtype)
    self.bn_momentum, self.bn_epsilon = bn_momentum, bn_epsilon
    self.bn_sync = layers.BatchNormSync(bn_group_size)
    self.spatial = spatial_lib.SpatialPartitioning(
        spatial_partitions, height=spatial_height,
        row_multiple=spatial_row_multiple)
    if spatial_partitions > 1 and bn_group_size % spatial_partitions:
      raise ValueError(
          f'bn_group_size ({bn_group_size}) must be 0 or a multiple of '
          f'SPATIAL_PARTITIONS ({spatial_partitions}): batch-norm statistics '
          'must span the replicas that share an image.')
    self.bottleneck = depth in BOTTLENECK_DEPTHS
    self.frozen, self.frozen_batch_norm = tuple(frozen), frozen_batch_norm
    self._seed = seed
    self._init_scale = kernel_init_scale
    self._counter = 0
    self.params = {}
    self.state = {}
    self._flops = None

    def width(c):
      return max(1, int(round(c * width_multiplier)))

    stem = width(64)
    self._conv('resnet/stem/conv', 7, 3, stem)
    self._bn('resnet/stem/bn', stem)
    # Block plan: (name, in_channels, filters, stride, has_projection).
    self.blocks = []
    channels = stem
    expansion = 4 if self.bottleneck else 1
    for s, n in enumerate(STAGE_BLOCKS[depth][:len(stage_strides)]):
      filters = width(64 * 2**s)
      for b in range(n):
        stride = stage_strides[s] if b == 0 else 1
        name = f'resnet/stage{s + 1}/block{b}'
        out = filters * expansion
        projection = stride != 1 or channels != out
        self._make_block(name, channels, filters, out, projection,
                         zero_init_last_bn_gamma)
        self.blocks.append((name, stride, projection))
        channels = out
    self.out_channels = channels
    if not classifier:
      return
    self.params['resnet/fc/kernel'] = self._var(
        'resnet/fc/kernel', tf.random.stateless_normal(
            [channels, num_classes], seed=self._next_seed(), stddev=0.01))
    self.params['resnet/fc/bias'] = self._var('resnet/fc/bias',
                                              tf.zeros([num_classes]))

  # -- Variable creation ------------------------------------------------------

  def _next_seed(self):
    self._counter += 1
    return [self._seed, self._counter]

  def _var(self, name, value, trainable=True):
    trainable = trainable and not name.startswith(self.frozen) and not (
        self.frozen_batch_norm and '/bn' in name)
    return tf.Variable(value, name=name, trainable=trainable)

  def _conv(self, name, k, cin, cout):
    self.params[f'{name}/kernel'] = self._var(
        f'{name}/kernel',
        layers.variance_scaling([k, k, cin, cout], self._next_seed(),
                                k * k * cin, self._init_scale))

  def _bn(self, name, c, zero_gamma=False):
    gamma = tf.zeros([c]) if zero_gamma else tf.ones([c])
    self.params[f'{name}/gamma'] = self._var(f'{name}/gamma', gamma)
    self.params[f'{name}/beta'] = self._var(f'{name}/beta', tf.zeros([c]))
    self.state[f'{name}/moving_mean'] = self._var(
        f'{name}/moving_mean', tf.zeros([c]), trainable=False)
    self.state[f'{name}/moving_variance'] = self._var(
        f'{name}/moving_variance', tf.ones([c]), trainable=False)

  def _make_block(self, name, cin, filters, out, projection, zero_gamma):
    if self.bottleneck:
      self._conv(f'{name}/conv1', 1, cin, filters)
      self._bn(f'{name}/bn1', filters)
      self._conv(f'{name}/conv2', 3, filters, filters)
      self._bn(f'{name}/bn2', filters)
      self._conv(f'{name}/conv3', 1, filters, out)
      self._bn(f'{name}/bn3', out, zero_gamma)
    else:
      self._conv(f'{name}/conv1', 3, cin, filters)
      self._bn(f'{name}/bn1', filters)
      self._conv(f'{name}/conv2', 3, filters, out)
      self._bn(f'{name}/bn2', out, zero_gamma)
    if projection:
      self._conv(f'{name}/shortcut/conv', 1, cin, out)
      self._bn(f'{name}/shortcut/bn', out)

  # -- Forward ----------------------------------------------------------------

  def __call__(self, images, *, training: bool):
    """Logits (float32) and, when training, the new moving statistics.

    Args:
      images: [batch, height, width, 3] float images.
      training: batch statistics and new moving statistics if True.

    Returns:
      (logits, state_updates) with state_updates a dict name -> value ({} in
      eval).
    """
    x, updates, partitioned = self.features(images, training=training)
    spatial = self.spatial
    if partitioned:  # The mean over whole images: the group's slices.
      x = spatial.group_sum(tf.reduce_sum(tf.cast(x, tf.float32), [1, 2])) / (
          spatial.valid_rows(x.shape[1]) * x.shape[2])
      x = tf.cast(x, self.dtype)
    else:
      x = tf.reduce_mean(x, axis=[1, 2])
    logits = tf.matmul(x, tf.cast(self.params['resnet/fc/kernel'], self.dtype))
    if self._flops is not None:
      self._flops += 2 * x.shape[1] * self.num_classes
    logits = tf.cast(logits, tf.float32) + self.params['resnet/fc/bias']
    return logits, updates

  def features(self, images, *, training: bool, stages: bool = False):
    """The last stage's feature map (in the compute dtype), or with
    `stages` every stage's: {2: C2, 3: C3, ...} (stage s's output is level
    s + 1, stride 2^(s + 1)), each whole (under spatial partitioning the
    group gathers the slices of a stage computed on them).

    Returns:
      (features, state_updates, partitioned): `partitioned` says the map is
      still this replica's height slice (spatial partitioning in training);
      otherwise it is whole.
    """
    weights = {k: tf.cast(v, self.dtype) if k.endswith('/kernel') else v
               for k, v in self.params.items()}
    updates = {}
    spatial = self.spatial
    # Height slices while they can be strided; whole maps after.
    partitioned = training and spatial.partitions > 1

    def split_or_whole(x, stride):
      nonlocal partitioned
      if partitioned and not spatial.can_split(x, stride):
        x, partitioned = spatial.gather_whole(x), False
      return x

    def conv(x, name, stride=1):
      kernel = weights[f'{name}/kernel']
      if partitioned:
        y = spatial_lib.conv2d(x, kernel, stride, spatial)
      else:
        y = layers.conv2d(x, kernel, stride)
      if self._flops is not None:
        k, _, cin, cout = kernel.shape
        self._flops += 2 * y.shape[1] * y.shape[2] * k * k * cin * cout
      return y

    def masked(x):
      """Padding rows of uneven slices back to zero
      (models/common/spatial.py)."""
      return spatial.masked(x) if partitioned else x

    batch_stats = training and not self.frozen_batch_norm

    def bn(x, name, relu=True):
      mask = spatial.mask(x) if partitioned else None
      y = layers.named_batch_norm(
          x, name, weights, self.state, updates, training=batch_stats,
          sync=self.bn_sync, momentum=self.bn_momentum,
          epsilon=self.bn_epsilon, mask=mask,
          valid_fraction=spatial.valid_fraction(x.shape[1]))
      y = tf.nn.relu(y) if relu else y
      return y if mask is None else y * mask

    x = masked(split_or_whole(tf.cast(images, self.dtype), 2))
    x = bn(conv(x, 'resnet/stem/conv', 2), 'resnet/stem/bn')
    x = split_or_whole(x, 2)
    if partitioned:
      x = masked(spatial_lib.max_pool(x, 3, 2, spatial))
    else:
      x = tf.nn.max_pool2d(x, 3, 2, 'SAME')
    outputs, sliced = {}, {}
    for name, stride, projection in self.blocks:
      x = split_or_whole(x, stride)
      shortcut = x
      if projection:
        shortcut = bn(conv(x, f'{name}/shortcut/conv', stride),
                      f'{name}/shortcut/bn', relu=False)
      if self.bottleneck:
        y = bn(conv(x, f'{name}/conv1'), f'{name}/bn1')
        y = bn(conv(y, f'{name}/conv2', stride), f'{name}/bn2')
        y = bn(conv(y, f'{name}/conv3'), f'{name}/bn3', relu=False)
      else:
        y = bn(conv(x, f'{name}/conv1', stride), f'{name}/bn1')
        y = bn(conv(y, f'{name}/conv2'), f'{name}/bn2', relu=False)
      x = tf.nn.relu(y + shortcut)
      level = int(name.split('/stage')[1].split('/')[0]) + 1
      outputs[level], sliced[level] = x, partitioned
    if stages:  # Every stage's map whole (a gather of the slices).
      outputs = {level: spatial.gather_whole(x) if sliced[level] else x
                 for level, x in outputs.items()}
      return outputs, updates, False
    return x, updates, partitioned

  def forward_flops(self, image_size: int) -> int:
    """Multiply-add FLOPs (2 per MAC) of one example's forward pass."""
    self._flops = 0
    try:
      tf.function(lambda x: self(x, training=False),
                  autograph=False).get_concrete_function(
          tf.TensorSpec([1, image_size, image_size, 3], tf.float32))
      return self._flops
    finally:
      self._flops = None
