"""Mask R-CNN's mask-branch targets against NumPy versions of Google's v0.7
select_fg_for_masks, get_mask_targets (one-hot einsums) and
mask_post_processing."""

import numpy as np
import tensorflow as tf

from models.maskrcnn import mask_targets


def numpy_get_mask_targets(fg_boxes, label_map, box_targets, gt, out=28):
  """Their sequence, step by step."""
  batch, instances, height, width = gt.shape
  num_masks = label_map.shape[1]
  levels = np.maximum(label_map, 0)
  one_hot = lambda idx, depth: (idx.astype(int)[..., None] ==  # noqa: E731
                                np.arange(depth)).astype(float)
  per_box = np.einsum('bihw,bmi->bmhw', gt, one_hot(levels, instances))
  by0, bx0, by1, bx1 = np.split(fg_boxes, 4, axis=2)
  gy0, gx0, gy1, gx1 = np.split(box_targets, 4, axis=2)
  vw, vh = width - 4, height - 4
  y_t = (by0 - gy0) * vh / (gy1 - gy0 + 1e-8) + 2
  x_t = (bx0 - gx0) * vw / (gx1 - gx0 + 1e-8) + 2
  h_t = (by1 - by0) * vh / (gy1 - gy0 + 1e-8)
  w_t = (bx1 - bx0) * vw / (gx1 - gx0 + 1e-8)
  gy = np.stack([y_t + (0.5 + i) * h_t / out for i in range(out)], 2)
  gx = np.stack([x_t + (0.5 + i) * w_t / out for i in range(out)], 2)
  y0, x0 = np.floor(gy), np.floor(gx)
  x01 = np.minimum(width - 1, np.maximum(0., np.stack([x0, x0 + 1], 3)))
  y01 = np.minimum(height - 1, np.maximum(0., np.stack([y0, y0 + 1], 3)))
  x_idx = x01.reshape(batch, num_masks, out, 2)
  y_idx = y01.reshape(batch, num_masks, out, 2)
  ly, lx = gy - y0, gx - x0
  ky = np.stack([1 - ly, ly], 3).reshape(batch, num_masks, out, 2, 1)
  kx = np.stack([1 - lx, lx], 3).reshape(batch, num_masks, out, 2, 1)
  wy = (one_hot(y_idx, height) * ky).sum(-2)
  wx = (one_hot(x_idx, width) * kx).sum(-2)
  per_box = np.einsum('bmhw,bmoh->bmow', per_box, wy)
  per_box = np.einsum('bmhw,bmow->bmho', per_box, wx)
  return (per_box >= 0.5).astype(float), per_box


def test_mask_targets_are_theirs():
  rng = np.random.default_rng(0)
  batch, instances, masks = 2, 5, 12
  gt = np.pad((rng.uniform(size=(batch, instances, 112, 112)) >
               rng.uniform(0.2, 0.8, (batch, instances, 1, 1))).astype(float),
              [[0, 0], [0, 0], [2, 2], [2, 2]])
  targets = rng.uniform(0, 200, (batch, masks, 2))
  targets = np.concatenate([targets, targets + rng.uniform(10, 150,
                                                           targets.shape)], -1)
  # RoIs around their ground truth, some reaching past it.
  rois = targets + rng.normal(0, 15, targets.shape)
  label_map = rng.integers(-1, instances, (batch, masks))
  want, soft = numpy_get_mask_targets(rois, label_map, targets, gt)
  got = mask_targets.get_mask_targets(
      tf.constant(rois), tf.constant(label_map), tf.constant(targets),
      tf.constant(gt)).numpy()
  # Values at 0.5 exactly could round either way: none here.
  assert np.abs(soft - 0.5).min() > 1e-9
  np.testing.assert_array_equal(got, want)
  assert 0 < want.mean() < 1


def test_foreground_rows_first_and_the_class_channel():
  classes = np.array([[0, 3, 0, 0, 7, 2], [0, 0, 0, 0, 0, 1]])
  boxes = np.arange(2 * 6 * 4, dtype=float).reshape(2, 6, 4)
  got = mask_targets.select_fg_for_masks(
      tf.constant(classes), tf.constant(boxes), tf.constant(boxes * 2),
      tf.constant(classes * 10), max_num_fg=4)
  np.testing.assert_array_equal(got[0], [[3, 7, 2, 0], [1, 0, 0, 0]])
  np.testing.assert_array_equal(got[2][0], boxes[0, [1, 4, 5, 0]] * 2)
  np.testing.assert_array_equal(got[2][1], boxes[1, [5, 0, 1, 2]] * 2)
  rng = np.random.default_rng(1)
  logits = rng.normal(size=(2, 4, 3, 3, 8))
  chosen = rng.integers(0, 8, (2, 4))
  one_hot = np.eye(8)[chosen]
  np.testing.assert_allclose(
      mask_targets.select_class_masks(tf.constant(logits),
                                      tf.constant(chosen)),
      np.einsum('bnhwf,bnf->bnhw', logits, one_hot), rtol=1e-12)
