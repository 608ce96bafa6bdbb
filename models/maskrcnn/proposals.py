"""Mask R-CNN's region proposals, as Google's MLPerf v0.7 `proposal_op`
(mask_rcnn_architecture.py, after Detectron's generate_proposals.py):

per FPN level: sigmoid scores; the top `pre_nms_topn` anchors (per level); their
deltas decoded onto the anchors (Detectron's convention,
models/maskrcnn/detectron_boxes.py); clipped to the image; boxes under a pixel
(x the image's scale) or centred outside the image zeroed; greedy NMS at
`nms_threshold` (a box goes when its IoU with a kept, higher-scoring box is at
least the threshold; zeroed boxes are never kept); the kept boxes, up to
`post_nms_topn`, zero-padded. Then the levels' proposals together, the
`post_nms_topn` best. No gradient flows through the proposals.

Their NMS is their tiled `non_max_suppression_padded`; TensorFlow's
`tf.image.non_max_suppression_padded` is the same algorithm (its IoU
lacks their padding mask, which only boxes left of 0 trigger, and clipped
proposals have none). That is the NMS of fixed shapes (a TPU's); elsewhere
`greedy_nms` keeps the same boxes by TensorFlow's C++ kernel, an image at a
time: the tiled loop's many small ops cost 0.7 CPU-seconds of a 2-core
CPU's training step (most of it beside the convolutions: 1.3% of the wall
time, docs/benchmarks.md).
"""

import numpy as np
import tensorflow as tf

from models.maskrcnn import detectron_boxes


def padded_nms(scores, boxes, max_output: int, iou_threshold: float,
               fixed_shapes: bool = True):
  """Greedy NMS of [B, N] score-sorted boxes [B, N, 4]: (scores [B, max],
  boxes [B, max, 4]) of the boxes kept, in order, zeros after them (their
  non_max_suppression_padded then gather_*_by_indices; `greedy_nms` unless
  `fixed_shapes`)."""
  if not fixed_shapes:
    return greedy_nms(scores, boxes, max_output, iou_threshold)
  picked, valid = tf.image.non_max_suppression_padded(
      boxes, scores, max_output, iou_threshold=iou_threshold,
      pad_to_max_output_size=True, sorted_input=True,
      canonicalized_coordinates=True)
  inside = tf.range(max_output)[None, :] < valid[:, None]
  return (tf.where(inside, tf.gather(scores, picked, batch_dims=1), 0.0),
          tf.where(inside[..., None], tf.gather(boxes, picked, batch_dims=1),
                   0.0))


def greedy_nms(scores, boxes, max_output: int, iou_threshold: float):
  """`padded_nms`'s boxes by `tf.image.non_max_suppression`, an image at a
  time: the same greedy pass in the input's order (the kernel ranks by
  each box's place, not its score, so equal scores go in input order as
  theirs), a box suppressed at IoU >= the threshold (the kernel's test is >:
  the float below it), boxes of no positive coordinate never kept (theirs
  skips them)."""
  below = float(np.nextafter(np.float32(iou_threshold), np.float32(0)))
  count = boxes.shape[1] or tf.shape(boxes)[1]
  rank = tf.cast(tf.range(count, 0, -1), tf.float32)  # First is highest.

  def one(image):
    image_scores, image_boxes = image
    keepable = tf.reduce_any(image_boxes > 0.0, axis=-1)
    picked = tf.image.non_max_suppression(
        image_boxes, tf.where(keepable, rank, 0.0), max_output,
        iou_threshold=below, score_threshold=0.5)
    pad = [[0, max_output - tf.shape(picked)[0]]]
    return (tf.pad(tf.gather(image_scores, picked), pad),
            tf.pad(tf.gather(image_boxes, picked), pad + [[0, 0]]))

  return tf.map_fn(one, (scores, boxes), fn_output_signature=(
      tf.TensorSpec([max_output], scores.dtype),
      tf.TensorSpec([max_output, 4], boxes.dtype)))


def _level_proposals(scores, deltas, anchors, image_info, pre_nms_topn: int,
                     post_nms_topn: int, nms_threshold: float,
                     min_size: float, fixed_shapes: bool):
  batch = tf.shape(scores)[0]  # Dynamic in a serving signature.
  count = scores.shape[1] * scores.shape[2] * scores.shape[3]
  scores = tf.sigmoid(tf.reshape(tf.cast(scores, tf.float32),
                                 [batch, count]))
  deltas = tf.reshape(tf.cast(deltas, tf.float32), [batch, count, 4])
  k = min(scores.shape[1], pre_nms_topn)
  scores, top = tf.math.top_k(scores, k=k)
  deltas = tf.gather(deltas, top, batch_dims=1)
  anchors = tf.gather(anchors, top)  # [B, k, 4]
  boxes = detectron_boxes.decode(anchors, deltas)
  height, width, scale = (image_info[:, i:i + 1] for i in range(3))
  boxes = detectron_boxes.clip(boxes, height, width)
  scores, boxes = detectron_boxes.filter_small(scores, boxes, min_size,
                                               height, width, scale)
  keep = min(k, post_nms_topn)
  if nms_threshold > 0:
    scores, boxes = padded_nms(scores, boxes, keep, nms_threshold,
                               fixed_shapes)
  scores, top = tf.math.top_k(scores, k=keep)
  return scores, tf.gather(boxes, top, batch_dims=1)


def propose(score_outputs: dict, box_outputs: dict, anchors: dict,
            image_info, *, pre_nms_topn: int = 2000,
            post_nms_topn: int = 1000, nms_threshold: float = 0.7,
            min_size: float = 0.0, fixed_shapes: bool = True):
  """(scores [B, K], boxes [B, K, 4]) of the best proposals, K =
  min(post_nms_topn, what the levels hold).

  Args:
    score_outputs: {level: [B, H, W, A] RPN logits}.
    box_outputs: {level: [B, H, W, 4 A] RPN deltas}.
    anchors: {level: [H W A, 4] pixel anchors} (fpn_anchors, split by
      level).
    image_info: [B, >= 3] float: the image's height and width on the
      network's input (before padding), and its scale (original pixels per
      network pixel).
  """
  image_info = tf.cast(image_info, tf.float32)
  scores, boxes = zip(*(
      _level_proposals(score_outputs[level], box_outputs[level],
                       tf.cast(anchors[level], tf.float32), image_info,
                       pre_nms_topn, post_nms_topn, nms_threshold, min_size,
                       fixed_shapes)
      for level in sorted(score_outputs)))
  scores, boxes = tf.concat(scores, axis=1), tf.concat(boxes, axis=1)
  scores, top = tf.math.top_k(scores, k=min(scores.shape[1], post_nms_topn))
  boxes = tf.gather(boxes, top, batch_dims=1)
  return tf.stop_gradient(scores), tf.stop_gradient(boxes)
