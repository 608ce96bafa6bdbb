"""Mask R-CNN's second-stage RoIs: proposals labelled by their best ground
truth and sampled, as Google's MLPerf v0.7 `proposal_label_op` does
(mask_rcnn_architecture.py, after Detectron's json_dataset.py and
roi_data/fast_rcnn.py).

Per image: the ground-truth boxes (scaled to the network's image) join the
proposals; each row takes the class and box of the ground truth it overlaps
most (background where it overlaps none); rows over `fg_thresh` are
foreground, rows in [bg_lo, bg_hi) background, rows that are padding
ignored; then `batch_size_per_im` rows: up to `fg_fraction` of them
foreground at random, background at random for the rest, in row order.

Their draw is `tf.random_shuffle` inside a static-shape sampler; here it is
a stateless draw from a seed (the same counts and candidates, other random
rows). Where there are too few candidates to fill the sample (never with
their 1000 proposals), theirs takes non-candidate rows in row order and so
does this.
"""

import tensorflow as tf

from input_pipeline import fpn_anchors

EPSILON = 1e-8


def overlap(boxes, gt_boxes):
  """bbox_overlap: [B, N, M] IoU of [B, N, 4] boxes and [B, M, 4] ground
  truth, -1 where the intersection starts left of 0 (ground-truth
  padding is -1: their padding mask)."""
  by0, bx0, by1, bx1 = tf.split(boxes, 4, axis=2)
  gy0, gx0, gy1, gx1 = tf.split(gt_boxes, 4, axis=2)
  t = lambda v: tf.transpose(v, [0, 2, 1])  # noqa: E731
  ix0, ix1 = tf.maximum(bx0, t(gx0)), tf.minimum(bx1, t(gx1))
  iy0, iy1 = tf.maximum(by0, t(gy0)), tf.minimum(by1, t(gy1))
  inter = tf.maximum(ix1 - ix0, 0.0) * tf.maximum(iy1 - iy0, 0.0)
  area = (by1 - by0) * (bx1 - bx0)
  gt_area = (gy1 - gy0) * (gx1 - gx0)
  iou = inter / (area + t(gt_area) - inter + EPSILON)
  return tf.where(ix0 < 0.0, -tf.ones_like(iou), iou)


def _sample(candidates, positives, size: int, fg_fraction: float, seed):
  """[B, N] bool: exactly `size` rows of each image (N >= size) as
  described above: the balanced draw (fpn_anchors.sample_balanced, the
  RPN's too), then other rows in row order while the sample is short."""
  chosen = fpn_anchors.sample_balanced(candidates, positives, size,
                                       fg_fraction, seed)
  others = tf.logical_not(candidates)
  fill = size - tf.reduce_sum(tf.cast(chosen, tf.int32), axis=-1,
                              keepdims=True)
  return chosen | (others & (tf.cumsum(tf.cast(others, tf.int32), axis=-1)
                             <= fill))


def assign_and_sample(proposals, gt_boxes, gt_classes, image_scale, seed, *,
                      batch_size_per_im: int = 512, fg_fraction: float = 0.25,
                      fg_thresh: float = 0.5, bg_thresh_hi: float = 0.5,
                      bg_thresh_lo: float = 0.0):
  """proposal_label_op.

  Args:
    proposals: [B, N, 4] pixel boxes on the network's image.
    gt_boxes: [B, M, 4] pixel boxes on the original image, padded with -1.
    gt_classes: [B, M] int32, padded with -1.
    image_scale: [B] original pixels per network pixel (image_info[:, 2]).
    seed: a [2] int stateless seed.

  Returns:
    (box targets [B, K, 4]: the assigned ground truth on the network's
    image; class targets [B, K] int32, 0 background; rois [B, K, 4];
    proposal_to_label_map [B, K] int32, the assigned ground-truth row, 0 for
    background), K = batch_size_per_im, rows in proposal order.
  """
  scaled_gt = gt_boxes * (1.0 / image_scale)[:, None, None]
  boxes = tf.concat([proposals, scaled_gt], axis=1)
  iou = overlap(boxes, scaled_gt)

  # _add_class_assignments.
  argmax = tf.argmax(iou, axis=2, output_type=tf.int32)
  max_overlap = tf.reduce_max(iou, axis=2)
  no_overlap = tf.equal(max_overlap, 0.0)
  classes = tf.where(no_overlap, 0, tf.gather(gt_classes, argmax,
                                              batch_dims=1))
  targets = tf.where(no_overlap[..., None], 0.0,
                     tf.gather(scaled_gt, argmax, batch_dims=1))

  positives = max_overlap > fg_thresh
  negatives = (max_overlap >= bg_thresh_lo) & (max_overlap < bg_thresh_hi)
  classes = tf.where(negatives, 0, classes)
  label_map = tf.where(negatives, 0, argmax)
  ignored = tf.reduce_min(iou, axis=2) < 0.0
  candidates = (positives | negatives) & tf.logical_not(ignored)

  chosen = _sample(candidates, positives, batch_size_per_im, fg_fraction,
                   seed)
  # The chosen rows' indices, ascending (their top_k of the indicator).
  picked = tf.math.top_k(tf.cast(chosen, tf.int32), k=batch_size_per_im,
                         sorted=True).indices
  take = lambda t: tf.gather(t, picked, batch_dims=1)  # noqa: E731
  return take(targets), take(classes), take(boxes), take(label_map)
