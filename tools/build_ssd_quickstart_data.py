"""Builds the SSD quickstart set: handwritten digits placed on canvases,
written as COCO (JSON + JPEGs) and converted by tools/convert_coco.py.

  python -m tools.build_ssd_quickstart_data --output_dir=data/ssd_quickstart

scikit-learn ships the 1,797 UCI handwritten digits (8x8, 17 grey levels),
so nothing is downloaded. Each canvas (160x160, a random background colour
with pixel noise) holds 2 to 5 digits, each scaled to 20-56 pixels, drawn
in a random contrasting colour, never overlapping another; a digit's box is
exactly the extent of its ink, its segmentation the ink itself (pixels
where the ink covers more than a quarter; `--include_masks` writes them into
the records, for Mask R-CNN), and its category is the digit (COCO ids 1-10
for 0-9). Training canvases use the digits of four in five of the digit
images, eval canvases the rest (held out: every fifth digit image, each on
at most one eval canvas). Output: `<output_dir>/coco/{train,val}/` (the
images), `<output_dir>/coco/instances_{train,val}.json`, then the records
`<output_dir>/{train,val}-*`, `val_annotations.json` and `categories.json`;
the first 100 training canvases again under `<output_dir>/calibration/`
(`--calibration_canvases`) for INT8 calibration.

Why digits and not the tree crowns of the `deepforest` wheel: every box here
is exact and there are ten classes, so per-class NMS and the mean over
categories are exercised, and a small SSD learns them in minutes on a CPU;
tree crowns are one class of small, touching objects whose hand-drawn boxes
a small model needs far longer to match.
"""

import json
import os

from absl import app
from absl import flags
import numpy as np
from PIL import Image

from core import entry_point

CANVAS = 160
TRAIN_CANVASES = 1200
DIGIT_SIZES = (20, 56)
DIGITS_PER_CANVAS = (2, 5)
INK = 0.25  # A pixel is the digit's where its ink covers more than this.
TRAIN_SHARDS = 4
EVAL_SHARDS = 2


def _place(rng, sizes, placed):
  """A top-left corner for a size x size digit overlapping none placed."""
  for _ in range(200):
    size = sizes
    y, x = rng.integers(0, CANVAS - size + 1, size=2)
    if all(y + size <= py or py + ps <= y or x + size <= px or px + ps <= x
           for py, px, ps in placed):
      return int(y), int(x)
  return None


def compressed_rle(mask: np.ndarray) -> dict:
  """COCO's compressed RLE of a [h, w] 0/1 mask, as JSON holds it."""
  from pycocotools import mask as mask_utils  # pylint: disable=import-outside-toplevel
  rle = mask_utils.encode(np.asfortranarray(mask))
  return {'size': [int(v) for v in rle['size']],
          'counts': rle['counts'].decode()}


def draw_canvas(rng, digits, labels, image_id: int):
  """(RGB uint8 canvas, COCO annotations of its digits: a digit's box is
  its ink's extent, its segmentation the ink itself (compressed RLE) and its
  area the ink's pixels, as COCO's areas are the masks')."""
  background = rng.integers(0, 256, size=3)
  canvas = np.clip(background + rng.normal(0, 12, (CANVAS, CANVAS, 3)),
                   0, 255)
  placed, annotations = [], []
  for digit, label in zip(digits, labels):
    size = int(rng.integers(DIGIT_SIZES[0], DIGIT_SIZES[1] + 1))
    corner = _place(rng, size, placed)
    if corner is None:
      continue
    y, x = corner
    ink = np.asarray(Image.fromarray((digit * 255 / 16).astype(np.uint8))
                     .resize((size, size), Image.BILINEAR), np.float32) / 255
    colour = 255 - background + rng.integers(-40, 41, size=3)
    region = canvas[y:y + size, x:x + size]
    canvas[y:y + size, x:x + size] = (region * (1 - ink[..., None]) +
                                      np.clip(colour, 0, 255) * ink[..., None])
    inside = ink > INK
    rows, cols = np.nonzero(inside)
    if not len(rows):
      continue
    placed.append((y, x, size))
    x0, y0 = x + cols.min(), y + rows.min()
    w, h = cols.max() - cols.min() + 1, rows.max() - rows.min() + 1
    mask = np.zeros((CANVAS, CANVAS), np.uint8)
    mask[y:y + size, x:x + size] = inside
    annotations.append({'image_id': image_id, 'category_id': int(label) + 1,
                        'bbox': [float(x0), float(y0), float(w), float(h)],
                        'area': float(inside.sum()), 'iscrowd': 0,
                        'segmentation': compressed_rle(mask)})
  return canvas.astype(np.uint8), annotations


def write_coco(output_dir: str, split: str, canvases) -> str:
  """Writes the split's JPEGs and instances JSON; returns the JSON path."""
  folder = os.path.join(output_dir, 'coco', split)
  os.makedirs(folder, exist_ok=True)
  images, annotations = [], []
  for image_id, (canvas, anns) in enumerate(canvases, start=1):
    name = f'{image_id:06d}.jpg'
    Image.fromarray(canvas).save(os.path.join(folder, name), quality=92)
    images.append({'id': image_id, 'file_name': name, 'height': CANVAS,
                   'width': CANVAS})
    for ann in anns:
      annotations.append({**ann, 'id': len(annotations) + 1})
  path = os.path.join(output_dir, 'coco', f'instances_{split}.json')
  categories = [{'id': d + 1, 'name': str(d), 'supercategory': 'digit'}
                for d in range(10)]
  with open(path, 'w') as f:
    json.dump({'images': images, 'annotations': annotations,
               'categories': categories}, f)
  return path


def canvases(seed: int, train_canvases: int = TRAIN_CANVASES,
             eval_digits: int | None = None):
  """(train canvases, eval canvases) of drawn digits; `eval_digits` caps
  the held-out digits drawn (None: all 360)."""
  from sklearn.datasets import load_digits  # Heavy import, only needed here.
  digits = load_digits()
  held_out = np.arange(len(digits.target)) % 5 == 0
  rng = np.random.default_rng(seed)
  train_pool = np.nonzero(~held_out)[0]
  train = []
  for image_id in range(1, train_canvases + 1):
    n = int(rng.integers(DIGITS_PER_CANVAS[0], DIGITS_PER_CANVAS[1] + 1))
    pick = rng.choice(train_pool, n, replace=False)
    train.append(draw_canvas(rng, digits.images[pick], digits.target[pick],
                             image_id))
  evaluation, order = [], rng.permutation(np.nonzero(held_out)[0])
  order = order[:eval_digits]
  start = 0
  while start < len(order):
    n = int(rng.integers(DIGITS_PER_CANVAS[0], DIGITS_PER_CANVAS[1] + 1))
    pick = order[start:start + n]
    start += n
    evaluation.append(draw_canvas(rng, digits.images[pick],
                                  digits.target[pick], len(evaluation) + 1))
  return train, evaluation


def build(output_dir: str, seed: int = 0,
          train_canvases: int = TRAIN_CANVASES,
          eval_digits: int | None = None, include_masks: bool = False,
          calibration_canvases: int = 0) -> dict:
  """COCO files, then records (with each digit's mask if `include_masks`,
  for Mask R-CNN), under `output_dir`; returns the counts.

  `calibration_canvases`: the first that many training canvases also go to
  `<output_dir>/calibration/` in the eval split's layout (val-*, its
  annotations and categories): held-out samples to calibrate INT8 on
  (tools/quantize_tflite.py), never the eval canvases.
  """
  from tools import convert_coco  # pylint: disable=import-outside-toplevel
  train, evaluation = canvases(seed, train_canvases, eval_digits)
  done = {}
  for name, folder, split, items, shards in (
      ('train', output_dir, 'train', train, TRAIN_SHARDS),
      ('val', output_dir, 'val', evaluation, EVAL_SHARDS),
      ('calibration', os.path.join(output_dir, 'calibration'), 'val',
       train[:calibration_canvases], 1)):
    if not items:
      continue
    path = write_coco(folder, split, items)
    done[name] = convert_coco.convert(
        annotations=path, images=os.path.join(folder, 'coco', split),
        output_dir=folder, split=split, num_shards=shards,
        include_masks=include_masks)
  return done


def main(argv):
  del argv
  done = build(FLAGS.output_dir, FLAGS.seed,
               include_masks=FLAGS.include_masks,
               calibration_canvases=FLAGS.calibration_canvases)
  for split, result in done.items():
    print(f'{split}: {result.images} images, {result.boxes} boxes')


if __name__ == '__main__':
  flags.DEFINE_string('output_dir', 'data/ssd_quickstart', 'Output folder.')
  flags.DEFINE_integer('seed', 0, 'Seed of the canvases.')
  flags.DEFINE_bool('include_masks', False,
                    'Also write each digit\'s ink as its mask (Mask R-CNN).')
  flags.DEFINE_integer('calibration_canvases', 100,
                       'Training canvases also written to '
                       '<output_dir>/calibration (INT8 calibration).')
  FLAGS = flags.FLAGS
  entry_point.parse_flags_early(lambda: None)
  app.run(entry_point.tool_main(main))
