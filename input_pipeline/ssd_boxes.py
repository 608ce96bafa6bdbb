"""SSD's default boxes and box coding, as Google's MLPerf v0.7 code has them.

Boxes are normalised to [0, 1] and ordered [ymin, xmin, ymax, xmax] ('ltrb'
in Google's names) or [cy, cx, h, w] ('xywh'). The default boxes follow
`ssd-research-TF-tpu-v3-8192/dataloader.py` `DefaultBoxes` exactly: per
level, every box size, then every cell in row-major order; each of cy, cx,
h, w clipped to [0, 1] on its own. Matching and coding follow the TF
object-detection pieces Google's `encode_labels` assembles: IoU similarity,
`ArgMaxMatcher(0.5, 0.5, negatives_lower_than_unmatched=True,
force_match_for_each_row=True)` and `FasterRcnnBoxCoder(10, 10, 5, 5)`.
"""

import dataclasses
import itertools
import math

import numpy as np
import tensorflow as tf

# What the box coder and the matcher use (ssd_constants.py).
BOX_CODER_SCALES = (10.0, 10.0, 5.0, 5.0)  # 1 / SCALE_XY, 1 / SCALE_HW.
MATCH_THRESHOLD = 0.5
_EPSILON = 1e-8  # FasterRcnnBoxCoder's EPSILON.


@dataclasses.dataclass(frozen=True)
class Geometry:
  """Where SSD's default boxes lie: per level, the feature map's size, the
  step in pixels (the cell pitch: centres at (j + 0.5) * step / image_size),
  the box scale (scales[i] and scales[i + 1] make the level's two square
  boxes) and the extra aspect ratios (each adds a wide and a tall box).

  `reduce_lowest_layer` gives the first level the object-detection API's
  three boxes instead (`reduce_boxes_in_lowest_layer`, SSD-MobileNet-v1's):
  a square a tenth of the image and two of scales[0] at aspect ratios 2 and
  1/2.

  The defaults are SSD300's (ssd_constants.py, after ssd.pytorch).
  """
  image_size: int = 300
  feature_sizes: tuple = (38, 19, 10, 5, 3, 1)
  steps: tuple = (8, 16, 32, 64, 100, 300)
  scales: tuple = (21, 45, 99, 153, 207, 261, 315)
  aspect_ratios: tuple = ((2,), (2, 3), (2, 3), (2, 3), (2,), (2,))
  reduce_lowest_layer: bool = False

  def __post_init__(self):
    n = len(self.feature_sizes)
    if not (len(self.steps) == len(self.aspect_ratios) == n and
            len(self.scales) == n + 1):
      raise ValueError(
          f'SSD geometry: {n} feature sizes need as many steps and aspect '
          f'ratio tuples and {n + 1} scales; got {len(self.steps)}, '
          f'{len(self.aspect_ratios)} and {len(self.scales)}.')

  @property
  def boxes_per_cell(self) -> tuple:
    """Default boxes at each cell of each level (4, 6, 6, 6, 4, 4)."""
    return tuple(len(box_sizes(self, level))
                 for level in range(len(self.feature_sizes)))

  @property
  def num_boxes(self) -> int:
    """8,732 for SSD300."""
    return sum(f * f * k for f, k in zip(self.feature_sizes,
                                         self.boxes_per_cell))


def box_sizes(geometry: Geometry, level: int) -> list:
  """A level's default boxes' (width, height), normalised, in order."""
  sk1 = geometry.scales[level] / geometry.image_size
  if level == 0 and geometry.reduce_lowest_layer:
    pairs = [(0.1, 0.1)]
    ratios = (2,)
  else:
    sk2 = geometry.scales[level + 1] / geometry.image_size
    sk3 = math.sqrt(sk1 * sk2)
    pairs = [(sk1, sk1), (sk3, sk3)]
    ratios = geometry.aspect_ratios[level]
  for alpha in ratios:
    w, h = sk1 * math.sqrt(alpha), sk1 / math.sqrt(alpha)
    pairs.append((w, h))
    pairs.append((h, w))
  return pairs


def default_boxes(geometry: Geometry = Geometry()) -> np.ndarray:
  """[num_boxes, 4] float32 default boxes as [cy, cx, h, w], in Google's
  order: level, then box size, then cell row, then cell column."""
  fk = geometry.image_size / np.array(geometry.steps)
  boxes = []
  for idx, feature_size in enumerate(geometry.feature_sizes):
    for w, h in box_sizes(geometry, idx):
      for i, j in itertools.product(range(feature_size), repeat=2):
        cx, cy = (j + 0.5) / fk[idx], (i + 0.5) / fk[idx]
        boxes.append(tuple(np.clip(k, 0, 1) for k in (cy, cx, h, w)))
  return np.array(boxes, np.float32)


def to_corners(centred):
  """[..., 4] [cy, cx, h, w] -> [ymin, xmin, ymax, xmax]."""
  cy, cx, h, w = tf.unstack(centred, axis=-1)
  return tf.stack([cy - h / 2, cx - w / 2, cy + h / 2, cx + w / 2], axis=-1)


def corners_of(centred: np.ndarray) -> np.ndarray:
  """`to_corners` in NumPy (the same float32 arithmetic)."""
  cy, cx, h, w = np.moveaxis(np.asarray(centred, np.float32), -1, 0)
  return np.stack([cy - h / 2, cx - w / 2, cy + h / 2, cx + w / 2], axis=-1)


def iou(boxes_a, boxes_b):
  """[N, M] IoU of [N, 4] and [M, 4] corner boxes (0 where they do not
  intersect: object_detection's IouSimilarity)."""
  ymin_a, xmin_a, ymax_a, xmax_a = tf.split(boxes_a, 4, axis=1)
  ymin_b, xmin_b, ymax_b, xmax_b = tf.split(boxes_b, 4, axis=1)
  height = tf.maximum(0.0, tf.minimum(ymax_a, tf.transpose(ymax_b)) -
                      tf.maximum(ymin_a, tf.transpose(ymin_b)))
  width = tf.maximum(0.0, tf.minimum(xmax_a, tf.transpose(xmax_b)) -
                     tf.maximum(xmin_a, tf.transpose(xmin_b)))
  intersection = height * width
  area_a = (ymax_a - ymin_a) * (xmax_a - xmin_a)
  area_b = (ymax_b - ymin_b) * (xmax_b - xmin_b)
  union = area_a + tf.transpose(area_b) - intersection
  return tf.where(tf.equal(intersection, 0.0), tf.zeros_like(intersection),
                  intersection / union)


def match(similarity, matched_threshold: float = MATCH_THRESHOLD,
          unmatched_threshold: float | None = None):
  """For each default box (column), the ground-truth row it takes, -1
  (negative) or -2 (ignored).

  object_detection's ArgMaxMatcher(matched_threshold, unmatched_threshold,
  negatives_lower_than_unmatched=True, force_match_for_each_row=True): a
  column whose best IoU is below `unmatched_threshold` is negative, one
  between the thresholds ignored; then each row's best column is forced to
  that row (the lowest row wins a column that is several rows' best). SSD's
  both thresholds are 0.5 (no column is ignored); Mask R-CNN's RPN 0.7/0.3.

  Args:
    similarity: [num_gt >= 1, num_boxes] IoU.
    matched_threshold: the least IoU that matches.
    unmatched_threshold: below it, negative (None: `matched_threshold`).
  """
  if unmatched_threshold is None:
    unmatched_threshold = matched_threshold
  matches = tf.argmax(similarity, 0, output_type=tf.int32)
  best = tf.reduce_max(similarity, 0)
  matches = tf.where(best < matched_threshold, -2, matches)
  matches = tf.where(best < unmatched_threshold, -1, matches)
  rows = tf.shape(similarity)[0]
  forced_columns = tf.argmax(similarity, 1, output_type=tf.int32)
  # Each column's lowest row among those whose best it is (none: the
  # int32 maximum).
  forced_rows = tf.math.unsorted_segment_min(
      tf.range(rows), forced_columns, tf.shape(similarity)[1])
  return tf.where(forced_rows < rows, forced_rows, matches)


def encode(boxes, anchors, scales=BOX_CODER_SCALES):
  """FasterRcnnBoxCoder.encode: corner boxes against [cy, cx, h, w]
  anchors, both [N, 4] -> [N, 4] targets (ty, tx, th, tw) x scales
  (Mask R-CNN's RPN: scales (1, 1, 1, 1), the coder without factors)."""
  ymin, xmin, ymax, xmax = tf.unstack(boxes, axis=1)
  ha, wa = anchors[:, 2] + _EPSILON, anchors[:, 3] + _EPSILON
  h, w = ymax - ymin + _EPSILON, xmax - xmin + _EPSILON
  ty = ((ymin + ymax) / 2 - anchors[:, 0]) / ha
  tx = ((xmin + xmax) / 2 - anchors[:, 1]) / wa
  th, tw = tf.math.log(h / ha), tf.math.log(w / wa)
  sy, sx, sh, sw = scales
  return tf.stack([ty * sy, tx * sx, th * sh, tw * sw], axis=1)


def decode(codes, anchors, scales=BOX_CODER_SCALES):
  """Predicted [..., N, 4] codes against [N, 4] [cy, cx, h, w] anchors ->
  corner boxes (Google's eval decoding in ssd_model.py; not clipped)."""
  codes = codes / tf.constant(scales, codes.dtype)
  ty, tx, th, tw = tf.unstack(codes, axis=-1)
  cy_a, cx_a, ha, wa = tf.unstack(tf.cast(anchors, codes.dtype), axis=-1)
  w, h = tf.exp(tw) * wa, tf.exp(th) * ha
  cy, cx = ty * ha + cy_a, tx * wa + cx_a
  return tf.stack([cy - h / 2, cx - w / 2, cy + h / 2, cx + w / 2], axis=-1)


def assign_targets(gt_boxes, gt_classes, anchors):
  """Google's `encode_labels` for one image.

  Args:
    gt_boxes: [num_gt, 4] corner boxes (num_gt may be 0).
    gt_classes: [num_gt] int32 labels 1..K.
    anchors: [num_boxes, 4] default boxes as [cy, cx, h, w].

  Returns:
    (classes [num_boxes] int32, 0 = background; box targets [num_boxes, 4],
    0 where unmatched; matched default boxes, a float32 scalar).
  """
  num_boxes = anchors.shape[0]
  # The anchors' corners once, not once an image, where they are constant.
  static = tf.get_static_value(anchors)
  corners = (tf.constant(corners_of(static)) if static is not None else
             to_corners(anchors))

  def assigned():
    matches = match(iou(gt_boxes, corners))
    matched = matches >= 0
    rows = tf.maximum(matches, 0)
    classes = tf.where(matched, tf.gather(gt_classes, rows), 0)
    targets = encode(tf.gather(gt_boxes, rows), anchors)
    targets = tf.where(matched[:, None], targets, 0.0)
    return classes, targets, tf.reduce_sum(tf.cast(matched, tf.float32))

  def empty():
    return (tf.zeros([num_boxes], tf.int32), tf.zeros([num_boxes, 4]),
            tf.constant(0.0))

  return tf.cond(tf.shape(gt_boxes)[0] > 0, assigned, empty)
