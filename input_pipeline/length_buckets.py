"""GNMT input: translation pairs in length buckets, every replica on the
same bucket each step.

Google's v0.7 GNMT compiles one training graph per bucket length (18, 24,
30, 36, 42, and 48: their `tf.switch_case` on (max(source, target, 12) -
12) / 6) and feeds every replica the same bucket each step, so no replica
waits at the all-reduce for a longer one (their distributed_iterator_utils:
"up to 50%" on large slices). Their way is one or two hosts reading the
whole global batch and the device rebuilding it by a cross-replica sum.
This pipeline gets the same guarantee with every host reading its own
share:

- tools/build_translation_data.py --layout=pairs writes each bucket's pairs
  to its own files (`train-L<length>-*`) and counts them in metadata.json;
- an epoch is a plan of pairs // global batch steps (Google's epoch),
  each naming one bucket, the buckets' shares in proportion to their pairs
  (at least one step each), in an order shuffled from (seed, epoch) alone,
  so every host computes the same plan;
- each host draws step s's batches (one per local replica, consecutive)
  from its own endless, shuffled stream of bucket plan[s]'s files.

A resumed run is positioned exactly: the plans before `start_step` say how
many batches each bucket's stream gave, and each stream skips that many
(records.shuffled_epochs, whose cost does not grow with the position).

Features of a batch: 'source', 'target_input' (start id 0, then the
target), 'target_output' (the target with EOS), each [batch, max_length]
zero-padded; 'source_length' and 'target_length' (ids with EOS); 'bucket'
(the bucket's index, the same for the whole batch). Lengths count EOS,
which theirs counts in the target and not in the source: a source of
exactly one bucket length less than theirs goes one bucket up here.
"""

import os

import numpy as np
import tensorflow as tf

from input_pipeline import records
from input_pipeline.translation import TranslationInput

# Google's compiled lengths below the longest (model.py's switch branches).
GOOGLE_LENGTHS = (18, 24, 30, 36, 42)

# The synthetic mode's data, as MLPerf v0.7 GNMT's: 32,317 BPE tokens,
# pairs of at most 48 ids, 3,442,299 of them (Google's train_samples),
# newstest2014's 3,003 eval sources padded to 160 (their src_max_len_infer).
# The pairs' shares of the buckets are ASSUMED, not measured (no WMT16
# build here): a log-normal length of the pair's longer side, median 25
# ids and sigma 0.5, cut at 48 (mean 28.7 ids; Google's 566,340 packed
# Transformer rows of 256 ids hold WMT's 4.5M pairs at ~32 ids a pair
# slot). The time-to-train model's GNMT rows lean on them (docs/
# benchmarks.md gives the rows under other shares).
SYNTHETIC_METADATA = {
    'vocab_size': 32317, 'max_length': 48, 'eval_length': 160,
    'train_pairs': 3442299, 'eval_pairs': 3003, 'layout': 'pairs',
    'buckets': [[18, 902094], [24, 807744], [30, 678738], [36, 488412],
                [42, 326885], [48, 238426]]}


def bucket_lengths(max_length: int) -> tuple[int, ...]:
  """The static lengths: Google's below max_length, then max_length."""
  return tuple(l for l in GOOGLE_LENGTHS if l < max_length) + (max_length,)


def bucket_of(source_length: int, target_length: int,
              lengths: tuple[int, ...]) -> int:
  """Their switch index: (max(source, target, 12) - 12) // 6, the last
  bucket for anything longer."""
  index = (max(source_length, target_length, 12) - 12) // 6
  return min(index, len(lengths) - 1)


def bucket_pattern(data_dir: str, length: int) -> str:
  return os.path.join(data_dir, f'train-L{length}-*')


def epoch_plan(steps_per_bucket: list[int], seed: int, epoch) -> tf.Tensor:
  """An epoch's buckets, one a step: bucket b steps_per_bucket[b] times in
  an order from (seed, epoch) only."""
  plan = np.repeat(np.arange(len(steps_per_bucket)), steps_per_bucket)
  return tf.random.experimental.stateless_shuffle(
      tf.constant(plan, tf.int64),
      seed=tf.stack([tf.constant(seed, tf.int64), tf.cast(epoch, tf.int64)]))


def apportion(counts: list[int], steps: int) -> list[int]:
  """`steps` shared in proportion to `counts` by largest remainders, every
  nonzero count given at least one (so the sum may exceed `steps` when
  there are more nonzero counts than steps)."""
  total = sum(counts)
  quotas = [c * steps / total for c in counts]
  shares = [int(q) for q in quotas]
  by_remainder = sorted(range(len(counts)), key=lambda i: shares[i] - quotas[i])
  for i in by_remainder[:steps - sum(shares)]:
    shares[i] += 1
  return [max(s, 1) if c else 0 for s, c in zip(shares, counts)]


class LengthBucketInput(TranslationInput):
  """Per-host GNMT batches. Implements training.task.TaskData; evaluation,
  vocabulary and references are TranslationInput's."""

  build_flags = ' --layout=pairs'
  quickstart_data = 'gnmt_data'
  synthetic_metadata = SYNTHETIC_METADATA
  _only_bucket = None  # shape_only's choice.

  def _all_buckets(self) -> list[tuple[int, int]]:
    if 'buckets' not in self.metadata:
      raise ValueError(
          f'{self.data_dir}/metadata.json has no length buckets: GNMT reads '
          'pairs by bucket. Build its data with tools/build_translation_data'
          f'.py{self.build_flags} (make {self.quickstart_data} builds the '
          'quickstart\'s).')
    return [tuple(b) for b in self.metadata['buckets']]

  @property
  def buckets(self) -> list[tuple[int, int]]:
    """(length, training pairs) of each bucket (after shape_only: none but
    in its bucket)."""
    return [(length, pairs if self._only_bucket in (None, i) else 0)
            for i, (length, pairs) in enumerate(self._all_buckets())]

  # tools.predictor.cost.ShapedTrain: a step's graph is its bucket's.
  def train_shares(self) -> list[float]:
    """Each bucket's share of the training pairs (so of an epoch's steps),
    whichever shape_only chose."""
    pairs = [p for _, p in self._all_buckets()]
    return [p / sum(pairs) for p in pairs]

  def shape_only(self, index: int) -> None:
    """Synthetic batches of bucket `index` alone, and the others left
    without pairs (so the task traces no graph of theirs)."""
    if not self.synthetic:
      raise ValueError('shape_only is for synthetic batches (the '
                       'time-to-train model\'s count).')
    self._only_bucket = index

  @property
  def lengths(self) -> tuple[int, ...]:
    return tuple(length for length, _ in self.buckets)

  @property
  def num_train_examples(self) -> int:
    """Training pairs (MLPerf's train_samples: 3,442,299 in Google's
    logs)."""
    return self.metadata['train_pairs']

  def steps_per_bucket(self, global_batch_size: int) -> list[int]:
    """An epoch's steps of each bucket: pairs // global batch steps in all
    (Google's epoch: 3,442,299 // 8192 = 420), shared by the buckets in
    proportion to their pairs (largest remainders), each bucket with
    pairs at least one."""
    return apportion([p for _, p in self.buckets],
                     max(1, self.num_train_examples // global_batch_size))

  def steps_per_epoch(self, global_batch_size: int) -> float:
    return float(sum(self.steps_per_bucket(global_batch_size)))

  def _train_features(self):
    return {k: tf.io.FixedLenFeature([self.max_length], tf.int64)
            for k in ('inputs', 'targets')}

  def check(self) -> None:
    if self.synthetic:
      return
    fix = ('Rebuild DATA_DIR with tools/build_translation_data.py '
           '--layout=pairs.')
    for length, pairs in self.buckets:
      if pairs:
        files = records.list_files(bucket_pattern(self.data_dir, length))
        records.check_record_files(files)
        records.check_features(files[0], self._train_features(), fix=fix)
    self.check_eval(fix)

  def consumed(self, start_step: int, steps: list[int]) -> list[int]:
    """Batches (a replica's) each bucket's stream gave before start_step,
    given the epoch's `steps_per_bucket`."""
    epoch, offset = divmod(start_step, sum(steps))
    done = np.array(steps) * epoch
    if offset:
      plan = epoch_plan(steps, self.seed, epoch).numpy()[:offset]
      done += np.bincount(plan, minlength=len(steps))
    return [int(d) for d in done]

  def train_dataset(self, input_context: tf.distribute.InputContext, *,
                    global_batch_size: int, start_step: int = 0):
    """Per-replica batches, positioned at `start_step`; each step's
    batches (one per local replica, consecutive) from one bucket."""
    batch = input_context.get_per_replica_batch_size(global_batch_size)
    if self.synthetic:
      return self._synthetic_train(batch)
    local_replicas = (input_context.num_replicas_in_sync //
                      input_context.num_input_pipelines)
    steps = self.steps_per_bucket(global_batch_size)
    start_epoch, offset = divmod(start_step, sum(steps))
    plan = tf.data.Dataset.range(start_epoch, 2**62).flat_map(
        records.no_autograph(lambda e: tf.data.Dataset.from_tensor_slices(
            epoch_plan(steps, self.seed, e)))).skip(offset)
    choice = plan.flat_map(records.no_autograph(
        lambda b: tf.data.Dataset.from_tensors(b).repeat(local_replicas)))
    features = self._train_features()
    streams = []
    for index, ((length, _), done) in enumerate(
        zip(self.buckets, self.consumed(start_step, steps))):
      if not steps[index]:
        streams.append(tf.data.Dataset.from_tensors(self._empty(batch, index)))
        continue
      ds = records.shuffled_epochs(
          records.list_files(bucket_pattern(self.data_dir, length)),
          input_context, seed=self.seed * 1009 + index, start_step=done,
          per_replica_batch=batch, shuffle_buffer=self.shuffle_buffer,
          cycle_length=self.cycle_length, deterministic=self.deterministic)
      ds = ds.map(records.no_autograph(
          lambda epoch, i, raw, index=index: self._pair(
              self._parse(raw, features), index)),
                  num_parallel_calls=tf.data.AUTOTUNE)
      streams.append(ds.batch(batch, drop_remainder=True))
    ds = tf.data.Dataset.choose_from_datasets(
        streams, choice.map(lambda b: tf.cast(b, tf.int64)))
    return ds.prefetch(tf.data.AUTOTUNE).with_options(
        self._options(self.deterministic))

  def _pair(self, example, index):
    source, target = example['inputs'], example['targets']
    return {
        'source': source, 'target_output': target,
        'target_input': tf.concat([[0], target[:-1]], 0),
        'source_length': tf.reduce_sum(tf.cast(source > 0, tf.int32)),
        'target_length': tf.reduce_sum(tf.cast(target > 0, tf.int32)),
        'bucket': tf.constant(index, tf.int32)}

  def _empty(self, batch, index):
    """A bucket without pairs: never in a plan (choose_from_datasets
    still needs a dataset of the element's structure)."""
    zeros = tf.zeros([batch, self.max_length], tf.int32)
    return {'source': zeros, 'target_output': zeros, 'target_input': zeros,
            'source_length': tf.zeros([batch], tf.int32),
            'target_length': tf.zeros([batch], tf.int32),
            'bucket': tf.fill([batch], index)}

  def _synthetic_train(self, batch: int):
    """Batches of one bucket (shape_only's, else the longest): pairs that
    fill it, its length - 1 ids and EOS, padded to max_length."""
    rng = np.random.default_rng(self.seed)
    index = (len(self.buckets) - 1 if self._only_bucket is None
             else self._only_bucket)
    length = self.lengths[index]
    ids = lambda: np.concatenate([  # noqa: E731
        rng.integers(3, self.metadata['vocab_size'], (batch, length - 1)),
        np.ones((batch, 1))], 1).astype(np.int32)
    pad = lambda a: np.pad(a, [[0, 0], [0, self.max_length - length]])  # noqa: E731
    source, target = pad(ids()), pad(ids())
    return records.synthetic_batches({
        'source': source, 'target_output': target,
        'target_input': np.pad(target[:, :-1], [[0, 0], [1, 0]]),
        'source_length': np.full(batch, length, np.int32),
        'target_length': np.full(batch, length, np.int32),
        'bucket': np.full(batch, index, np.int32)})
