"""SSD300 with the MLPerf ResNet-34 backbone, as Google's v0.7 code builds it.

`ssd-research-TF-tpu-v3-8192/ssd_architecture.py` read line by line:

- Backbone: ResNet-34 v1 with basic blocks, its first three stages only,
  the third at stride 1 (`block_group3(strides=1)`): 256 channels at 38x38
  for a 300x300 image. Our models/resnet.py builds exactly that
  (`stage_strides=(1, 2, 1)`, no classifier), so its variables keep the
  ResNet's names (`resnet/stem/conv/kernel`, ...) and a ResNet-34 this
  suite trained on ImageNet initialises it by name (load_backbone).
- Extra layers (`block7`..`block11`): a 1x1 convolution then a 3x3 one,
  each with a bias and a ReLU and no batch norm; 3x3 at stride 2 with TF's
  'same' padding for levels 4-6 (19, 10, 5), 'valid' for levels 7 and 8
  (3, 1). Channels 256/512, 256/512, 128/256, 128/256, 128/256.
- Heads: per level a class and a box convolution with a bias, kernel
  min(map size, 3) and 'same' padding; default-box-major flattening
  (`concat_outputs`: box size, row, column), which input_pipeline/ssd_boxes.py's
  default boxes follow.
- tf.layers' default initialisers: Glorot-uniform kernels, zero biases.

Conv0 as space-to-depth (Google's TPU speed-up, the same function) is not
done. `compute_dtype='bfloat16'` runs the network in bfloat16 and returns
float32 outputs, as Google's `bfloat16_scope` and casts.
"""

import math

import tensorflow as tf

from input_pipeline import ssd_boxes
from models import layers
from models import named_checkpoint
from models import resnet as resnet_lib

BACKBONE_DEPTHS = (10, 18, 34)  # ResNets with basic blocks.

# (level, 1x1 channels, 3x3 channels, stride, padding) after the backbone.
EXTRA_LAYERS = ((4, 256, 512, 2, 'SAME'), (5, 256, 512, 2, 'SAME'),
                (6, 128, 256, 2, 'SAME'), (7, 128, 256, 1, 'VALID'),
                (8, 128, 256, 1, 'VALID'))


def glorot_uniform(shape, seed, fan_in: int, fan_out: int) -> tf.Tensor:
  """tf.layers' default kernel initialiser, stateless."""
  limit = math.sqrt(6.0 / (fan_in + fan_out))
  return tf.random.stateless_uniform(shape, seed, -limit, limit)


def feature_sizes(image_size: int, levels: int = 6) -> tuple:
  """The feature maps' sizes the network makes of an image size (the first
  `levels` of six)."""
  half = lambda n: -(-n // 2)  # Every stride-2 layer here gives ceil(n / 2).
  size = half(half(half(image_size)))  # Stem, max pool, stage 2.
  sizes = [size]
  for _, _, _, stride, _ in EXTRA_LAYERS[:levels - 1]:
    size = half(size) if stride == 2 else size - 2
    sizes.append(size)
  return tuple(sizes)


def no_decay_exemption(name: str) -> bool:
  """Google's v0.7 SSD decays every weight, batch norm and biases too
  (`WeightDecayOptimizer` adds wd x var to every gradient)."""
  del name
  return False


class SSD(tf.Module):
  """SSD300-ResNet34: class logits and box codes for every default box.

  Variables: `params` (trainable, by path name; the backbone's under
  `resnet/`, the rest under `ssd/`) and `state` (the backbone's batch-norm
  moving statistics).
  """

  def __init__(self, *, num_classes: int = 81, width_multiplier: float = 1.0,
               geometry: ssd_boxes.Geometry = ssd_boxes.Geometry(),
               compute_dtype: str = 'float32', bn_momentum: float = 0.9,
               bn_epsilon: float = 1e-5, bn_group_size: int = 0,
               spatial_partitions: int = 1, spatial_row_multiple: int = 8,
               backbone_depth: int = 34, seed: int = 0):
    """Args:
      num_classes: classes with background (COCO: 80 + 1).
      width_multiplier: scales every layer's channels but the heads'
        outputs (1.0 is MLPerf's model; the CPU quickstart uses less).
      backbone_depth: the backbone ResNet's depth, basic blocks: 34
        (MLPerf's: 13 blocks in its three stages), 18 (6) or 10 (3). The
        strides and so the feature maps do not depend on it; the tests
        trace a 10 (tracing time grows with the layers).
      geometry: default boxes; its feature sizes must be what the network
        makes of its image size (fewer than six levels drop the last extra
        layers: a small image's quickstart model).
      compute_dtype: 'float32' or 'bfloat16'.
      bn_momentum: moving-statistics decay (Google: 0.9).
      bn_epsilon: batch-norm epsilon (Google: 1e-5).
      bn_group_size: replicas whose batch-norm statistics are combined (0
        all, 1 per replica; Google's 4096-chip run: 16).
      spatial_partitions: training images arrive split along their height
        over this many replicas (models/spatial.py): the backbone runs on
        the slices while they can be strided; the group then gathers the
        map and every member computes the rest.
      spatial_row_multiple: each partition's slice has a multiple of this
        many rows, the image padded below to fill them when needed (uneven
        partitioning, models/spatial.py). 8, the backbone's stride: the
        whole backbone runs on slices (300 rows over 8 partitions: slices
        of 40, 20, 10 and 5 rows, 300, 150, 75 and 38 of them valid).
      seed: initialisation seed.
    """
    super().__init__(name='ssd')
    levels = len(geometry.feature_sizes)
    if not 1 <= levels <= 1 + len(EXTRA_LAYERS):
      raise ValueError(f'SSD geometry: 1 to {1 + len(EXTRA_LAYERS)} feature '
                       f'maps, got {levels}.')
    self.extra_layers = EXTRA_LAYERS[:levels - 1]
    made = feature_sizes(geometry.image_size, levels)
    if made != tuple(geometry.feature_sizes) or min(made) < 1:
      raise ValueError(
          f'SSD geometry: a {geometry.image_size}x{geometry.image_size} image '
          f'gives feature maps {made}, but the geometry says '
          f'{tuple(geometry.feature_sizes)}: set feature_sizes to match.')
    if num_classes < 2:
      raise ValueError(f'SSD `num_classes` counts background too: at least '
                       f'2, got {num_classes}.')
    self.num_classes, self.geometry = num_classes, geometry
    self.width_multiplier = width_multiplier
    self.dtype = layers.compute_dtype(compute_dtype)
    if backbone_depth not in BACKBONE_DEPTHS:
      raise ValueError(f'SSD `backbone_depth` must be one of '
                       f'{BACKBONE_DEPTHS} (basic blocks), got '
                       f'{backbone_depth}.')
    self.backbone = resnet_lib.ResNet(
        depth=backbone_depth, width_multiplier=width_multiplier,
        stage_strides=(1, 2, 1), classifier=False,
        zero_init_last_bn_gamma=True, bn_momentum=bn_momentum,
        bn_epsilon=bn_epsilon, bn_group_size=bn_group_size,
        compute_dtype=compute_dtype, spatial_partitions=spatial_partitions,
        spatial_height=geometry.image_size,
        spatial_row_multiple=spatial_row_multiple, seed=seed)
    self.spatial = self.backbone.spatial
    self._seed, self._counter = seed + 7919, 0
    self.params = dict(self.backbone.params)
    self.state = dict(self.backbone.state)
    self._head_names = []

    def width(c):
      return max(1, int(round(c * width_multiplier)))

    channels = [self.backbone.out_channels]
    cin = channels[0]
    for level, inner, outer, _, _ in self.extra_layers:
      self._conv(f'ssd/block{level + 3}-conv1x1', 1, cin, width(inner))
      self._conv(f'ssd/block{level + 3}-conv3x3', 3, width(inner),
                 width(outer))
      cin = width(outer)
      channels.append(cin)
    for i, (size, boxes) in enumerate(zip(geometry.feature_sizes,
                                          geometry.boxes_per_cell)):
      k = min(size, 3)
      level = i + 3
      self._conv(f'ssd/class_net/class-{level}', k, channels[i],
                 boxes * num_classes)
      self._conv(f'ssd/box_net/box-{level}', k, channels[i], boxes * 4)
    self.out_channels = tuple(channels)

  def _conv(self, name, k, cin, cout):
    self._counter += 1
    self.params[f'{name}/kernel'] = tf.Variable(
        glorot_uniform([k, k, cin, cout], [self._seed, self._counter],
                       k * k * cin, k * k * cout), name=f'{name}/kernel')
    self.params[f'{name}/bias'] = tf.Variable(tf.zeros([cout]),
                                              name=f'{name}/bias')

  def _apply(self, x, name, stride=1, padding='SAME', relu=True):
    kernel = tf.cast(self.params[f'{name}/kernel'], self.dtype)
    y = tf.nn.conv2d(x, kernel, stride, padding)
    y = y + tf.cast(self.params[f'{name}/bias'], self.dtype)
    return tf.nn.relu(y) if relu else y

  def __call__(self, images, *, training: bool):
    """Class logits [b, boxes, classes] and box codes [b, boxes, 4]
    (float32) and, when training, the backbone's new moving statistics.

    Args:
      images: [batch, height, width, 3] normalised images (whole, or this
        replica's height slice under spatial partitioning in training).
      training: batch statistics and new moving statistics if True.
    """
    x, updates, partitioned = self.backbone.features(
        tf.cast(images, self.dtype), training=training)
    if partitioned:
      x = self.spatial.gather_whole(x)
    maps = [x]
    for level, _, _, stride, padding in self.extra_layers:
      x = self._apply(x, f'ssd/block{level + 3}-conv1x1')
      x = self._apply(x, f'ssd/block{level + 3}-conv3x3', stride, padding)
      maps.append(x)
    classes, boxes = [], []
    for i, x in enumerate(maps):
      level = i + 3
      k = self.geometry.boxes_per_cell[i]
      classes.append(self._per_box(self._apply(
          x, f'ssd/class_net/class-{level}', relu=False), k,
                                   self.num_classes))
      boxes.append(self._per_box(self._apply(
          x, f'ssd/box_net/box-{level}', relu=False), k, 4))
    return (tf.cast(tf.concat(classes, 1), tf.float32),
            tf.cast(tf.concat(boxes, 1), tf.float32), updates)

  @staticmethod
  def _per_box(x, boxes_per_cell, depth):
    """[b, s, s, k * depth] -> [b, k * s * s, depth], box size major."""
    size = x.shape[1]
    x = tf.reshape(x, [-1, size, size, boxes_per_cell, depth])
    x = tf.transpose(x, [0, 3, 1, 2, 4])
    return tf.reshape(x, [-1, boxes_per_cell * size * size, depth])


def load_backbone(model, path: str, *, name_map=None,
                  depth_binding: str = 'models.ssd.SSD.backbone_depth'
                  ) -> int:
  """Initialises the backbone's weights and moving statistics from a
  checkpoint, every name and shape checked before anything is assigned.

  Args:
    model: the SSD (or any model with a ResNet `backbone` and its
      `width_multiplier`: Mask R-CNN's).
    path: a checkpoint prefix or folder: by default one this suite wrote for
      a ResNet of the backbone's depth (34 unless `backbone_depth` says
      otherwise; its `model/params/...` and `model/state/...` entries; the
      classifier and the fourth stage are not read; a deeper ResNet's is
      refused).
    name_map: backbone variable name (`resnet/stem/conv/kernel`) -> the
      checkpoint's name, for checkpoints of another source.
    depth_binding: the gin binding of the backbone's depth, for the error.

  Returns:
    The number of variables loaded.
  """
  backbone = model.backbone
  params, state = backbone.params, backbone.state
  depth = backbone.depth
  refuse = None
  if name_map is None:
    name_map = lambda name: suite_checkpoint_key(
        name, 'state' if name in state else 'params')
    # A deeper ResNet's names include a shallower one's: its first blocks
    # would load without a word.
    past = tuple(suite_checkpoint_path(f'resnet/stage{s + 1}/block{n}/', c)
                 for s, n in enumerate(resnet_lib.STAGE_BLOCKS[depth][:3])
                 for c in ('params', 'state'))
    refuse = lambda key: (
        f'a deeper ResNet than the backbone, a ResNet-{depth}: set '
        f'{depth_binding} to the depth it was trained at.'
        if key.startswith(past) else None)
  return named_checkpoint.load_named_variables(
      {**params, **state}, path, name_map=name_map,
      what=f'a ResNet-{depth} checkpoint of this suite',
      flag='BACKBONE_CHECKPOINT', refuse=refuse,
      fix_shapes=f'The backbone is a ResNet-{depth} of width_multiplier '
      f'{model.width_multiplier}: train the ResNet with the same depth and '
      'width.')


def suite_checkpoint_path(name: str, collection: str) -> str:
  """Where `model.<collection>[name]` sits in a checkpoint this suite's
  Checkpointer wrote (tf.train.Checkpoint escapes '/' in dict keys); a
  name's prefix gives the prefix of every key under it."""
  return f'model/{collection}/{name.replace("/", ".S")}'


def suite_checkpoint_key(name: str, collection: str) -> str:
  """The key of `model.<collection>[name]`'s value in such a checkpoint."""
  return (f'{suite_checkpoint_path(name, collection)}/.ATTRIBUTES/'
          'VARIABLE_VALUE')
