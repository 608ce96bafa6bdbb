"""Mask R-CNN's multilevel RoIAlign, both ways (gather; crop_and_resize by
level), against a NumPy version of Google's v0.7 multilevel_crop_and_resize
(one-hot matrices and einsum, level by level)."""

import numpy as np
import tensorflow as tf

from models.maskrcnn import roi_align


def numpy_multilevel_crop_and_resize(features, boxes, output_size=7,
                                     sampling_ratio=2):
  """Their sequence, step by step."""
  min_level, max_level = min(features), max(features)
  batch, _, _, channels = features[min_level].shape
  num_boxes = boxes.shape[1]
  box_height = boxes[:, :, 2] - boxes[:, :, 0]
  box_width = boxes[:, :, 3] - boxes[:, :, 1]
  areas_sqrt = np.sqrt(box_height * box_width)
  with np.errstate(divide='ignore'):
    levels = (np.floor(np.log(areas_sqrt / 224.0) / np.log(2.0)) + 4.0)
  levels = np.nan_to_num(levels, neginf=-1e9).astype(np.int64)
  levels = np.minimum(max_level, np.maximum(levels, min_level))
  scale = 2.0 ** levels
  boxes = boxes / scale[..., None]
  box_height, box_width = box_height / scale, box_width / scale
  bin_h, bin_w = box_height / output_size, box_width / output_size
  ys, xs = [], []
  for i in range(output_size):
    for j in range(sampling_ratio):
      ys.append(boxes[:, :, 0] + i * bin_h + (j + 0.5) * bin_h /
                sampling_ratio)
      xs.append(boxes[:, :, 1] + i * bin_w + (j + 0.5) * bin_w /
                sampling_ratio)
  grid_y, grid_x = np.stack(ys, 2), np.stack(xs, 2)
  out = np.zeros([batch, num_boxes, output_size, output_size, channels])
  for level in range(min_level, max_level + 1):
    f = features[level]
    height, width = f.shape[1:3]
    y0 = np.maximum(0.0, np.floor(grid_y))
    x0 = np.maximum(0.0, np.floor(grid_x))
    y01 = np.stack([np.minimum(y0, height), np.minimum(y0 + 1, height)], 3)
    x01 = np.stack([np.minimum(x0, width), np.minimum(x0 + 1, width)], 3)
    y01 = y01.reshape(batch, num_boxes, output_size, sampling_ratio * 2)
    x01 = x01.reshape(batch, num_boxes, output_size, sampling_ratio * 2)
    ly, lx = grid_y - y0, grid_x - x0
    ky = np.stack([1 - ly, ly], 3).reshape(
        batch, num_boxes, output_size, sampling_ratio * 2, 1) / sampling_ratio
    kx = np.stack([1 - lx, lx], 3).reshape(
        batch, num_boxes, output_size, sampling_ratio * 2, 1) / sampling_ratio
    one_hot = lambda idx, depth: (idx.astype(int)[..., None] ==  # noqa: E731
                                  np.arange(depth)).astype(float)
    wy = (one_hot(y01, height) * ky).sum(-2)
    wx = (one_hot(x01, width) * kx).sum(-2)
    y_out = np.einsum('bhwf,bnyh->bnywf', f, wy)
    x_out = np.einsum('bnywf,bnxw->bnyxf', y_out, wx)
    out += np.where((levels == level)[..., None, None, None], x_out, 0)
  return out


def test_values_are_theirs_on_every_level_and_at_the_edges():
  rng = np.random.default_rng(0)
  image = (256, 192)
  features = {l: rng.normal(size=(2, image[0] // 2 ** l, image[1] // 2 ** l,
                                  3)) for l in range(2, 7)}
  # Boxes of every size (levels 2 to 6), some past the image's edges.
  centre = rng.uniform(-20, 260, (2, 40, 2))
  side = np.exp(rng.uniform(np.log(4), np.log(1200), (2, 40, 2)))
  boxes = np.concatenate([centre - side / 2, centre + side / 2], -1)
  boxes[:, 0] = [-10, -30, 990, 1000]  # Level 6 (sqrt area over 896).
  want = numpy_multilevel_crop_and_resize(features, boxes)
  got = roi_align.multilevel_crop_and_resize(
      {l: tf.constant(f) for l, f in features.items()}, tf.constant(boxes),
      method='gather')
  levels = roi_align.box_levels(tf.constant(boxes), 2, 6).numpy()
  assert set(levels.ravel()) == {2, 3, 4, 5, 6}
  assert (boxes[..., :2] < 0).any()
  np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
  # float32, the model's dtype, and 14x14 crops (the mask head's).
  got32 = roi_align.multilevel_crop_and_resize(
      {l: tf.constant(f, tf.float32) for l, f in features.items()},
      tf.constant(boxes, tf.float32), output_size=14, method='gather')
  np.testing.assert_allclose(
      got32, numpy_multilevel_crop_and_resize(features, boxes, 14),
      rtol=1e-4, atol=1e-4)


def test_crops_by_level_give_their_values_and_the_gathers_gradients():
  rng = np.random.default_rng(1)
  image = (1024, 960)  # Room for boxes of level 6 inside the image.
  features = {l: rng.normal(size=(2, image[0] // 2 ** l, image[1] // 2 ** l,
                                  3)).astype(np.float32) for l in range(2, 7)}
  # Boxes of every level, clipped to the image as proposals and detections
  # are (Detectron's clip: [0, size - 1]); some on the edges, one empty.
  centre = rng.uniform(0, 1024, (2, 40, 2))
  side = np.exp(rng.uniform(np.log(4), np.log(1200), (2, 40, 2)))
  boxes = np.concatenate([centre - side / 2, centre + side / 2], -1)
  boxes = np.clip(boxes, 0, [image[0] - 1, image[1] - 1] * 2)
  boxes[0, 0] = [0, 0, image[0] - 1, image[1] - 1]
  boxes[1, 1] = 0.0  # An empty detection slot.
  boxes = boxes.astype(np.float32)
  levels = roi_align.box_levels(tf.constant(boxes), 2, 6).numpy()
  assert set(levels.ravel()) == {2, 3, 4, 5, 6}
  tensors = {l: tf.constant(f) for l, f in features.items()}
  for size in (7, 14):
    got = roi_align.multilevel_crop_and_resize(tensors, tf.constant(boxes),
                                               size, method='crop')
    np.testing.assert_allclose(got, numpy_multilevel_crop_and_resize(
        {l: f.astype(np.float64) for l, f in features.items()},
        boxes.astype(np.float64), size), rtol=1e-4, atol=1e-4)

  weights = tf.constant(rng.normal(size=(2, 40, 7, 7, 3)), tf.float32)

  def gradients(method):
    with tf.GradientTape() as tape:
      tape.watch(list(tensors.values()))
      out = roi_align.multilevel_crop_and_resize(tensors, tf.constant(boxes),
                                                 7, method=method)
      loss = tf.reduce_sum(out * weights)
    return tape.gradient(loss, list(tensors.values()))

  for got, want in zip(gradients('crop'), gradients('gather')):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
  # On a CPU, 'auto' is the crops.
  np.testing.assert_array_equal(
      roi_align.multilevel_crop_and_resize(tensors, tf.constant(boxes)),
      roi_align.multilevel_crop_and_resize(tensors, tf.constant(boxes),
                                           method='crop'))
