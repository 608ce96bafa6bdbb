"""ImageNet TFRecords in the TPU schema: the ResNet train and eval pipelines.

Schema (as the TPU reference's converter writes it): `image/encoded` (JPEG
bytes) and `image/class/label` (int64, 1..1000: label 0 is reserved for
"background" in that schema). `label_offset` (default 1) is subtracted so the
model sees 0..num_classes-1.
"""

import os

import numpy as np
import tensorflow as tf

from input_pipeline import image_preprocessing
from input_pipeline import records

IMAGE_KEY = 'image/encoded'
LABEL_KEY = 'image/class/label'
FEATURES = {
    IMAGE_KEY: tf.io.FixedLenFeature((), tf.string),
    LABEL_KEY: tf.io.FixedLenFeature((), tf.int64),
}
CACHE_MODES = ('none', 'raw', 'decoded')
BAD_IMAGE_POLICIES = ('fail', 'skip')
# What an encoded image starts with: JPEG is what the pipeline decodes; the
# others are named when found in its place.
JPEG_MAGIC = b'\xff\xd8\xff'
OTHER_FORMATS = ((b'\x89PNG', 'PNG'), (b'GIF8', 'GIF'), (b'BM', 'BMP'),
                 (b'II*\x00', 'TIFF'), (b'MM\x00*', 'TIFF'),
                 (b'RIFF', 'WEBP or another RIFF format'))


def not_jpeg(data: bytes) -> str | None:
  """Why `data` is not JPEG bytes, judged by its magic bytes (None: JPEG)."""
  if data.startswith(JPEG_MAGIC):
    return None
  for magic, name in OTHER_FORMATS:
    if data.startswith(magic):
      return f'{name} bytes, not JPEG'
  return f'not JPEG bytes (starts {data[:4].hex(" ") or "empty"})'


class ImageNetInput:
  """Builds per-host train and eval datasets for image classification."""

  def __init__(self, *, data_dir: str = '', train_pattern: str = 'train-*',
               eval_pattern: str = 'validation-*',
               image_size: int = 224, num_classes: int = 1000,
               num_train_examples: int = 1281167,
               label_offset: int = 1, cache: str = 'raw',
               eval_cache: bool = True, shuffle_buffer: int = 16384,
               interleave_cycle: int = 64, deterministic: bool = False,
               seed: int = 0, flip: bool = True,
               min_object_covered: float = 0.1,
               area_range: tuple[float, float] = (0.08, 1.0),
               on_bad_image: str = 'fail', synthetic: bool = False,
               threads: int = 0, resize: str = 'bilinear'):
    """Args:
      data_dir: folder (local or gs://) holding the TFRecords.
      train_pattern: glob of the training files inside data_dir.
      eval_pattern: glob of the evaluation files inside data_dir.
      image_size: model input height and width.
      num_classes: number of classes the model predicts.
      num_train_examples: examples in one epoch of the training set (MLPerf
        train_samples; ImageNet's 1,281,167).
      label_offset: subtracted from `image/class/label` (1 for the TPU schema).
      cache: 'none', 'raw' (encoded records in memory) or 'decoded' (decoded
        images in memory: for hosts with few images each).
      eval_cache: keep preprocessed eval batches in memory after the first eval.
      shuffle_buffer: records in the shuffle buffer.
      interleave_cycle: files read in parallel.
      deterministic: reproducible element order (slower; for tests/resume).
      seed: seed of shuffling and augmentation.
      flip: random left-right flips in training.
      min_object_covered: crop argument of `sample_distorted_bounding_box`.
      area_range: crop area range of `sample_distorted_bounding_box`.
      on_bad_image: 'fail' (stop naming the record) or 'skip' (drop and count).
      synthetic: random tensors instead of files, for throughput runs.
      threads: private tf.data thread pool size (0: TensorFlow's default).
      resize: 'bilinear' (TF2 resize; the MLPerf reference's kernel) or
        'bicubic' (Google's v0.7 TPU code: TF1 resize_bicubic, for training
        and eval; the pod configs' default).
    """
    if cache not in CACHE_MODES:
      raise ValueError(f'`cache` must be one of {CACHE_MODES}, got {cache!r}.')
    if resize not in image_preprocessing.RESIZE_METHODS:
      raise ValueError(f'`resize` must be one of '
                       f'{image_preprocessing.RESIZE_METHODS}, got {resize!r}.')
    if on_bad_image not in BAD_IMAGE_POLICIES:
      raise ValueError(f'`on_bad_image` must be one of {BAD_IMAGE_POLICIES}, '
                       f'got {on_bad_image!r}.')
    self.train_files = os.path.join(data_dir, train_pattern)
    self.eval_files = os.path.join(data_dir, eval_pattern)
    self.image_size, self.num_classes = image_size, num_classes
    self.num_train_examples = num_train_examples
    self.label_offset = label_offset
    self.cache, self.eval_cache = cache, eval_cache
    self.shuffle_buffer, self.interleave_cycle = shuffle_buffer, interleave_cycle
    self.deterministic, self.seed, self.flip = deterministic, seed, flip
    self.min_object_covered, self.area_range = min_object_covered, area_range
    self.on_bad_image, self.synthetic, self.threads = (on_bad_image, synthetic,
                                                       threads)
    self.resize = resize
    self._eval_counts = records.EvalCounts(self.eval_files)

  # -- Checks run before any compute ---------------------------------------

  def check(self) -> None:
    """Fails fast on missing files or a wrong schema."""
    if self.synthetic:
      return
    fix = ('The pipeline expects the ImageNet TPU schema (JPEG images); '
           'rebuild the files with tools/convert_image_folder.py.')
    for pattern in (self.train_files, self.eval_files):
      files = records.list_files(pattern)
      records.check_record_files(files)
      first = records.check_features(files[0], FEATURES, fix=fix)
      problem = not_jpeg(first[IMAGE_KEY].bytes_list.value[0])
      if problem:
        raise ValueError(f'{files[0]}, record 0: {IMAGE_KEY} holds {problem}. '
                         f'{fix}')

  def steps_per_epoch(self, global_batch_size: int) -> float:
    return self.num_train_examples / global_batch_size

  # -- Datasets ---------------------------------------------------------------

  def _options(self) -> tf.data.Options:
    options = tf.data.Options()
    options.deterministic = self.deterministic
    if self.threads:
      options.threading.private_threadpool_size = self.threads
    options.autotune.enabled = True
    return options

  def _parse(self, raw):
    parsed = tf.io.parse_single_example(raw, FEATURES)
    label = parsed[LABEL_KEY] - self.label_offset
    # An out-of-range label would one-hot to all zeros and train silently.
    in_range = tf.logical_and(label >= 0, label < self.num_classes)
    check = tf.debugging.Assert(in_range, [
        f'{LABEL_KEY} minus label_offset ({self.label_offset}) must lie in '
        f'[0, num_classes={self.num_classes}); check those two bindings. '
        'Got:', label])
    with tf.control_dependencies([check]):
      return parsed[IMAGE_KEY], tf.cast(label, tf.int32)

  def _drop_bad(self, ds):
    return ds.ignore_errors(log_warning=True) if self.on_bad_image == 'skip' \
        else ds

  def train_dataset(self, input_context: tf.distribute.InputContext, *,
                    global_batch_size: int, start_step: int = 0):
    """Per-host training batches, starting at training step `start_step`.

    The stream is a pure function of the seed in deterministic mode: epoch
    e's order depends only on (seed, e), and each example's crop on (host,
    e, its place in the epoch). A run resumed at step s skips the earlier
    epochs whole and reads at most one epoch to reach its position, so it
    sees exactly what an uninterrupted run would have (when no image is
    skipped as undecodable) in time that does not grow with s.
    """
    batch = input_context.get_per_replica_batch_size(global_batch_size)
    if self.synthetic:
      return self._synthetic(batch)
    replicas_per_host = (input_context.num_replicas_in_sync //
                         input_context.num_input_pipelines)
    start_record = start_step * batch * replicas_per_host
    image_size = self.image_size
    decoded = self.cache == 'decoded'

    files = records.list_files(self.train_files)

    def parsed(epoch):
      ds = records.host_records(
          files, input_context, cycle_length=self.interleave_cycle,
          deterministic=self.deterministic,
          shuffle_seed=records.epoch_seed(self.seed, epoch))
      ds = ds.map(records.no_autograph(self._parse),
                  num_parallel_calls=tf.data.AUTOTUNE)
      if decoded:
        ds = self._drop_bad(ds.map(records.no_autograph(
            lambda img, label: (tf.io.decode_jpeg(img, channels=3), label)),
            num_parallel_calls=tf.data.AUTOTUNE))
      return ds

    if self.cache != 'none':
      cached = parsed(0).cache()  # Read once; later epochs from memory.
      epoch_records = lambda epoch: cached
    else:
      epoch_records = parsed

    def one_epoch(epoch):
      return epoch_records(epoch).shuffle(
          self.shuffle_buffer, seed=records.epoch_seed(self.seed, epoch),
          reshuffle_each_iteration=False)

    ds = records.epochs(
        one_epoch, start_record=start_record,
        count_records=lambda: records.host_record_count(files, input_context))

    # Hosts number their examples alike: the host id keeps their crops apart.
    host_seed = tf.constant(
        self.seed * 100003 + input_context.input_pipeline_id, tf.int64)

    @records.no_autograph
    def preprocess(epoch, index, example):
      image, label = example
      seed = tf.stack([host_seed, epoch * 2**32 + index])
      image = image_preprocessing.train_image(
          image, seed, image_size=image_size, flip=self.flip,
          min_object_covered=self.min_object_covered,
          area_range=self.area_range, decoded=decoded, resize=self.resize)
      return {'image': image, 'label': label}

    ds = ds.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=self.deterministic)
    if not decoded:
      ds = self._drop_bad(ds)
    ds = ds.batch(batch, drop_remainder=True)
    return ds.prefetch(tf.data.AUTOTUNE).with_options(self._options())

  def eval_steps(self, *, num_pipelines: int, global_batch_size: int) -> int:
    """Eval steps so that every host covers all its examples once."""
    if self.synthetic:
      return 1
    return self._eval_counts.steps(num_pipelines=num_pipelines,
                                   global_batch_size=global_batch_size)

  def num_eval_examples(self) -> int:
    """Real eval examples over all hosts (reuses any per-host count)."""
    return 0 if self.synthetic else self._eval_counts.total()

  def eval_dataset(self, input_context: tf.distribute.InputContext, *,
                   global_batch_size: int, steps: int, cache: bool = True):
    """Per-host eval batches covering each example once, padded with mask 0.

    Every replica receives exactly `steps` batches; padding examples have an
    all-zero image and `mask` 0, real ones `mask` 1. With `cache` (and the
    `eval_cache` binding) the batches stay in memory after the first pass.
    """
    batch = input_context.get_per_replica_batch_size(global_batch_size)
    if self.synthetic:
      return self._synthetic(batch, mask=True)
    replicas_per_host = (input_context.num_replicas_in_sync //
                         input_context.num_input_pipelines)
    total = steps * batch * replicas_per_host
    image_size = self.image_size

    # Always in file order: inference numbers samples by their position, and
    # an audit compares responses across runs.
    ds = records.host_records(
        records.list_files(self.eval_files), input_context,
        cycle_length=self.interleave_cycle, deterministic=True,
        shuffle_seed=None)

    @records.no_autograph
    def preprocess(raw):
      image_bytes, label = self._parse(raw)
      image = image_preprocessing.eval_image(image_bytes,
                                             image_size=image_size,
                                             resize=self.resize)
      return {'image': image, 'label': label, 'mask': tf.constant(1.0)}

    ds = self._drop_bad(ds.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE,
                               deterministic=True))
    padding = tf.data.Dataset.from_tensors({
        'image': tf.zeros([image_size, image_size, 3], tf.float32),
        'label': tf.constant(0, tf.int32),
        'mask': tf.constant(0.0),
    }).repeat()
    ds = ds.concatenate(padding).take(total).batch(batch, drop_remainder=True)
    if self.eval_cache and cache:
      ds = ds.cache()
    options = self._options()
    options.deterministic = True
    return ds.prefetch(tf.data.AUTOTUNE).with_options(options)

  def _synthetic(self, batch: int, mask: bool = False):
    rng = np.random.default_rng(self.seed)
    element = {
        'image': tf.constant(rng.standard_normal(
            (batch, self.image_size, self.image_size, 3), np.float32)),
        'label': tf.constant(rng.integers(0, self.num_classes, (batch,),
                                          np.int32)),
    }
    if mask:
      element['mask'] = tf.ones([batch], tf.float32)
    return tf.data.Dataset.from_tensors(element).repeat()

  # -- Diagnosis --------------------------------------------------------------

  def find_undecodable(self, limit: int = 5) -> list[str]:
    """Scans train and eval files for images that are not JPEG (by their
    magic bytes: decode_jpeg also accepts PNG, the pipeline's crop-decode
    does not) or that JPEG decoding rejects.

    Returns:
      Up to `limit` descriptions "file, record N: problem".
    """
    bad = []
    files = dict.fromkeys(records.list_files(self.train_files) +
                          records.list_files(self.eval_files))
    for path in files:
      for i, raw in enumerate(tf.data.TFRecordDataset([path])):
        image = tf.io.parse_single_example(raw, FEATURES)[IMAGE_KEY]
        problem = not_jpeg(image.numpy())
        if problem:
          problem = f'{IMAGE_KEY} holds {problem}'
        else:
          try:
            tf.io.decode_jpeg(image, channels=3)
          except tf.errors.InvalidArgumentError as e:
            problem = e.message.splitlines()[0]
        if problem:
          bad.append(f'{path}, record {i}: {problem}')
          if len(bad) >= limit:
            return bad
    return bad
