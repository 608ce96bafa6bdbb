"""Mask R-CNN's RoI labelling and sampling against a NumPy version of
Google's v0.7 proposal_label_op (their labels; the random draw is ours, so
the sample is checked by its counts and candidates)."""

import numpy as np
import tensorflow as tf

from models.maskrcnn import roi_sampling


def numpy_overlap(boxes, gt):
  """bbox_overlap, line by line (one image)."""
  ix0 = np.maximum(boxes[:, None, 1], gt[None, :, 1])
  ix1 = np.minimum(boxes[:, None, 3], gt[None, :, 3])
  iy0 = np.maximum(boxes[:, None, 0], gt[None, :, 0])
  iy1 = np.minimum(boxes[:, None, 2], gt[None, :, 2])
  inter = np.maximum(ix1 - ix0, 0) * np.maximum(iy1 - iy0, 0)
  area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
  gt_area = (gt[:, 2] - gt[:, 0]) * (gt[:, 3] - gt[:, 1])
  iou = inter / (area[:, None] + gt_area[None] - inter + 1e-8)
  return np.where(ix0 < 0, -1.0, iou)


def numpy_labels(proposals, gt, classes, scale):
  """proposal_label_op before the sampling, for one image: (boxes, box
  targets, class targets, label map, positives, candidates)."""
  scaled = gt * (np.float32(1) / scale)  # Theirs: gt * (1 / scale).
  boxes = np.concatenate([proposals, scaled])
  iou = numpy_overlap(boxes, scaled)
  argmax = np.argmax(iou, 1)
  max_overlap = iou.max(1)
  bg = max_overlap == 0
  cls = np.where(bg, 0, classes[argmax])
  targets = np.where(bg[:, None], 0, scaled[argmax])
  positives = max_overlap > 0.5
  negatives = (max_overlap >= 0) & (max_overlap < 0.5)
  cls = np.where(negatives, 0, cls)
  label_map = np.where(negatives, 0, argmax)
  ignore = iou.min(1) < 0
  return boxes, targets, cls, label_map, positives, \
      (positives | negatives) & ~ignore


def an_image(rng, n_proposals, n_gt, rows=43):
  padded = rows - n_gt
  gt = rng.uniform(0, 300, (n_gt, 2))
  gt = np.concatenate([gt, gt + rng.uniform(20, 120, (n_gt, 2))], 1)
  gt = np.concatenate([gt, -np.ones((padded, 4))])
  classes = np.concatenate([rng.integers(1, 11, n_gt), -np.ones(padded,
                                                                 int)])
  scale = rng.uniform(0.5, 2.0)
  # Proposals: jittered copies of the boxes (foreground) and random boxes.
  near = np.repeat(gt[:n_gt] / scale, n_proposals // (2 * n_gt), 0)
  near = near + rng.normal(0, 6, near.shape)
  far = rng.uniform(0, 400, (n_proposals - len(near), 2))
  far = np.concatenate([far, far + rng.uniform(5, 80, far.shape)], 1)
  proposals = np.clip(np.concatenate([near, far]), 0, None)
  return proposals, gt, classes, scale


def test_labels_are_theirs_and_the_sample_has_their_counts():
  rng = np.random.default_rng(0)
  images = [an_image(rng, 600, 5), an_image(rng, 600, 40)]
  proposals, gt, classes, scale = (np.stack(v) for v in zip(*images))
  out = roi_sampling.assign_and_sample(
      tf.constant(proposals, tf.float32), tf.constant(gt, tf.float32),
      tf.constant(classes, tf.int32), tf.constant(scale, tf.float32),
      seed=[7, 8])
  targets, cls, rois, label_map = (t.numpy() for t in out)
  assert rois.shape == (2, 512, 4)
  for i in range(2):
    boxes, want_t, want_c, want_m, pos, cand = numpy_labels(
        proposals[i].astype(np.float32), gt[i].astype(np.float32), classes[i],
        np.float32(scale[i]))
    # Each sampled row is a row of theirs, with their labels, in row
    # order (a box two rows share: the first, labelled alike).
    rows = [int(np.flatnonzero((boxes == r).all(1))[0]) for r in rois[i]]
    assert rows == sorted(rows)
    np.testing.assert_allclose(targets[i], want_t[rows], rtol=1e-6)
    np.testing.assert_array_equal(cls[i], want_c[rows])
    np.testing.assert_array_equal(label_map[i], want_m[rows])
    n_pos = min(128, int(pos[cand].sum()))
    n_neg = min(512 - n_pos, int((cand & ~pos).sum()))
    assert pos[rows].sum() == n_pos and pos[cand].sum() > 128  # Capped.
    assert (cand & ~pos)[rows].sum() == n_neg
    # Short of background (image 0: 379 for 384 places), the first other
    # rows in row order fill the sample, as their static sampler does.
    fill = [r for r in rows if not cand[r]]
    assert len(fill) == 512 - n_pos - n_neg == (5, 0)[i]
    np.testing.assert_array_equal(boxes[fill],
                                  boxes[np.flatnonzero(~cand)[:len(fill)]])


def test_the_draw_is_seeded():
  rng = np.random.default_rng(1)
  proposals, gt, classes, scale = (np.stack(v) for v in zip(
      an_image(rng, 800, 40)))
  run = lambda seed: roi_sampling.assign_and_sample(  # noqa: E731
      tf.constant(proposals, tf.float32), tf.constant(gt, tf.float32),
      tf.constant(classes, tf.int32), tf.constant(scale, tf.float32),
      seed=seed)[2].numpy()
  np.testing.assert_array_equal(run([1, 2]), run([1, 2]))
  assert (run([1, 2]) != run([3, 4])).any()
