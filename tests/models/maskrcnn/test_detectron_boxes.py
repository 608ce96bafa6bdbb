"""Mask R-CNN's Detectron-convention box arithmetic against NumPy versions
of Google's v0.7 box_utils.py sequence."""

import numpy as np
import tensorflow as tf

from models.maskrcnn import detectron_boxes as boxes_lib

CLIP = np.log(1000.0 / 16.0)


def numpy_decode(boxes, delta, weights=None):
  """batch_decode_box_outputs_op, line by line."""
  heights = boxes[:, :, 2] - boxes[:, :, 0] + 1.0
  widths = boxes[:, :, 3] - boxes[:, :, 1] + 1.0
  ctr_y = boxes[:, :, 0] + 0.5 * heights
  ctr_x = boxes[:, :, 1] + 0.5 * widths
  dy, dx, dh, dw = (delta[:, :, i] for i in range(4))
  if weights:
    dy, dx, dh, dw = dy / weights[0], dx / weights[1], dh / weights[2], \
        dw / weights[3]
  dw = np.minimum(dw, CLIP)
  dh = np.minimum(dh, CLIP)
  pred_ctr_x = dx * widths + ctr_x
  pred_ctr_y = dy * heights + ctr_y
  pred_h = np.exp(dh) * heights
  pred_w = np.exp(dw) * widths
  return np.stack([pred_ctr_y - 0.5 * pred_h, pred_ctr_x - 0.5 * pred_w,
                   pred_ctr_y + 0.5 * pred_h - 1, pred_ctr_x + 0.5 * pred_w - 1],
                  axis=2)


def numpy_encode(boxes, gt_boxes, weights=None):
  """batch_encode_box_targets_op, line by line."""
  ex_h = boxes[:, :, 2] - boxes[:, :, 0] + 1.0
  ex_w = boxes[:, :, 3] - boxes[:, :, 1] + 1.0
  ex_y = boxes[:, :, 0] + 0.5 * ex_h
  ex_x = boxes[:, :, 1] + 0.5 * ex_w
  gt_h = gt_boxes[:, :, 2] - gt_boxes[:, :, 0] + 1.0
  gt_w = gt_boxes[:, :, 3] - gt_boxes[:, :, 1] + 1.0
  gt_y = gt_boxes[:, :, 0] + 0.5 * gt_h
  gt_x = gt_boxes[:, :, 1] + 0.5 * gt_w
  t = [(gt_y - ex_y) / ex_h, (gt_x - ex_x) / ex_w, np.log(gt_h / ex_h),
       np.log(gt_w / ex_w)]
  if weights:
    t = [v * k for v, k in zip(t, weights)]
  return np.stack(t, axis=2)


def random_boxes(rng, shape, size=800.0):
  corner = rng.uniform(0, size * 0.8, shape + (2,))
  extent = rng.uniform(1, size * 0.3, shape + (2,))
  return np.concatenate([corner, corner + extent], -1)


def test_encode_and_decode_are_their_sequence_and_invert_each_other():
  rng = np.random.default_rng(0)
  rois, gt = random_boxes(rng, (2, 50)), random_boxes(rng, (2, 50))
  for weights in (None, boxes_lib.BOX_WEIGHTS):
    codes = boxes_lib.encode(tf.constant(rois), tf.constant(gt), weights)
    np.testing.assert_allclose(codes, numpy_encode(rois, gt, weights),
                               rtol=1e-10)
    back = boxes_lib.decode(tf.constant(rois), codes, weights).numpy()
    np.testing.assert_allclose(back, gt, rtol=1e-9)
    scale = np.array(weights or (1.0,) * 4)
    deltas = rng.normal(0, 3, (2, 50, 4)) * scale  # Some past the cap.
    assert (deltas[..., 2:] / scale[2:] > CLIP).any()
    np.testing.assert_allclose(
        boxes_lib.decode(tf.constant(rois), tf.constant(deltas), weights),
        numpy_decode(rois, deltas, weights), rtol=1e-10)


def test_clip_and_filter_follow_their_sequence():
  rng = np.random.default_rng(1)
  b = random_boxes(rng, (2, 40), size=300.0) - 40.0
  height = np.array([[200.0], [256.0]])
  width = np.array([[320.0], [180.0]])
  got = boxes_lib.clip(tf.constant(b), height, width).numpy()
  want = np.stack([np.clip(b[..., 0], 0, height - 1),
                   np.clip(b[..., 1], 0, width - 1),
                   np.clip(b[..., 2], 0, height - 1),
                   np.clip(b[..., 3], 0, width - 1)], -1)
  np.testing.assert_array_equal(got, want)
  scores = rng.uniform(size=(2, 40))
  scale = np.array([[1.5], [0.5]])
  s, kept = boxes_lib.filter_small(tf.constant(scores), tf.constant(b), 0.0,
                                   height, width, scale)
  hs, ws = b[..., 2] - b[..., 0], b[..., 3] - b[..., 1]
  keep = ((hs >= scale) & (ws >= scale) &
          (b[..., 0] + hs / 2 + 0.5 < height) &
          (b[..., 1] + ws / 2 + 0.5 < width))
  assert keep.any() and not keep.all()
  np.testing.assert_array_equal(s, np.where(keep, scores, 0))
  np.testing.assert_array_equal(kept, b * keep[..., None])
