"""Mask R-CNN's multilevel RoIAlign, with the values of Google's MLPerf v0.7
`multilevel_crop_and_resize` (mask_rcnn_architecture.py).

Each box goes to FPN level floor(log2(sqrt(area) / 224)) + 4, clamped to
the levels given, and is divided by that level's stride. Its
output_size x output_size bins each average sampling_ratio^2 points
(y = ymin + i bin + (j + 0.5) bin / ratio), each point bilinear between its
four neighbours. Their arithmetic, kept: the lower neighbour is floor(y)
raised to 0 (so a point left of the map weighs its neighbours by more
than 1 and less than 0), both neighbours are capped at the map's size, and
a neighbour at the size reads zeros.

Theirs builds one-hot matrices and contracts them with the whole level's
features by einsum (a shape the TPU's matrix units like, and five levels'
worth of work). Here two ways to the same values:
- `gather` (static shapes, for XLA and a TPU): every box reads only its own
  level, by one gather of the four neighbours of every point from the
  levels laid end to end, each with a zero row and column past its edge;
- `crop` (dynamic shapes, CPUs and GPUs): the boxes split by level
  (tf.dynamic_partition), each level's cropped by
  `tf.image.crop_and_resize` at output_size x ratio points placed exactly
  on theirs (the map padded with the same zero row and column), averaged
  over each bin's ratio x ratio points, stitched back in order. Its kernel
  and gradient read only the points: on 2 CPU cores the box head's step
  takes a fraction of the gather's (whose gradient scatters every gathered
  neighbour). Points left of or above the map (their extrapolation) never
  occur: boxes are clipped to the image.
`method='auto'` takes `gather` under a TPUStrategy, `crop` elsewhere.
"""

import tensorflow as tf


def box_levels(boxes, min_level: int, max_level: int):
  """[B, N] int32 FPN level of each [B, N, 4] pixel box."""
  height = boxes[..., 2] - boxes[..., 0]
  width = boxes[..., 3] - boxes[..., 1]
  log2 = tf.math.log(tf.constant(2.0, boxes.dtype))
  levels = tf.cast(tf.math.floordiv(
      tf.math.log(tf.sqrt(height * width) / 224.0), log2) + 4.0, tf.int32)
  return tf.minimum(max_level, tf.maximum(levels, min_level))


def multilevel_crop_and_resize(features: dict, boxes, output_size: int = 7,
                               sampling_ratio: int = 2, method: str = 'auto'):
  """[B, N, output_size, output_size, C] features of [B, N, 4] pixel boxes
  ([ymin, xmin, ymax, xmax] on the network's image, inside it) from
  {level: [B, H_l, W_l, C]}; `method` 'gather', 'crop' or 'auto' (above)."""
  if method == 'auto':
    method = 'gather' if isinstance(tf.distribute.get_strategy(), (
        tf.distribute.TPUStrategy,
        tf.distribute.experimental.TPUStrategy)) else 'crop'
  if method == 'crop':
    return _by_crops(features, boxes, output_size, sampling_ratio)
  if method != 'gather':
    raise ValueError(f"RoIAlign method {method!r}: 'gather', 'crop' or "
                     "'auto'.")
  levels_present = sorted(features)
  min_level, max_level = levels_present[0], levels_present[-1]
  first = features[min_level]
  batch, channels = tf.shape(first)[0], first.shape[-1]
  num_boxes = boxes.shape[1] or tf.shape(boxes)[1]  # Dynamic: mask RoIs.
  dtype = first.dtype
  ratio = max(sampling_ratio, 1)

  levels = box_levels(boxes, min_level, max_level)
  scale = tf.pow(2.0, tf.cast(levels, boxes.dtype))
  boxes = boxes / scale[..., None]
  bin_h = (boxes[..., 2] - boxes[..., 0]) / output_size
  bin_w = (boxes[..., 3] - boxes[..., 1]) / output_size
  steps = tf.constant([i + (j + 0.5) / ratio for i in range(output_size)
                       for j in range(ratio)], boxes.dtype)
  grid_y = boxes[..., 0:1] + steps * bin_h[..., None]  # [B, N, out * ratio]
  grid_x = boxes[..., 1:2] + steps * bin_w[..., None]

  # The levels end to end, each padded with a zero row and column.
  sizes = [features[l].shape[1:3] for l in range(min_level, max_level + 1)]
  flat, offsets, offset = [], [], 0
  for level, (h, w) in zip(range(min_level, max_level + 1), sizes):
    padded = tf.pad(features[level], [[0, 0], [0, 1], [0, 1], [0, 0]])
    flat.append(tf.reshape(padded, [batch, -1, channels]))
    offsets.append(offset)
    offset += (h + 1) * (w + 1)
  flat = tf.concat(flat, axis=1)
  index = levels - min_level
  pick = lambda values: tf.gather(tf.constant(values), index)  # noqa: E731
  base = pick(offsets)[..., None]
  height = tf.cast(pick([h for h, _ in sizes]), boxes.dtype)[..., None]
  width_i = pick([w for _, w in sizes])[..., None]
  width = tf.cast(width_i, boxes.dtype)

  def neighbours(grid, size):
    lower = tf.maximum(tf.floor(grid), 0.0)
    frac = grid - lower
    ids = tf.stack([tf.minimum(lower, size), tf.minimum(lower + 1.0, size)],
                   axis=-1)  # [B, N, out * ratio, 2]
    weights = tf.stack([1.0 - frac, frac], axis=-1) / ratio
    return tf.cast(ids, tf.int32), weights

  iy, wy = neighbours(grid_y, height)
  ix, wx = neighbours(grid_x, width)
  # [B, N, out*ratio*2 (y), out*ratio*2 (x)] rows of the flattened levels.
  iy = tf.reshape(iy, [batch, num_boxes, -1])
  ix = tf.reshape(ix, [batch, num_boxes, -1])
  rows = (base[..., None] + iy[..., :, None] * (width_i[..., None] + 1) +
          ix[..., None, :])
  values = tf.gather(flat, tf.reshape(rows, [batch, -1]), batch_dims=1)
  values = tf.reshape(values, [batch, num_boxes, output_size, 2 * ratio,
                               output_size, 2 * ratio, channels])
  wy = tf.cast(tf.reshape(wy, [batch, num_boxes, output_size, 2 * ratio]),
               dtype)
  wx = tf.cast(tf.reshape(wx, [batch, num_boxes, output_size, 2 * ratio]),
               dtype)
  return tf.einsum('bnysxtc,bnys,bnxt->bnyxc', values, wy, wx)


def _by_crops(features: dict, boxes, output_size: int, sampling_ratio: int):
  """multilevel_crop_and_resize by tf.image.crop_and_resize, level by level."""
  levels_present = sorted(features)
  min_level, max_level = levels_present[0], levels_present[-1]
  first = features[min_level]
  dtype, channels = first.dtype, first.shape[-1]
  batch = tf.shape(boxes)[0]
  num_boxes = boxes.shape[1] or tf.shape(boxes)[1]
  ratio = max(sampling_ratio, 1)
  points = output_size * ratio
  boxes = tf.cast(boxes, tf.float32)
  levels = box_levels(boxes, min_level, max_level)
  scaled = boxes / tf.pow(2.0, tf.cast(levels, tf.float32))[..., None]
  # Their points: ymin + (k + 0.5) step, k < points, step = bin / ratio.
  step_y = (scaled[..., 2] - scaled[..., 0]) / points
  step_x = (scaled[..., 3] - scaled[..., 1]) / points
  first_y = scaled[..., 0] + 0.5 * step_y
  first_x = scaled[..., 1] + 0.5 * step_x
  ends = tf.stack([first_y, first_x, first_y + (points - 1) * step_y,
                   first_x + (points - 1) * step_x], axis=-1)
  ends = tf.reshape(ends, [-1, 4])
  images = tf.repeat(tf.range(batch), num_boxes)
  parts = tf.dynamic_partition(tf.range(tf.shape(ends)[0]),
                               tf.reshape(levels - min_level, [-1]),
                               max_level - min_level + 1)
  pooled = []
  for i, level in enumerate(range(min_level, max_level + 1)):
    feature = tf.cast(features[level], tf.float32)
    height, width = feature.shape[1], feature.shape[2]
    # Their zero row and column past the edge; crop_and_resize's
    # normalised coordinate 1 is the padded map's last row: theirs `size`.
    padded = tf.pad(feature, [[0, 0], [0, 1], [0, 1], [0, 0]])
    mine = tf.gather(ends, parts[i]) / [height, width, height, width]
    crops = tf.image.crop_and_resize(padded, mine,
                                     tf.gather(images, parts[i]),
                                     [points, points])
    pooled.append(tf.nn.avg_pool2d(crops, ratio, ratio, 'VALID'))
  out = tf.dynamic_stitch(parts, pooled)
  return tf.cast(tf.reshape(out, [batch, num_boxes, output_size, output_size,
                                  channels]), dtype)
