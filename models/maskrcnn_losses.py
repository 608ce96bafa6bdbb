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
replicas' gradients.
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


def fast_rcnn_loss(class_outputs, box_outputs, class_targets, box_targets, *,
                   box_weight: float = 1.0):
  """(total, class loss, box loss).

  Args:
    class_outputs: [B, K, C] logits.
    box_outputs: [B, K, 4 C] deltas, class-major (class c at 4c..4c+3).
    class_targets: [B, K] int, 0 background.
    box_targets: [B, K, 4] encoded targets (zeros for background).
  """
  class_outputs = tf.cast(class_outputs, tf.float32)
  num_classes = class_outputs.shape[-1]
  class_targets = tf.cast(class_targets, tf.int32)
  class_loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(
      labels=tf.one_hot(class_targets, num_classes), logits=class_outputs))
  per_class = tf.reshape(tf.cast(box_outputs, tf.float32), tf.concat(
      [tf.shape(class_targets), [num_classes, 4]], axis=0))
  chosen = tf.gather(per_class, class_targets, batch_dims=2)
  foreground = tf.broadcast_to((class_targets > 0)[..., None],
                               tf.shape(chosen))
  box_loss = box_weight * _mean_over_nonzero(
      huber(chosen - tf.cast(box_targets, tf.float32), 1.0), foreground)
  return class_loss + box_loss, class_loss, box_loss


def mask_loss(mask_outputs, mask_targets, select_class_targets, *,
              weight: float = 1.0):
  """Sigmoid cross-entropy of [B, M, h, w] mask logits (the RoI's class's
  mask) against [B, M, h, w] targets, over RoIs whose class is > 0."""
  logits = tf.cast(mask_outputs, tf.float32)
  ce = tf.nn.sigmoid_cross_entropy_with_logits(
      labels=tf.cast(mask_targets, tf.float32), logits=logits)
  foreground = tf.broadcast_to(
      (select_class_targets > 0)[:, :, None, None], tf.shape(ce))
  return weight * _mean_over_nonzero(ce, foreground)
