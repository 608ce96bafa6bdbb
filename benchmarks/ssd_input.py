"""Benchmark: SSD's training input pipeline vs raw JPEG decoding.

  python -m benchmarks.ssd_input [--images=256] [--rounds=3]

Writes COCO-sized JPEGs (640x480, photo-like noise) with 7 boxes each (COCO
train2017's mean) as a COCO annotation file, converts them with
tools.convert_coco, then measures side by side, interleaved round by round,
on the same records and cores:
  raw:  records in memory -> parse -> decode_jpeg -> batch 32, as parallel
        as tf.data allows (the ceiling for any JPEG pipeline);
  ours: CocoInput.train_dataset for SSD300 (Google's crop, flip, resize to
        300, targets for the 8,732 default boxes, the colour jitter's
        factors, batch 32; the task applies the jitter on the device).
Prints images/s of each and their ratio, then where ours spends an image:
each stage of CocoInput's training example timed alone, an image at a
time (`--profile_images`; milliseconds of one call, a function call's
floor included and printed), and the jitter the device applies, an image of
a batch.
"""

import json
import os
import tempfile

from absl import app
from absl import flags
import numpy as np
from PIL import Image
import tensorflow as tf

from benchmarks import common
from core import entry_point
from input_pipeline import coco
from input_pipeline import records
from input_pipeline import ssd_boxes
from tools import convert_coco

FLAGS = flags.FLAGS
BATCH = 32


def write_coco(root: str, count: int, masks: bool = False) -> str:
  """`count` JPEGs with 7 boxes each and their COCO annotation file (with
  `masks`, each box's inscribed octagon as its polygon)."""
  rng = np.random.default_rng(0)
  os.makedirs(os.path.join(root, 'images'))
  images, anns = [], []
  for i in range(1, count + 1):
    base = rng.integers(0, 255, (60, 80, 3)).astype(np.uint8)
    pixels = np.asarray(Image.fromarray(base).resize((640, 480)), np.float32)
    pixels = np.clip(pixels + rng.normal(0, 8, pixels.shape), 0, 255)
    Image.fromarray(pixels.astype(np.uint8)).save(
        os.path.join(root, 'images', f'{i}.jpg'), quality=90)
    images.append({'id': i, 'file_name': f'{i}.jpg', 'height': 480,
                   'width': 640})
    for _ in range(7):
      w, h = rng.uniform(20, 300, 2)
      x, y = rng.uniform(0, 640 - w), rng.uniform(0, 480 - h)
      ann = {'id': len(anns) + 1, 'image_id': i,
             'category_id': int(rng.integers(1, 81)),
             'bbox': [x, y, w, h], 'area': w * h, 'iscrowd': 0}
      if masks:
        angles = np.arange(8) * np.pi / 4
        ann['segmentation'] = [np.stack(
            [x + w / 2 * (1 + np.cos(angles)),
             y + h / 2 * (1 + np.sin(angles))], 1).reshape(-1).tolist()]
      anns.append(ann)
  path = os.path.join(root, 'instances.json')
  with open(path, 'w') as f:
    json.dump({'images': images, 'annotations': anns,
               'categories': [{'id': c} for c in range(1, 81)]}, f)
  return path


def write_records(root: str, count: int, masks: bool = False) -> str:
  """`write_coco`'s images as COCO records through tools.convert_coco (both
  splits, 4 shards each; with `masks`, the masks as PNGs): their folder."""
  path = write_coco(root, count, masks=masks)
  out = os.path.join(root, 'out')
  for split in ('train', 'val'):
    convert_coco.convert(annotations=path, images=os.path.join(root, 'images'),
                         output_dir=out, split=split, num_shards=4,
                         include_masks=masks)
  return out


def stage_profile(root: str, count: int) -> list:
  """(stage, ms an image) of train_example's stages, each alone."""
  with open(os.path.join(root, 'instances.json')) as f:
    annotations = json.load(f)['annotations']
  boxes = {}
  for a in annotations:
    x, y, w, h = a['bbox']
    boxes.setdefault(a['image_id'], []).append(
        [y / 480, x / 640, (y + h) / 480, (x + w) / 640])
  anchors = tf.constant(ssd_boxes.default_boxes(ssd_boxes.Geometry()))
  examples = []
  for i in range(1, count + 1):
    with open(os.path.join(root, 'images', f'{i}.jpg'), 'rb') as f:
      jpeg = tf.constant(f.read())
    b = tf.constant(np.array(boxes[i], np.float32))
    seed = tf.constant([0, i], tf.int64)
    window, _ = coco.crop_window(b, seed)
    examples.append((jpeg, b, tf.range(1, len(boxes[i]) + 1), seed, window))
  image = tf.random.uniform([300, 300, 3])
  # Each stage takes only the tensors it needs (whose shapes do not vary),
  # so each traces once.
  stages = {
      'a function call (the floor)': (lambda seed: seed + 0, (3,)),
      'decode, the whole JPEG': (
          lambda jpeg: tf.io.decode_jpeg(jpeg, channels=3), (0,)),
      'crop search': (coco.crop_window, (1, 3)),
      'decode the window + resize to 300 (+ flip)': (
          lambda jpeg, window: coco.decode_window(jpeg, window,
                                                  tf.constant(True), 300),
          (0, 4)),
      'colour jitter factors (the device applies them)': (
          lambda seed: coco.jitter_factors(image, seed), (3,)),
      'targets for 8,732 boxes (the uncropped boxes)': (
          lambda b, labels: ssd_boxes.assign_targets(b, labels, anchors),
          (1, 2)),
      'the whole example': (
          lambda jpeg, b, labels, seed: coco.train_example(
              jpeg, b, labels, seed, anchors=anchors, size=300), (0, 1, 2, 3)),
  }
  profile = [(name, common.ms_per_call(
      fn, [[e[k] for k in picks] for e in examples]))
             for name, (fn, picks) in stages.items()]
  # The jitter's other half, on the device (here the same CPU), an image of
  # a batch of 32.
  batch = tf.random.uniform([BATCH, 300, 300, 3])
  jitter = tf.stack([coco.jitter_factors(image, e[3])
                     for e in examples[:BATCH]])
  device = common.ms_per_call(coco.apply_jitter, [(batch, jitter)] * 8) / BATCH
  return profile + [('(device) colour jitter applied, batch 32, an image',
                     device)]


def main(argv):
  del argv
  if FLAGS.images < BATCH:
    raise app.UsageError(f'--images={FLAGS.images}: give at least a batch '
                         f'({BATCH}).')
  root = tempfile.mkdtemp()
  data = coco.CocoInput(data_dir=write_records(root, FLAGS.images),
                        geometry=ssd_boxes.Geometry(),
                        num_train_examples=FLAGS.images)
  ctx = tf.distribute.InputContext()
  ours = data.train_dataset(ctx, global_batch_size=BATCH)
  files = records.list_files(data.train_files)
  raw = tf.data.TFRecordDataset(files).cache().repeat().map(
      lambda r: tf.io.decode_jpeg(tf.io.parse_single_example(
          r, coco.FEATURES)['image/encoded'], channels=3)[:300, :300],
      num_parallel_calls=tf.data.AUTOTUNE).batch(BATCH).prefetch(
          tf.data.AUTOTUNE)
  med = common.interleaved_images_per_second(
      {'raw decode': raw, 'ours': ours}, FLAGS.rounds, FLAGS.images // BATCH,
      BATCH)
  print(f'--- SSD300 training input, {FLAGS.images} images 640x480, '
        f'{FLAGS.rounds} interleaved rounds (medians)')
  for k, v in med.items():
    print(f'  {k:10s} {v:7.1f} images/s')
  print(f'  ours / raw decode: {med["ours"] / med["raw decode"]:.2f}')
  print(f'--- where an image goes, each stage alone ({FLAGS.profile_images} '
        'images, ms of one call)')
  for name, ms in stage_profile(root, min(FLAGS.profile_images,
                                          FLAGS.images)):
    print(f'  {name:52s} {ms:6.2f}')
  print(common.page_rows([(
      'input pipeline, one host', f'{med["ours"]:,.0f} images/s',
      f'raw `decode_jpeg` {med["raw decode"]:,.0f} images/s',
      f'{med["ours"] / med["raw decode"]:.2f}')]))


if __name__ == '__main__':
  flags.DEFINE_integer('images', 256, 'Images written and read.')
  flags.DEFINE_integer('rounds', 3, 'Interleaved rounds.')
  flags.DEFINE_integer('profile_images', 64, 'Images of the stage profile.')
  entry_point.parse_flags_early(lambda: None)  # Flag errors: exit 2.
  app.run(entry_point.tool_main(main))
