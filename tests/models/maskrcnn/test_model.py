"""Mask R-CNN's network: the pyramid, heads and their shapes, what trains
and what is frozen, and the doubled bias gradients."""

import numpy as np
import tensorflow as tf

from models.maskrcnn import model as maskrcnn


def small():
  return maskrcnn.MaskRCNN(num_classes=5, depth=10, width_multiplier=0.25,
                           mlp_head_dim=32, seed=1)


def test_shapes_of_the_pyramid_and_heads():
  model = small()
  images = tf.random.stateless_uniform([2, 128, 192, 3], [0, 1])
  feats, _ = model.pyramid(images, training=True)
  assert {l: tuple(f.shape) for l, f in feats.items()} == {
      2: (2, 32, 48, 256), 3: (2, 16, 24, 256), 4: (2, 8, 12, 256),
      5: (2, 4, 6, 256), 6: (2, 2, 3, 256)}
  np.testing.assert_array_equal(feats[6], feats[5][:, ::2, ::2])
  scores, boxes = model.rpn(feats)
  assert scores[3].shape == (2, 16, 24, 3) and boxes[6].shape == (2, 2, 3, 12)
  rois = tf.constant(np.tile([[[4., 8., 60., 90.]], [[30., 2., 127., 40.]]],
                             [1, 16, 1]), tf.float32)
  logits, deltas = model.box_head(feats, rois)
  assert logits.shape == (2, 16, 5) and deltas.shape == (2, 16, 20)
  masks = model.mask_head(feats, rois[:, :8])
  assert masks.shape == (2, 8, 28, 28, 5)


def test_frozen_backbone_parts_and_doubled_bias_gradients():
  model = small()
  names = {v.name.split(':')[0] for v in model.trainable_variables}
  assert not any(n.startswith(('resnet/stem/', 'resnet/stage1/')) or '/bn'
                 in n for n in names)
  assert 'resnet/stage2/block0/conv1/kernel' in names
  assert 'rpn/class/bias' in names and 'mask/logits/kernel' in names
  frozen = [v for v in model.variables if not v.trainable]
  assert any('resnet/stem/conv' in v.name for v in frozen)
  images = tf.random.stateless_uniform([2, 64, 64, 3], [0, 2])
  with tf.GradientTape() as tape:
    feats, _ = model.pyramid(images, training=True)
    scores, _ = model.rpn(feats)
    total = tf.add_n([tf.reduce_sum(s) for s in scores.values()])
  bias, kernel = tape.gradient(total, [model.params['rpn/class/bias'],
                                       model.params['rpn/class/kernel']])
  positions = sum(int(np.prod(s.shape[:3])) for s in scores.values())
  # d total / d bias is the positions' count: doubled, as Google's train_op.
  np.testing.assert_allclose(bias, [2.0 * positions] * 3, rtol=1e-6)
  # A kernel's gradient is not doubled: the positions' activations summed.
  x = [model._apply_conv(f, 'rpn/conv', relu=True) for f in feats.values()]
  want = sum(tf.reduce_sum(a, [0, 1, 2]) for a in x)
  np.testing.assert_allclose(kernel[0, 0, :, 0], want, rtol=1e-4)
  # Frozen batch norms: moving statistics in training, no updates.
  _, updates, _ = model.backbone.features(images, training=True, stages=True)
  assert updates == {}
