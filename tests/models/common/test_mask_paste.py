"""Mask pasting for the COCO segm evaluation against a NumPy version of
tensorflow/tpu's segm_results (Google's v0.7 evaluation), with bilinear
resizing written out as OpenCV's INTER_LINEAR defines it."""

import numpy as np
from pycocotools import mask as mask_utils

from models.common import mask_paste


def numpy_resize(image, width, height):
  """cv2.resize INTER_LINEAR: half-pixel centres, edges replicated."""
  src_h, src_w = image.shape

  def taps(dst, src):
    x = (np.arange(dst) + 0.5) * (src / dst) - 0.5
    x0 = np.floor(x).astype(int)
    frac = x - x0
    return (np.clip(x0, 0, src - 1), np.clip(x0 + 1, 0, src - 1), frac)

  y0, y1, fy = taps(height, src_h)
  x0, x1, fx = taps(width, src_w)
  top = image[y0][:, x0] * (1 - fx) + image[y0][:, x1] * fx
  bottom = image[y1][:, x0] * (1 - fx) + image[y1][:, x1] * fx
  return top * (1 - fy[:, None]) + bottom * fy[:, None]


def numpy_segm_results(masks, boxes, height, width):
  """segm_results, step by step."""
  size = masks.shape[2]
  scale = (size + 2.0) / size
  w_half, h_half = boxes[:, 2] * .5, boxes[:, 3] * .5
  x_c, y_c = boxes[:, 0] + w_half, boxes[:, 1] + h_half
  w_half, h_half = w_half * scale, h_half * scale
  ref = np.stack([x_c - w_half, y_c - h_half, x_c + w_half, y_c + h_half],
                 1).astype(np.int32)
  padded = np.zeros((size + 2, size + 2), np.float32)
  out = []
  for i, mask in enumerate(masks):
    padded[1:-1, 1:-1] = mask
    w = max(ref[i, 2] - ref[i, 0] + 1, 1)
    h = max(ref[i, 3] - ref[i, 1] + 1, 1)
    m = (numpy_resize(padded, w, h) > 0.5).astype(np.uint8)
    im = np.zeros((height, width), np.uint8)
    x0, x1 = max(ref[i, 0], 0), min(ref[i, 2] + 1, width)
    y0, y1 = max(ref[i, 1], 0), min(ref[i, 3] + 1, height)
    im[y0:y1, x0:x1] = m[y0 - ref[i, 1]:y1 - ref[i, 1],
                         x0 - ref[i, 0]:x1 - ref[i, 0]]
    out.append(im)
  return np.array(out)


def test_pasted_masks_are_their_sequence():
  rng = np.random.default_rng(0)
  n, height, width = 12, 90, 130
  # Smooth blobs (what a mask head gives), some boxes past the borders.
  yy, xx = np.mgrid[0:28, 0:28] / 27.0
  centres = rng.uniform(0.2, 0.8, (n, 2))
  masks = np.exp(-((yy - centres[:, :1, None]) ** 2 +
                   (xx - centres[:, 1:, None]) ** 2) / 0.08)
  # Detection boxes lie in the image; widened, those at its edges reach
  # past it.
  corner = rng.uniform(0, 1, (n, 2)) * [width - 10, height - 10]
  extent = rng.uniform(3, 70, (n, 2))
  extent = np.minimum(extent, [width, height] - corner)
  boxes = np.concatenate([corner, extent], 1)
  boxes[0], boxes[1] = [0, 0, 40, 30], [100, 60, 30, 30]
  masks[:2] = 1.0  # Whole boxes at the edges.
  got = mask_paste.paste(masks.astype(np.float32), boxes, height, width)
  want = numpy_segm_results(masks.astype(np.float32), boxes, height, width)
  assert got.shape == (n, height, width) and want.sum() > 1000
  # OpenCV's float bilinear may round a pixel at exactly 0.5 the other way.
  assert (got != want).sum() <= 0.002 * want.sum()
  # Clipped at the borders: the edge boxes' masks reach the edges.
  assert got[0, 0].any() or got[0, :, 0].any()
  assert got[1, -1].any() or got[1, :, -1].any()


def test_rle_round_trip():
  rng = np.random.default_rng(1)
  masks = (rng.uniform(size=(3, 40, 50)) > 0.6).astype(np.uint8)
  rles = mask_paste.to_rle(masks)
  assert all(isinstance(r['counts'], str) for r in rles)
  back = np.stack([mask_utils.decode(dict(r, counts=r['counts'].encode()))
                   for r in rles])
  np.testing.assert_array_equal(back, masks)
