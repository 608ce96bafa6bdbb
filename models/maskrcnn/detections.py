"""Mask R-CNN's detections at evaluation, as Google's MLPerf v0.7
`generate_detections_per_image_op` (post_processing.py) makes them, for a
batch:

the `pre_nms` best (RoI, class) pairs by softmax score over the
foreground classes; each pair's class box decoded onto its RoI (Detectron's
convention, weights 10, 10, 5, 5) and clipped to the image; per class, the
pairs of that class scoring over 0.05, greedy NMS at `nms_threshold`, up
to `num_detections` kept; then the `num_detections` best over classes.
Rows are [image id, ymin, xmin, ymax, xmax, score, class], pixels on the
network's image, classes 1.., zero rows where fewer were found.
"""

import tensorflow as tf

from models.maskrcnn import detectron_boxes
from models.maskrcnn import proposals

SCORE_THRESHOLD = 0.05


def generate_detections(class_probs, box_outputs, rois, image_info,
                        image_ids, *, num_detections: int = 100,
                        pre_nms: int = 1000, nms_threshold: float = 0.5,
                        weights=detectron_boxes.BOX_WEIGHTS,
                        fixed_shapes: bool = True):
  """[B, num_detections, 7] detections.

  Args:
    class_probs: [B, N, C] softmax scores, class 0 the background.
    box_outputs: [B, N, 4 C] deltas, class-major.
    rois: [B, N, 4] the RoIs they refine.
    image_info: [B, >= 2]: the image's height and width on the network.
    image_ids: [B] the images' ids.
    fixed_shapes: their tiled NMS (a TPU's), or proposals.greedy_nms's same
      boxes.
  """
  _, num_rois, num_classes = class_probs.shape
  batch = tf.shape(class_probs)[0]  # Dynamic in a serving signature.
  fg = num_classes - 1
  scores = tf.reshape(tf.cast(class_probs[:, :, 1:], tf.float32),
                      [batch, -1])
  scores, flat = tf.math.top_k(scores, k=pre_nms)
  classes = flat % fg  # 0-based foreground class.
  rows = flat // fg
  per_class = tf.reshape(tf.cast(box_outputs, tf.float32),
                         [batch, num_rois, num_classes, 4])[:, :, 1:]
  deltas = tf.gather_nd(per_class, tf.stack([rows, classes], -1),
                        batch_dims=1)
  boxes = detectron_boxes.decode(
      tf.gather(tf.cast(rois, tf.float32), rows, batch_dims=1), deltas,
      weights)
  image_info = tf.cast(image_info, tf.float32)
  boxes = detectron_boxes.clip(boxes, image_info[:, 0:1], image_info[:, 1:2])

  # One row per class: its pairs' scores (others 0), sorted.
  mine = tf.equal(classes[:, None, :], tf.range(fg)[None, :, None])
  class_scores = tf.where(mine, scores[:, None, :], 0.0)
  class_scores = tf.where(class_scores > SCORE_THRESHOLD, class_scores, 0.0)
  class_scores, order = tf.math.top_k(class_scores, k=pre_nms)
  class_boxes = tf.gather(boxes, order, batch_dims=1)  # [B, fg, pre, 4]
  flat_boxes = tf.reshape(class_boxes, [batch * fg, pre_nms, 4])
  flat_scores = tf.reshape(class_scores, [batch * fg, pre_nms])
  kept_scores, kept_boxes = proposals.padded_nms(
      flat_scores, flat_boxes, num_detections, nms_threshold, fixed_shapes)
  kept_scores = tf.reshape(kept_scores, [batch, fg * num_detections])
  kept_boxes = tf.reshape(kept_boxes, [batch, fg * num_detections, 4])
  kept_classes = tf.repeat(tf.range(fg), num_detections)  # Row's class.
  best, top = tf.math.top_k(kept_scores, k=num_detections)
  best_boxes = tf.gather(kept_boxes, top, batch_dims=1)
  best_classes = tf.cast(tf.gather(kept_classes, top) + 1, tf.float32)
  ids = tf.broadcast_to(tf.cast(image_ids, tf.float32)[:, None],
                        tf.shape(best))
  return tf.concat([ids[..., None], best_boxes, best[..., None],
                    best_classes[..., None]], axis=-1)
