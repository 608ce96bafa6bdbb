"""Mask R-CNN's FPN anchors and RPN targets against NumPy versions of
Google's v0.7 sequence (anchors.py, object_detection's ArgMaxMatcher,
FasterRcnnBoxCoder and BalancedPositiveNegativeSampler)."""

import numpy as np
import pytest
import tensorflow as tf

from input_pipeline import fpn_anchors
from input_pipeline import ssd_boxes


def numpy_google_anchors(image_size, min_level=2, max_level=6, num_scales=1,
                         aspect_ratios=((1.0, 1.0), (1.4, 0.7), (0.7, 1.4)),
                         anchor_scale=8.0):
  """Their _generate_anchor_configs and _generate_anchor_boxes, step by
  step."""
  configs = {}
  for level in range(min_level, max_level + 1):
    configs[level] = [(2 ** level, octave / float(num_scales), aspect)
                      for octave in range(num_scales)
                      for aspect in aspect_ratios]
  boxes_all = []
  for _, level_configs in configs.items():
    boxes_level = []
    for stride, octave_scale, aspect in level_configs:
      base = anchor_scale * stride * 2 ** octave_scale
      half_x, half_y = base * aspect[0] / 2.0, base * aspect[1] / 2.0
      x = np.arange(stride / 2, image_size[1], stride)
      y = np.arange(stride / 2, image_size[0], stride)
      xv, yv = np.meshgrid(x, y)
      xv, yv = xv.reshape(-1), yv.reshape(-1)
      boxes = np.swapaxes(np.vstack((yv - half_y, xv - half_x, yv + half_y,
                                     xv + half_x)), 0, 1)
      boxes_level.append(np.expand_dims(boxes, axis=1))
    boxes_all.append(np.concatenate(boxes_level, axis=1).reshape([-1, 4]))
  return np.vstack(boxes_all)


def test_anchors_are_googles_in_their_order():
  for size in ((832, 1344), (1344, 832), (192, 128)):
    got = fpn_anchors.anchor_boxes(size)
    np.testing.assert_allclose(got, numpy_google_anchors(size), rtol=1e-6)
  got = fpn_anchors.anchor_boxes((832, 1344))
  # Google's landscape image: 93,093 locations on levels 2-6, 3 anchors.
  assert got.shape == (279279, 4)
  # Level 2 (stride 4, size 32): the square, then the wide (1.4, 0.7) box,
  # at the first location (2, 2); the next location is (2, 6).
  np.testing.assert_allclose(got[0], [-14, -14, 18, 18])
  np.testing.assert_allclose(got[1], [2 - 11.2, 2 - 22.4, 2 + 11.2, 2 + 22.4],
                             rtol=1e-6)
  np.testing.assert_allclose(got[3], [-14, -10, 18, 22])
  sizes = fpn_anchors.level_sizes((832, 1344))
  assert sizes[2] == (208, 336) and sizes[6] == (13, 21)
  assert 3 * sum(h * w for h, w in sizes.values()) == len(got)


def test_an_image_size_the_largest_stride_does_not_divide_is_named():
  with pytest.raises(ValueError, match=r'160x160 is not a multiple of its '
                     r'largest feature stride 64'):
    fpn_anchors.anchor_boxes((160, 160))


def numpy_matcher(sim, matched=0.7, unmatched=0.3):
  """ArgMaxMatcher(0.7, 0.3, negatives_lower_than_unmatched=True,
  force_match_for_each_row=True), line by line."""
  matches = np.argmax(sim, 0)
  vals = np.max(sim, 0)
  matches = np.where(vals < unmatched, -1, matches)
  matches = np.where((vals >= unmatched) & (vals < matched), -2, matches)
  force_cols = np.argmax(sim, 1)
  indicators = np.eye(sim.shape[1])[force_cols]
  force_mask = indicators.max(0) > 0
  return np.where(force_mask, np.argmax(indicators, 0), matches)


def image_boxes():
  return np.array([[10, 20, 60, 90], [100, 40, 180, 100], [30, 120, 50, 140],
                   [12, 22, 58, 88]], np.float32)


def test_rpn_targets_follow_their_matcher_sampler_and_coder():
  anchors = fpn_anchors.anchor_boxes((192, 192))
  gt = image_boxes()
  sim = ssd_boxes.iou(tf.constant(gt), tf.constant(anchors)).numpy()
  want = numpy_matcher(sim)
  scores, codes = fpn_anchors.rpn_targets(gt, anchors, seed=[1, 2])
  scores, codes = scores.numpy(), codes.numpy()
  positives, negatives = want >= 0, want == -1
  assert (want == -2).any() and positives.sum() > 0
  # Sampled: up to 128 positives, negatives filling 256; never an ignored
  # anchor; every positive taken here, as there are fewer than 128.
  assert positives.sum() < 128
  assert (scores == 1).sum() == positives.sum()
  assert (scores == 0).sum() == 256 - positives.sum()
  assert set(np.flatnonzero(scores == 1)) == set(np.flatnonzero(positives))
  assert negatives[scores == 0].all()
  # Box targets for every matched anchor, the coder without scale factors.
  assert not codes[~positives].any()
  centred = fpn_anchors.to_centred(tf.constant(anchors)).numpy()
  back = ssd_boxes.decode(tf.constant(codes[positives]),
                          tf.constant(centred[positives]),
                          fpn_anchors.RPN_SCALES).numpy()
  np.testing.assert_allclose(back, gt[want[positives]], atol=1e-3)
  a, b = centred[positives][0], gt[want[positives][0]]
  np.testing.assert_allclose(
      codes[positives][0],
      [((b[0] + b[2]) / 2 - a[0]) / (a[2] + 1e-8),
       ((b[1] + b[3]) / 2 - a[1]) / (a[3] + 1e-8),
       np.log((b[2] - b[0] + 1e-8) / (a[2] + 1e-8)),
       np.log((b[3] - b[1] + 1e-8) / (a[3] + 1e-8))], rtol=1e-4, atol=1e-6)


def test_sampling_caps_positives_is_seeded_and_handles_no_boxes():
  anchors = fpn_anchors.anchor_boxes((192, 192))
  # Many boxes: more than 128 positive anchors, so half the sample.
  starts = np.stack(np.meshgrid(np.arange(0, 176, 12), np.arange(0, 176, 12),
                                indexing='ij'), -1).reshape(-1, 2)
  gt = np.concatenate([starts, starts + 16], 1).astype(np.float32)
  first = fpn_anchors.rpn_targets(gt, anchors, seed=[3, 4])[0].numpy()
  again = fpn_anchors.rpn_targets(gt, anchors, seed=[3, 4])[0].numpy()
  other = fpn_anchors.rpn_targets(gt, anchors, seed=[5, 6])[0].numpy()
  assert (first == 1).sum() == 128 and (first == 0).sum() == 128
  np.testing.assert_array_equal(first, again)
  assert (first != other).any()
  scores, codes = fpn_anchors.rpn_targets(np.zeros([0, 4], np.float32),
                                          anchors, seed=[1, 1])
  assert (scores.numpy() == 0).sum() == 256 and (scores.numpy() == 1).sum() == 0
  assert not codes.numpy().any()


def _sample_by_sorting(indicator, labels, size, positive_fraction, seed):
  """sample_balanced as first written: each candidate's rank in a random
  order by sorting every key twice."""
  positives = tf.logical_and(indicator, labels)
  negatives = tf.logical_and(indicator, tf.logical_not(labels))
  seeds = tf.random.experimental.stateless_split(seed, 2)

  def pick(candidates, count, seed):
    keys = tf.random.stateless_uniform(tf.shape(candidates), seed)
    keys = tf.where(candidates, keys, 2.0)
    rank = tf.argsort(tf.argsort(keys, axis=-1), axis=-1)
    return tf.logical_and(candidates, rank < count)

  chosen = pick(positives, int(positive_fraction * size), seeds[0])
  taken = tf.reduce_sum(tf.cast(chosen, tf.int32), axis=-1, keepdims=True)
  return chosen | pick(negatives, size - taken, seeds[1])


def test_balanced_sample_is_the_first_of_a_random_order():
  """The top-k draw takes exactly the candidates a full sort of the random
  keys ranks first: rows on their own, few positives or many, fewer
  candidates than the sample, none."""
  rng = np.random.default_rng(5)
  for rows, n, size, p_candidate, p_positive in (
      (1, 5000, 256, 0.5, 0.01), (3, 2000, 512, 0.3, 0.4),
      (2, 300, 256, 0.5, 0.5), (2, 100, 64, 0.0, 0.5), (1, 50, 64, 1.0, 1.0)):
    indicator = tf.constant(rng.uniform(size=(rows, n)) < p_candidate)
    labels = tf.constant(rng.uniform(size=(rows, n)) < p_positive)
    for seed in ([1, 2], [3, 4]):
      got = fpn_anchors.sample_balanced(indicator, labels, size, 0.25, seed)
      want = _sample_by_sorting(indicator, labels, size, 0.25, seed)
      np.testing.assert_array_equal(got, want)
      # Up to a quarter positives, negatives for the rest.
      pos = (indicator & labels).numpy().sum(-1)
      neg = (indicator & ~labels).numpy().sum(-1)
      taken = np.minimum(pos, size // 4)
      np.testing.assert_array_equal(
          got.numpy().sum(-1), taken + np.minimum(neg, size - taken))


def test_first_by_key_breaks_ties_by_place():
  """Keys that tie (five values among hundreds): the first `count` by
  (key, place), as ranking every key by a stable sort does; counts of 0,
  within and past `most`."""
  rng = np.random.default_rng(6)
  keys = tf.constant(rng.integers(0, 5, (3, 400)) / 5.0, tf.float32)
  rank = tf.argsort(tf.argsort(keys, axis=-1, stable=True), axis=-1,
                    stable=True)
  for count in ([[0], [1], [7]], [[50], [64], [64]], 64):
    got = fpn_anchors.first_by_key(keys, count, 64)
    np.testing.assert_array_equal(got, rank < np.minimum(count, 64))
