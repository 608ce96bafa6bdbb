"""Writes click records (input_pipeline/clicks.py's format) whole or not at
all: shards of tf.train.Examples and metadata.json, through
core/staged_files.py."""

import contextlib
import json
import os

import numpy as np
import tensorflow as tf

from core import staged_files
from input_pipeline import clicks


def example(label: int, dense, sparse) -> bytes:
  """One impression as a serialized tf.train.Example."""
  feature = tf.train.Feature
  return tf.train.Example(features=tf.train.Features(feature={
      'label': feature(int64_list=tf.train.Int64List(value=[int(label)])),
      'dense': feature(float_list=tf.train.FloatList(value=list(dense))),
      'sparse': feature(int64_list=tf.train.Int64List(value=list(sparse))),
  })).SerializeToString()


def shard_paths(output_dir: str, prefix: str, shards: int) -> list[str]:
  return [os.path.join(output_dir, f'{prefix}-{i:05d}-of-{shards:05d}')
          for i in range(shards)]


@contextlib.contextmanager
def shard_writers(paths: list[str]):
  """Yields write(row, label, dense, sparse): row r goes to shard r mod S
  (every host's files hold an even share). The shards are staged and appear
  only when the block ends normally (core/staged_files.py)."""
  with staged_files.staged(paths) as temporaries:
    writers = [tf.io.TFRecordWriter(t) for t in temporaries]
    try:
      def write(row, label, dense, sparse):
        writers[row % len(writers)].write(example(label, dense, sparse))
      yield write
    finally:
      for writer in writers:
        writer.close()


def write_arrays(paths: list[str], labels, dense, sparse) -> None:
  """Every row of the arrays, through shard_writers."""
  labels, dense, sparse = (np.asarray(labels), np.asarray(dense, np.float32),
                           np.asarray(sparse, np.int64))
  with shard_writers(paths) as write:
    for i in range(len(labels)):
      write(i, labels[i], dense[i], sparse[i])


def write_metadata(output_dir: str, *, dense_features, sparse_features,
                   vocab_sizes, train_examples: int, eval_examples: int,
                   **extra) -> None:
  """metadata.json: what input_pipeline.clicks.read_metadata reads."""
  metadata = {'dense_features': list(dense_features),
              'sparse_features': list(sparse_features),
              'vocab_sizes': [int(v) for v in vocab_sizes],
              'train_examples': int(train_examples),
              'eval_examples': int(eval_examples), **extra}
  staged_files.write_text(os.path.join(output_dir, clicks.METADATA_FILE),
                          json.dumps(metadata, indent=1) + '\n')


def frequency_vocabulary(counts: dict) -> dict:
  """value -> row, most frequent first (ties: the larger value first), as
  tft.compute_and_apply_vocabulary orders the vocabularies of Google's v0.7
  preprocessing (criteo_preprocess.py)."""
  ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
  return {value: row for row, (value, _) in enumerate(ranked)}
