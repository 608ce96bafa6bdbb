"""Builds the quickstart image set: scikit-learn's handwritten digits as TFRecords.

  python -m tools.build_quickstart_data --output_dir=data/quickstart

scikit-learn ships the 1,797 UCI handwritten digits (8x8, 17 grey levels) with
the package, so nothing is downloaded. Each digit is upscaled to 32x32 and
written as an image file in a class folder (a mix of grayscale PNG, grayscale
JPEG and RGB JPEG, as messy as a real image folder), then converted by
tools/convert_image_folder.py into ImageNet-schema TFRecords:
`<output_dir>/train-*` (1,437 images, 4 files) and
`<output_dir>/validation-*` (360 images: every fifth digit, 3 files).

`<output_dir>/calibration/validation-00000-of-00001` holds 205 of the
training images (every seventh digit that is not a validation one) in the
eval files' format: the calibration set of post-training quantization
(tools/quantize_tflite.py), as MLPerf's calibration lists are training
images.
"""

import os

from absl import app
from absl import flags
import numpy as np
from PIL import Image

from core import entry_point


# The command line, parsed before the imports below: --help and flag errors
# answer at once, not after TensorFlow loads.
def define_flags():
  flags.DEFINE_string('output_dir', 'data/quickstart', 'Where to write.')


if __name__ == '__main__':
  entry_point.parse_flags_early(define_flags)

from tools import convert_image_folder

IMAGE_SIZE = 32
TRAIN_SHARDS = 4
EVAL_SHARDS = 3


def write_image_folders(output_dir: str) -> dict[str, str]:
  """Writes digits as image files under <output_dir>/images/{train,
  validation,calibration} (calibration images are training ones too)."""
  from sklearn.datasets import load_digits  # Heavy import, only needed here.
  digits = load_digits()
  roots = {split: os.path.join(output_dir, 'images', split)
           for split in ('train', 'validation', 'calibration')}
  for i, (pixels, label) in enumerate(zip(digits.images, digits.target)):
    split = 'validation' if i % 5 == 0 else 'train'
    folders = [os.path.join(roots[split], f'digit_{label}')]
    if split == 'train' and i % 7 == 0:
      folders.append(os.path.join(roots['calibration'], f'digit_{label}'))
    for folder in folders:
      os.makedirs(folder, exist_ok=True)
      _save(pixels, i, folder)
  return roots


def _save(pixels, i: int, folder: str) -> None:
  """Digit i as a 32x32 image file (PNG, grey JPEG or RGB JPEG by i)."""
  grey = np.clip(pixels * 16, 0, 255).astype(np.uint8)
  image = Image.fromarray(grey, mode='L').resize((IMAGE_SIZE, IMAGE_SIZE),
                                                 Image.BICUBIC)
  kind = i % 3
  if kind == 0:
    image.save(os.path.join(folder, f'{i:04d}.png'))
  elif kind == 1:
    image.save(os.path.join(folder, f'{i:04d}.jpg'), quality=95)
  else:
    image.convert('RGB').save(os.path.join(folder, f'{i:04d}.jpeg'),
                              quality=95)


def build(output_dir: str) -> None:
  """Image folders, then TFRecords, under `output_dir`."""
  roots = write_image_folders(output_dir)
  convert_image_folder.convert(input_dir=roots['train'],
                               output_prefix=os.path.join(output_dir, 'train'),
                               num_shards=TRAIN_SHARDS)
  convert_image_folder.convert(input_dir=roots['validation'],
                               output_prefix=os.path.join(output_dir,
                                                          'validation'),
                               num_shards=EVAL_SHARDS)
  convert_image_folder.convert(
      input_dir=roots['calibration'],
      output_prefix=os.path.join(output_dir, 'calibration', 'validation'),
      num_shards=1)


def main(argv):
  del argv
  build(FLAGS.output_dir)
  print(f'quickstart data written to {FLAGS.output_dir}')


if __name__ == '__main__':
  FLAGS = flags.FLAGS
  app.run(entry_point.tool_main(main))
