"""MLPerf BERT pretraining TFRecords: per-host train stream and exact eval.

Features (tools/create_pretraining_data.py writes them): input_ids,
input_mask, segment_ids (int64 x max_seq_length), masked_lm_positions,
masked_lm_ids (int64 x max_predictions_per_seq), masked_lm_weights (float x
max_predictions_per_seq), next_sentence_labels (int64 x 1).

Training: files sharded per host (records when files < hosts), shuffled file
order, parallel interleave (cycle <= 8; non-deterministic unless
`deterministic`), record shuffle, repeat, per-replica batches. Eval: the first
`num_eval_samples` records in file order, sharded by record across hosts and
padded with zero-weight examples so every sample counts exactly once.
"""

import os

import numpy as np
import tensorflow as tf

from input_pipeline import records

INT_SEQ = ('input_ids', 'input_mask', 'segment_ids')
INT_PRED = ('masked_lm_positions', 'masked_lm_ids')


class BertPretrainingInput:
  """Builds per-host BERT pretraining train and eval datasets."""

  def __init__(self, *, data_dir: str = '', train_pattern: str = 'train-*',
               eval_pattern: str = 'eval-*', max_seq_length: int = 512,
               max_predictions_per_seq: int = 76,
               num_eval_samples: int = 10000, num_train_examples: int = 0,
               shuffle_buffer: int = 1000,
               cycle_length: int = 8, deterministic: bool = False,
               seed: int = 0, synthetic: bool = False):
    """Args:
      data_dir: folder (local or gs://) holding the TFRecords.
      train_pattern: glob of the training files inside data_dir.
      eval_pattern: glob of the evaluation files inside data_dir.
      max_seq_length: tokens a sample (512 in MLPerf).
      max_predictions_per_seq: masked-LM slots a sample (76 in MLPerf).
      num_eval_samples: evaluate on the first this many eval samples (10,000
        in MLPerf; fewer if the files hold fewer).
      num_train_examples: MLPerf train_samples (the samples in the train
        files; 0 when not counted). BERT is scheduled in steps, not epochs.
      shuffle_buffer: training records in the shuffle buffer.
      cycle_length: files read in parallel (at most 8).
      deterministic: reproducible order (for tests and exact resume).
      seed: shuffling seed.
      synthetic: random tensors instead of files, for throughput runs.
    """
    self.train_files = os.path.join(data_dir, train_pattern)
    self.eval_files = os.path.join(data_dir, eval_pattern)
    self.max_seq_length = max_seq_length
    self.max_predictions_per_seq = max_predictions_per_seq
    self.num_eval_samples = num_eval_samples
    self.num_train_examples = num_train_examples
    self.shuffle_buffer, self.cycle_length = shuffle_buffer, min(cycle_length, 8)
    self.deterministic, self.seed, self.synthetic = deterministic, seed, synthetic
    self._eval_total = None
    s, p = max_seq_length, max_predictions_per_seq
    self.features = {
        **{k: tf.io.FixedLenFeature([s], tf.int64) for k in INT_SEQ},
        **{k: tf.io.FixedLenFeature([p], tf.int64) for k in INT_PRED},
        'masked_lm_weights': tf.io.FixedLenFeature([p], tf.float32),
        'next_sentence_labels': tf.io.FixedLenFeature([1], tf.int64),
    }

  def check(self) -> None:
    """Fails fast on missing files or features of the wrong length."""
    if self.synthetic:
      return
    for pattern in (self.train_files, self.eval_files):
      files = records.list_files(pattern)
      records.check_record_files(files)
      records.check_features(
          files[0], self.features,
          fix='Build the data with tools/create_pretraining_data.py and set '
          'max_seq_length / max_predictions_per_seq to the values it used.')

  def steps_per_epoch(self, global_batch_size: int) -> float:
    return self.num_train_examples / global_batch_size

  def _options(self, deterministic):
    options = tf.data.Options()
    options.deterministic = deterministic
    return options

  def _parse(self, raw):
    example = tf.io.parse_single_example(raw, self.features)
    return {k: (v if v.dtype == tf.float32 else tf.cast(v, tf.int32))
            for k, v in example.items()}

  def train_dataset(self, input_context: tf.distribute.InputContext, *,
                    global_batch_size: int, start_step: int = 0):
    """Per-host training batches, positioned at training step `start_step`.

    Epoch e's order depends only on (seed, e); a resumed run skips earlier
    epochs whole (records.epochs), so positioning costs at most one epoch.
    """
    batch = input_context.get_per_replica_batch_size(global_batch_size)
    if self.synthetic:
      return self._synthetic(batch)
    ds = records.shuffled_epochs(
        records.list_files(self.train_files), input_context, seed=self.seed,
        start_step=start_step, per_replica_batch=batch,
        shuffle_buffer=self.shuffle_buffer, cycle_length=self.cycle_length,
        deterministic=self.deterministic)
    ds = ds.map(records.no_autograph(lambda epoch, index, raw:
                                     self._parse(raw)),
                num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.batch(batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    return ds.with_options(self._options(self.deterministic))

  def num_eval_examples(self) -> int:
    """Eval samples over all hosts: num_eval_samples or what the files hold."""
    if self.synthetic:
      return 0
    if self._eval_total is None:
      files = records.list_files(self.eval_files)
      self._eval_total = int(tf.data.TFRecordDataset(files).take(
          self.num_eval_samples).reduce(tf.constant(0, tf.int64),
                                        lambda n, _: n + 1))
    return self._eval_total

  def eval_steps(self, *, num_pipelines: int, global_batch_size: int) -> int:
    if self.synthetic:
      return 1
    return records.dealt_eval_steps(self.num_eval_examples(),
                                    num_pipelines=num_pipelines,
                                    global_batch_size=global_batch_size)

  def eval_dataset(self, input_context: tf.distribute.InputContext, *,
                   global_batch_size: int, steps: int, cache: bool = True):
    """Exactly `steps` batches per replica; padding has weight and mask 0.

    With `cache`, the parsed batches stay in memory after the first pass.
    """
    batch = input_context.get_per_replica_batch_size(global_batch_size)
    if self.synthetic:
      return self._synthetic(batch)
    files = records.list_files(self.eval_files)
    ds = tf.data.TFRecordDataset(files).take(self.num_eval_examples())
    ds = ds.shard(input_context.num_input_pipelines,
                  input_context.input_pipeline_id)
    ds = ds.map(records.no_autograph(
        lambda raw: {**self._parse(raw), 'mask': tf.constant(1.0)}))
    padding = {k: tf.zeros(spec.shape, tf.float32 if spec.dtype == tf.float32
                           else tf.int32) for k, spec in self.features.items()}
    padding['mask'] = tf.constant(0.0)
    return records.padded_eval_batches(ds, padding, input_context,
                                       per_replica_batch=batch, steps=steps,
                                       cache=cache)

  def _synthetic(self, batch: int):
    rng = np.random.default_rng(self.seed)
    s, p = self.max_seq_length, self.max_predictions_per_seq
    element = {
        'input_ids': rng.integers(5, 1000, (batch, s)),
        'input_mask': np.ones((batch, s)),
        'segment_ids': (np.arange(s) >= s // 2).astype(int)[None].repeat(
            batch, 0),
        'masked_lm_positions': np.sort(rng.choice(s, (batch, p))),
        'masked_lm_ids': rng.integers(5, 1000, (batch, p)),
        'next_sentence_labels': rng.integers(0, 2, (batch, 1)),
    }
    element = {k: tf.constant(v, tf.int32) for k, v in element.items()}
    element['masked_lm_weights'] = tf.ones([batch, p])
    element['mask'] = tf.ones([batch])
    return tf.data.Dataset.from_tensors(element).repeat()
