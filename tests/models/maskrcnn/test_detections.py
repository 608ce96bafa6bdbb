"""Mask R-CNN's eval detections against a NumPy version of Google's v0.7
generate_detections_per_image_op with a plain greedy NMS."""

import numpy as np
import tensorflow as tf

from models.maskrcnn import detections as maskrcnn_detections
from tests.models.maskrcnn.test_proposals import iou


def numpy_detections(probs, box_out, rois, info, image_id, num=100, pre=1000,
                     thresh=0.5, weights=(10., 10., 5., 5.)):
  """Their sequence for one image (rows with a score)."""
  n, c = probs.shape
  fg_scores = probs[:, 1:].reshape(-1)
  top = np.argsort(-fg_scores, kind='stable')[:pre]
  scores, classes, rows = fg_scores[top], top % (c - 1), top // (c - 1)
  deltas = box_out.reshape(n, c, 4)[:, 1:][rows, classes] / np.array(weights)
  r = rois[rows]
  h, w = r[:, 2] - r[:, 0] + 1, r[:, 3] - r[:, 1] + 1
  cy, cx = r[:, 0] + 0.5 * h, r[:, 1] + 0.5 * w
  dh = np.minimum(deltas[:, 2], np.log(1000 / 16))
  dw = np.minimum(deltas[:, 3], np.log(1000 / 16))
  pcy, pcx = deltas[:, 0] * h + cy, deltas[:, 1] * w + cx
  ph, pw = np.exp(dh) * h, np.exp(dw) * w
  boxes = np.stack([pcy - ph / 2, pcx - pw / 2, pcy + ph / 2 - 1,
                    pcx + pw / 2 - 1], 1)
  hi = np.array([info[0], info[1], info[0], info[1]]) - 1
  boxes = np.clip(boxes, 0, hi)
  out = []
  for k in range(c - 1):
    mask = (classes == k) & (scores > 0.05)
    idx = np.flatnonzero(mask)  # Already in score order.
    kept = []
    for i in idx:
      if kept and (iou(boxes[i], boxes[kept]) >= thresh).any():
        continue
      kept.append(i)
    out += [(scores[i], k, i) for i in kept[:num]]
  out.sort(key=lambda t: -t[0])
  out = out[:num]
  return np.array([[image_id, *boxes[i], s, k + 1] for s, k, i in out])


def test_detections_are_their_sequence():
  rng = np.random.default_rng(0)
  batch, n, c = 2, 60, 6
  logits = rng.normal(0, 2, (batch, n, c))
  probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
  corner = rng.uniform(0, 150, (batch, n, 2))
  rois = np.concatenate([corner, corner + rng.uniform(8, 60, (batch, n, 2))],
                        -1)
  rois[:, n // 2:] = rois[:, :n // 2] + rng.normal(0, 2, (batch, n // 2, 4))
  box_out = rng.normal(0, 0.5, (batch, n, 4 * c))
  info = np.array([[160.0, 180.0], [200.0, 150.0]])
  got = maskrcnn_detections.generate_detections(
      tf.constant(probs, tf.float32), tf.constant(box_out, tf.float32),
      tf.constant(rois, tf.float32), tf.constant(info), tf.constant([7, 9]),
      num_detections=40, pre_nms=200, nms_threshold=0.5).numpy()
  assert got.shape == (batch, 40, 7)
  for b in range(batch):
    want = numpy_detections(probs[b], box_out[b], rois[b], info[b], (7, 9)[b],
                            num=40, pre=200)
    found = got[b][got[b][:, 5] > 0]
    assert 0 < len(found) == len(want) <= 40
    np.testing.assert_allclose(found, want, rtol=1e-4, atol=1e-3)
    assert not got[b][len(found):, 1:6].any()  # Padding rows.
    # The NMS took boxes out (without it the list differs).
    unsuppressed = numpy_detections(probs[b], box_out[b], rois[b], info[b],
                                    0, num=40, pre=200, thresh=1.01)
    assert (len(unsuppressed) != len(want) or
            (unsuppressed[:, 1:] != want[:, 1:]).any())
