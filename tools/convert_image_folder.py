"""Converts an image directory into ImageNet-schema TFRecords.

  python -m tools.convert_image_folder --input_dir=DIR --output_prefix=OUT/train \
      --num_shards=8
  python -m tools.convert_image_folder --input_dir=VAL --output_prefix=OUT/validation \
      --labels_file=LABELS --classes_from=DIR --num_shards=8

DIR holds one sub-folder per class (`DIR/<class>/<image>`); classes are sorted
by name and labelled 1..N as the TPU reference's converter does (label 0 is
"background"). A flat folder (ImageNet's validation set: 50,000 files, no
class folders) takes `--labels_file`, a class name a line for its images in
sorted file-name order (ImageNet: the TPU reference's
imagenet_2012_validation_synset_labels.txt), and `--classes_from`, the
class-folder set whose sorted names give the labels (the training set, so
that both number the classes alike; default: the labels file's names
sorted). Every image becomes an RGB JPEG: PNG, CMYK, grayscale and
palette files are re-encoded (real ImageNet contains all of these); RGB JPEGs
are copied byte for byte. A file no image library can read stops the run with
its path, or with --on_bad_image=skip is left out and listed (path and reason)
with a count at the end.

Shards are written under temporary names and renamed when all are complete
(core/staged_files.py): a failed conversion leaves nothing under the final
names.
"""

import dataclasses
import io
import os
import random

from absl import app
from absl import flags
from PIL import Image

from core import entry_point

from core import startup

ON_BAD_IMAGE = ('fail', 'skip')


# The command line, parsed before the imports below: --help and flag errors
# answer at once, not after TensorFlow loads.
def define_flags():
  flags.DEFINE_string('input_dir', None, 'Folder with one sub-folder a class '
                      '(or a flat folder of images, with --labels_file).')
  flags.DEFINE_string('labels_file', '', 'For a flat --input_dir: a class '
                      'name a line, for its images in sorted name order.')
  flags.DEFINE_string('classes_from', '', 'With --labels_file: the class '
                      'folders (the training set) whose sorted names number '
                      'the labels.')
  flags.DEFINE_string('output_prefix', None, 'Output path prefix.')
  flags.DEFINE_integer('num_shards', 8, 'Number of output files.')
  flags.DEFINE_enum('on_bad_image', 'fail', ON_BAD_IMAGE,
                    'An unreadable image: stop naming it, or skip and list it.')
  flags.mark_flags_as_required(['input_dir', 'output_prefix'])


if __name__ == '__main__':
  entry_point.parse_flags_early(define_flags)

startup.import_tensorflow()  # First: TensorFlow without Keras.
# pylint: disable=wrong-import-position
import tensorflow as tf

from core import staged_files

IMAGE_SUFFIXES = ('.jpg', '.jpeg', '.png', '.bmp', '.gif', '.tif', '.tiff',
                  '.webp')


def list_images(input_dir: str) -> tuple[list[str], list[tuple[str, int]]]:
  """Class names and (path, label) pairs, labels 1..N in sorted class order."""
  classes = sorted(d for d in tf.io.gfile.listdir(input_dir)
                   if tf.io.gfile.isdir(os.path.join(input_dir, d)))
  classes = [c.rstrip('/') for c in classes]
  if not classes:
    raise ValueError(f'{input_dir} has no class sub-folders.')
  items = []
  for label, name in enumerate(classes, start=1):
    folder = os.path.join(input_dir, name)
    for f in sorted(tf.io.gfile.listdir(folder)):
      if f.lower().endswith(IMAGE_SUFFIXES):
        items.append((os.path.join(folder, f), label))
  return classes, items


def list_labelled_images(input_dir: str, labels_file: str,
                         classes_from: str = '') -> tuple[list[str], list]:
  """A flat folder's images with a class name a line of `labels_file` (in
  sorted file-name order); labels 1..N in the sorted order of
  `classes_from`'s class folders (or of the labels file's names).

  Raises:
    ValueError: naming the labels file when its lines and the images differ
      in number, or the line whose class `classes_from` does not have.
  """
  images = sorted(f for f in tf.io.gfile.listdir(input_dir)
                  if f.lower().endswith(IMAGE_SUFFIXES))
  if not images:
    raise ValueError(f'{input_dir} has no images.')
  with tf.io.gfile.GFile(labels_file) as f:
    names = [line.strip() for line in f if line.strip()]
  if len(names) != len(images):
    raise ValueError(f'{labels_file} has {len(names)} labels for the '
                     f'{len(images)} images in {input_dir}: one line an '
                     'image, in sorted file-name order.')
  if classes_from:
    classes = sorted(d.rstrip('/') for d in tf.io.gfile.listdir(classes_from)
                     if tf.io.gfile.isdir(os.path.join(classes_from, d)))
  else:
    classes = sorted(set(names))
  index = {name: i for i, name in enumerate(classes, start=1)}
  for line, name in enumerate(names, start=1):
    if name not in index:
      raise ValueError(f'{labels_file}, line {line}: class {name!r} is not '
                       f'one of the {len(classes)} class folders of '
                       f'{classes_from}.')
  return classes, [(os.path.join(input_dir, image), index[name])
                   for image, name in zip(images, names)]


def to_rgb_jpeg(data: bytes, path: str = '<bytes>',
                quality: int = 95) -> tuple[bytes, int, int]:
  """RGB JPEG bytes, height and width of an encoded image of any format.

  Raises:
    ValueError: naming `path` if the image cannot be read.
  """
  try:
    image = Image.open(io.BytesIO(data))
    image.load()
  except Exception as e:  # PIL raises many types for corrupt files.
    raise ValueError(f'Cannot read image {path}: {e}') from e
  if image.format == 'JPEG' and image.mode == 'RGB':
    return data, image.height, image.width
  if image.mode in ('RGBA', 'LA', 'P'):
    image = image.convert('RGBA')
    background = Image.new('RGBA', image.size, (255, 255, 255, 255))
    image = Image.alpha_composite(background, image)
  image = image.convert('RGB')
  out = io.BytesIO()
  image.save(out, format='JPEG', quality=quality)
  return out.getvalue(), image.height, image.width


def make_example(jpeg: bytes, label: int, synset: str, filename: str,
                 height: int, width: int) -> tf.train.Example:
  def _bytes(v):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))

  def _int(v):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))

  return tf.train.Example(features=tf.train.Features(feature={
      'image/encoded': _bytes(jpeg),
      'image/format': _bytes(b'JPEG'),
      'image/class/label': _int(label),
      'image/class/synset': _bytes(synset.encode()),
      'image/filename': _bytes(os.path.basename(filename).encode()),
      'image/height': _int(height),
      'image/width': _int(width),
      'image/colorspace': _bytes(b'RGB'),
      'image/channels': _int(3),
  }))


@dataclasses.dataclass
class Converted:
  paths: list[str]  # The shards written.
  examples: int  # Images written.
  skipped: list[tuple[str, str]]  # (path, reason) of images left out.


def convert(*, input_dir: str, output_prefix: str, num_shards: int,
            shuffle_seed: int | None = 0,
            on_bad_image: str = 'fail', labels_file: str = '',
            classes_from: str = '') -> Converted:
  """Writes `num_shards` TFRecord files `<prefix>-0000i-of-0000n`.

  Args:
    input_dir: one sub-folder a class (or, with `labels_file`, the images).
    labels_file: for a flat `input_dir`: a class name a line, one an image
      in sorted file-name order.
    classes_from: with `labels_file`: the class-folder set whose sorted
      names number the labels (default: the labels file's names sorted).
    output_prefix: shards are `<output_prefix>-0000i-of-0000n`.
    num_shards: files to spread the images over.
    shuffle_seed: order of images over shards (None: sorted order).
    on_bad_image: 'fail' stops at an unreadable image naming it; 'skip'
      leaves it out and lists it in the result.

  Raises:
    ValueError: an unreadable image (with 'fail'), or no images.
  """
  if on_bad_image not in ON_BAD_IMAGE:
    raise ValueError(f'on_bad_image must be one of {ON_BAD_IMAGE}, got '
                     f'{on_bad_image!r}.')
  if labels_file:
    classes, items = list_labelled_images(input_dir, labels_file,
                                          classes_from)
  elif classes_from:
    raise ValueError('--classes_from goes with --labels_file (a flat folder);'
                     ' a class-folder input numbers its own classes.')
  else:
    classes, items = list_images(input_dir)
  if not items:
    raise ValueError(f'{input_dir} has class folders but no images.')
  if shuffle_seed is not None:
    # Spread classes across shards, reproducibly.
    random.Random(shuffle_seed).shuffle(items)
  tf.io.gfile.makedirs(os.path.dirname(output_prefix) or '.')
  paths = [f'{output_prefix}-{i:05d}-of-{num_shards:05d}'
           for i in range(num_shards)]
  skipped, written = [], 0
  with staged_files.staged(paths) as temporaries:
    writers = [tf.io.TFRecordWriter(p) for p in temporaries]
    try:
      for path, label in items:
        with tf.io.gfile.GFile(path, 'rb') as f:
          data = f.read()
        try:
          jpeg, height, width = to_rgb_jpeg(data, path)
        except ValueError as e:
          if on_bad_image == 'fail':
            raise ValueError(f'{e} (rerun with --on_bad_image=skip to leave '
                             'unreadable images out)') from e
          skipped.append((path, str(e.__cause__ or e)))
          continue
        example = make_example(jpeg, label, classes[label - 1], path, height,
                               width)
        writers[written % num_shards].write(example.SerializeToString())
        written += 1
    finally:
      for w in writers:
        w.close()
    if not written:
      raise ValueError(f'No readable image in {input_dir}.')
  return Converted(paths=paths, examples=written, skipped=skipped)


def main(argv):
  del argv
  done = convert(input_dir=FLAGS.input_dir,
                 output_prefix=FLAGS.output_prefix,
                 num_shards=FLAGS.num_shards,
                 on_bad_image=FLAGS.on_bad_image,
                 labels_file=FLAGS.labels_file,
                 classes_from=FLAGS.classes_from)
  for path, reason in done.skipped:
    print(f'skipped {path}: {reason}')
  print(f'wrote {done.examples} images to {len(done.paths)} files '
        f'({done.paths[0]} ...); skipped {len(done.skipped)} unreadable '
        'images')


if __name__ == '__main__':
  FLAGS = flags.FLAGS
  app.run(entry_point.tool_main(main))
