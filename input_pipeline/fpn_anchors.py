"""Mask R-CNN's anchors on the FPN levels and the RPN's targets, as Google's
MLPerf v0.7 code has them (mlcommons/training_results_v0.7, `Google/
benchmarks/maskrcnn/implementations/maskrcnn-research-TF-tpu-*/anchors.py`:
`_generate_anchor_boxes`, `AnchorLabeler`).

Anchors are in pixels, [ymin, xmin, ymax, xmax], ordered by level, then
location (row-major), then anchor config (octave scale, then aspect
ratio). An aspect ratio is an (x, y) pair of multipliers: (1.4, 0.7) is a
wide box. The RPN's targets are computed on the host, per image, before
padding: IoU with the image's boxes, ArgMaxMatcher(0.7, 0.3) with every box
forced to its best anchor, FasterRcnnBoxCoder without scale factors, and a
random subset of 256 anchors with at most half positive (their
BalancedPositiveNegativeSampler, is_static=False); here the subset is drawn
from a seed (stateless, so a resumed run draws the same).
"""

import dataclasses

import numpy as np
import tensorflow as tf

from input_pipeline import ssd_boxes

RPN_SCALES = (1.0, 1.0, 1.0, 1.0)  # FasterRcnnBoxCoder() for the RPN.


@dataclasses.dataclass(frozen=True)
class AnchorConfig:
  """Google's mask_rcnn_params.py defaults."""
  min_level: int = 2
  max_level: int = 6
  num_scales: int = 1
  aspect_ratios: tuple = ((1.0, 1.0), (1.4, 0.7), (0.7, 1.4))
  anchor_scale: float = 8.0

  @property
  def anchors_per_location(self) -> int:
    return self.num_scales * len(self.aspect_ratios)


def anchor_boxes(image_size: tuple, config: AnchorConfig = AnchorConfig()
                 ) -> np.ndarray:
  """[N, 4] float32 anchors for an image of `image_size` (height, width),
  which the largest stride must divide.

  Raises:
    ValueError: naming the size and the stride.
  """
  height, width = image_size
  stride = 2 ** config.max_level
  if height % stride or width % stride:
    raise ValueError(f'Mask R-CNN image size {height}x{width} is not a '
                     f'multiple of its largest feature stride {stride} '
                     f'(2^max_level, max_level {config.max_level}).')
  levels = []
  for level in range(config.min_level, config.max_level + 1):
    stride = 2 ** level
    y, x = np.meshgrid(np.arange(stride / 2, height, stride),
                       np.arange(stride / 2, width, stride), indexing='ij')
    y, x = y.reshape(-1, 1), x.reshape(-1, 1)
    per_config = []
    for octave in range(config.num_scales):
      for ax, ay in config.aspect_ratios:
        size = config.anchor_scale * stride * 2 ** (octave / config.num_scales)
        half_x, half_y = size * ax / 2, size * ay / 2
        per_config.append(np.concatenate(
            [y - half_y, x - half_x, y + half_y, x + half_x], axis=1))
    levels.append(np.stack(per_config, axis=1).reshape(-1, 4))
  return np.concatenate(levels).astype(np.float32)


def by_level(anchors: np.ndarray, image_size: tuple,
             config: AnchorConfig = AnchorConfig()) -> dict:
  """{level: [H_l W_l A, 4]}: `anchor_boxes` split by level (their
  `unpack_labels`); the same split serves per-anchor targets."""
  out, start = {}, 0
  for level, (h, w) in level_sizes(image_size, config).items():
    count = h * w * config.anchors_per_location
    out[level] = anchors[start:start + count]
    start += count
  return out


def level_sizes(image_size: tuple, config: AnchorConfig = AnchorConfig()
                ) -> dict:
  """{level: (feature height, feature width)}."""
  return {level: (image_size[0] // 2 ** level, image_size[1] // 2 ** level)
          for level in range(config.min_level, config.max_level + 1)}


def to_centred(corners):
  """[..., 4] [ymin, xmin, ymax, xmax] -> [cy, cx, h, w]."""
  ymin, xmin, ymax, xmax = tf.unstack(corners, axis=-1)
  return tf.stack([(ymin + ymax) / 2, (xmin + xmax) / 2, ymax - ymin,
                   xmax - xmin], axis=-1)


def first_by_key(keys, count, most: int):
  """[..., N] bool: the `count` (<= `most`) first places of each row in the
  order of (key, place), found by a top-k of `most` rather than by sorting
  every key (an image's 267,012 anchors).

  Args:
    keys: [..., N] float.
    count: an int or [..., 1] int32, each row's.
    most: the largest count.
  """
  k = min(most, keys.shape[-1])
  low, where = tf.math.top_k(-keys, k=k)  # Ties: the lower place first.
  count = tf.broadcast_to(tf.convert_to_tensor(count, tf.int32),
                          tf.concat([tf.shape(keys)[:-1], [1]], 0))
  last = tf.clip_by_value(count - 1, 0, k - 1)
  last_key = -tf.gather(low, last, batch_dims=len(keys.shape) - 1)
  last_place = tf.gather(where, last, batch_dims=len(keys.shape) - 1)
  place = tf.range(tf.shape(keys)[-1])
  first = (keys < last_key) | ((keys == last_key) & (place <= last_place))
  return first & (count > 0)


def centred_of(corners: np.ndarray) -> np.ndarray:
  """`to_centred` in NumPy (the same float32 arithmetic)."""
  ymin, xmin, ymax, xmax = np.moveaxis(np.asarray(corners, np.float32), -1, 0)
  return np.stack([(ymin + ymax) / 2, (xmin + xmax) / 2, ymax - ymin,
                   xmax - xmin], axis=-1)


def sample_balanced(indicator, labels, size: int, positive_fraction: float,
                    seed):
  """BalancedPositiveNegativeSampler.subsample (is_static=False): up to
  `positive_fraction * size` of the positives (indicator & labels) at
  random, then negatives (indicator & ~labels) to fill `size`; a [..., N]
  bool, each row of the leading axes drawn on its own.

  Args:
    indicator, labels: [..., N] bool.
    seed: a [2] int stateless seed (one draw for every row).
  """
  positives = tf.logical_and(indicator, labels)
  negatives = tf.logical_and(indicator, tf.logical_not(labels))
  seeds = tf.random.experimental.stateless_split(seed, 2)

  def pick(candidates, count, seed):
    # A random order of the candidates first; keep the first `count`.
    keys = tf.random.stateless_uniform(tf.shape(candidates), seed)
    keys = tf.where(candidates, keys, 2.0)
    return candidates & first_by_key(keys, count, size)

  chosen_positives = pick(positives, int(positive_fraction * size), seeds[0])
  taken = tf.reduce_sum(tf.cast(chosen_positives, tf.int32), axis=-1,
                        keepdims=True)
  return tf.logical_or(chosen_positives,
                       pick(negatives, size - taken, seeds[1]))


def rpn_targets(gt_boxes, anchors, seed, *, matched_threshold: float = 0.7,
                unmatched_threshold: float = 0.3, batch_size: int = 256,
                positive_fraction: float = 0.5):
  """Google's AnchorLabeler.label_anchors for one image.

  Args:
    gt_boxes: [num_gt, 4] pixel corner boxes (num_gt may be 0).
    anchors: [N, 4] pixel corner anchors (`anchor_boxes`).
    seed: a [2] int stateless seed for the sampling.

  Returns:
    (score targets [N] int32: 1 a sampled positive, 0 a sampled negative, -1
    not sampled or ignored; box targets [N, 4] float32, the coded box for
    every matched anchor, sampled or not, zeros elsewhere: their box loss
    counts every matched anchor).
  """
  n = anchors.shape[0]
  static = tf.get_static_value(anchors)
  anchors = tf.convert_to_tensor(anchors, tf.float32)
  gt_boxes = tf.convert_to_tensor(gt_boxes, tf.float32)
  # The anchors' centres and sizes once, not once an image, when constant.
  centred = (tf.constant(centred_of(static)) if static is not None else
             to_centred(anchors))

  def matched():
    return ssd_boxes.match(ssd_boxes.iou(gt_boxes, anchors),
                           matched_threshold, unmatched_threshold)

  matches = tf.cond(tf.shape(gt_boxes)[0] > 0, matched,
                    lambda: tf.fill([n], -1))
  positive = matches >= 0
  sampled = sample_balanced(matches > -2, positive, batch_size,
                            positive_fraction, seed)
  scores = tf.where(sampled, tf.cast(positive, tf.int32), -1)
  rows = tf.maximum(matches, 0)
  boxes = tf.cond(tf.shape(gt_boxes)[0] > 0,
                  lambda: tf.gather(gt_boxes, rows),
                  lambda: tf.zeros([n, 4]))
  codes = ssd_boxes.encode(boxes, centred, RPN_SCALES)
  return scores, tf.where(positive[:, None], codes, 0.0)
