"""Mask R-CNN's COCO pipelines, as Google's MLPerf v0.7 `dataloader.py`
(mlcommons/training_results_v0.7, `Google/benchmarks/maskrcnn/
implementations/maskrcnn-research-TF-tpu-*`) prepares them.

Records: input_pipeline/coco.py's schema with `image/object/mask` (one PNG
an instance: `tools.convert_coco --include_masks`), `image/height`,
`image/width` and `image/object/is_crowd`. A class is the COCO category id
itself (Google's `num_classes=91` for COCO's ids 1..90): `num_classes` is
the largest id + 1.

Training, per image: crowd instances left out (`skip_crowd_during_training`);
the image to [0, 1], minus ImageNet's mean, over its std; a horizontal flip
with probability 1/2 (image, boxes, masks); a scale so that the short side
is 800 and the long side at most 1333 (integer sizes, truncated: the
MLPerf reference's rule), TF1's bilinear resize, padded at the bottom and
right to 832x1344 (landscape: height < width) or 1344x832; boxes in the
resized image's pixels, clipped to the padded size - 1, all-zero boxes
dropped; each mask cropped to its box and resized to 112x112 (bilinear, on
the original mask) and zero-padded to 116x116; the RPN's targets on the
orientation's anchors (input_pipeline/fpn_anchors.py); the boxes then
scaled back to the original image's pixels and everything padded to 100
instances with -1. Google's loader asserts at most 100 instances; here an
image with more keeps its first 100 (COCO 2017 has none once crowds are
left out).

Batches hold one orientation (Google's `group_by_window`). So that both
orientations share one shape, an image leaves the host flattened,
[H x W, 3] (Google's transposed-and-flattened layout without the
transpose), and the RPN's targets flat over all anchors of the
orientation, level by level; `image_info` = [scaled height, scaled width,
original pixels per network pixel, original height, original width] tells
the model which it is (height < width: landscape).

Evaluation: the same image processing (no flip), `image_info` and the
image id; per host, its landscape images in batches, then its portrait
ones, each padded with `mask` 0, then whole padding batches up to the steps
every host needs (their counts come from `image/height` and `image/width`,
read once).

Randomness is stateless, keyed by (seed, host, epoch, index) as the other
pipelines'; a resumed run starts at the right record, though the grouping
by orientation may pair records in other batches than the uninterrupted
run did.
"""

import dataclasses
import os

import numpy as np
import tensorflow as tf

from input_pipeline import coco
from input_pipeline import fpn_anchors
from input_pipeline import records

FEATURES = {
    'image/encoded': tf.io.FixedLenFeature((), tf.string),
    'image/source_id': tf.io.FixedLenFeature((), tf.string),
    'image/height': tf.io.FixedLenFeature((), tf.int64),
    'image/width': tf.io.FixedLenFeature((), tf.int64),
    'image/object/bbox/ymin': tf.io.VarLenFeature(tf.float32),
    'image/object/bbox/xmin': tf.io.VarLenFeature(tf.float32),
    'image/object/bbox/ymax': tf.io.VarLenFeature(tf.float32),
    'image/object/bbox/xmax': tf.io.VarLenFeature(tf.float32),
    'image/object/class/label': tf.io.VarLenFeature(tf.int64),
    'image/object/is_crowd': tf.io.VarLenFeature(tf.int64),
    'image/object/mask': tf.io.VarLenFeature(tf.string),
}
SIZE_FEATURES = {k: FEATURES[k] for k in ('image/height', 'image/width')}
MEAN = (0.485, 0.456, 0.406)  # ImageNet's, on [0, 1] pixels.
STD = (0.229, 0.224, 0.225)
COCO_CLASSES = 91  # COCO 2017's category ids 1..90, and background.


@dataclasses.dataclass(frozen=True)
class Geometry:
  """The input's sizes (Google's mask_rcnn_params.py defaults)."""
  image_size: tuple = (832, 1344)  # Padded (short side, long side).
  short_side: int = 800  # The scaled image's short side...
  long_side_max: int = 1333  # ...unless its long side would pass this.
  gt_mask_size: int = 112  # Ground-truth masks cropped to this, padded by 2.
  max_instances: int = 100
  anchors: fpn_anchors.AnchorConfig = fpn_anchors.AnchorConfig()

  def padded_size(self, landscape: bool) -> tuple:
    """(height, width) of the network's input."""
    short, long = self.image_size
    return (short, long) if landscape else (long, short)

  @property
  def pixels(self) -> int:
    return self.image_size[0] * self.image_size[1]

  @property
  def num_anchors(self) -> int:
    return sum(h * w for h, w in fpn_anchors.level_sizes(
        self.image_size, self.anchors).values()) * (
            self.anchors.anchors_per_location)

  def anchors_for(self, landscape: bool) -> np.ndarray:
    """[N, 4] pixel anchors of the orientation."""
    return fpn_anchors.anchor_boxes(self.padded_size(landscape), self.anchors)


def check_geometry(geometry: Geometry) -> None:
  """Fails, naming the binding, on sizes the model cannot take."""
  short, long = geometry.image_size
  stride = 2 ** geometry.anchors.max_level
  if short % stride or long % stride:
    raise ValueError(
        f'input_pipeline.maskrcnn.Geometry.image_size {geometry.image_size} '
        f'is not a multiple of the largest feature stride {stride} on both '
        'sides.')
  if geometry.short_side > short or geometry.long_side_max > long:
    raise ValueError(
        f'Geometry.short_side {geometry.short_side} / long_side_max '
        f'{geometry.long_side_max} do not fit the padded image_size '
        f'{geometry.image_size}: a scaled image would be cut.')


def normalize(image):
  """uint8 [H, W, 3] -> float32, ImageNet's mean and std taken out."""
  image = tf.image.convert_image_dtype(image, tf.float32)
  return (image - MEAN) / STD


def reference_scale(height, width, short_side: int, long_side_max: int):
  """(scale, scaled height, scaled width): the short side to `short_side`
  unless the long side would pass `long_side_max`; sizes truncated."""
  height, width = tf.cast(height, tf.float32), tf.cast(width, tf.float32)
  scale = tf.minimum(short_side / tf.minimum(height, width),
                     long_side_max / tf.maximum(height, width))
  return (scale, tf.cast(height * scale, tf.int32),
          tf.cast(width * scale, tf.int32))


def resize_and_pad(image, scaled_height, scaled_width, landscape,
                   geometry: Geometry):
  """TF1's bilinear resize (no half-pixel centres), padded with zeros at
  the bottom and right to the orientation's size, flattened: [H W, 3]."""
  image = tf.raw_ops.ResizeBilinear(
      images=image[None], size=tf.stack([scaled_height, scaled_width]),
      align_corners=False, half_pixel_centers=False)[0]
  (lh, lw), (ph, pw) = geometry.padded_size(True), geometry.padded_size(False)
  height = tf.where(landscape, lh, ph)
  width = tf.where(landscape, lw, pw)
  image = tf.pad(image, [[0, height - scaled_height],
                         [0, width - scaled_width], [0, 0]])
  return tf.reshape(image, [geometry.pixels, 3])


def image_info(scaled_height, scaled_width, scale, height, width):
  """Google's [scaled h, scaled w, 1 / scale, original h, original w]."""
  f = lambda x: tf.cast(x, tf.float32)
  return tf.stack([f(scaled_height), f(scaled_width), 1.0 / scale, f(height),
                   f(width)])


def flip(image, boxes, masks):
  """Left-right: image [H, W, C], normalised boxes [N, 4], masks [N, H, W]."""
  boxes = tf.stack([boxes[:, 0], 1 - boxes[:, 3], boxes[:, 2],
                    1 - boxes[:, 1]], axis=1)
  return image[:, ::-1], boxes, masks[:, :, ::-1]


def scale_and_clip_boxes(boxes, scaled_height, scaled_width, landscape,
                         geometry: Geometry):
  """Normalised boxes -> pixels of the scaled image, clipped to [0, the
  padded size - 1] (Google's `resize_and_crop_boxes`, `clip_boxes`)."""
  h, w = tf.cast(scaled_height, tf.float32), tf.cast(scaled_width, tf.float32)
  boxes = boxes * tf.stack([h, w, h, w])
  (lh, lw), (ph, pw) = geometry.padded_size(True), geometry.padded_size(False)
  bound = tf.where(landscape, tf.constant([lh - 1, lw - 1] * 2, tf.float32),
                   tf.constant([ph - 1, pw - 1] * 2, tf.float32))
  return tf.minimum(tf.maximum(boxes, 0.0), bound)


def crop_masks(masks, boxes, size: int):
  """Each [H, W] mask cropped to its normalised box, resized bilinearly to
  size x size and zero-padded by 2: [N, size + 4, size + 4]."""
  count = tf.shape(masks)[0]
  cropped = tf.image.crop_and_resize(
      masks[..., None], boxes, tf.range(count), [size, size],
      method='bilinear')[..., 0]
  return tf.pad(cropped, [[0, 0], [2, 2], [2, 2]])


def pad_rows(x, rows: int, value):
  """x's first `rows` rows, padded with `value` to exactly `rows`."""
  x = x[:rows]
  pad = [[0, rows - tf.shape(x)[0]]] + [[0, 0]] * (len(x.shape) - 1)
  return tf.pad(x, pad, constant_values=value)


def decode_masks(pngs, height, width):
  """[N] PNG strings -> [N, height, width] float32 (Google's decoder)."""
  def one(png):
    return tf.cast(tf.io.decode_png(png, channels=1)[..., 0], tf.float32)
  return tf.cond(
      tf.size(pngs) > 0,
      lambda: tf.map_fn(one, pngs, fn_output_signature=tf.TensorSpec(
          [None, None], tf.float32)),
      lambda: tf.zeros([0, height, width]))


def train_example(image, boxes, classes, masks, seed, *, geometry: Geometry,
                  anchors: tuple):
  """Google's training `_dataset_parser` after decoding.

  Args:
    image: uint8 [H, W, 3].
    boxes: [N, 4] normalised corner boxes; classes: [N] int32; masks:
      [N, H, W] float32 0/1 (crowds already left out).
    seed: a [2] int stateless seed.
    anchors: (landscape anchors, portrait anchors), [A, 4] each.

  Returns:
    The example; its `roi_seed` keys the model's RoI sampling (the first
    example's seed serves its batch).
  """
  s = tf.random.experimental.stateless_split(seed, 3)
  height, width = tf.shape(image)[0], tf.shape(image)[1]
  landscape = height < width
  image = normalize(image)
  flipped = tf.random.stateless_uniform([], s[0]) > 0.5
  image, boxes, masks = tf.cond(flipped, lambda: flip(image, boxes, masks),
                                lambda: (image, boxes, masks))
  scale, sh, sw = reference_scale(height, width, geometry.short_side,
                                  geometry.long_side_max)
  flat = resize_and_pad(image, sh, sw, landscape, geometry)
  pixels = scale_and_clip_boxes(boxes, sh, sw, landscape, geometry)
  keep = tf.reduce_sum(pixels, axis=1) != 0
  pixels = tf.boolean_mask(pixels, keep)
  classes = tf.boolean_mask(classes, keep)
  crops = crop_masks(tf.boolean_mask(masks, keep), tf.boolean_mask(boxes, keep),
                     geometry.gt_mask_size)
  land, port = anchors
  scores, codes = tf.cond(
      landscape, lambda: fpn_anchors.rpn_targets(pixels, land, s[1]),
      lambda: fpn_anchors.rpn_targets(pixels, port, s[1]))
  n, side = geometry.max_instances, geometry.gt_mask_size + 4
  return {
      'image': flat,
      'image_info': image_info(sh, sw, scale, height, width),
      'rpn_score_targets': scores,
      'rpn_box_targets': codes,
      'gt_boxes': tf.ensure_shape(pad_rows(pixels / scale, n, -1.0), [n, 4]),
      'gt_classes': tf.ensure_shape(pad_rows(classes, n, -1), [n]),
      'gt_masks': tf.ensure_shape(pad_rows(crops, n, -1.0), [n, side, side]),
      'roi_seed': s[2],
  }


def eval_example(image, image_id, *, geometry: Geometry):
  """Google's PREDICT `_dataset_parser` after decoding."""
  height, width = tf.shape(image)[0], tf.shape(image)[1]
  scale, sh, sw = reference_scale(height, width, geometry.short_side,
                                  geometry.long_side_max)
  flat = resize_and_pad(normalize(image), sh, sw, height < width, geometry)
  return {'image': flat, 'image_info': image_info(sh, sw, scale, height, width),
          'image_id': image_id, 'mask': tf.constant(1.0)}


def is_landscape(example: dict):
  """A prepared example's orientation, from its image_info."""
  return example['image_info'][3] < example['image_info'][4]


def padding_example(geometry: Geometry, landscape: bool) -> dict:
  """An eval example of `mask` 0 in the orientation: the padded size as
  both its scaled and original size (scale 1), a zero image, id -1."""
  h, w = geometry.padded_size(landscape)
  return {'image': tf.zeros([geometry.pixels, 3]),
          'image_info': tf.constant([h, w, 1.0, h, w], tf.float32),
          'image_id': tf.constant(-1, tf.int32), 'mask': tf.constant(0.0)}


def landscape_record(raw):
  """Whether a record's image is landscape (height < width), from its
  `image/height` and `image/width` (no decoding)."""
  f = tf.io.parse_single_example(raw, SIZE_FEATURES)
  return f['image/height'] < f['image/width']


def orientation_counts(files: list[str], num_pipelines: int) -> list[tuple]:
  """(landscape, portrait) eval records of each input pipeline under
  records.host_shard."""
  def landscapes(ds):
    return ds.map(records.no_autograph(
        lambda raw: tf.cast(landscape_record(raw), tf.int64)))

  def count(ds):
    return tuple(int(x) for x in ds.reduce(
        tf.zeros([2], tf.int64),
        lambda n, land: n + tf.stack([land, 1 - land])).numpy())

  if len(files) >= num_pipelines:
    return [count(landscapes(tf.data.TFRecordDataset(files[i::num_pipelines])))
            for i in range(num_pipelines)]
  return [count(landscapes(tf.data.TFRecordDataset(files).shard(
      num_pipelines, i))) for i in range(num_pipelines)]


def batches_needed(counts: tuple, batch: int) -> int:
  """Batches of `batch`, one orientation each, that hold (landscape,
  portrait) examples."""
  return sum(-(-c // batch) for c in counts)


class MaskRcnnInput:
  """Builds per-host train and eval datasets for Mask R-CNN."""

  def __init__(self, *, data_dir: str = '', train_pattern: str = 'train-*',
               eval_pattern: str = 'val-*',
               eval_annotations: str = 'val_annotations.json',
               geometry: Geometry = Geometry(),
               num_train_examples: int = 118287, shuffle_buffer: int = 4096,
               interleave_cycle: int = 16, eval_cache: bool = True,
               deterministic: bool = False, seed: int = 0,
               synthetic: bool = False):
    """Args:
      data_dir: folder (local or gs://) with `tools.convert_coco
        --include_masks` output.
      train_pattern, eval_pattern: globs of the record files in data_dir.
      eval_annotations: the eval set's COCO annotation file in data_dir.
      geometry: image, mask and anchor sizes.
      num_train_examples: one epoch (MLPerf train_samples: 118,287).
      shuffle_buffer: records shuffled (Google: 4096).
      interleave_cycle: files read in parallel (Google: 16).
      eval_cache: keep preprocessed eval batches in memory.
      deterministic: reproducible element order (slower).
      seed: seed of shuffling and augmentation.
      synthetic: random batches of the real shapes instead of files.
    """
    check_geometry(geometry)
    self.data_dir, self.synthetic = data_dir, synthetic
    self.train_files = os.path.join(data_dir, train_pattern)
    self.eval_files = os.path.join(data_dir, eval_pattern)
    self.eval_annotations = os.path.join(data_dir, eval_annotations)
    self.geometry = geometry
    self.num_train_examples = num_train_examples
    self.shuffle_buffer, self.interleave_cycle = shuffle_buffer, interleave_cycle
    self.eval_cache, self.deterministic, self.seed = (eval_cache,
                                                      deterministic, seed)
    self._categories = None
    self._orientations: dict[int, list[tuple]] = {}

  @property
  def category_ids(self) -> list[int]:
    """The data's COCO category ids, sorted."""
    if self._categories is None:
      self._categories = (list(range(1, COCO_CLASSES)) if self.synthetic
                          else coco.read_categories(self.data_dir))
    return self._categories

  @property
  def num_classes(self) -> int:
    """Classes with background: a class is its category id."""
    return max(self.category_ids) + 1

  def check(self) -> None:
    """Fails fast on missing files or a wrong schema."""
    if self.synthetic:
      return
    coco.check_records(
        train_files=self.train_files, eval_files=self.eval_files,
        eval_annotations=self.eval_annotations, features=FEATURES,
        fix=('Mask R-CNN expects COCO records with masks; build them with '
             'python -m tools.convert_coco --include_masks.'))
    if min(self.category_ids) < 1:
      raise ValueError(f'{self.data_dir}/{coco.CATEGORIES_FILE} lists '
                       f'category id {min(self.category_ids)}: Mask R-CNN '
                       'uses the ids as classes, 0 being background.')

  def steps_per_epoch(self, global_batch_size: int) -> float:
    return self.num_train_examples / global_batch_size

  def _known(self):
    return tf.constant(self.category_ids, tf.int64)

  @staticmethod
  def _parse(raw, known):
    """(jpeg, boxes [N, 4], classes [N] int32, is_crowd [N] bool, PNG
    masks [N], image id, height, width)."""
    f = tf.io.parse_single_example(raw, FEATURES)
    dense = lambda k, default=0: tf.sparse.to_dense(f[k], default)
    boxes = tf.stack([dense(f'image/object/bbox/{k}') for k in
                      ('ymin', 'xmin', 'ymax', 'xmax')], axis=1)
    ids = dense('image/object/class/label')
    listed = tf.reduce_any(ids[:, None] == known[None], axis=1)
    check = tf.debugging.Assert(tf.reduce_all(listed), [
        f'A record names a category id missing from {coco.CATEGORIES_FILE}:',
        ids])
    with tf.control_dependencies([check]):
      classes = tf.cast(ids, tf.int32)
    image_id = tf.strings.to_number(f['image/source_id'], tf.int32)
    return (f['image/encoded'], boxes, classes,
            dense('image/object/is_crowd') > 0, dense('image/object/mask', ''),
            image_id, f['image/height'], f['image/width'])

  def _options(self, deterministic: bool) -> tf.data.Options:
    options = tf.data.Options()
    options.deterministic = deterministic
    options.autotune.enabled = True
    return options

  def train_dataset(self, input_context: tf.distribute.InputContext, *,
                    global_batch_size: int, start_step: int = 0):
    """Per-replica training batches of one orientation each, starting at
    training step `start_step`."""
    batch = input_context.get_per_replica_batch_size(global_batch_size)
    if self.synthetic:
      return self._synthetic_train(batch)
    geometry = self.geometry
    anchors = (tf.constant(geometry.anchors_for(True)),
               tf.constant(geometry.anchors_for(False)))
    ds = records.shuffled_epochs(
        records.list_files(self.train_files), input_context, seed=self.seed,
        start_step=start_step, per_replica_batch=batch,
        shuffle_buffer=self.shuffle_buffer, cycle_length=self.interleave_cycle,
        deterministic=self.deterministic)
    host_seed = tf.constant(
        self.seed * 100003 + input_context.input_pipeline_id, tf.int64)
    known = self._known()

    @records.no_autograph
    def prepare(epoch, index, raw):
      jpeg, boxes, classes, crowd, pngs, _, height, width = self._parse(
          raw, known)
      image = tf.io.decode_jpeg(jpeg, channels=3)
      masks = decode_masks(pngs, tf.shape(image)[0], tf.shape(image)[1])
      alone = tf.logical_not(crowd)  # skip_crowd_during_training.
      del height, width
      seed = tf.stack([host_seed, epoch * 2**32 + index])
      return train_example(
          image, tf.boolean_mask(boxes, alone), tf.boolean_mask(classes, alone),
          tf.boolean_mask(masks, alone), seed, geometry=geometry,
          anchors=anchors)

    ds = ds.map(prepare, num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=self.deterministic)
    ds = ds.group_by_window(
        key_func=lambda x: tf.cast(is_landscape(x), tf.int64),
        reduce_func=lambda _, window: window.batch(batch, drop_remainder=True),
        window_size=batch)
    # Whole batches: say so in the static shapes (group_by_window drops it).
    ds = ds.map(records.no_autograph(lambda x: {
        k: tf.ensure_shape(v, [batch] + v.shape[1:]) for k, v in x.items()}))
    return ds.prefetch(tf.data.AUTOTUNE).with_options(
        self._options(self.deterministic))

  def _orientation_counts(self, num_pipelines: int) -> list[tuple]:
    if num_pipelines not in self._orientations:
      self._orientations[num_pipelines] = orientation_counts(
          records.list_files(self.eval_files), num_pipelines)
    return self._orientations[num_pipelines]

  def eval_steps(self, *, num_pipelines: int, global_batch_size: int) -> int:
    """Steps that let every host cover its images in batches of one
    orientation each."""
    if self.synthetic:
      return 1
    # A step takes per_host images of a host, one orientation a replica:
    # whole steps of each orientation always suffice (at most one more
    # than the fewest that would).
    per_host = global_batch_size // num_pipelines
    return max(1, max(batches_needed(c, per_host)
                      for c in self._orientation_counts(num_pipelines)))

  def num_eval_examples(self) -> int:
    return 0 if self.synthetic else sum(
        sum(c) for c in self._orientation_counts(1))

  def eval_dataset(self, input_context: tf.distribute.InputContext, *,
                   global_batch_size: int, steps: int, cache: bool = True):
    """Per-host eval batches covering each image once: its landscape
    images, then its portrait ones, each run padded to whole batches with
    `mask` 0, then padding batches up to `steps` for every replica."""
    batch = input_context.get_per_replica_batch_size(global_batch_size)
    replicas = (input_context.num_replicas_in_sync //
                input_context.num_input_pipelines)
    geometry = self.geometry
    if self.synthetic:
      return records.synthetic_batches({
          k: np.stack([v.numpy()] * batch)
          for k, v in padding_example(geometry, True).items()})
    files = records.list_files(self.eval_files)
    counts = self._orientation_counts(input_context.num_input_pipelines)[
        input_context.input_pipeline_id]
    known = self._known()

    @records.no_autograph
    def prepare(raw):
      jpeg, *_, image_id, _, _ = self._parse(raw, known)
      return eval_example(tf.io.decode_jpeg(jpeg, channels=3), image_id,
                          geometry=geometry)

    def run(landscape: bool, count: int):
      """The orientation's examples, padded to whole batches, batched."""
      ds = records.host_records(files, input_context,
                                cycle_length=self.interleave_cycle,
                                deterministic=True, shuffle_seed=None)
      ds = ds.filter(records.no_autograph(lambda raw: tf.equal(
          landscape_record(raw), landscape)))
      ds = ds.map(prepare, num_parallel_calls=tf.data.AUTOTUNE,
                  deterministic=True)
      pad = padding_example(geometry, landscape)
      return ds.concatenate(tf.data.Dataset.from_tensors(pad).repeat(
          -(-count // batch) * batch - count)).batch(batch,
                                                     drop_remainder=True)

    empty = tf.data.Dataset.from_tensors(padding_example(
        geometry, True)).repeat(batch).batch(batch, drop_remainder=True)
    ds = run(True, counts[0]).concatenate(run(False, counts[1]))
    ds = ds.concatenate(empty.repeat()).take(steps * replicas)
    if cache and self.eval_cache:
      ds = ds.cache()
    return ds.prefetch(tf.data.AUTOTUNE).with_options(self._options(True))

  def _synthetic_train(self, batch: int):
    """Random landscape images with four boxes each (their masks the
    whole box) through the real target assignment."""
    rng = np.random.default_rng(self.seed)
    geometry = self.geometry
    anchors = (tf.constant(geometry.anchors_for(True)),
               tf.constant(geometry.anchors_for(False)))
    h, w = geometry.padded_size(True)
    examples = []
    for i in range(batch):
      corners = np.sort(rng.uniform(size=(4, 2, 2)), axis=1)
      boxes = np.stack([corners[:, 0, 0], corners[:, 0, 1], corners[:, 1, 0],
                        corners[:, 1, 1]], axis=1).astype(np.float32)
      image = rng.integers(0, 256, (h - 32, w - 32, 3), np.uint8)
      masks = np.ones([4, h - 32, w - 32], np.float32)
      classes = rng.integers(1, COCO_CLASSES, 4).astype(np.int32)
      examples.append(train_example(
          tf.constant(image), tf.constant(boxes), tf.constant(classes),
          tf.constant(masks), tf.constant([self.seed, i], tf.int64),
          geometry=geometry, anchors=anchors))
    return records.synthetic_batches(
        {k: np.stack([e[k].numpy() for e in examples]) for k in examples[0]})
