"""Mask R-CNN's losses as Google's MLPerf v0.7 code computes them
(mlcommons/training_results_v0.7, `Google/benchmarks/maskrcnn/
implementations/maskrcnn-research-TF-tpu-*/losses.py`), with the
reductions of the `tf.compat.v1.losses` functions they call spelled out:

- RPN, per FPN level, then summed over levels: the score loss is sigmoid
  cross-entropy summed over the sampled anchors (targets 1 or 0; -1 is
  left out) and divided by batch x 256; the box loss is Huber (delta 1/9,
  0.5 x^2 inside delta, delta (|x| - delta / 2) outside, not divided by
  delta) summed over the non-zero target coordinates and divided by their
  count (SUM_BY_NONZERO_WEIGHTS).
- Second stage: softmax cross-entropy averaged over every sampled RoI;
  Huber (delta 1) of the box of the RoI's target class, over foreground
  RoIs' coordinates, divided by their count.
- Mask: sigmoid cross-entropy over the foreground RoIs' pixels, divided by
  their count.

Each is a replica's mean: Google's CrossShardOptimizer averages the
replicas' gradients. Under RoI sharding (models/common/spatial.py's `share`) a
member computes the second stage's sums over its share of the RoIs and
divides them by the counts of all of them (`whole_class_targets`), so the
members' losses add up to the whole's.
"""

import tensorflow as tf


def huber(errors, delta: float):
  """tf.compat.v1.losses.huber_loss's elementwise loss."""
  absolute = tf.abs(errors)
  quadratic = tf.minimum(absolute, delta)
  return 0.5 * quadratic ** 2 + delta * (absolute - quadratic)


def _mean_over_nonzero(losses, weights):
  """SUM_BY_NONZERO_WEIGHTS: sum(losses * weights) / count(weights != 0),
  0 when there are none."""
  weights = tf.cast(weights, losses.dtype)
  count = tf.math.count_nonzero(weights, dtype=losses.dtype)
  return tf.math.divide_no_nan(tf.reduce_sum(losses * weights), count)


def rpn_loss(score_outputs: dict, box_outputs: dict, score_targets: dict,
             box_targets: dict, *, batch_size_per_im: int = 256,
             box_weight: float = 1.0, delta: float = 1.0 / 9):
  """(total, score loss, box loss) over the levels.

  Args:
    score_outputs: {level: [B, H, W, A] logits}.
    box_outputs: {level: [B, H, W, 4 A] deltas}.
    score_targets: {level: [B, H, W, A] int (1, 0, -1 ignored)}.
    box_targets: {level: [B, H, W, 4 A]}.
  """
  scores, boxes = [], []
  for level in sorted(score_outputs):
    logits = tf.cast(score_outputs[level], tf.float32)
    targets = tf.cast(score_targets[level], tf.float32)
    batch = tf.cast(tf.shape(logits)[0], tf.float32)
    counted = tf.cast(targets >= 0, tf.float32)
    ce = tf.nn.sigmoid_cross_entropy_with_logits(
        labels=tf.maximum(targets, 0.0), logits=logits)
    scores.append(tf.reduce_sum(ce * counted) / (batch * batch_size_per_im))
    box_t = tf.cast(box_targets[level], tf.float32)
    errors = tf.cast(box_outputs[level], tf.float32) - box_t
    boxes.append(_mean_over_nonzero(huber(errors, delta),
                                    tf.not_equal(box_t, 0.0)))
  score_loss = tf.add_n(scores)
  box_loss = box_weight * tf.add_n(boxes)
  return score_loss + box_loss, score_loss, box_loss


def _foreground(class_targets, dtype):
  """The count of RoIs of class > 0."""
  return tf.math.count_nonzero(class_targets > 0, dtype=dtype)


def fast_rcnn_loss(class_outputs, box_outputs, class_targets, box_targets, *,
                   box_weight: float = 1.0, whole_class_targets=None):
  """(total, class loss, box loss).

  Args:
    class_outputs: [B, K, C] logits.
    box_outputs: [B, K, 4 C] deltas, class-major (class c at 4c..4c+3).
    class_targets: [B, K] int, 0 background.
    box_targets: [B, K, 4] encoded targets (zeros for background).
    whole_class_targets: when these K RoIs are a share of more, all of
      their class targets: the sums are divided by their counts (None:
      class_targets).
  """
  whole = class_targets if whole_class_targets is None else whole_class_targets
  class_outputs = tf.cast(class_outputs, tf.float32)
  num_classes = class_outputs.shape[-1]
  class_targets = tf.cast(class_targets, tf.int32)
  class_loss = tf.reduce_sum(tf.nn.softmax_cross_entropy_with_logits(
      labels=tf.one_hot(class_targets, num_classes), logits=class_outputs)
  ) / tf.cast(tf.size(whole), tf.float32)
  per_class = tf.reshape(tf.cast(box_outputs, tf.float32), tf.concat(
      [tf.shape(class_targets), [num_classes, 4]], axis=0))
  chosen = tf.gather(per_class, class_targets, batch_dims=2)
  foreground = tf.cast((class_targets > 0)[..., None], tf.float32)
  errors = huber(chosen - tf.cast(box_targets, tf.float32), 1.0)
  box_loss = box_weight * tf.math.divide_no_nan(
      tf.reduce_sum(errors * foreground), 4 * _foreground(whole, tf.float32))
  return class_loss + box_loss, class_loss, box_loss


def mask_loss(mask_outputs, mask_targets, select_class_targets, *,
              weight: float = 1.0, whole_class_targets=None):
  """Sigmoid cross-entropy of [B, M, h, w] mask logits (the RoI's class's
  mask) against [B, M, h, w] targets, over RoIs whose class is > 0
  (`whole_class_targets` as fast_rcnn_loss's)."""
  whole = (select_class_targets if whole_class_targets is None
           else whole_class_targets)
  logits = tf.cast(mask_outputs, tf.float32)
  ce = tf.nn.sigmoid_cross_entropy_with_logits(
      labels=tf.cast(mask_targets, tf.float32), logits=logits)
  foreground = tf.cast((select_class_targets > 0)[:, :, None, None],
                       tf.float32)
  pixels = float(ce.shape[2] * ce.shape[3])
  return weight * tf.math.divide_no_nan(
      tf.reduce_sum(ce * foreground), pixels * _foreground(whole, tf.float32))
