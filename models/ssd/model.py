"""SSD: class and box heads on a feature pyramid, as Google's v0.7 code
builds SSD300 (`ssd-research-TF-tpu-v3-8192/ssd_architecture.py`).

The pyramid (models/ssd/features.py, a gin choice) is MLPerf's ResNet-34
with Google's extra layers by default, or MobileNet-v1 with the TF
object-detection API's (SSD-MobileNet-v1, MLPerf Inference v0.5).

- Heads: per level a class and a box convolution with a bias, kernel
  min(map size, the pyramid's head kernel: 3 for the ResNet, 1 for
  MobileNet) and 'same' padding; default-box-major flattening
  (`concat_outputs`: box size, row, column), which input_pipeline/ssd_boxes.py's
  default boxes follow. tf.layers' default initialisers: Glorot-uniform
  kernels, zero biases (the object-detection API starts SSD-MobileNet's
  heads from a truncated normal of stddev 0.03: not followed).

Conv0 as space-to-depth (Google's TPU speed-up, the same function) is not
done. `compute_dtype='bfloat16'` runs the network in bfloat16 and returns
float32 outputs, as Google's `bfloat16_scope` and casts.
"""

import tensorflow as tf

from input_pipeline import ssd_boxes
from models.common import layers
from models.ssd import features as ssd_features


def no_decay_exemption(name: str) -> bool:
  """Google's v0.7 SSD decays every weight, batch norm and biases too
  (`WeightDecayOptimizer` adds wd x var to every gradient)."""
  del name
  return False


class SSD(tf.Module):
  """SSD: class logits and box codes for every default box.

  Variables: `params` (trainable, by path name; the backbone's under
  `resnet/` or `mobilenet/`, the rest under `ssd/`) and `state` (batch-norm
  moving statistics). `normalize` takes [0, 1] images to the pyramid's
  input scale.
  """

  def __init__(self, *, features=ssd_features.ResNetFeatures,
               num_classes: int = 81, width_multiplier: float = 1.0,
               geometry: ssd_boxes.Geometry = ssd_boxes.Geometry(),
               compute_dtype: str = 'float32', bn_momentum: float = 0.9,
               bn_epsilon: float = 1e-5, bn_group_size: int = 0,
               spatial_partitions: int = 1, quantization_aware: bool = False,
               seed: int = 0):
    """Args:
      features: builds the feature pyramid (a ssd_features.FeaturePyramid
        class; gin: `@models.ssd.features.ResNetFeatures` or
        `@models.ssd.features.MobileNetFeatures`, no call); its own settings
        (the ResNet's depth, ...) are bound on it.
      num_classes: classes with background (COCO: 80 + 1).
      width_multiplier: scales every layer's channels but the heads'
        outputs (1.0 is MLPerf's model; the CPU quickstart uses less).
      geometry: default boxes; its feature sizes must be what the network
        makes of its image size (fewer than six levels drop the last extra
        layers: a small image's quickstart model).
      compute_dtype: 'float32' or 'bfloat16'.
      bn_momentum: moving-statistics decay (Google: 0.9).
      bn_epsilon: batch-norm epsilon (Google: 1e-5).
      bn_group_size: replicas whose batch-norm statistics are combined (0
        all, 1 per replica; Google's 4096-chip run: 16).
      spatial_partitions: training images arrive split along their height
        over this many replicas (the ResNet pyramid's;
        models/common/spatial.py).
      quantization_aware: compute with every kernel rounded to its INT8
        grid, the pyramid's and the heads' (layers.int8_kernel):
        quantization-aware training of the INT8 model's weights.
      seed: initialisation seed.
    """
    super().__init__(name='ssd')
    levels = len(geometry.feature_sizes)
    if num_classes < 2:
      raise ValueError(f'SSD `num_classes` counts background too: at least '
                       f'2, got {num_classes}.')
    self.features = features(
        levels=levels, image_size=geometry.image_size,
        width_multiplier=width_multiplier, compute_dtype=compute_dtype,
        bn_momentum=bn_momentum, bn_epsilon=bn_epsilon,
        bn_group_size=bn_group_size, spatial_partitions=spatial_partitions,
        quantization_aware=quantization_aware, seed=seed)
    made = self.features.feature_sizes(geometry.image_size)
    if made != tuple(geometry.feature_sizes) or min(made) < 1:
      raise ValueError(
          f'SSD geometry: a {geometry.image_size}x{geometry.image_size} image '
          f'gives feature maps {made}, but the geometry says '
          f'{tuple(geometry.feature_sizes)}: set feature_sizes to match.')
    self.num_classes, self.geometry = num_classes, geometry
    self.width_multiplier = width_multiplier
    self.dtype = layers.compute_dtype(compute_dtype)
    self.quantization_aware = quantization_aware
    self.backbone = self.features.backbone
    self.spatial = self.features.spatial
    self.normalize = self.features.normalize
    self._seed, self._counter = self.features.head_seed
    self.params = dict(self.features.params)
    self.state = dict(self.features.state)
    channels = self.features.out_channels
    for i, (size, boxes) in enumerate(zip(geometry.feature_sizes,
                                          geometry.boxes_per_cell)):
      k = min(size, self.features.head_kernel)
      level = i + 3
      self._conv(f'ssd/class_net/class-{level}', k, channels[i],
                 boxes * num_classes)
      self._conv(f'ssd/box_net/box-{level}', k, channels[i], boxes * 4)
    self.out_channels = tuple(channels)

  def _conv(self, name, k, cin, cout):
    self._counter += 1
    self.params[f'{name}/kernel'] = tf.Variable(
        layers.glorot_uniform([k, k, cin, cout], [self._seed, self._counter],
                             k * k * cin, k * k * cout), name=f'{name}/kernel')
    self.params[f'{name}/bias'] = tf.Variable(tf.zeros([cout]),
                                              name=f'{name}/bias')

  def _apply(self, x, name, stride=1, padding='SAME', relu=True):
    kernel = layers.compute_kernel(self.params[f'{name}/kernel'], self.dtype,
                                   int8=self.quantization_aware)
    y = tf.nn.conv2d(x, kernel, stride, padding)
    y = y + tf.cast(self.params[f'{name}/bias'], self.dtype)
    return tf.nn.relu(y) if relu else y

  def __call__(self, images, *, training: bool):
    """Class logits [b, boxes, classes] and box codes [b, boxes, 4]
    (float32) and, when training, the pyramid's new moving statistics.

    Args:
      images: [batch, height, width, 3] images normalised by `normalize`
        (whole, or this replica's height slice under spatial partitioning
        in training).
      training: batch statistics and new moving statistics if True.
    """
    maps, updates = self.features(images, training=training)
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

  def load_backbone(self, path: str) -> int:
    """The pyramid's backbone from a checkpoint of this suite (its
    `load_backbone`); returns the variables loaded."""
    return self.features.load_backbone(path)

  @staticmethod
  def _per_box(x, boxes_per_cell, depth):
    """[b, s, s, k * depth] -> [b, k * s * s, depth], box size major."""
    size = x.shape[1]
    x = tf.reshape(x, [-1, size, size, boxes_per_cell, depth])
    x = tf.transpose(x, [0, 3, 1, 2, 4])
    return tf.reshape(x, [-1, boxes_per_cell * size * size, depth])
