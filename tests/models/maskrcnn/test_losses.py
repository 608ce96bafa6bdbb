"""Mask R-CNN's losses against NumPy versions of Google's v0.7 losses.py
with tf.compat.v1.losses' reductions written out."""

import numpy as np
import tensorflow as tf

from models.maskrcnn import losses as losses


def sigmoid_ce(labels, logits):
  return np.maximum(logits, 0) - logits * labels + np.log1p(
      np.exp(-np.abs(logits)))


def numpy_huber(labels, predictions, weights, delta):
  """huber_loss with SUM_BY_NONZERO_WEIGHTS."""
  error = predictions - labels
  abs_error = np.abs(error)
  quadratic = np.minimum(abs_error, delta)
  linear = abs_error - quadratic
  loss = 0.5 * quadratic ** 2 + delta * linear
  weights = np.broadcast_to(weights, loss.shape).astype(np.float64)
  present = np.count_nonzero(weights)
  return (loss * weights).sum() / present if present else 0.0


def test_rpn_loss_is_their_per_level_sum():
  rng = np.random.default_rng(0)
  outs, boxes, s_t, b_t = {}, {}, {}, {}
  want_score = want_box = 0.0
  for level, (h, w) in {2: (8, 6), 3: (4, 3)}.items():
    outs[level] = rng.normal(size=(2, h, w, 3))
    boxes[level] = rng.normal(0, 0.3, (2, h, w, 12))
    s_t[level] = rng.choice([-1, 0, 1], (2, h, w, 3))
    b_t[level] = np.where(rng.uniform(size=(2, h, w, 12)) < 0.2,
                          rng.normal(0, 0.2, (2, h, w, 12)), 0.0)
    mask = (s_t[level] == 1) | (s_t[level] == 0)
    want_score += (sigmoid_ce(np.maximum(s_t[level], 0), outs[level]) *
                   mask).sum() / (2 * 256)
    want_box += numpy_huber(b_t[level], boxes[level], b_t[level] != 0, 1 / 9)
  total, score, box = losses.rpn_loss(
      *({k: tf.constant(v, tf.float32) for k, v in d.items()}
        for d in (outs, boxes, s_t, b_t)))
  np.testing.assert_allclose([score, box, total],
                             [want_score, want_box, want_score + want_box],
                             rtol=1e-5)
  # A level without positives adds no box loss (safe division).
  empty = {k: tf.zeros_like(v, tf.float32) for k, v in b_t.items()}
  assert losses.rpn_loss(*({k: tf.constant(v, tf.float32)
                            for k, v in d.items()} for d in (outs, boxes, s_t)),
                         empty)[2].numpy() == 0


def test_fast_rcnn_loss_picks_the_target_class_box():
  rng = np.random.default_rng(1)
  b, k, c = 2, 16, 5
  logits = rng.normal(size=(b, k, c))
  box_out = rng.normal(0, 2, (b, k, 4 * c))
  classes = rng.integers(0, c, (b, k))
  targets = np.where(classes[..., None] > 0, rng.normal(0, 1, (b, k, 4)), 0)
  z = logits - logits.max(-1, keepdims=True)
  log_softmax = z - np.log(np.exp(z).sum(-1, keepdims=True))
  want_class = -np.take_along_axis(log_softmax, classes[..., None], -1).mean()
  # Their one-hot matmul gather of box_outputs[..., 4c:4c+4].
  picked = box_out.reshape(b, k, c, 4)[np.arange(b)[:, None],
                                       np.arange(k)[None], classes]
  mask = np.tile((classes > 0)[..., None], [1, 1, 4])
  want_box = numpy_huber(targets, picked, mask, 1.0)
  total, cls, box = losses.fast_rcnn_loss(
      tf.constant(logits), tf.constant(box_out), tf.constant(classes),
      tf.constant(targets))
  np.testing.assert_allclose([cls, box, total],
                             [want_class, want_box, want_class + want_box],
                             rtol=1e-5)


def test_mask_loss_averages_over_foreground_pixels():
  rng = np.random.default_rng(2)
  logits = rng.normal(size=(2, 6, 4, 4))
  targets = (rng.uniform(size=(2, 6, 4, 4)) > 0.5).astype(np.float64)
  classes = np.array([[0, 3, 1, 0, 0, 2], [4, 0, 0, 0, 0, 0]])
  weights = np.tile((classes > 0)[..., None, None], [1, 1, 4, 4])
  want = (sigmoid_ce(targets, logits) * weights).sum() / weights.sum()
  got = losses.mask_loss(tf.constant(logits), tf.constant(targets),
                         tf.constant(classes))
  np.testing.assert_allclose(got, want, rtol=1e-5)


def test_shares_of_the_rois_add_up_to_the_whole_losses():
  # RoI sharding: each member divides its share's sums by all the RoIs'
  # counts, so the shares' losses add up to the whole's (and a share
  # without foreground still counts).
  rng = np.random.default_rng(3)
  b, k, c = 2, 8, 5
  logits = rng.normal(size=(b, k, c)).astype(np.float32)
  box_out = rng.normal(size=(b, k, 4 * c)).astype(np.float32)
  classes = np.array([[0, 3, 1, 0, 0, 0, 0, 0], [4, 0, 0, 2, 0, 0, 0, 0]])
  targets = np.where(classes[..., None] > 0,
                     rng.normal(size=(b, k, 4)), 0).astype(np.float32)
  masks = rng.normal(size=(b, k, 4, 4)).astype(np.float32)
  mask_targets = (rng.uniform(size=(b, k, 4, 4)) > 0.5).astype(np.float32)
  whole_fast = losses.fast_rcnn_loss(logits, box_out, classes, targets)
  whole_mask = losses.mask_loss(masks, mask_targets, classes)
  fast, mask = np.zeros(3), 0.0
  for part in (slice(0, 4), slice(4, 8)):  # The second has no foreground.
    fast += [float(v) for v in losses.fast_rcnn_loss(
        logits[:, part], box_out[:, part], classes[:, part],
        targets[:, part], whole_class_targets=classes)]
    mask += float(losses.mask_loss(masks[:, part], mask_targets[:, part],
                                   classes[:, part],
                                   whole_class_targets=classes))
  np.testing.assert_allclose(fast, [float(v) for v in whole_fast], rtol=1e-5)
  np.testing.assert_allclose(mask, float(whole_mask), rtol=1e-5)
  # The first share holds half the RoIs and all the foreground: by its own
  # counts its class loss would be twice its share, its box loss the same.
  shared = losses.fast_rcnn_loss(logits[:, :4], box_out[:, :4],
                                 classes[:, :4], targets[:, :4],
                                 whole_class_targets=classes)
  own = losses.fast_rcnn_loss(logits[:, :4], box_out[:, :4], classes[:, :4],
                              targets[:, :4])
  np.testing.assert_allclose([float(own[1]), float(own[2])],
                             [2 * float(shared[1]), float(shared[2])],
                             rtol=1e-6)
