"""SSD's default boxes, matching and box coding against NumPy ports of
Google's v0.7 code and the TF object-detection pieces it assembles."""

import math

import numpy as np
import tensorflow as tf

from input_pipeline import ssd_boxes


def test_ssd300_has_8732_default_boxes_in_googles_order():
  boxes = ssd_boxes.default_boxes()
  assert boxes.shape == (8732, 4) == (ssd_boxes.Geometry().num_boxes, 4)
  # Level 0 (38x38, step 8): first the 21-pixel squares, row-major.
  fk = 300 / 8
  np.testing.assert_allclose(boxes[0], [0.5 / fk, 0.5 / fk, 0.07, 0.07],
                             rtol=1e-6)
  np.testing.assert_allclose(boxes[1], [0.5 / fk, 1.5 / fk, 0.07, 0.07],
                             rtol=1e-6)
  np.testing.assert_allclose(boxes[38], [1.5 / fk, 0.5 / fk, 0.07, 0.07],
                             rtol=1e-6)
  # Then the sqrt(21 x 45) squares, then the 2:1 box (w, h) = (s sqrt2,
  # s / sqrt2) stored as (h, w).
  side = math.sqrt(21 * 45) / 300
  np.testing.assert_allclose(boxes[38 * 38, 2:], [side, side], rtol=1e-6)
  s = 21 / 300
  np.testing.assert_allclose(boxes[2 * 38 * 38, 2:],
                             [s / math.sqrt(2), s * math.sqrt(2)], rtol=1e-6)
  # The last level: one cell, 4 boxes, the big ones clipped to 1.
  np.testing.assert_allclose(boxes[-4], [0.5, 0.5, 261 / 300, 261 / 300],
                             rtol=1e-6)
  assert boxes.min() >= 0 and boxes.max() <= 1


def numpy_iou(a, b):
  lt = np.maximum(a[:, None, :2], b[None, :, :2])
  rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
  inter = np.prod(np.maximum(rb - lt, 0), axis=-1)
  area = lambda x: (x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1])
  union = area(a)[:, None] + area(b)[None] - inter
  return np.where(inter == 0, 0, inter / np.where(union == 0, 1, union))


def numpy_argmax_matcher(sim):
  """object_detection ArgMaxMatcher(0.5, 0.5, negatives_lower_than_
  unmatched=True, force_match_for_each_row=True), line by line."""
  matches = np.argmax(sim, 0)
  matched_vals = np.max(sim, 0)
  matches = np.where(matched_vals < 0.5, -1, matches)
  force_cols = np.argmax(sim, 1)
  indicators = np.eye(sim.shape[1])[force_cols]
  force_rows = np.argmax(indicators, 0)
  force_mask = indicators.max(0) > 0
  return np.where(force_mask, force_rows, matches)


def random_boxes(rng, n):
  yx = rng.uniform(0, 0.8, (n, 2))
  hw = rng.uniform(0.02, 0.5, (n, 2))
  return np.concatenate([yx, np.minimum(yx + hw, 1)], 1).astype(np.float32)


def test_matching_equals_argmax_matcher_with_forced_rows():
  rng = np.random.default_rng(0)
  anchors = ssd_boxes.default_boxes()
  corners = ssd_boxes.to_corners(tf.constant(anchors)).numpy()
  for n in (1, 3, 12):
    gt = random_boxes(rng, n)
    # Two identical boxes: both want the same column; the first row wins.
    gt[-1] = gt[0]
    sim = numpy_iou(gt, corners)
    got = ssd_boxes.match(ssd_boxes.iou(tf.constant(gt),
                                        tf.constant(corners))).numpy()
    np.testing.assert_array_equal(got, numpy_argmax_matcher(sim))
    # Every row that does not share its best column owns it.
    assert set(got[got >= 0]) <= set(range(n))


def test_encode_then_decode_gives_the_boxes_back():
  rng = np.random.default_rng(1)
  anchors = ssd_boxes.default_boxes()[:500]
  boxes = random_boxes(rng, 500)
  codes = ssd_boxes.encode(tf.constant(boxes), tf.constant(anchors))
  back = ssd_boxes.decode(codes, tf.constant(anchors)).numpy()
  np.testing.assert_allclose(back, boxes, atol=2e-6)
  # FasterRcnnBoxCoder's scales: ty x 10, th x 5.
  a, b = anchors[0], boxes[0]
  ty = ((b[0] + b[2]) / 2 - a[0]) / (a[2] + 1e-8) * 10
  th = math.log((b[2] - b[0] + 1e-8) / (a[2] + 1e-8)) * 5
  np.testing.assert_allclose(codes.numpy()[0, [0, 2]], [ty, th], rtol=1e-5)


def test_targets_label_matched_boxes_and_background():
  anchors = ssd_boxes.default_boxes()
  gt = np.array([[0.1, 0.1, 0.4, 0.3], [0.5, 0.5, 0.9, 0.95]], np.float32)
  classes, targets, matched = ssd_boxes.assign_targets(
      tf.constant(gt), tf.constant([3, 7]), tf.constant(anchors))
  classes, targets = classes.numpy(), targets.numpy()
  assert set(np.unique(classes)) == {0, 3, 7}
  assert matched.numpy() == np.sum(classes > 0) >= 2
  assert not targets[classes == 0].any()
  decoded = ssd_boxes.decode(tf.constant(targets[classes == 7]),
                             tf.constant(anchors[classes == 7])).numpy()
  np.testing.assert_allclose(decoded, np.repeat(gt[1:], len(decoded), 0),
                             atol=1e-5)
  empty = ssd_boxes.assign_targets(tf.zeros([0, 4]), tf.zeros([0], tf.int32),
                                   tf.constant(anchors))
  assert not empty[0].numpy().any() and empty[2].numpy() == 0
