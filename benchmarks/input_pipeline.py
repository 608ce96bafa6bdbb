"""Benchmark: the ResNet train input pipeline vs raw decode_and_crop_jpeg.

  python -m benchmarks.input_pipeline [--images=512] [--rounds=3]

Writes ImageNet-sized JPEGs (500x375, ~ImageNet's mean size and bytes) into
class folders, converts them with tools/convert_image_folder.py, then measures
side by side, interleaved round by round, on the same files and cores:
  raw:  records in memory -> parse -> crop window -> decode_and_crop_jpeg ->
        batch 64, as parallel as tf.data allows (the ceiling for any JPEG
        pipeline);
  raw + resize: the same, each crop then resized to 224 (TF's bilinear
        resize, as ours): the ceiling of any pipeline that resizes;
  ours: ImageNetInput.train_dataset (interleave, cache, shuffle, fused
        decode+crop, flip, resize to 224, batch 64, prefetch; normalisation
        runs on the device), with the raw-record cache (the default) and
        with the decoded-image cache (decode once, crop from memory).
Prints images/s of each and their ratio to the raw decode rate.
"""

import os
import statistics
import tempfile

from absl import app
from absl import flags
import numpy as np
from PIL import Image
import tensorflow as tf

from benchmarks import common
from core import entry_point
from input_pipeline import image_preprocessing
from input_pipeline import imagenet
from tools import convert_image_folder

FLAGS = flags.FLAGS
BATCH = 64


def write_jpegs(root: str, count: int, classes: int = 8) -> None:
  """Photo-like JPEGs: smooth colour fields plus sensor-like noise."""
  rng = np.random.default_rng(0)
  for i in range(count):
    folder = os.path.join(root, f'class_{i % classes}')
    os.makedirs(folder, exist_ok=True)
    low = rng.integers(0, 255, (12, 16, 3), np.uint8)
    image = np.asarray(Image.fromarray(low).resize((500, 375), Image.BICUBIC),
                       np.float32)
    image += rng.normal(0, 12, image.shape)
    Image.fromarray(np.clip(image, 0, 255).astype(np.uint8)).save(
        os.path.join(folder, f'{i}.jpg'), quality=90)


def raw_decode_rate_dataset(files, resize: bool = False):
  def decode(raw, index):
    parsed = tf.io.parse_single_example(raw, imagenet.FEATURES)
    image = parsed[imagenet.IMAGE_KEY]
    seed = tf.stack([tf.constant(0, tf.int64), index])
    window = image_preprocessing._distorted_box(  # pylint: disable=protected-access
        tf.image.extract_jpeg_shape(image), seed, min_object_covered=0.1,
        area_range=(0.08, 1.0), aspect_ratio_range=(0.75, 1.33),
        max_attempts=10)
    crop = tf.image.decode_and_crop_jpeg(image, window, channels=3)
    if resize:  # A pixel of it: its shape alone is known without running it.
      return image_preprocessing._resize(  # pylint: disable=protected-access
          crop, 224, 'bilinear')[0, 0]
    return tf.shape(crop)

  ds = tf.data.TFRecordDataset(files).cache().repeat().enumerate()
  ds = ds.map(lambda i, r: decode(r, i), num_parallel_calls=tf.data.AUTOTUNE,
              deterministic=False)
  return ds.batch(BATCH).prefetch(tf.data.AUTOTUNE)


def rate(dataset, batches: int) -> float:
  return common.images_per_second(dataset, batches, BATCH)


def main(argv):
  del argv
  with tempfile.TemporaryDirectory() as tmp:
    write_jpegs(os.path.join(tmp, 'images'), FLAGS.images)
    files = convert_image_folder.convert(
        input_dir=os.path.join(tmp, 'images'),
        output_prefix=os.path.join(tmp, 'train'), num_shards=8).paths
    size = sum(os.path.getsize(f) for f in files) / FLAGS.images
    def ours(cache):
      return imagenet.ImageNetInput(
          data_dir=tmp, image_size=224, cache=cache, shuffle_buffer=1024,
          interleave_cycle=8).train_dataset(tf.distribute.InputContext(),
                                            global_batch_size=BATCH)

    contenders = {
        'raw decode_and_crop_jpeg': raw_decode_rate_dataset(files),
        'raw + resize to 224': raw_decode_rate_dataset(files, resize=True),
        'ours, cache=raw': ours('raw'),
        'ours, cache=decoded': ours('decoded'),
    }
    batches = 2 * FLAGS.images // BATCH  # Two passes over the files.
    for dataset in contenders.values():
      rate(dataset, batches)  # Fill the caches and warm up.
    rates = {k: [] for k in contenders}
    for _ in range(FLAGS.rounds):
      for name, dataset in contenders.items():
        rates[name].append(rate(dataset, batches))
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f'{FLAGS.images} JPEGs of 500x375, {size / 1024:.0f} KiB a record, '
          f'{os.cpu_count()} cores, {FLAGS.rounds} interleaved rounds '
          '(medians)')
    raw = med['raw decode_and_crop_jpeg']
    for k, v in med.items():
      print(f'  {k:26s} {v:8.1f} images/s  ({v / raw:.3f} of raw decode)')
    names = {
        'ours, cache=raw': 'input pipeline, raw-record cache (the default)',
        'ours, cache=decoded': 'input pipeline, decoded cache (the pod '
                               'configs)'}
    rows = [(names[k], f'{v:,.0f} images/s',
             f'raw `decode_and_crop_jpeg` {raw:,.0f} images/s',
             f'**{v / raw:.2f}** (>= 0.90'
             f'{"" if v / raw >= 0.90 else ": missed"})')
            for k, v in med.items() if k in names]
    resized = med['raw + resize to 224']
    rows.insert(1, ('input pipeline, raw-record cache, against the decode '
                    'and the resize alone', f'{med["ours, cache=raw"]:,.0f} '
                    'images/s', f'raw `decode_and_crop_jpeg` + resize to 224 '
                    f'{resized:,.0f} images/s',
                    f'{med["ours, cache=raw"] / resized:.2f}'))
    print(common.page_rows(rows))


if __name__ == '__main__':
  flags.DEFINE_integer('images', 512, 'JPEGs to write.')
  flags.DEFINE_integer('rounds', 3, 'Interleaved rounds.')
  entry_point.parse_flags_early(lambda: None)  # Flag errors: exit 2.
  app.run(entry_point.tool_main(main))
