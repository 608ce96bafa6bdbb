"""TFRecord file discovery, per-host sharding and validation."""

import concurrent.futures
import math
import re

import numpy as np
import tensorflow as tf

from core import error_text


def list_files(file_pattern: str) -> list[str]:
  """Sorted files matching a glob (local or gs://).

  Raises:
    FileNotFoundError: naming the glob when nothing matches.
  """
  files = sorted(tf.io.gfile.glob(file_pattern))
  if not files:
    raise FileNotFoundError(
        f'No input files match {file_pattern!r}. Check the DATA_DIR gin macro '
        'or build the data first (docs/data.md; the quickstarts: make '
        'quickstart and friends).')
  return files


def host_shard(files: list[str],
               input_context: tf.distribute.InputContext | None):
  """This input pipeline's files and, when files are fewer than hosts, a record shard.

  Returns:
    (files, record_shard) where record_shard is None (shard by file) or
    (num_shards, index) to apply to the records of all files.
  """
  if input_context is None or input_context.num_input_pipelines == 1:
    return files, None
  n, i = input_context.num_input_pipelines, input_context.input_pipeline_id
  if len(files) >= n:
    return files[i::n], None
  return files, (n, i)


def per_host_counts(files: list[str], num_pipelines: int) -> list[int]:
  """Records each input pipeline reads under `host_shard`, for every pipeline."""
  if len(files) >= num_pipelines:
    return [count_records(files[i::num_pipelines]) for i in range(num_pipelines)]
  total = count_records(files)
  return [len(range(i, total, num_pipelines)) for i in range(num_pipelines)]


def host_record_count(files: list[str],
                      input_context: tf.distribute.InputContext | None) -> int:
  """Records this input pipeline reads from `files` under `host_shard`."""
  mine, record_shard = host_shard(files, input_context)
  if record_shard is None:
    return count_records(mine)
  n, i = record_shard
  return len(range(i, count_records(mine), n))


def count_records(files: list[str]) -> int:
  """Number of records in `files` (reads them once, no parsing)."""
  if not files:
    return 0
  return int(tf.data.TFRecordDataset(files).reduce(
      tf.constant(0, tf.int64), lambda n, _: n + 1))


def check_features(path: str, features: dict, *, fix: str) -> dict:
  """Parses the first record of `path`: each feature present, each length right.

  Args:
    path: a TFRecord file.
    features: name -> tf.io.FixedLenFeature (its length checked) or
      tf.io.VarLenFeature (any length).
    fix: what the user should do, appended to the message.

  Returns:
    The first record's features (tf.train.Feature by name).

  Raises:
    ValueError: naming the file, the feature and, for a length, both lengths.
  """
  for raw in tf.data.TFRecordDataset([path]).take(1):
    present = tf.train.Example.FromString(raw.numpy()).features.feature
    for name, spec in features.items():
      if name not in present:
        raise ValueError(f'Record 0 of {path} has no feature {name!r} (it has '
                         f'{sorted(present)}). {fix}')
      if isinstance(spec, tf.io.VarLenFeature):
        continue
      f = present[name]
      length = len(f.int64_list.value or f.float_list.value or
                   f.bytes_list.value)
      want = int(np.prod(spec.shape))  # A scalar feature holds one value.
      if length != want:
        raise ValueError(f'Feature {name!r} of record 0 of {path} has {length} '
                         f'values but the input expects {want}. {fix}')
    return present
  raise ValueError(f'{path} holds no records.')


# TensorFlow's words for a bad record -> ours.
_RECORD_ERRORS = (
    (re.compile(r'corrupted record at (\d+) \(Is this even a TFRecord file\?\)'),
     'not a TFRecord file (no valid record header at byte {0})'),
    (re.compile(r'corrupted record at (\d+)'),
     'the record at byte {0} fails its checksum (the bytes were changed)'),
    (re.compile(r'truncated record at (\d+)'),
     'the file ends inside the record at byte {0} (truncated)'),
)


def _first_line(error: Exception) -> str:
  """The cause of a record-reading error in our words; other errors'
  first line without TensorFlow's function-node and op decorations, cut at
  a word (the whole text stays in the exception chain for --verbose)."""
  message = getattr(error, 'message', None) or str(error)
  for pattern, words in _RECORD_ERRORS:
    found = pattern.search(message)
    if found:
      return words.format(*found.groups())
  return error_text.one_line(error)


def check_record_files(files: list[str], *, threads: int = 32) -> None:
  """Reads the first record of every file, in parallel, before any compute.

  Raises:
    ValueError: naming the files that are not TFRecord files (or whose
      first record is damaged).
  """
  def first_record_error(path):
    try:
      for _ in tf.data.TFRecordDataset([path]).take(1):
        pass
    except tf.errors.OpError as e:
      return f'{path} ({_first_line(e)})'
    return None

  with concurrent.futures.ThreadPoolExecutor(
      max(1, min(threads, len(files)))) as pool:
    bad = [b for b in pool.map(first_record_error, files) if b]
  if bad:
    more = f' and {len(bad) - 3} more' if len(bad) > 3 else ''
    raise ValueError(
        f'Not TFRecord files: {"; ".join(bad[:3])}{more}. Remove them from '
        'DATA_DIR or narrow the file pattern to the TFRecord shards.')


def find_damaged_record(files: list[str]) -> str | None:
  """The first damaged record in `files`: "file, record N: error", or None.

  Each file is counted in one pass (C++); only a file that fails is read
  again record by record to say where.
  """
  for path in files:
    try:
      count_records([path])
      continue
    except tf.errors.OpError:
      pass
    index = 0
    try:
      for _ in tf.data.TFRecordDataset([path]):
        index += 1
    except tf.errors.OpError as e:
      return f'{path}, record {index}: {_first_line(e)}'
  return None


def explain_data_loss(error: Exception, patterns) -> str | None:
  """For a corrupted-record error of the input pipeline: a message naming the
  file and record (None for other errors)."""
  if not isinstance(error, tf.errors.DataLossError):
    return None
  files = [f for pattern in patterns for f in list_files(pattern)]
  where = find_damaged_record(files)
  if where is None:
    return None
  return (f'Damaged TFRecord data: {where}. Rebuild or replace that file '
          '(its other records may be fine: nothing skips them for you).')


def no_autograph(fn):
  """`fn`, for a tf.data function: traced as the Python it is.

  tf.data converts its functions with AutoGraph, which converts every
  function they call; these pipelines branch only on Python values, and
  converting them costs more than tracing them (docs/benchmarks-history.md,
  "Start-up")."""
  return tf.autograph.experimental.do_not_convert(fn)


def interleave_files(files: list[str], *, cycle_length: int,
                     deterministic: bool, shuffle_seed: int | None):
  """Records of `files` read in parallel, optionally in a shuffled file order."""
  ds = tf.data.Dataset.from_tensor_slices(files)
  if shuffle_seed is not None:
    ds = ds.shuffle(len(files), seed=shuffle_seed)
  return ds.interleave(
      no_autograph(
          lambda f: tf.data.TFRecordDataset(f, buffer_size=8 * 1024 * 1024)),
      cycle_length=min(cycle_length, len(files)), block_length=1,
      num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)


def host_records(files: list[str],
                 input_context: tf.distribute.InputContext | None, *,
                 cycle_length: int, deterministic: bool,
                 shuffle_seed) -> tf.data.Dataset:
  """This input pipeline's records: its files (or record shard) read in
  parallel, the file order shuffled by `shuffle_seed` (None: file order)."""
  mine, record_shard = host_shard(files, input_context)
  ds = interleave_files(mine, cycle_length=cycle_length,
                        deterministic=deterministic, shuffle_seed=shuffle_seed)
  return ds.shard(*record_shard) if record_shard else ds


def eval_steps(counts: list[int], per_host_batch: int) -> int:
  """Eval steps that let every host cover all of its examples."""
  return max(1, max(math.ceil(c / per_host_batch) for c in counts))


def dealt_eval_steps(total: int, *, num_pipelines: int,
                     global_batch_size: int) -> int:
  """Eval steps for `total` examples dealt to the pipelines in turn
  (example i to pipeline i mod N, as `Dataset.shard` deals them)."""
  counts = [len(range(i, total, num_pipelines)) for i in range(num_pipelines)]
  return eval_steps(counts, global_batch_size // num_pipelines)


class EvalCounts:
  """The eval records of `files` each of N input pipelines reads, counted
  once per N (reading the files, no parsing) and then kept."""

  def __init__(self, files: str | list[str]):
    self._files = files
    self._counts: dict[int, list[int]] = {}

  def per_pipeline(self, num_pipelines: int) -> list[int]:
    if num_pipelines not in self._counts:
      self._counts[num_pipelines] = per_host_counts(list_files(self._files),
                                                    num_pipelines)
    return self._counts[num_pipelines]

  def steps(self, *, num_pipelines: int, global_batch_size: int) -> int:
    """Eval steps that let every pipeline cover all of its records."""
    return eval_steps(self.per_pipeline(num_pipelines),
                      global_batch_size // num_pipelines)

  def total(self) -> int:
    """Records over all pipelines (reuses any count already made)."""
    counts = next(iter(self._counts.values()), None)
    return sum(counts if counts is not None else self.per_pipeline(1))


def epoch_seed(seed: int, epoch) -> tf.Tensor:
  """The shuffling seed of one epoch: a function of (seed, epoch) only."""
  return tf.constant(seed, tf.int64) * 1000003 + tf.cast(epoch, tf.int64)


def epochs(one_epoch, *, start_record: int, count_records) -> tf.data.Dataset:
  """Endless epochs of records, positioned at `start_record`, in time that
  does not grow with it.

  Args:
    one_epoch: epoch (int64 tensor) -> the dataset of that epoch's records, in
      an order that depends only on the epoch (shuffle with `epoch_seed`).
    start_record: records already consumed (a resumed run's position).
    count_records: () -> the records in one epoch; called only when
      start_record > 0. The epochs before the position are skipped whole and
      at most one epoch is read to reach it.

  Returns:
    (epoch, index within the epoch, record) elements: the pair keys
    per-example randomness, so a resumed run draws what an uninterrupted one
    would.
  """
  start_epoch, offset = 0, 0
  if start_record:
    size = count_records()
    if not size:
      raise ValueError('The training files hold no records for this host.')
    start_epoch, offset = divmod(start_record, size)
  ds = tf.data.Dataset.range(start_epoch, 2**62).flat_map(no_autograph(
      lambda e: one_epoch(e).enumerate().map(no_autograph(
          lambda i, record: (e, i, record)))))
  return ds.skip(offset)


def shuffled_epochs(files: list[str],
                    input_context: tf.distribute.InputContext, *,
                    seed: int, start_step: int, per_replica_batch: int,
                    shuffle_buffer: int, cycle_length: int,
                    deterministic: bool) -> tf.data.Dataset:
  """This pipeline's training records, endless epochs positioned at training
  step `start_step`: epoch e's file and record order from (seed, e) only.

  Returns:
    `epochs`' (epoch, index, record) elements.
  """
  replicas_per_host = (input_context.num_replicas_in_sync //
                       input_context.num_input_pipelines)

  def one_epoch(epoch):
    epoch_shuffle = epoch_seed(seed, epoch)
    return host_records(
        files, input_context, cycle_length=cycle_length,
        deterministic=deterministic, shuffle_seed=epoch_shuffle).shuffle(
            shuffle_buffer, seed=epoch_shuffle, reshuffle_each_iteration=False)

  return epochs(
      one_epoch,
      start_record=start_step * per_replica_batch * replicas_per_host,
      count_records=lambda: host_record_count(files, input_context))


def padded_eval_batches(ds: tf.data.Dataset, padding: dict,
                        input_context: tf.distribute.InputContext, *,
                        per_replica_batch: int, steps: int,
                        cache: bool) -> tf.data.Dataset:
  """This pipeline's eval examples then `padding` (mask 0), cut to exactly
  `steps` batches for each of its replicas, in order; with `cache`, kept in
  memory after the first pass."""
  replicas_per_host = (input_context.num_replicas_in_sync //
                       input_context.num_input_pipelines)
  ds = ds.concatenate(tf.data.Dataset.from_tensors(padding).repeat())
  ds = ds.take(steps * per_replica_batch * replicas_per_host)
  ds = ds.batch(per_replica_batch, drop_remainder=True)
  if cache:
    ds = ds.cache()
  options = tf.data.Options()
  options.deterministic = True
  return ds.prefetch(tf.data.AUTOTUNE).with_options(options)


def synthetic_batches(element: dict) -> tf.data.Dataset:
  """A pipeline's synthetic mode: one batch of the real batches' shapes and
  dtypes (numpy arrays or tensors), repeated; no files read."""
  return tf.data.Dataset.from_tensors(
      {k: tf.constant(v) for k, v in element.items()}).repeat()
