"""Mask R-CNN's proposals against a NumPy version of Google's v0.7
proposal_op sequence with a plain greedy NMS."""

import numpy as np
import tensorflow as tf

from input_pipeline import fpn_anchors
from models.maskrcnn import proposals


def numpy_decode(boxes, delta):
  h = boxes[:, 2] - boxes[:, 0] + 1.0
  w = boxes[:, 3] - boxes[:, 1] + 1.0
  cy, cx = boxes[:, 0] + 0.5 * h, boxes[:, 1] + 0.5 * w
  dh = np.minimum(delta[:, 2], np.log(1000 / 16))
  dw = np.minimum(delta[:, 3], np.log(1000 / 16))
  pcy, pcx = delta[:, 0] * h + cy, delta[:, 1] * w + cx
  ph, pw = np.exp(dh) * h, np.exp(dw) * w
  return np.stack([pcy - 0.5 * ph, pcx - 0.5 * pw, pcy + 0.5 * ph - 1,
                   pcx + 0.5 * pw - 1], 1)


def iou(a, b):
  ix = np.maximum(0, np.minimum(a[3], b[:, 3]) - np.maximum(a[1], b[:, 1]))
  iy = np.maximum(0, np.minimum(a[2], b[:, 2]) - np.maximum(a[0], b[:, 0]))
  inter = ix * iy
  area = lambda x: (x[..., 2] - x[..., 0]) * (x[..., 3] - x[..., 1])  # noqa
  return inter / (area(a) + area(b) - inter + 1e-8)


def numpy_level(scores, deltas, anchors, info, pre, post, thresh):
  """_proposal_op_per_level for one image."""
  scores = 1 / (1 + np.exp(-scores.reshape(-1)))
  k = min(len(scores), pre)
  top = np.argsort(-scores, kind='stable')[:k]
  scores = scores[top]
  boxes = numpy_decode(anchors[top], deltas.reshape(-1, 4)[top])
  height, width, scale = info
  boxes = np.stack([np.clip(boxes[:, 0], 0, height - 1),
                    np.clip(boxes[:, 1], 0, width - 1),
                    np.clip(boxes[:, 2], 0, height - 1),
                    np.clip(boxes[:, 3], 0, width - 1)], 1)
  hs, ws = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
  keep = ((hs >= scale) & (ws >= scale) &
          (boxes[:, 0] + hs / 2 + 0.5 < height) &
          (boxes[:, 1] + ws / 2 + 0.5 < width))
  scores, boxes = scores * keep, boxes * keep[:, None]
  kept = []  # Greedy: suppressed at IoU >= thresh; dots never kept.
  for i in range(k):
    if not (boxes[i] > 0).any():
      continue
    if kept and (iou(boxes[i], boxes[kept]) >= thresh).any():
      continue
    kept.append(i)
  limit = min(k, post)
  kept = kept[:limit]
  out_s, out_b = np.zeros(limit), np.zeros((limit, 4))
  out_s[:len(kept)], out_b[:len(kept)] = scores[kept], boxes[kept]
  return out_s, out_b


def test_proposals_are_their_sequence():
  rng = np.random.default_rng(0)
  size = (128, 192)
  anchors = fpn_anchors.by_level(fpn_anchors.anchor_boxes(size), size)
  batch = 2
  scores, deltas = {}, {}
  for level, (h, w) in fpn_anchors.level_sizes(size).items():
    scores[level] = rng.normal(0, 2, (batch, h, w, 3)).astype(np.float32)
    deltas[level] = rng.normal(0, 0.4, (batch, h, w, 12)).astype(np.float32)
  info = np.array([[120.0, 180.0, 1.5], [128.0, 150.0, 0.8]], np.float32)
  pre, post, thresh = 300, 200, 0.7
  got_s, got_b = proposals.propose(
      {l: tf.constant(v) for l, v in scores.items()},
      {l: tf.constant(v) for l, v in deltas.items()},
      anchors, tf.constant(info), pre_nms_topn=pre, post_nms_topn=post,
      nms_threshold=thresh)
  assert got_s.shape == (batch, post) and got_b.shape == (batch, post, 4)
  got_s, got_b = got_s.numpy(), got_b.numpy()
  for b in range(batch):
    per_level = [numpy_level(scores[l][b], deltas[l][b], anchors[l], info[b],
                             pre, post, thresh) for l in sorted(scores)]
    all_s = np.concatenate([s for s, _ in per_level])
    all_b = np.concatenate([x for _, x in per_level])
    order = np.argsort(-all_s, kind='stable')[:post]
    np.testing.assert_allclose(got_s[b], all_s[order], rtol=1e-5)
    np.testing.assert_allclose(got_b[b], all_b[order], rtol=1e-4, atol=1e-3)
    assert got_b[b].max() <= max(info[b, :2]) - 1  # Clipped.
  assert (got_s > 0).all()
  # NMS took boxes out: without it the best proposals differ.
  _, unsuppressed = proposals.propose(
      {l: tf.constant(v) for l, v in scores.items()},
      {l: tf.constant(v) for l, v in deltas.items()},
      anchors, tf.constant(info), pre_nms_topn=pre, post_nms_topn=post,
      nms_threshold=0.0)
  assert (unsuppressed.numpy() != got_b).any()


def test_greedy_nms_keeps_what_the_padded_nms_keeps():
  """The C++ kernel's pass keeps the tiled NMS's boxes in the same order:
  overlapping clusters, boxes of no positive coordinate (never kept), a
  pair at exactly the threshold (suppressed, as theirs) and equal scores
  (input order)."""
  rng = np.random.default_rng(3)
  centres = rng.uniform(20, 180, (6, 2))
  boxes = []
  for _ in range(60):
    cy, cx = centres[rng.integers(6)] + rng.normal(0, 3, 2)
    h, w = rng.uniform(20, 30, 2)
    boxes.append([cy - h / 2, cx - w / 2, cy + h / 2, cx + w / 2])
  boxes = np.array(boxes, np.float32)
  boxes[[7, 30]] = 0.0  # Zeroed by filter_small.
  boxes[40], boxes[41] = [0, 0, 20, 20], [0, 0, 20, 10]  # IoU 0.5 exactly.
  scores = np.sort(rng.uniform(0, 1, (2, 60)).astype(np.float32))[:, ::-1]
  scores[:, 41] = scores[:, 40]  # A tie.
  scores[:, 12] = scores[:, 11]
  batch_boxes = tf.constant(np.stack([boxes, boxes[::-1].copy()]))
  batch_scores = tf.constant(scores.copy())
  for threshold in (0.5, 0.7):
    want = proposals.padded_nms(batch_scores, batch_boxes, 60, threshold)
    got = proposals.padded_nms(batch_scores, batch_boxes, 60, threshold,
                               fixed_shapes=False)
    kept = (want[0].numpy() > 0).sum(1)
    assert (kept > 5).all() and (kept < 50).all()  # Some suppressed.
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
