"""SSD's feature pyramids: a backbone and the extra layers after it.

The SSD (models/ssd/model.py) puts its class and box heads on the maps a pyramid
makes; which pyramid is a gin choice (`models.ssd.model.SSD.features`):

- `ResNetFeatures`: MLPerf's SSD300-ResNet34, as Google's v0.7 code builds
  it (`ssd-research-TF-tpu-v3-8192/ssd_architecture.py`): the ResNet's first
  three stages, the third at stride 1 (256 channels at 38x38 for 300x300),
  then five extra layers (`block7`..`block11`), each a 1x1 convolution and a
  3x3 one with a bias and a ReLU, no batch norm; 3x3 at stride 2 'SAME' for
  levels 4-6 (19, 10, 5), 'VALID' at stride 1 for levels 7 and 8 (3, 1).
  Channels 256/512, 256/512, 128/256, 128/256, 128/256; tf.layers' Glorot
  kernels. Pixels normalised by the ImageNet mean and stddev.
- `MobileNetFeatures`: MLPerf Inference v0.5's SSD-MobileNet-v1, as the TF
  object-detection API builds it (`ssd_mobilenet_v1_feature_extractor.py`,
  `feature_map_generators.multi_resolution_feature_maps`, and the
  `ssd_mobilenet_v1_coco` config): MobileNet-v1's blocks 11 and 13
  (`Conv2d_11_pointwise`, `Conv2d_13_pointwise`: 19x19 and 10x10 at 300x300),
  then four extra layers of depth 512, 256, 256, 128, each a 1x1 convolution
  of half the depth and a 3x3 one at stride 2 'SAME' (5, 3, 2, 1), every
  convolution without a bias, followed by batch norm (decay and epsilon as
  the backbone's) and ReLU6, kernels truncated normal of stddev 0.03;
  depths x width_multiplier, at least `min_depth` (16). Pixels in [-1, 1].
  The heads are 1x1 (the config's `kernel_size: 1`).
"""

from typing import Protocol

import tensorflow as tf

from models.common import backbone_checkpoint
from models.common import layers
from models.common import mobilenet as mobilenet_lib
from models.common import resnet as resnet_lib
from models.common import spatial as spatial_lib

# ssd_constants.py.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

RESNET_DEPTHS = (10, 18, 34)  # ResNets with basic blocks.

# (level, 1x1 channels, 3x3 channels, stride, padding) after the ResNet.
RESNET_EXTRA_LAYERS = ((4, 256, 512, 2, 'SAME'), (5, 256, 512, 2, 'SAME'),
                       (6, 128, 256, 2, 'SAME'), (7, 128, 256, 1, 'VALID'),
                       (8, 128, 256, 1, 'VALID'))

# The object-detection API's `layer_depth` of the maps after block 13.
MOBILENET_EXTRA_DEPTHS = (512, 256, 256, 128)
MOBILENET_FEATURE_BLOCKS = (11, 13)
MOBILENET_EXTRA_STDDEV = 0.03


class FeaturePyramid(Protocol):
  """What the SSD needs of a backbone with its extra layers.

  Attributes:
    params, state: trainable variables and batch-norm moving statistics by
      path name (the SSD adds them to its own).
    backbone: the backbone network (`load_backbone` fills it).
    bn_sync: its batch-norm groups (the task logs `model_bn_span`).
    spatial: its spatial partitioning (partitions 1 if it has none).
    out_channels: each map's channels.
    head_kernel: the heads' kernel size (at most each map's size).
    head_seed: (seed, counter) where the heads' initialisation continues
      the pyramid's stateless stream.

  Constructed with the SSD's levels, image_size, width_multiplier,
  compute_dtype, bn_momentum, bn_epsilon, bn_group_size,
  spatial_partitions, quantization_aware and seed.
  """

  params: dict
  state: dict
  backbone: tf.Module
  bn_sync: layers.BatchNormSync
  spatial: spatial_lib.SpatialPartitioning
  out_channels: tuple
  head_kernel: int
  head_seed: tuple

  def feature_sizes(self, image_size: int) -> tuple:
    """The maps' sizes for a square image of `image_size` pixels."""

  def normalize(self, images) -> tf.Tensor:
    """[0, 1] images -> the network's input scale (float32)."""

  def __call__(self, images, *, training: bool) -> tuple[list, dict]:
    """([the maps, whole, in the compute dtype], the new moving statistics:
    {} in eval). `images` are normalised (a height slice under spatial
    partitioning in training)."""

  def load_backbone(self, path: str) -> int:
    """Initialises the backbone from a checkpoint of this suite, every
    name and shape checked first; returns the variables loaded."""


def _half(n: int) -> int:
  return -(-n // 2)  # A stride-2 'SAME' layer gives ceil(n / 2).


class ResNetFeatures(tf.Module):
  """SSD300-ResNet34's pyramid (MLPerf Training v0.7 `ssd`). Implements
  FeaturePyramid; the extra layers' variables are `ssd/block{7..11}-...`."""

  head_kernel = 3

  def __init__(self, *, levels: int = 6, image_size: int = 300,
               width_multiplier: float = 1.0, depth: int = 34,
               compute_dtype: str = 'float32', bn_momentum: float = 0.9,
               bn_epsilon: float = 1e-5, bn_group_size: int = 0,
               spatial_partitions: int = 1, spatial_row_multiple: int = 8,
               quantization_aware: bool = False, seed: int = 0):
    """Args:
      levels: maps, 1 to 6 (fewer drop the last extra layers: a small
        image's quickstart model).
      image_size: the images' height (uneven spatial slices need it).
      width_multiplier: scales every layer's channels.
      depth: the ResNet's depth, basic blocks: 34 (MLPerf's: 13 blocks in
        its three stages), 18 (6) or 10 (3). The strides and so the maps do
        not depend on it; the tests trace a 10 (tracing time grows with the
        layers).
      compute_dtype, bn_momentum, bn_epsilon, bn_group_size: the ResNet's.
      spatial_partitions: training images arrive split along their height
        over this many replicas (models/common/spatial.py): the backbone runs on
        the slices while they can be strided; the group then gathers the
        map and every member computes the rest.
      spatial_row_multiple: each partition's slice has a multiple of this
        many rows, the image padded below to fill them when needed (uneven
        partitioning, models/common/spatial.py). 8, the backbone's stride: the
        whole backbone runs on slices (300 rows over 8 partitions: slices
        of 40, 20, 10 and 5 rows, 300, 150, 75 and 38 of them valid).
      quantization_aware: must be False (SSD-ResNet34 has no INT8 model
        here).
      seed: initialisation seed.
    """
    super().__init__(name='resnet_features')
    if quantization_aware:
      raise ValueError(
          'models.ssd.model.SSD.quantization_aware: quantization-aware '
          'training is built for the MobileNet pyramid (MobileNetFeatures) only; unset '
          'it for SSD-ResNet34.')
    if not 1 <= levels <= 1 + len(RESNET_EXTRA_LAYERS):
      raise ValueError(f'SSD-ResNet: 1 to {1 + len(RESNET_EXTRA_LAYERS)} '
                       f'feature maps, got {levels}.')
    if depth not in RESNET_DEPTHS:
      raise ValueError(
          f'models.ssd.features.ResNetFeatures.depth must be one of '
          f'{RESNET_DEPTHS} (basic blocks), got {depth}.')
    self.extra_layers = RESNET_EXTRA_LAYERS[:levels - 1]
    self.width_multiplier = width_multiplier
    self.dtype = layers.compute_dtype(compute_dtype)
    self.backbone = resnet_lib.ResNet(
        depth=depth, width_multiplier=width_multiplier,
        stage_strides=(1, 2, 1), classifier=False,
        zero_init_last_bn_gamma=True, bn_momentum=bn_momentum,
        bn_epsilon=bn_epsilon, bn_group_size=bn_group_size,
        compute_dtype=compute_dtype, spatial_partitions=spatial_partitions,
        spatial_height=image_size, spatial_row_multiple=spatial_row_multiple,
        seed=seed)
    self.bn_sync = self.backbone.bn_sync
    self.spatial = self.backbone.spatial
    self.params = dict(self.backbone.params)
    self.state = dict(self.backbone.state)
    seed, counter = seed + 7919, 0
    width = lambda c: max(1, int(round(c * width_multiplier)))
    channels = [self.backbone.out_channels]
    cin = channels[0]
    for level, inner, outer, _, _ in self.extra_layers:
      for name, k, cout in (('conv1x1', 1, width(inner)),
                            ('conv3x3', 3, width(outer))):
        counter += 1
        name = f'ssd/block{level + 3}-{name}'
        self.params[f'{name}/kernel'] = tf.Variable(layers.glorot_uniform(
            [k, k, cin, cout], [seed, counter], k * k * cin, k * k * cout),
                                                    name=f'{name}/kernel')
        self.params[f'{name}/bias'] = tf.Variable(tf.zeros([cout]),
                                                  name=f'{name}/bias')
        cin = cout
      channels.append(cin)
    self.out_channels = tuple(channels)
    # The SSD's heads continue the extra layers' initialisation stream.
    self.head_seed = (seed, counter)

  def feature_sizes(self, image_size: int) -> tuple:
    size = _half(_half(_half(image_size)))  # Stem, max pool, stage 2.
    sizes = [size]
    for _, _, _, stride, _ in self.extra_layers:
      size = _half(size) if stride == 2 else size - 2
      sizes.append(size)
    return tuple(sizes)

  @staticmethod
  def normalize(images):
    return ((tf.cast(images, tf.float32) - tf.constant(IMAGENET_MEAN)) /
            tf.constant(IMAGENET_STD))

  def __call__(self, images, *, training: bool):
    x, updates, partitioned = self.backbone.features(
        tf.cast(images, self.dtype), training=training)
    if partitioned:
      x = self.spatial.gather_whole(x)
    maps = [x]
    for level, _, _, stride, padding in self.extra_layers:
      for name, s, pad in (('conv1x1', 1, 'SAME'), ('conv3x3', stride,
                                                      padding)):
        name = f'ssd/block{level + 3}-{name}'
        x = tf.nn.conv2d(x, tf.cast(self.params[f'{name}/kernel'],
                                    self.dtype), s, pad)
        x = tf.nn.relu(x + tf.cast(self.params[f'{name}/bias'], self.dtype))
      maps.append(x)
    return maps, updates

  def load_backbone(self, path: str) -> int:
    return backbone_checkpoint.load_resnet(
        self, path, depth_binding='models.ssd.features.ResNetFeatures.depth')


class MobileNetFeatures(tf.Module):
  """SSD-MobileNet-v1's pyramid (MLPerf Inference v0.5 `ssd-mobilenet`).
  Implements FeaturePyramid; the backbone's variables are MobileNet-v1's
  (`mobilenet/conv{i}/...`), the extra layers' `ssd/extra{j}-...`."""

  head_kernel = 1

  def __init__(self, *, levels: int = 6, image_size: int = 300,
               width_multiplier: float = 1.0, min_depth: int = 16,
               compute_dtype: str = 'float32', bn_momentum: float = 0.9997,
               bn_epsilon: float = 0.001, bn_group_size: int = 0,
               spatial_partitions: int = 1, quantization_aware: bool = False,
               seed: int = 0):
    """Args:
      levels: maps, 1 to 6 (blocks 11 and 13, then the extra layers).
      image_size: unused (the maps follow from the image); the SSD passes it.
      width_multiplier: the object-detection API's depth_multiplier, for
        the backbone and the extra layers.
      min_depth: the fewest channels a layer keeps (the API's 16 for SSD).
      compute_dtype, bn_momentum, bn_epsilon, bn_group_size: every batch
        norm's (the config's decay 0.9997 and epsilon 0.001).
      spatial_partitions: must be 1 (MobileNet-v1 has none).
      quantization_aware: every kernel, the backbone's too, on its INT8
        grid (layers.int8_kernel): quantization-aware training.
      seed: initialisation seed.
    """
    super().__init__(name='mobilenet_features')
    del image_size
    limit = len(MOBILENET_FEATURE_BLOCKS) + len(MOBILENET_EXTRA_DEPTHS)
    if not 1 <= levels <= limit:
      raise ValueError(f'SSD-MobileNet: 1 to {limit} feature maps, got '
                       f'{levels}.')
    self.width_multiplier = width_multiplier
    self.dtype = layers.compute_dtype(compute_dtype)
    self.backbone = mobilenet_lib.MobileNetV1(
        width_multiplier=width_multiplier, min_depth=min_depth,
        classifier=False, bn_momentum=bn_momentum, bn_epsilon=bn_epsilon,
        bn_group_size=bn_group_size, spatial_partitions=spatial_partitions,
        compute_dtype=compute_dtype, quantization_aware=quantization_aware,
        seed=seed)
    self.bn_momentum, self.bn_epsilon = bn_momentum, bn_epsilon
    self.bn_sync = self.backbone.bn_sync
    self.spatial = spatial_lib.SpatialPartitioning(1)
    self.params = dict(self.backbone.params)
    self.state = dict(self.backbone.state)
    self.blocks = MOBILENET_FEATURE_BLOCKS[:levels]
    extra = MOBILENET_EXTRA_DEPTHS[:max(0, levels - len(self.blocks))]
    depth = lambda d: max(int(d * width_multiplier), min_depth)
    channels = [self.backbone.channels[b] for b in self.blocks]
    cin, counter = channels[-1], 0
    self.extra_layers = []
    for j, d in enumerate(extra):
      names = []
      for kind, k, cout in (('1x1', 1, depth(d // 2)), ('3x3', 3, depth(d))):
        counter += 1
        name = f'ssd/extra{j + 2}-conv{kind}'
        self.params[f'{name}/kernel'] = tf.Variable(
            tf.random.stateless_truncated_normal(
                [k, k, cin, cout], [seed + 7919, counter],
                stddev=MOBILENET_EXTRA_STDDEV), name=f'{name}/kernel')
        for key, value in (('gamma', tf.ones([cout])),
                           ('beta', tf.zeros([cout]))):
          self.params[f'{name}/bn/{key}'] = tf.Variable(
              value, name=f'{name}/bn/{key}')
        for key, value in (('moving_mean', tf.zeros([cout])),
                           ('moving_variance', tf.ones([cout]))):
          self.state[f'{name}/bn/{key}'] = tf.Variable(
              value, name=f'{name}/bn/{key}', trainable=False)
        names.append(name)
        cin = cout
      self.extra_layers.append(tuple(names))
      channels.append(cin)
    self.out_channels = tuple(channels)
    self.head_seed = (seed + 7919, counter)

  def feature_sizes(self, image_size: int) -> tuple:
    size = image_size
    sizes = []
    for i, (_, _, stride) in enumerate(mobilenet_lib.CONV_DEFS):
      size = _half(size) if stride == 2 else size
      if i in self.blocks:
        sizes.append(size)
    for _ in self.extra_layers:
      size = _half(size)
      sizes.append(size)
    return tuple(sizes)

  @staticmethod
  def normalize(images):
    # The API's (2 / 255) x pixels - 1 of [0, 1] images.
    return tf.cast(images, tf.float32) * 2.0 - 1.0

  def __call__(self, images, *, training: bool):
    blocks, updates = self.backbone.features(images, training=training)
    maps = [blocks[b] for b in self.blocks]
    x = maps[-1]
    for names in self.extra_layers:
      for name, stride in zip(names, (1, 2)):
        x = tf.nn.conv2d(x, self.kernel(name), stride, 'SAME')
        x = tf.nn.relu6(layers.named_batch_norm(
            x, f'{name}/bn', self.params, self.state, updates,
            training=training, sync=self.bn_sync, momentum=self.bn_momentum,
            epsilon=self.bn_epsilon))
      maps.append(x)
    return maps, updates

  def kernel(self, name: str) -> tf.Tensor:
    """`{name}/kernel` in the compute dtype, on its INT8 grid when the
    backbone is quantization-aware."""
    return layers.compute_kernel(self.params[f'{name}/kernel'], self.dtype,
                                 int8=self.backbone.quantization_aware)

  def load_backbone(self, path: str) -> int:
    return backbone_checkpoint.load_mobilenet(self.backbone, path)
