"""COCO instance segmentations as the PNG masks Google's TPU converter
writes (tensorflow/tpu create_coco_tf_record.py with --include_masks, read
by their Mask R-CNN's tf_example_decoder: `image/object/mask`, one PNG an
instance, pixel 1 inside and 0 outside).

A segmentation comes in COCO's three forms: polygons (a list of
[x0, y0, x1, y1, ...] lists, their union the instance), uncompressed RLE
(`{'size': [h, w], 'counts': [runs]}`, what crowd regions use) and compressed
RLE (`counts` a string). `check` reads the form and sizes without decoding
(run on every annotation before anything is written); `png` rasterizes with
pycocotools, as COCO's own `annToMask` does, so the masks are the ones the
COCO evaluation compares with.
"""

import io
import numbers

import numpy as np


def check(segmentation, height: int, width: int) -> str | None:
  """What is wrong with a segmentation for an image of height x width, or
  None."""
  if isinstance(segmentation, list):
    if not segmentation:
      return 'segmentation is an empty polygon list'
    for polygon in segmentation:
      if (not isinstance(polygon, list) or not all(
          isinstance(v, numbers.Real) and not isinstance(v, bool)
          for v in polygon)):
        return 'segmentation polygon is not a list of numbers'
      if len(polygon) < 6 or len(polygon) % 2:
        return (f'segmentation polygon has {len(polygon)} coordinates (a '
                'polygon needs x, y pairs, at least 3)')
    return None
  if isinstance(segmentation, dict):
    size, counts = segmentation.get('size'), segmentation.get('counts')
    if size is None or counts is None:
      return 'segmentation RLE lacks size or counts'
    if list(size) != [height, width]:
      return (f'segmentation RLE size {list(size)} is not its image\'s '
              f'[{height}, {width}]')
    if isinstance(counts, list):
      if not all(isinstance(c, int) and c >= 0 for c in counts):
        return 'segmentation RLE counts are not non-negative integers'
      if sum(counts) != height * width:
        return (f'segmentation RLE counts cover {sum(counts)} pixels, not '
                f'{height} x {width}')
    elif not isinstance(counts, str):
      return 'segmentation RLE counts are neither a list nor a string'
    return None
  return (f'segmentation is a {type(segmentation).__name__}, not polygons '
          'or RLE')


def decode(segmentation, height: int, width: int) -> np.ndarray:
  """[height, width] uint8, 1 inside the instance (COCO's annToMask)."""
  from pycocotools import mask as mask_utils  # pylint: disable=import-outside-toplevel
  if isinstance(segmentation, list):  # Polygons: their union.
    rle = mask_utils.merge(mask_utils.frPyObjects(segmentation, height,
                                                  width))
  elif isinstance(segmentation['counts'], list):  # Uncompressed RLE.
    rle = mask_utils.frPyObjects(segmentation, height, width)
  else:
    rle = dict(segmentation, counts=segmentation['counts'].encode())
  return mask_utils.decode(rle)


def png(mask: np.ndarray) -> bytes:
  """A [h, w] 0/1 mask as a one-channel PNG."""
  from PIL import Image  # pylint: disable=import-outside-toplevel
  out = io.BytesIO()
  Image.fromarray(mask.astype(np.uint8)).save(out, format='PNG')
  return out.getvalue()
