"""Mask R-CNN's mask-branch targets, with the values of Google's MLPerf v0.7
code (mask_rcnn_architecture.py: `select_fg_for_masks`,
`get_mask_targets`, `mask_post_processing`).

In training the mask branch sees `max_num_fg` RoIs an image: the sampled
foreground RoIs in row order, then background rows in row order to fill
(their masks count in no loss). A RoI's target is its ground-truth
instance's mask, cropped on the host to the instance's box at 112x112 and
zero-padded by 2 (input pipeline), re-sampled onto the RoI: 28x28 points
at bin centres, bilinear between neighbours clamped into the padded
crop, then 1 where the value is at least 0.5. Theirs gathers by one-hot
einsums; here by tf.gather, the same values.
"""

import tensorflow as tf

EPSILON = 1e-8


def select_fg_for_masks(class_targets, box_targets, boxes, label_map,
                        max_num_fg: int = 128):
  """(class targets, box targets, boxes, label map), each of the first
  `max_num_fg` rows an image: foreground rows first, then the rest, each in
  row order (their top_k of class > 0)."""
  _, rows = tf.math.top_k(tf.cast(class_targets > 0, tf.float32),
                          k=max_num_fg)
  take = lambda t: tf.gather(t, rows, batch_dims=1)  # noqa: E731
  return take(class_targets), take(box_targets), take(boxes), take(label_map)


def get_mask_targets(fg_boxes, fg_label_map, fg_box_targets, gt_masks,
                     output_size: int = 28):
  """[B, M, output_size, output_size] 0/1 float targets.

  Args:
    fg_boxes: [B, M, 4] RoIs on the network's image.
    fg_label_map: [B, M] the RoI's ground-truth row (may be -1: read as 0).
    fg_box_targets: [B, M, 4] that ground truth's box on the network's image.
    gt_masks: [B, I, H + 4, W + 4] each instance's mask cropped to its box
      and zero-padded by 2 (Google's 116x116).
  """
  height, width = gt_masks.shape[2], gt_masks.shape[3]
  masks = tf.gather(gt_masks, tf.maximum(fg_label_map, 0), batch_dims=1)
  by0, bx0, by1, bx1 = tf.unstack(fg_boxes, axis=-1)
  gy0, gx0, gy1, gx1 = tf.unstack(fg_box_targets, axis=-1)
  valid_h, valid_w = height - 4, width - 4
  y0 = (by0 - gy0) * valid_h / (gy1 - gy0 + EPSILON) + 2
  x0 = (bx0 - gx0) * valid_w / (gx1 - gx0 + EPSILON) + 2
  h = (by1 - by0) * valid_h / (gy1 - gy0 + EPSILON)
  w = (bx1 - bx0) * valid_w / (gx1 - gx0 + EPSILON)
  centres = tf.range(output_size, dtype=fg_boxes.dtype) + 0.5
  grid_y = y0[..., None] + centres * (h / output_size)[..., None]
  grid_x = x0[..., None] + centres * (w / output_size)[..., None]

  def neighbours(grid, size):
    lower = tf.floor(grid)
    ids = tf.stack([lower, lower + 1.0], axis=-1)
    ids = tf.cast(tf.minimum(float(size - 1), tf.maximum(0.0, ids)), tf.int32)
    frac = grid - lower
    return ids, tf.stack([1.0 - frac, frac], axis=-1)  # [B, M, out, 2]

  iy, wy = neighbours(grid_y, height)
  ix, wx = neighbours(grid_x, width)
  rows = tf.gather(masks, iy, batch_dims=2)  # [B, M, out, 2, W + 4]
  values = tf.gather(rows, ix, axis=4, batch_dims=2)  # [B, M, oy, 2, ox, 2]
  sampled = tf.einsum('bmysxt,bmys,bmxt->bmyx', values,
                      tf.cast(wy, values.dtype), tf.cast(wx, values.dtype))
  return tf.stop_gradient(tf.cast(sampled >= 0.5, sampled.dtype))


def select_class_masks(mask_outputs, class_indices):
  """mask_post_processing: [B, M, h, w, C] logits -> [B, M, h, w], each
  mask the channel of its class."""
  per_class = tf.transpose(mask_outputs, [0, 1, 4, 2, 3])
  return tf.gather(per_class, tf.cast(class_indices, tf.int32), batch_dims=2)
