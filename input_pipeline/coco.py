"""COCO detection TFRecords: SSD's train and eval pipelines.

Schema (Google's TPU `create_coco_tf_record.py`, which tools/convert_coco.py
writes): `image/encoded` (JPEG), `image/source_id` (the COCO image id as
text), `image/height`, `image/width`, `image/object/bbox/{ymin,xmin,ymax,
xmax}` (normalised), `image/object/class/label` (COCO category ids),
`image/object/is_crowd`. `categories.json` beside the records lists the
category ids; sorted, they become labels 1..K (0 is background), which for
COCO 2017 is Google's CLASS_MAP.

Training, as Google's v0.7 `dataloader.py`: images without boxes are left
out; the SSD random crop (below), a horizontal flip with probability 1/2,
colour jitter (brightness 0.125, contrast 0.5, saturation 0.5, hue 0.05, in
that order), and the targets of input_pipeline/ssd_boxes.py. The host draws
the jitter's factors (feature `jitter`) and the task applies them on the
device (`apply_jitter`: the same values within 2e-6; half of the host's work
an image otherwise). Crowd boxes
are boxes like any other there (Google's loader ignores `is_crowd`, as the
MLCommons reference does); the COCO evaluation treats them as crowds. Randomness is
stateless, keyed by (seed, host, epoch, index) as the ImageNet pipeline's.

Eval: the whole image resized to the model's size (TF1's `resize_images`,
as Google's), its COCO id and original (height, width) for the detections,
padded with `mask` 0 to whole batches.

Images leave the host as float32 in [0, 1]; the task normalises them on the
device.
"""

import json
import os

import numpy as np
import tensorflow as tf

from input_pipeline import records
from input_pipeline import ssd_boxes

FEATURES = {
    'image/encoded': tf.io.FixedLenFeature((), tf.string),
    'image/source_id': tf.io.FixedLenFeature((), tf.string),
    'image/object/bbox/ymin': tf.io.VarLenFeature(tf.float32),
    'image/object/bbox/xmin': tf.io.VarLenFeature(tf.float32),
    'image/object/bbox/ymax': tf.io.VarLenFeature(tf.float32),
    'image/object/bbox/xmax': tf.io.VarLenFeature(tf.float32),
    'image/object/class/label': tf.io.VarLenFeature(tf.int64),
}
CATEGORIES_FILE = 'categories.json'

# The SSD crop (ssd_constants.py): 50 candidate windows a pass, each side
# U(0.3, 1) of the image, aspect within 2, every box overlapping the window
# by more than a minimum IoU drawn from these, at least one box centre
# inside; a pass takes no crop with probability 1/7.
NUM_CROP_PASSES = 50
CROP_MIN_IOU_CHOICES = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9)
P_NO_CROP_PER_PASS = 1 / (len(CROP_MIN_IOU_CHOICES) + 1)
# Google's loop runs until a pass succeeds; this bound (never reached in
# practice: (6/7)^100 = 2e-7 when no window ever fits) keeps it finite.
MAX_CROP_ROUNDS = 100
# COCO 2017's detection categories: the synthetic mode's label count.
COCO_CATEGORIES = 80


def read_categories(data_dir: str) -> list[int]:
  """The data's category ids, sorted (label k is the k-th, from 1)."""
  path = os.path.join(data_dir, CATEGORIES_FILE)
  if not tf.io.gfile.exists(path):
    raise ValueError(f'{path} is missing: it lists the category ids. Build '
                     'the data with python -m tools.convert_coco.')
  with tf.io.gfile.GFile(path) as f:
    return sorted(int(c['id']) for c in json.load(f))


def check_records(*, train_files: str, eval_files: str,
                  eval_annotations: str, features: dict, fix: str) -> None:
  """Fails fast, naming the cause: no files, damaged files, a wrong schema
  (`fix` says what to do), or no eval annotation file."""
  for pattern in (train_files, eval_files):
    files = records.list_files(pattern)
    records.check_record_files(files)
    records.check_features(files[0], features, fix=fix)
  if not tf.io.gfile.exists(eval_annotations):
    raise ValueError(f'{eval_annotations} is missing: the COCO '
                     'evaluation needs the eval set\'s annotations. '
                     'tools.convert_coco keeps them beside the records.')


def crop_proposal(boxes, heights, widths, tops, lefts, min_iou):
  """One pass of 50 candidate windows (Google's `crop_proposal`).

  Args:
    boxes: [N, 4] corner boxes.
    heights, widths: [50] window sides, U(0.3, 1).
    tops, lefts: [50] U(0, 1) draws; the window starts at u x (1 - side).
    min_iou: the pass's minimum IoU.

  Returns:
    (use_crop, window [ymin, xmin, ymax, xmax], kept [N] bool): the last
    valid window of the pass and the boxes whose centre lies inside it.
  """
  top, left = tops * (1 - heights), lefts * (1 - widths)
  windows = tf.stack([top, left, top + heights, left + widths], axis=1)
  overlaps = ssd_boxes.iou(windows, boxes)
  cy = (boxes[:, 0] + boxes[:, 2]) / 2
  cx = (boxes[:, 1] + boxes[:, 3]) / 2
  inside = ((cy[None] > top[:, None]) & (cy[None] < top[:, None] + heights[:, None]) &
            (cx[None] > left[:, None]) & (cx[None] < left[:, None] + widths[:, None]))
  valid = ((heights / widths < 2) & (widths / heights < 2) &
           tf.reduce_all(overlaps > min_iou, axis=1) &
           tf.reduce_any(inside, axis=1))
  index = tf.range(1, NUM_CROP_PASSES + 1)
  chosen = tf.equal(tf.reduce_max(index * tf.cast(valid, tf.int32)), index)
  window = tf.reduce_sum(windows * tf.cast(chosen, tf.float32)[:, None], 0)
  kept = tf.reduce_any(inside & chosen[:, None], axis=0)
  return tf.reduce_any(chosen), window, kept


def crop_window(boxes, seed):
  """Google's IoU-biased random crop, its search only (no pixels).

  Returns:
    (window [ymin, xmin, ymax, xmax] normalised, kept [N] bool: the boxes
    whose centre lies inside it).
  """

  def one_pass(done, window, kept, round_):
    pass_seed = tf.random.experimental.stateless_fold_in(seed, round_)
    s = tf.random.experimental.stateless_split(pass_seed, 6)
    no_crop = tf.random.stateless_uniform([], s[0]) < P_NO_CROP_PER_PASS
    draw = lambda k, low: tf.random.stateless_uniform(
        [NUM_CROP_PASSES], s[k], low, 1.0)
    min_iou = tf.gather(CROP_MIN_IOU_CHOICES, tf.random.stateless_uniform(
        [], s[5], 0, len(CROP_MIN_IOU_CHOICES), tf.int32))
    use, proposed, inside = crop_proposal(boxes, draw(1, 0.3), draw(2, 0.3),
                                          draw(3, 0.0), draw(4, 0.0), min_iou)
    whole = tf.constant([0.0, 0.0, 1.0, 1.0])
    everything = tf.ones_like(kept)
    return (no_crop | use, tf.where(no_crop, whole, proposed),
            tf.where(no_crop, everything, inside), round_ + 1)

  start = (tf.constant(False), tf.constant([0.0, 0.0, 1.0, 1.0]),
           tf.ones([tf.shape(boxes)[0]], tf.bool), tf.constant(0))
  done, window, kept, _ = tf.while_loop(
      lambda done, *_: tf.logical_not(done), one_pass, start,
      maximum_iterations=MAX_CROP_ROUNDS)
  return (tf.where(done, window, [0.0, 0.0, 1.0, 1.0]),
          tf.where(done, kept, tf.ones_like(kept)))


# decode_window decodes a region of whole 16-pixel blocks (the largest JPEG
# MCU) with a block's margin around the pixels the resize reads: the
# decoder's chroma upsampling at a region's edge reads past it, so pixels
# within a few of the edge may differ from a whole decode's; a block in,
# they are the same (a test holds them equal).
_JPEG_BLOCK = 16


def _decoded_span(start, end, size):
  """[first, length) of whole blocks covering pixels start..end with a
  block's margin, within [0, size)."""
  first = tf.maximum(0, (start - _JPEG_BLOCK) // _JPEG_BLOCK * _JPEG_BLOCK)
  last = tf.minimum(size, (end + 2 * _JPEG_BLOCK) // _JPEG_BLOCK * _JPEG_BLOCK)
  return first, last - first


def decode_window(jpeg, window, flip, size: int):
  """The crop of `window` of a JPEG, resized to size x size by
  `tf.image.crop_and_resize` (float32, 0-255), mirrored left-right if
  `flip`: the values of the crop and resize of the whole decoded image,
  decoding only the blocks around the window, and the flip as the window's
  mirror (crop_and_resize samples x2 to x1 when x1 > x2)."""
  shape = tf.io.extract_jpeg_shape(jpeg)
  height, width = shape[0], shape[1]
  # The rows and columns the bilinear resize reads: floor(y1 (H - 1)) to
  # ceil(y2 (H - 1)), in the whole image's pixel coordinates.
  scale = tf.cast(tf.stack([height, width, height, width]) - 1, tf.float32)
  pixels = window * scale
  top, height_d = _decoded_span(tf.cast(tf.floor(pixels[0]), tf.int32),
                                tf.cast(tf.math.ceil(pixels[2]), tf.int32),
                                height)
  left, width_d = _decoded_span(tf.cast(tf.floor(pixels[1]), tf.int32),
                                tf.cast(tf.math.ceil(pixels[3]), tf.int32),
                                width)
  region = tf.image.decode_and_crop_jpeg(
      jpeg, tf.stack([top, left, height_d, width_d]), channels=3)
  origin = tf.cast(tf.stack([top, left, top, left]), tf.float32)
  extent = tf.cast(tf.stack([height_d, width_d, height_d, width_d]) - 1,
                   tf.float32)
  box = (pixels - origin) / tf.maximum(extent, 1.0)
  box = tf.where(flip, tf.gather(box, [0, 3, 2, 1]), box)
  return tf.image.crop_and_resize(region[None], box[None], [0],
                                  [size, size])[0]


# Google's colour jitter (its order): brightness, contrast, saturation, hue.
BRIGHTNESS_DELTA, CONTRAST_RANGE, SATURATION_RANGE, HUE_DELTA = (
    0.125, (0.5, 1.5), (0.5, 1.5), 0.05)
JITTER_SIZE = 7  # The four factors and the contrast's three channel means.


def jitter_factors(image, seed):
  """The host's half of Google's colour jitter of an [H, W, 3] image in
  [0, 1]: [7] = the brightness delta, the contrast, saturation and hue
  factors (drawn as tf.image.stateless_random_brightness, _contrast,
  _saturation and _hue draw them from `seed`), and the channel means of the
  brightened image (the contrast's centre, so that a height slice of the
  image can be jittered alone). `apply_jitter` is the other half, on the
  device (XLA compiles it): the host keeps 0.2 ms of 2.6 ms an image."""
  s = tf.random.experimental.stateless_split(seed, 4)
  uniform = lambda low, high, seed: tf.random.stateless_uniform(
      [], seed, minval=low, maxval=high)
  delta = uniform(-BRIGHTNESS_DELTA, BRIGHTNESS_DELTA, s[0])
  factors = tf.stack([delta, uniform(*CONTRAST_RANGE, s[1]),
                      uniform(*SATURATION_RANGE, s[2]),
                      uniform(-HUE_DELTA, HUE_DELTA, s[3])])
  return tf.concat([factors, tf.reduce_mean(image, [0, 1]) + delta], 0)


def apply_jitter(images, jitter):
  """Google's colour jitter (unclipped, as theirs) of [b, H, W, 3] images,
  or height slices of them, from `jitter_factors` [b, 7]: brightness, then
  contrast about the brightened image's means, then saturation (clipped to
  [0, 1] in HSV) and hue (wrapped), in one HSV round trip."""
  j = tf.cast(jitter, images.dtype)[:, None, None, :]
  images = images + j[..., 0:1]
  mean = j[..., 4:7]
  images = (images - mean) * j[..., 1:2] + mean
  hue, saturation, value = tf.unstack(tf.image.rgb_to_hsv(images), axis=-1)
  saturation = tf.clip_by_value(saturation * j[..., 2], 0.0, 1.0)
  hue = hue + j[..., 3]
  hue = hue - tf.floor(hue)
  return tf.image.hsv_to_rgb(tf.stack([hue, saturation, value], axis=-1))


def train_example(jpeg, boxes, classes, seed, *, anchors, size: int):
  """Google's crop, resize, /255, flip and targets for one JPEG, and its
  colour jitter's factors (`jitter`: the device applies them).

  Args:
    jpeg: the encoded image (a scalar string).
    boxes: [N, 4] normalised corner boxes; classes: [N] labels.
    seed: [2] int64, the example's stateless seed.
    anchors: the model's default boxes; size: its image side.
  """
  s = tf.random.experimental.stateless_split(seed, 3)
  window, kept = crop_window(boxes, s[0])
  boxes, classes = tf.boolean_mask(boxes, kept), tf.boolean_mask(classes, kept)
  clipped = tf.concat([tf.maximum(boxes[:, :2], window[:2]),
                       tf.minimum(boxes[:, 2:], window[2:])], axis=1)
  origin = tf.tile(window[:2], [2])
  extent = tf.tile(window[2:] - window[:2], [2])
  boxes = (clipped - origin) / extent
  flip = tf.random.stateless_uniform([], s[1]) < 0.5
  image = decode_window(jpeg, window, flip, size) / 255.0
  boxes = tf.where(flip, tf.stack([boxes[:, 0], 1 - boxes[:, 3], boxes[:, 2],
                                   1 - boxes[:, 1]], axis=1), boxes)
  labels, targets, matched = ssd_boxes.assign_targets(boxes, classes, anchors)
  return {'image': image, 'jitter': jitter_factors(image, s[2]),
          'classes': labels, 'boxes': targets, 'num_matched': matched}


class CocoInput:
  """Builds per-host train and eval datasets for SSD."""

  def __init__(self, *, data_dir: str = '', train_pattern: str = 'train-*',
               eval_pattern: str = 'val-*',
               eval_annotations: str = 'val_annotations.json',
               geometry: ssd_boxes.Geometry = ssd_boxes.Geometry(),
               num_train_examples: int = 118287, shuffle_buffer: int = 64,
               interleave_cycle: int = 32, eval_cache: bool = True,
               deterministic: bool = False, seed: int = 0,
               synthetic: bool = False):
    """Args:
      data_dir: folder (local or gs://) with tools/convert_coco.py's output.
      train_pattern, eval_pattern: globs of the record files in data_dir.
      eval_annotations: the eval set's COCO annotation file in data_dir.
      geometry: the model's default boxes (image size and targets).
      num_train_examples: one epoch (MLPerf train_samples; COCO train2017:
        118,287 images, as Google logs it).
      shuffle_buffer: records shuffled (Google: 64, after the cache).
      interleave_cycle: files read in parallel (Google: 32).
      eval_cache: keep preprocessed eval batches in memory.
      deterministic: reproducible element order (slower).
      seed: seed of shuffling and augmentation.
      synthetic: random batches of the real shapes instead of files (COCO
        2017's 80 categories; the time-to-train model costs a step so).
    """
    self.data_dir = data_dir
    self.synthetic = synthetic
    self.train_files = os.path.join(data_dir, train_pattern)
    self.eval_files = os.path.join(data_dir, eval_pattern)
    self.eval_annotations = os.path.join(data_dir, eval_annotations)
    self.geometry = geometry
    self.num_train_examples = num_train_examples
    self.shuffle_buffer, self.interleave_cycle = shuffle_buffer, interleave_cycle
    self.eval_cache, self.deterministic, self.seed = (eval_cache,
                                                      deterministic, seed)
    self._categories = None
    self._eval_counts = records.EvalCounts(self.eval_files)

  @property
  def category_ids(self) -> list[int]:
    """The COCO category id of each label 1..K (label k: entry k - 1)."""
    if self._categories is None:
      self._categories = (list(range(1, COCO_CATEGORIES + 1))
                          if self.synthetic else
                          read_categories(self.data_dir))
    return self._categories

  @property
  def num_classes(self) -> int:
    """Labels with background."""
    return len(self.category_ids) + 1

  def check(self) -> None:
    """Fails fast on missing files or a wrong schema."""
    if self.synthetic:
      return
    check_records(
        train_files=self.train_files, eval_files=self.eval_files,
        eval_annotations=self.eval_annotations, features=FEATURES,
        fix=('The pipeline expects COCO detection records; build them with '
             'python -m tools.convert_coco.'))
    self.category_ids  # pylint: disable=pointless-statement

  def steps_per_epoch(self, global_batch_size: int) -> float:
    return self.num_train_examples / global_batch_size

  def _label_table(self):
    """COCO category id -> label 1..K (-1 for an id not listed)."""
    return tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.constant(self.category_ids, tf.int64),
            tf.range(1, len(self.category_ids) + 1, dtype=tf.int32)), -1)

  @staticmethod
  def _parse(raw, table):
    """(jpeg, corner boxes [N, 4], labels [N] int32, image id)."""
    f = tf.io.parse_single_example(raw, FEATURES)
    dense = lambda k: tf.sparse.to_dense(f[f'image/object/bbox/{k}'])
    boxes = tf.stack([dense('ymin'), dense('xmin'), dense('ymax'),
                      dense('xmax')], axis=1)
    ids = tf.sparse.to_dense(f['image/object/class/label'])
    labels = table.lookup(ids)
    known = tf.debugging.Assert(tf.reduce_all(labels > 0), [
        f'A record names a category id missing from {CATEGORIES_FILE}:', ids])
    with tf.control_dependencies([known]):
      labels = tf.identity(labels)
    image_id = tf.strings.to_number(f['image/source_id'], tf.int32)
    return f['image/encoded'], boxes, labels, image_id

  def _options(self) -> tf.data.Options:
    options = tf.data.Options()
    options.deterministic = self.deterministic
    options.autotune.enabled = True
    return options

  def train_dataset(self, input_context: tf.distribute.InputContext, *,
                    global_batch_size: int, start_step: int = 0):
    """Per-host training batches, starting at training step `start_step`
    (records.shuffled_epochs: epoch order from (seed, epoch) only)."""
    batch = input_context.get_per_replica_batch_size(global_batch_size)
    if self.synthetic:
      return self._synthetic_train(batch)
    files = records.list_files(self.train_files)
    anchors = tf.constant(ssd_boxes.default_boxes(self.geometry))
    size = self.geometry.image_size
    ds = records.shuffled_epochs(
        files, input_context, seed=self.seed, start_step=start_step,
        per_replica_batch=batch, shuffle_buffer=self.shuffle_buffer,
        cycle_length=self.interleave_cycle, deterministic=self.deterministic)
    host_seed = tf.constant(
        self.seed * 100003 + input_context.input_pipeline_id, tf.int64)
    table = self._label_table()

    @records.no_autograph
    def parse(epoch, index, raw):
      jpeg, boxes, labels, _ = self._parse(raw, table)
      return epoch, index, jpeg, boxes, labels

    @records.no_autograph
    def preprocess(epoch, index, jpeg, boxes, labels):
      seed = tf.stack([host_seed, epoch * 2**32 + index])
      return train_example(jpeg, boxes, labels, seed, anchors=anchors,
                           size=size)

    ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=self.deterministic)
    # Google leaves images without boxes out of training.
    ds = ds.filter(records.no_autograph(
        lambda e, i, jpeg, boxes, labels: tf.size(labels) > 0))
    ds = ds.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=self.deterministic)
    ds = ds.batch(batch, drop_remainder=True)
    return ds.prefetch(tf.data.AUTOTUNE).with_options(self._options())

  def eval_steps(self, *, num_pipelines: int, global_batch_size: int) -> int:
    if self.synthetic:
      return 1
    return self._eval_counts.steps(num_pipelines=num_pipelines,
                                   global_batch_size=global_batch_size)

  def num_eval_examples(self) -> int:
    return 0 if self.synthetic else self._eval_counts.total()

  def eval_dataset(self, input_context: tf.distribute.InputContext, *,
                   global_batch_size: int, steps: int, cache: bool = True):
    """Per-host eval batches covering each image once, in file order,
    padded with `mask` 0 (and image id -1)."""
    batch = input_context.get_per_replica_batch_size(global_batch_size)
    size = self.geometry.image_size
    if self.synthetic:
      rng = np.random.default_rng(self.seed)
      return records.synthetic_batches({
          'image': rng.uniform(size=(batch, size, size, 3)).astype(np.float32),
          'image_id': np.arange(batch, dtype=np.int32),
          'raw_shape': np.full((batch, 2), 480, np.int32),
          'mask': np.ones(batch, np.float32)})
    ds = records.host_records(
        records.list_files(self.eval_files), input_context,
        cycle_length=self.interleave_cycle, deterministic=True,
        shuffle_seed=None)
    table = self._label_table()

    @records.no_autograph
    def preprocess(raw):
      jpeg, _, _, image_id = self._parse(raw, table)
      image = tf.io.decode_jpeg(jpeg, channels=3)
      shape = tf.shape(image)[:2]
      # TF1's resize_images (Google's eval): no half-pixel centres.
      image = tf.raw_ops.ResizeBilinear(
          images=image[None], size=[size, size], align_corners=False,
          half_pixel_centers=False)[0]
      return {'image': image / 255.0, 'image_id': image_id,
              'raw_shape': shape, 'mask': tf.constant(1.0)}

    ds = ds.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=True)
    padding = {'image': tf.zeros([size, size, 3]),
               'image_id': tf.constant(-1, tf.int32),
               'raw_shape': tf.ones([2], tf.int32), 'mask': tf.constant(0.0)}
    return records.padded_eval_batches(
        ds, padding, input_context, per_replica_batch=batch, steps=steps,
        cache=cache and self.eval_cache)

  def _synthetic_train(self, batch: int):
    """Random images, boxes and classes through the real target assignment
    (so matched anchors and hard negatives are as many as real data's)."""
    rng = np.random.default_rng(self.seed)
    anchors = tf.constant(ssd_boxes.default_boxes(self.geometry))
    size = self.geometry.image_size
    examples = []
    for _ in range(batch):
      corners = np.sort(rng.uniform(size=(4, 2, 2)), axis=1)  # 4 boxes.
      boxes = np.stack([corners[:, 0, 0], corners[:, 0, 1], corners[:, 1, 0],
                        corners[:, 1, 1]], axis=1).astype(np.float32)
      classes = rng.integers(1, self.num_classes, 4).astype(np.int32)
      labels, targets, matched = ssd_boxes.assign_targets(
          tf.constant(boxes), tf.constant(classes), anchors)
      examples.append((labels.numpy(), targets.numpy(), matched.numpy()))
    labels, targets, matched = (np.stack(x) for x in zip(*examples))
    images = rng.uniform(size=(batch, size, size, 3)).astype(np.float32)
    jitter = tf.stack([jitter_factors(image, [self.seed, i])
                       for i, image in enumerate(images)])
    return records.synthetic_batches({
        'image': images, 'jitter': jitter.numpy(), 'classes': labels,
        'boxes': targets, 'num_matched': matched})
