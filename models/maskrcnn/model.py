"""Mask R-CNN's network as Google's MLPerf v0.7 code builds it
(maskrcnn-research-TF-tpu-*: fpn.py, mask_rcnn_architecture.py `rpn_net`,
`faster_rcnn_heads`, `mask_rcnn_heads`), as a plain tf.Module: the parts
the training and evaluation graphs (models/maskrcnn/task.py, to come)
assemble with the proposals, RoI sampling, RoIAlign, targets and losses of
their own modules.

- Backbone: models.common.resnet.ResNet without its classifier, every batch norm
  frozen (moving statistics, gamma and beta untrained) and the stem and
  first stage frozen, as theirs; C2..C5.
- FPN: 1x1 laterals of 256 on C2..C5, the top-down sum with nearest
  upsampling, 3x3 convolutions of 256 after it (glorot-uniform kernels,
  zero biases: tf.layers' defaults), P6 = P5 subsampled by 2 (their 1x1
  max pool of stride 2).
- RPN, shared by P2..P6: 3x3 conv 256 + ReLU, then 1x1 to A scores and
  4 A deltas (normal 0.01).
- Box head on 7x7 RoIAlign: fc6, fc7 of 1024 + ReLU (glorot uniform),
  class logits (normal 0.01) and class-major deltas (normal 0.001).
- Mask head on 14x14 RoIAlign: four 3x3 convs of 256 + ReLU, a 2x2
  stride-2 transposed conv of 256 + ReLU, a 1x1 conv to a mask per class
  (normal, std sqrt(2 / (k k fan_out)): Caffe2's MSRAFill), 28x28.

Biases learn at twice the rate (their `train_op` doubles the gradients of
'bias' and 'beta' variables; every beta here is frozen): each bias is read
through `double_gradient`, the identity whose gradient is doubled.
"""

import math

import tensorflow as tf

from models.common import layers
from models.common import resnet as resnet_lib
from models.maskrcnn import roi_align as roi_align_lib

FPN_CHANNELS = 256  # Google's, the FPN's and both heads' convolutions.
MIN_LEVEL, MAX_LEVEL = 2, 6
FROZEN = ('resnet/stem/', 'resnet/stage1/')  # Their conv2d .. conv2d_10.


def no_decay(name: str) -> bool:
  """Google's WeightDecayOptimizer skips 'bias' and batch-norm variables
  (the batch norms are frozen here, or trained without decay when not)."""
  return 'bias' in name or '/bn' in name


@tf.custom_gradient
def double_gradient(x):
  """x, with its gradient doubled."""
  return tf.identity(x), lambda dy: 2.0 * dy


def _upsample2(x):
  """Nearest-neighbour x2 of [B, H, W, C] by stacking copies (static shapes
  in the gradient too: XLA takes it where tf.repeat's is refused)."""
  _, h, w, c = x.shape
  rows = tf.reshape(tf.stack([x, x], axis=2), [-1, 2 * h, w, c])
  return tf.reshape(tf.stack([rows, rows], axis=3), [-1, 2 * h, 2 * w, c])


class MaskRCNN(tf.Module):
  """Google's v0.7 Mask R-CNN network.

  Variables live in `params` by path name; trainable ones are those
  `tf.Module.trainable_variables` lists (the backbone's frozen parts are
  not). The backbone's batch-norm state stays as loaded (frozen).
  """

  def __init__(self, *, num_classes: int = 91, depth: int = 50,
               width_multiplier: float = 1.0, anchors_per_location: int = 3,
               mlp_head_dim: int = 1024, mask_resolution: int = 28,
               fpn_channels: int = FPN_CHANNELS, frozen: tuple = FROZEN,
               frozen_batch_norm: bool = True, bn_group_size: int = 0,
               spatial_partitions: int = 1, compute_dtype: str = 'float32',
               seed: int = 0):
    """Args:
      num_classes: classes with background.
      depth, width_multiplier: the ResNet backbone's.
      mlp_head_dim: the box head's two layers' width.
      fpn_channels: the FPN's, the RPN's and the mask head's channels.
      frozen: backbone variable name prefixes that do not train (Google's:
        the stem and the first stage); () trains them all (from scratch).
      frozen_batch_norm: the backbone's batch norms use their moving
        statistics and do not train (Google's, from an ImageNet-trained
        backbone); False normalizes by the batch's statistics and trains
        them (from scratch).
      bn_group_size: replicas whose batch statistics a trained batch norm
        shares (0: all; a multiple of spatial_partitions).
      spatial_partitions: training images arrive split along their height
        over this many replicas (models/common/spatial.py, Google's
        input_partition_dims): the backbone runs on the slices while they
        can be strided, each stage's map is gathered whole for the FPN,
        every member of a group computes the RPN on whole maps and the
        task gives each its share of the stage-2 RoIs. The height must
        divide by it (both orientations').
    """
    super().__init__(name='maskrcnn')
    self.num_classes, self.mask_resolution = num_classes, mask_resolution
    self.anchors_per_location = anchors_per_location
    self.width_multiplier = width_multiplier
    self.dtype = layers.compute_dtype(compute_dtype)
    self.backbone = resnet_lib.ResNet(
        depth=depth, width_multiplier=width_multiplier, classifier=False,
        frozen=frozen, frozen_batch_norm=frozen_batch_norm,
        bn_group_size=bn_group_size, spatial_partitions=spatial_partitions,
        compute_dtype=compute_dtype, zero_init_last_bn_gamma=False, seed=seed)
    self.spatial = self.backbone.spatial
    # Moving statistics the train step replaces (none when frozen).
    self.state = {} if frozen_batch_norm else dict(self.backbone.state)
    self._seed, self._counter = seed + 1, 0
    self.params = {}
    c = self.fpn_channels = fpn_channels
    stage_channels = self._stage_channels(depth, width_multiplier)
    for level, cin in stage_channels.items():
      self._conv(f'fpn/l{level}', 1, cin, c, 'glorot')
      self._conv(f'fpn/post_hoc_d{level}', 3, c, c, 'glorot')
    a = anchors_per_location
    self._conv('rpn/conv', 3, c, c, 0.01)
    self._conv('rpn/class', 1, c, a, 0.01)
    self._conv('rpn/box', 1, c, 4 * a, 0.01)
    roi_features = 7 * 7 * c
    self._dense('box/fc6', roi_features, mlp_head_dim, 'glorot')
    self._dense('box/fc7', mlp_head_dim, mlp_head_dim, 'glorot')
    self._dense('box/class', mlp_head_dim, num_classes, 0.01)
    self._dense('box/box', mlp_head_dim, 4 * num_classes, 0.001)
    for i in range(4):
      self._conv(f'mask/conv{i}', 3, c, c, math.sqrt(2 / (9 * c)))
    self._conv('mask/deconv', 2, c, c, math.sqrt(2 / (4 * c)))
    self._conv('mask/logits', 1, c, num_classes,
               math.sqrt(2 / num_classes))

  @staticmethod
  def _stage_channels(depth: int, width_multiplier: float) -> dict:
    expansion = 4 if depth in resnet_lib.BOTTLENECK_DEPTHS else 1
    return {s + 2: max(1, int(round(64 * 2**s * width_multiplier))) *
            expansion for s in range(4)}

  # -- Variables --------------------------------------------------------------

  def _next_seed(self):
    self._counter += 1
    return [self._seed, self._counter]

  def _init(self, shape, init, fan_in, fan_out):
    if init == 'glorot':
      return layers.glorot_uniform(shape, self._next_seed(), fan_in, fan_out)
    return tf.random.stateless_normal(shape, self._next_seed(), stddev=init)

  def _conv(self, name, k, cin, cout, init):
    self.params[f'{name}/kernel'] = tf.Variable(
        self._init([k, k, cin, cout], init, k * k * cin, k * k * cout),
        name=f'{name}/kernel')
    self.params[f'{name}/bias'] = tf.Variable(tf.zeros([cout]),
                                              name=f'{name}/bias')

  def _dense(self, name, cin, cout, init):
    self.params[f'{name}/kernel'] = tf.Variable(
        self._init([cin, cout], init, cin, cout), name=f'{name}/kernel')
    self.params[f'{name}/bias'] = tf.Variable(tf.zeros([cout]),
                                              name=f'{name}/bias')

  def _weights(self, name):
    return (tf.cast(self.params[f'{name}/kernel'], self.dtype),
            tf.cast(double_gradient(self.params[f'{name}/bias']), self.dtype))

  def _apply_conv(self, x, name, relu=False):
    kernel, bias = self._weights(name)
    y = tf.nn.conv2d(x, kernel, 1, 'SAME') + bias
    return tf.nn.relu(y) if relu else y

  def _apply_dense(self, x, name, relu=False):
    kernel, bias = self._weights(name)
    y = tf.einsum('bni,io->bno', x, kernel) + bias
    return tf.nn.relu(y) if relu else y

  # -- Forward ----------------------------------------------------------------

  def pyramid(self, images, *, training: bool) -> tuple[dict, dict]:
    """({2..6: [B, H / 2^l, W / 2^l, 256]} from [B, H, W, 3] images, the
    backbone's new batch-norm state: empty when frozen)."""
    stages, updates, _ = self.backbone.features(images, training=training,
                                                stages=True)
    lateral = {level: self._apply_conv(stages[level], f'fpn/l{level}')
               for level in stages}
    top = max(lateral)
    feats = {top: lateral[top]}
    for level in range(top - 1, min(lateral) - 1, -1):
      up = _upsample2(feats[level + 1])
      feats[level] = up + lateral[level]
    feats = {level: self._apply_conv(f, f'fpn/post_hoc_d{level}')
             for level, f in feats.items()}
    feats[MAX_LEVEL] = feats[top][:, ::2, ::2, :]
    return feats, updates

  def rpn(self, features: dict):
    """({level: [B, H, W, A] logits}, {level: [B, H, W, 4 A] deltas})."""
    scores, boxes = {}, {}
    for level, f in features.items():
      x = self._apply_conv(f, 'rpn/conv', relu=True)
      scores[level] = self._apply_conv(x, 'rpn/class')
      boxes[level] = self._apply_conv(x, 'rpn/box')
    return scores, boxes

  def box_head(self, features: dict, rois, roi_align: str = 'auto'):
    """([B, K, C] class logits, [B, K, 4 C] deltas) of [B, K, 4] RoIs
    (`roi_align`: models/maskrcnn/roi_align.py's method)."""
    x = roi_align_lib.multilevel_crop_and_resize(features, rois, output_size=7,
                                                 method=roi_align)
    x = tf.reshape(x, [-1, x.shape[1], x.shape[2] * x.shape[3] * x.shape[4]])
    x = self._apply_dense(x, 'box/fc6', relu=True)
    x = self._apply_dense(x, 'box/fc7', relu=True)
    return (tf.cast(self._apply_dense(x, 'box/class'), tf.float32),
            tf.cast(self._apply_dense(x, 'box/box'), tf.float32))

  def mask_head(self, features: dict, rois, roi_align: str = 'auto'):
    """[B, M, 28, 28, C] mask logits of [B, M, 4] RoIs."""
    x = roi_align_lib.multilevel_crop_and_resize(
        features, rois, output_size=14, method=roi_align)
    num = x.shape[1] or tf.shape(x)[1]  # Dynamic: foreground RoIs only.
    x = tf.reshape(x, [-1, x.shape[2], x.shape[3], x.shape[4]])
    for i in range(4):
      x = self._apply_conv(x, f'mask/conv{i}', relu=True)
    kernel, bias = self._weights('mask/deconv')
    size = 2 * x.shape[1]
    x = tf.nn.relu(tf.nn.conv2d_transpose(
        x, kernel, [tf.shape(x)[0], size, size, self.fpn_channels], 2,
        'VALID') + bias)
    x = self._apply_conv(x, 'mask/logits')
    return tf.cast(tf.reshape(x, [-1, num, size, size, self.num_classes]),
                   tf.float32)
