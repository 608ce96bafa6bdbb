"""Click records (Criteo, MovieLens as clicks) for DLRM: per-host train and
eval datasets.

The records tools/convert_criteo.py and tools/build_dlrm_quickstart_data.py
write: one tf.train.Example per impression with
  label   int64 [1]             1 clicked, 0 not
  dense   float [num_dense]     Criteo: log(max(x, 0) + 1) of the counts
  sparse  int64 [num_tables]    the row of each feature's table
and `metadata.json` beside them (`METADATA_FILE`): the feature names, each
table's rows, the example counts and where the data came from.

Training batches are parsed whole (tf.io.parse_example on a batch of
records: one op a batch, no per-example work in Python or in tf.data),
after a shuffle of the records; every host reads its own files
(records.shuffled_epochs). Evaluation reads every host's records once, in
file order, padded to whole batches with `mask` 0.
"""

import json
import os

import numpy as np
import tensorflow as tf

from input_pipeline import records

METADATA_FILE = 'metadata.json'
FIX = ('The DLRM pipeline reads click records: build them with python -m '
       'tools.convert_criteo (Criteo) or python -m '
       'tools.build_dlrm_quickstart_data.')


# The synthetic mode's data: Criteo Terabyte as Google's v0.7 DLRM saw it
# (13 counts, 26 categorical features with the vocabularies of its
# run_and_time.sh --vocab_sizes_embed, the logs' train_samples and
# eval_samples), each vocabulary capped at SYNTHETIC_MAX_ROWS: a step's cost
# does not grow with a table's rows (a lookup gathers rows, a sparse update
# writes the looked-up ones), and the 13 tables a pod all-reduces are all
# smaller than the cap, so the capped tables all-reduce the same gradients.
CRITEO_TERABYTE_VOCAB_SIZES = (
    39884406, 39043, 17289, 7420, 20263, 3, 7120, 1543, 63, 38532951,
    2953546, 403346, 10, 2208, 11938, 155, 4, 976, 14, 39979771, 25641295,
    39664984, 585935, 12972, 108, 36)
SYNTHETIC_MAX_ROWS = 65536


def synthetic_metadata() -> dict:
  return {'dense_features': [f'int-feature-{i}' for i in range(1, 14)],
          'sparse_features': [f'categorical-feature-{i}'
                              for i in range(14, 40)],
          'vocab_sizes': [min(v, SYNTHETIC_MAX_ROWS)
                          for v in CRITEO_TERABYTE_VOCAB_SIZES],
          'train_examples': 4195197692, 'eval_examples': 89137318,
          'source': 'synthetic (input_pipeline/clicks.py)'}


def features(num_dense: int, num_tables: int) -> dict:
  return {'label': tf.io.FixedLenFeature([1], tf.int64),
          'dense': tf.io.FixedLenFeature([num_dense], tf.float32),
          'sparse': tf.io.FixedLenFeature([num_tables], tf.int64)}


def read_metadata(data_dir: str) -> dict:
  """metadata.json of a click-records folder (ValueError naming the file
  when it is missing or incomplete)."""
  path = os.path.join(data_dir, METADATA_FILE)
  if not tf.io.gfile.exists(path):
    raise ValueError(f'{path} is missing. {FIX}')
  with tf.io.gfile.GFile(path) as f:
    metadata = json.load(f)
  missing = [k for k in ('dense_features', 'sparse_features', 'vocab_sizes',
                         'train_examples', 'eval_examples')
             if k not in metadata]
  if missing:
    raise ValueError(f'{path} lacks {missing}. {FIX}')
  if len(metadata['vocab_sizes']) != len(metadata['sparse_features']):
    raise ValueError(f'{path}: {len(metadata["vocab_sizes"])} vocab sizes '
                     f'for {len(metadata["sparse_features"])} sparse '
                     f'features. {FIX}')
  return metadata


class ClickInput:
  """Per-host click-record datasets. Implements training.task.TaskData."""

  def __init__(self, *, data_dir: str = '', train_pattern: str = 'train-*',
               eval_pattern: str = 'eval-*', shuffle_buffer: int = 65536,
               interleave_cycle: int = 16, eval_cache: bool = True,
               deterministic: bool = False, seed: int = 0,
               synthetic: bool = False):
    """Args:
      data_dir: folder (local or gs://) with the records and metadata.json.
      train_pattern, eval_pattern: globs of the record files in data_dir.
      shuffle_buffer: records shuffled before batching.
      interleave_cycle: files read in parallel.
      eval_cache: keep the eval batches in memory after the first pass.
      deterministic: reproducible element order (slower).
      seed: shuffling.
      synthetic: random batches of Criteo Terabyte's shapes instead of
        files (synthetic_metadata(); its tables capped at
        SYNTHETIC_MAX_ROWS); the time-to-train model costs a step so.
    """
    self.data_dir = data_dir
    self.synthetic = synthetic
    self.train_files = os.path.join(data_dir, train_pattern)
    self.eval_files = os.path.join(data_dir, eval_pattern)
    self.shuffle_buffer, self.interleave_cycle = (shuffle_buffer,
                                                  interleave_cycle)
    self.eval_cache, self.deterministic, self.seed = (eval_cache,
                                                      deterministic, seed)
    self._metadata = None
    self._eval_counts = records.EvalCounts(self.eval_files)

  @property
  def metadata(self) -> dict:
    if self._metadata is None:
      self._metadata = (synthetic_metadata() if self.synthetic else
                        read_metadata(self.data_dir))
    return self._metadata

  @property
  def vocab_sizes(self) -> list[int]:
    return [int(v) for v in self.metadata['vocab_sizes']]

  @property
  def num_dense(self) -> int:
    return len(self.metadata['dense_features'])

  @property
  def num_train_examples(self) -> int:
    return int(self.metadata['train_examples'])

  def _features(self) -> dict:
    return features(self.num_dense, len(self.vocab_sizes))

  def check(self) -> None:
    """Fails fast on missing files or a wrong schema."""
    if self.synthetic:
      return
    for pattern in (self.train_files, self.eval_files):
      files = records.list_files(pattern)
      records.check_record_files(files)
      records.check_features(files[0], self._features(), fix=FIX)

  def steps_per_epoch(self, global_batch_size: int) -> float:
    return self.num_train_examples / global_batch_size

  def _options(self) -> tf.data.Options:
    options = tf.data.Options()
    options.deterministic = self.deterministic
    options.autotune.enabled = True
    return options

  def _parse_batch(self, raw):
    f = tf.io.parse_example(raw, self._features())
    return {'dense': f['dense'], 'sparse': f['sparse'],
            'label': tf.cast(f['label'][:, 0], tf.float32)}

  def train_dataset(self, input_context: tf.distribute.InputContext, *,
                    global_batch_size: int, start_step: int = 0):
    """Per-replica training batches from this host's files, positioned at
    training step `start_step` (records.shuffled_epochs)."""
    batch = input_context.get_per_replica_batch_size(global_batch_size)
    if self.synthetic:
      return self._synthetic(batch)
    ds = records.shuffled_epochs(
        records.list_files(self.train_files), input_context, seed=self.seed,
        start_step=start_step, per_replica_batch=batch,
        shuffle_buffer=self.shuffle_buffer,
        cycle_length=self.interleave_cycle, deterministic=self.deterministic)
    ds = ds.map(records.no_autograph(lambda epoch, index, raw: raw))
    ds = ds.batch(batch, drop_remainder=True)
    ds = ds.map(records.no_autograph(self._parse_batch),
                num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=self.deterministic)
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
    """Per-replica eval batches covering each of this host's records once,
    in file order, padded with `mask` 0 (label 0, ids 0)."""
    batch = input_context.get_per_replica_batch_size(global_batch_size)
    if self.synthetic:
      return self._synthetic(batch, mask=True)
    ds = records.host_records(
        records.list_files(self.eval_files), input_context,
        cycle_length=self.interleave_cycle, deterministic=True,
        shuffle_seed=None)
    spec = self._features()

    @records.no_autograph
    def parse(raw):
      f = tf.io.parse_single_example(raw, spec)
      return {'dense': f['dense'], 'sparse': f['sparse'],
              'label': tf.cast(f['label'][0], tf.float32),
              'mask': tf.constant(1.0)}

    ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=True)
    padding = {'dense': tf.zeros([self.num_dense]),
               'sparse': tf.zeros([len(self.vocab_sizes)], tf.int64),
               'label': tf.constant(0.0), 'mask': tf.constant(0.0)}
    return records.padded_eval_batches(
        ds, padding, input_context, per_replica_batch=batch, steps=steps,
        cache=cache and self.eval_cache)

  def _synthetic(self, batch: int, mask: bool = False):
    rng = np.random.default_rng(self.seed)
    element = {
        'dense': rng.exponential(size=(batch, self.num_dense)).astype(
            np.float32),
        'sparse': np.stack([rng.integers(0, v, batch)
                            for v in self.vocab_sizes], axis=1),
        'label': rng.integers(0, 2, batch).astype(np.float32)}
    if mask:
      element['mask'] = np.ones(batch, np.float32)
    return records.synthetic_batches(element)
