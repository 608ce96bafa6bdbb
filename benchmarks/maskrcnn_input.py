"""Benchmark: Mask R-CNN's training input pipeline vs raw JPEG decoding.

  python -m benchmarks.maskrcnn_input [--images=64] [--rounds=3]

Writes COCO-sized JPEGs (640x480) with 7 objects each (COCO train2017's
mean), each with a polygon mask, converts them with tools.convert_coco
(masks as PNGs, as Google's records), then measures side by side,
interleaved round by round, on the same records and cores:
  raw:  records in memory -> parse -> decode_jpeg -> batch 2 (the ceiling
        for any JPEG pipeline);
  ours: MaskRcnnInput.train_dataset at Google's sizes (the masks decoded,
        flip, TF1 resize to 800 on the short side padded to 832x1344, the
        masks cropped to 112x112, RPN targets for its 267,012 anchors, batch
        2 of one orientation).
Prints images/s of each and their ratio, then where ours spends an image:
each stage of the training example timed alone, an image at a time.
"""

import tempfile

from absl import app
from absl import flags
import tensorflow as tf

from benchmarks import common
from benchmarks import ssd_input
from core import entry_point
from input_pipeline import coco
from input_pipeline import fpn_anchors
from input_pipeline import maskrcnn
from input_pipeline import records

FLAGS = flags.FLAGS
BATCH = 2


def stage_profile(files: list, count: int) -> list:
  """(stage, ms an image) of the training example's stages, each alone."""
  data = maskrcnn.MaskRcnnInput()
  geometry = data.geometry
  known = tf.constant(list(range(1, coco.COCO_CATEGORIES + 1)), tf.int64)
  raws = list(tf.data.TFRecordDataset(files).take(count))
  anchors = tf.constant(geometry.anchors_for(True))
  parsed = [data._parse(r, known) for r in raws]  # pylint: disable=protected-access
  images = [tf.io.decode_jpeg(p[0], channels=3) for p in parsed]
  masks = [maskrcnn.decode_masks(p[4], 480, 640) for p in parsed]
  seed = tf.constant([0, 1], tf.int64)
  stages = {
      'a function call (the floor)': (lambda s: s + 0, lambda i: (seed,)),
      'decode the JPEG': (lambda j: tf.io.decode_jpeg(j, channels=3),
                          lambda i: (parsed[i][0],)),
      'decode the 7 mask PNGs': (lambda m: maskrcnn.decode_masks(m, 480, 640),
                                 lambda i: (parsed[i][4],)),
      'normalise, resize to 800x1067, pad to 832x1344': (
          lambda image: maskrcnn.resize_and_pad(
              maskrcnn.normalize(image), 800, 1067, True, geometry),
          lambda i: (images[i],)),
      'crop the masks to 112x112': (
          lambda m, b: maskrcnn.crop_masks(m, b, geometry.gt_mask_size),
          lambda i: (masks[i], parsed[i][1])),
      'RPN targets for the anchors': (
          lambda b: fpn_anchors.rpn_targets(b * [800., 1067., 800., 1067.],
                                            anchors, seed),
          lambda i: (parsed[i][1],)),
      'the whole example (after decoding)': (
          lambda image, b, c, m: maskrcnn.train_example(
              image, b, c, m, seed, geometry=geometry,
              anchors=(anchors, tf.constant(geometry.anchors_for(False)))),
          lambda i: (images[i], parsed[i][1], parsed[i][2], masks[i])),
  }
  return [(name, common.ms_per_call(fn, [args(i) for i in range(count)]))
          for name, (fn, args) in stages.items()]


def main(argv):
  del argv
  if FLAGS.images < 4 * BATCH:
    raise app.UsageError(f'--images={FLAGS.images}: give at least '
                         f'{4 * BATCH}.')
  root = tempfile.mkdtemp()
  data = maskrcnn.MaskRcnnInput(data_dir=ssd_input.write_records(
                                    root, FLAGS.images, masks=True),
                                num_train_examples=FLAGS.images)
  ours = data.train_dataset(tf.distribute.InputContext(),
                            global_batch_size=BATCH)
  files = records.list_files(data.train_files)
  raw = tf.data.TFRecordDataset(files).cache().repeat().map(
      lambda r: tf.shape(tf.io.decode_jpeg(tf.io.parse_single_example(
          r, coco.FEATURES)['image/encoded'], channels=3)),
      num_parallel_calls=tf.data.AUTOTUNE).batch(BATCH).prefetch(
          tf.data.AUTOTUNE)
  med = common.interleaved_images_per_second(
      {'raw decode': raw, 'ours': ours}, FLAGS.rounds, FLAGS.images // BATCH,
      BATCH)
  print(f'--- Mask R-CNN training input, {FLAGS.images} images 640x480, 7 '
        f'masks each, {FLAGS.rounds} interleaved rounds (medians)')
  for k, v in med.items():
    print(f'  {k:10s} {v:7.1f} images/s')
  ratio = med['ours'] / med['raw decode']
  print(f'  ours / raw decode: {ratio:.2f}')
  count = min(FLAGS.profile_images, FLAGS.images)
  print(f'--- where an image goes, each stage alone ({count} images, ms of '
        'one call)')
  for name, ms in stage_profile(records.list_files(data.train_files), count):
    print(f'  {name:50s} {ms:7.2f}')
  print(common.page_rows([(
      'Mask R-CNN input pipeline, one host, Google\'s sizes',
      f'{med["ours"]:,.1f} images/s',
      f'raw `decode_jpeg` {med["raw decode"]:,.0f} images/s',
      f'{ratio:.3f}')]))


if __name__ == '__main__':
  flags.DEFINE_integer('images', 64, 'Images written and read.')
  flags.DEFINE_integer('rounds', 3, 'Interleaved rounds.')
  flags.DEFINE_integer('profile_images', 16, 'Images of the stage profile.')
  entry_point.parse_flags_early(lambda: None)  # Flag errors: exit 2.
  app.run(entry_point.tool_main(main))
