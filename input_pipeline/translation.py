"""Transformer input: packed training rows and exact eval over every pair.

Reads what tools/build_translation_data.py writes (its docstring lists the
files). Training: packed rows (input_pipeline/packing.py features), files
sharded per host (records when files < hosts), shuffled file order, record
shuffle, endless epochs positioned at a resumed step. Eval: every eval pair
once, sharded by record over hosts, padded to whole batches with `mask` 0
and `index` -1.
"""

import json
import os

import numpy as np
import tensorflow as tf

from input_pipeline import bpe
from input_pipeline import packing
from input_pipeline import records
from input_pipeline import subwords

# The synthetic mode's data, as MLPerf v0.7's (Google's logs and Lingvo's
# params: 33,708 subwords, rows of 256 ids packed from pairs of at most 80,
# newstest2014's 3,003 pairs with sources of at most 97 ids).
SYNTHETIC_METADATA = {'vocab_size': 33708, 'packed_length': 256,
                      'max_length': 80, 'eval_length': 97,
                      'train_rows': 566340, 'eval_pairs': 3003}


class TranslationInput:
  """Builds per-host Transformer train and eval datasets. Implements
  training.task.TaskData."""

  # How its data is built, for the messages that say so.
  build_flags = ''
  quickstart_data = 'transformer_data'
  # The synthetic mode's metadata.json.
  synthetic_metadata = SYNTHETIC_METADATA

  def __init__(self, *, data_dir: str, shuffle_buffer: int = 1024,
               cycle_length: int = 8, deterministic: bool = False,
               seed: int = 0, synthetic: bool = False):
    """Args:
      data_dir: tools/build_translation_data.py's output_dir (local or gs://).
      shuffle_buffer: training rows in the shuffle buffer.
      cycle_length: files read in parallel (at most 8).
      deterministic: reproducible order (for tests and exact resume).
      seed: shuffling seed.
      synthetic: random batches of MLPerf's shapes (SYNTHETIC_METADATA)
        instead of files; the time-to-train model costs a step so.
    """
    self.data_dir = data_dir
    self.synthetic = synthetic
    self.train_files = os.path.join(data_dir, 'train-*')
    self.eval_files = os.path.join(data_dir, 'eval-*')
    self.vocab_file = os.path.join(data_dir, 'vocab.txt')
    self.references_file = os.path.join(data_dir, 'eval_references.txt')
    self.shuffle_buffer, self.cycle_length = shuffle_buffer, min(cycle_length, 8)
    self.deterministic, self.seed = deterministic, seed
    self._metadata = None
    self._vocab = None

  @property
  def metadata(self) -> dict:
    if self._metadata is None and self.synthetic:
      self._metadata = dict(self.synthetic_metadata)
    if self._metadata is None:
      path = os.path.join(self.data_dir, 'metadata.json')
      if not tf.io.gfile.exists(path):
        raise FileNotFoundError(
            f'{path} does not exist: DATA_DIR must be the output_dir of '
            f'tools/build_translation_data.py{self.build_flags} (make '
            f'{self.quickstart_data} builds the quickstart\'s).')
      with tf.io.gfile.GFile(path) as f:
        self._metadata = json.load(f)
    return self._metadata

  @property
  def vocab(self) -> subwords.SubwordVocab | bpe.BpeVocab:
    """The data's vocabulary, read once: this suite's subwords, or the
    GNMT reference's BPE tokens (metadata `vocab_format`)."""
    if self._vocab is None:
      if self.metadata.get('vocab_format', 'subword') == 'bpe':
        self._vocab = bpe.BpeVocab.load(
            self.vocab_file, lang=self.metadata.get('target_lang', 'de'))
      else:
        self._vocab = subwords.SubwordVocab.load(self.vocab_file)
    return self._vocab

  @property
  def num_train_examples(self) -> int:
    """Packed rows: MLPerf's train_samples (Google's v0.7 logs 566,340)."""
    return self.metadata['train_rows']

  @property
  def packed_length(self) -> int:
    return self.metadata['packed_length']

  @property
  def eval_length(self) -> int:
    return self.metadata['eval_length']

  @property
  def max_length(self) -> int:
    return self.metadata['max_length']

  def _train_features(self):
    return {k: tf.io.FixedLenFeature([self.packed_length], tf.int64)
            for k in packing.FEATURES}

  def _eval_features(self):
    return {'inputs': tf.io.FixedLenFeature([self.eval_length], tf.int64),
            'index': tf.io.FixedLenFeature([1], tf.int64)}

  def check(self) -> None:
    """Fails fast on missing files, the wrong features or vocabulary."""
    if self.synthetic:
      return
    fix = ('Rebuild DATA_DIR with tools/build_translation_data.py; its '
           'metadata.json must describe its records.')
    files = records.list_files(self.train_files)
    records.check_record_files(files)
    records.check_features(files[0], self._train_features(), fix=fix)
    self.check_eval(fix)

  def check_eval(self, fix: str) -> None:
    """Fails fast on missing or wrong eval files, vocabulary or references;
    `fix` says how to rebuild."""
    files = records.list_files(self.eval_files)
    records.check_record_files(files)
    records.check_features(files[0], self._eval_features(), fix=fix)
    if len(self.vocab) != self.metadata['vocab_size']:
      raise ValueError(
          f'{self.vocab_file} has {len(self.vocab)} pieces but metadata.json says '
          f'{self.metadata["vocab_size"]}: the data and vocabulary are from '
          'different builds. ' + fix)
    if not tf.io.gfile.exists(self.references_file):
      raise FileNotFoundError(f'{self.references_file} is missing. ' + fix)

  def steps_per_epoch(self, global_batch_size: int) -> float:
    return self.num_train_examples / global_batch_size

  @staticmethod
  def _options(deterministic):
    options = tf.data.Options()
    options.deterministic = deterministic
    return options

  def _parse(self, raw, features):
    example = tf.io.parse_single_example(raw, features)
    return {k: tf.cast(v, tf.int32) for k, v in example.items()}

  def train_dataset(self, input_context: tf.distribute.InputContext, *,
                    global_batch_size: int, start_step: int = 0):
    """Per-replica batches of packed rows, positioned at `start_step`."""
    batch = input_context.get_per_replica_batch_size(global_batch_size)
    if self.synthetic:
      return self._synthetic_train(batch)
    features = self._train_features()
    ds = records.shuffled_epochs(
        records.list_files(self.train_files), input_context, seed=self.seed,
        start_step=start_step, per_replica_batch=batch,
        shuffle_buffer=self.shuffle_buffer, cycle_length=self.cycle_length,
        deterministic=self.deterministic)
    ds = ds.map(records.no_autograph(
        lambda epoch, index, raw: self._parse(raw, features)),
                num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.batch(batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    return ds.with_options(self._options(self.deterministic))

  def num_eval_examples(self) -> int:
    return 0 if self.synthetic else self.metadata['eval_pairs']

  def eval_steps(self, *, num_pipelines: int, global_batch_size: int) -> int:
    if self.synthetic:
      return 1
    return records.dealt_eval_steps(self.num_eval_examples(),
                                    num_pipelines=num_pipelines,
                                    global_batch_size=global_batch_size)

  def eval_dataset(self, input_context: tf.distribute.InputContext, *,
                   global_batch_size: int, steps: int, cache: bool = True):
    """Exactly `steps` batches per replica; padding has mask 0, index -1."""
    batch = input_context.get_per_replica_batch_size(global_batch_size)
    if self.synthetic:
      rng = np.random.default_rng(self.seed)
      inputs = rng.integers(3, self.metadata['vocab_size'],
                            (batch, self.eval_length)).astype(np.int32)
      inputs[:, -1] = subwords.EOS_ID
      return records.synthetic_batches({
          'inputs': inputs, 'index': np.arange(batch, dtype=np.int32),
          'mask': np.ones(batch, np.float32)})
    files = records.list_files(self.eval_files)
    features = self._eval_features()
    ds = tf.data.TFRecordDataset(files)
    ds = ds.shard(input_context.num_input_pipelines,
                  input_context.input_pipeline_id)
    ds = ds.map(records.no_autograph(lambda raw: self._parse(raw, features)))
    ds = ds.map(records.no_autograph(
        lambda x: {'inputs': x['inputs'], 'index': x['index'][0],
                   'mask': tf.constant(1.0)}))
    padding = {'inputs': tf.zeros([self.eval_length], tf.int32),
               'index': tf.constant(-1, tf.int32), 'mask': tf.constant(0.0)}
    return records.padded_eval_batches(ds, padding, input_context,
                                       per_replica_batch=batch, steps=steps,
                                       cache=cache)

  def references(self) -> list[str]:
    """The eval targets, by index."""
    with tf.io.gfile.GFile(self.references_file, 'rb') as f:
      return f.read().decode('utf-8').split('\n')[:self.num_eval_examples()]

  def _synthetic_train(self, batch: int):
    """Packed rows as input_pipeline/packing.py writes them: six pairs of 40
    source and 40 target ids a row (half of max_length each), then padding."""
    rng = np.random.default_rng(self.seed)
    length, pair = self.packed_length, self.max_length // 2
    segments = np.zeros(length, np.int32)
    positions = np.zeros(length, np.int32)
    for k in range(length // pair):
      segments[k * pair:(k + 1) * pair] = k + 1
      positions[k * pair:(k + 1) * pair] = np.arange(pair)
    ids = lambda: rng.integers(3, self.metadata['vocab_size'],
                               (batch, length)).astype(np.int32) * (
                                   segments > 0)
    element = {}
    for side in ('inputs', 'targets'):
      element[side] = ids()
      element[f'{side}_segmentation'] = np.tile(segments, (batch, 1))
      element[f'{side}_position'] = np.tile(positions, (batch, 1))
    return records.synthetic_batches(element)
