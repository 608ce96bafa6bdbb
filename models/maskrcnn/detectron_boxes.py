"""Mask R-CNN's box arithmetic in pixels, as Google's MLPerf v0.7 code has
it (mlcommons/training_results_v0.7, `Google/benchmarks/maskrcnn/
implementations/maskrcnn-research-TF-tpu-*/box_utils.py`, after
Detectron's utils/boxes.py).

Detectron's convention, not the TF object-detection one: a box
[ymin, xmin, ymax, xmax] is `ymax - ymin + 1` pixels high with its centre at
`ymin + h / 2`, and decoding ends at `centre + h / 2 - 1`. Google's code
uses it for the proposals (decoding the RPN's deltas), the second stage's
box targets and the detections; only the RPN's training targets use the TF
object-detection coder (input_pipeline/fpn_anchors.py). Encoding then
decoding gives the box back.
"""

import math

import tensorflow as tf

BBOX_XFORM_CLIP = math.log(1000.0 / 16.0)  # The largest dh, dw decoded.
BOX_WEIGHTS = (10.0, 10.0, 5.0, 5.0)  # bbox_reg_weights of the 2nd stage.


def _size_and_centre(boxes):
  ymin, xmin, ymax, xmax = tf.unstack(boxes, axis=-1)
  h, w = ymax - ymin + 1.0, xmax - xmin + 1.0
  return h, w, ymin + 0.5 * h, xmin + 0.5 * w


def encode(boxes, gt_boxes, weights=None):
  """batch_encode_box_targets_op: [..., 4] targets (dy, dx, dh, dw) of
  `gt_boxes` relative to `boxes`, times `weights` (None: none)."""
  h, w, cy, cx = _size_and_centre(boxes)
  gh, gw, gcy, gcx = _size_and_centre(gt_boxes)
  targets = [(gcy - cy) / h, (gcx - cx) / w, tf.math.log(gh / h),
             tf.math.log(gw / w)]
  if weights:
    targets = [t * k for t, k in zip(targets, weights)]
  return tf.stack(targets, axis=-1)


def decode(boxes, deltas, weights=None):
  """batch_decode_box_outputs_op: `deltas` [..., 4] (divided by
  `weights`) applied to `boxes`; dh and dw capped at log(1000 / 16)."""
  deltas = tf.cast(deltas, boxes.dtype)
  h, w, cy, cx = _size_and_centre(boxes)
  dy, dx, dh, dw = tf.unstack(deltas, axis=-1)
  if weights:
    dy, dx, dh, dw = (d / k for d, k in zip((dy, dx, dh, dw), weights))
  dh = tf.minimum(dh, BBOX_XFORM_CLIP)
  dw = tf.minimum(dw, BBOX_XFORM_CLIP)
  pcy, pcx = dy * h + cy, dx * w + cx
  ph, pw = tf.exp(dh) * h, tf.exp(dw) * w
  return tf.stack([pcy - 0.5 * ph, pcx - 0.5 * pw, pcy + 0.5 * ph - 1.0,
                   pcx + 0.5 * pw - 1.0], axis=-1)


def clip(boxes, height, width):
  """clip_boxes: each coordinate into [0, size - 1]; `height`, `width`
  broadcast against boxes[..., 0] ([batch, 1] for [batch, N, 4])."""
  ymin, xmin, ymax, xmax = tf.unstack(boxes, axis=-1)
  height = tf.cast(height, boxes.dtype)
  width = tf.cast(width, boxes.dtype)
  in_y = lambda v: tf.maximum(tf.minimum(v, height - 1.0), 0.0)  # noqa: E731
  in_x = lambda v: tf.maximum(tf.minimum(v, width - 1.0), 0.0)  # noqa: E731
  return tf.stack([in_y(ymin), in_x(xmin), in_y(ymax), in_x(xmax)], axis=-1)


def filter_small(scores, boxes, min_size: float, height, width, scale):
  """filter_boxes: zero the score and box of every box less than
  max(min_size, 1) * scale high or wide, or whose centre (+0.5) lies
  outside the height x width image; `height`, `width`, `scale` broadcast as
  in `clip`."""
  ymin, xmin, ymax, xmax = tf.unstack(boxes, axis=-1)
  hs, ws = ymax - ymin, xmax - xmin
  least = max(min_size, 1.0) * tf.cast(scale, boxes.dtype)
  keep = ((hs >= least) & (ws >= least) &
          (ymin + hs / 2 + 0.5 < tf.cast(height, boxes.dtype)) &
          (xmin + ws / 2 + 0.5 < tf.cast(width, boxes.dtype)))
  return (tf.where(keep, scores, tf.zeros_like(scores)),
          boxes * tf.cast(keep[..., None], boxes.dtype))
