"""Mask R-CNN's masks pasted into their images for the COCO evaluation, on
the host, as Google's MLPerf v0.7 evaluation does (eval_multiprocess.py
calls tensorflow/tpu's `segm_utils.segm_results`, after Detectron's
core/test.py):

a detection's box [x, y, w, h] (original pixels) is widened about its
centre by (M + 2) / M and truncated to integers; its M x M mask
(probabilities) gets a zero border of one pixel, is resized to the widened
box's (x2 - x1 + 1) x (y2 - y1 + 1) pixels by OpenCV's bilinear resize (the
same library, so the same pixels), thresholded at 0.5 and pasted into an
image-sized array, clipped at its borders. The result is COCO's compressed
RLE (pycocotools), what `COCOeval(iouType='segm')` reads.

Imports no TensorFlow: the evaluation's pool processes import this module
alone.
"""

import numpy as np


def paste(masks: np.ndarray, boxes: np.ndarray, height: int,
          width: int) -> np.ndarray:
  """[n, height, width] uint8 0/1 masks from [n, M, M] probabilities and
  [n, 4] boxes [x, y, w, h]."""
  import cv2  # pylint: disable=import-outside-toplevel
  size = masks.shape[-1]
  scale = (size + 2.0) / size
  boxes = np.asarray(boxes, np.float64)
  half_w, half_h = boxes[:, 2] * 0.5 * scale, boxes[:, 3] * 0.5 * scale
  centre_x, centre_y = boxes[:, 0] + boxes[:, 2] * 0.5, \
      boxes[:, 1] + boxes[:, 3] * 0.5
  ref = np.stack([centre_x - half_w, centre_y - half_h, centre_x + half_w,
                  centre_y + half_h], axis=1).astype(np.int32)
  padded = np.zeros((size + 2, size + 2), np.float32)
  out = np.zeros((len(masks), height, width), np.uint8)
  for i, mask in enumerate(masks):
    padded[1:-1, 1:-1] = mask
    x0, y0, x1, y1 = (int(v) for v in ref[i])
    w, h = max(x1 - x0 + 1, 1), max(y1 - y0 + 1, 1)
    resized = (cv2.resize(padded, (w, h)) > 0.5).astype(np.uint8)
    left, right = max(x0, 0), min(x1 + 1, width)
    top, bottom = max(y0, 0), min(y1 + 1, height)
    if left < right and top < bottom:
      out[i, top:bottom, left:right] = resized[top - y0:bottom - y0,
                                               left - x0:right - x0]
  return out


def to_rle(masks: np.ndarray) -> list:
  """COCO compressed RLEs (counts as str, JSON-ready) of [n, h, w] 0/1
  masks."""
  from pycocotools import mask as mask_utils  # pylint: disable=import-outside-toplevel
  rles = mask_utils.encode(np.asfortranarray(masks.transpose(1, 2, 0)))
  return [dict(r, counts=r['counts'].decode()) for r in rles]
