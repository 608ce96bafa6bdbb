"""MiniGo's training examples in TFRecords, as Google's v0.7 writes and
reads them (preprocessing.py).

A record is a tf.train.Example of
  'x'        bytes: the features, [size, size, 13] uint8
             (models/minigo/features.py);
  'pi'       bytes: the search's policy, [size * size + 1] float32;
  'outcome'  float: the game's result, Black's view (+1 or -1);
in ZLIB-compressed TFRecord files (their TF_RECORD_CONFIG).

Training sees each example under one of the 8 symmetries drawn at random
(their rotate_train_nhwc: bit 0 reverses the rows, bit 1 the columns, bit 2
transposes; the policy's board part moves with the features, its pass
stays).
"""

import numpy as np
import tensorflow as tf

from core import staged_files

COMPRESSION = 'ZLIB'


def serialize(features: np.ndarray, pi: np.ndarray, outcome: float) -> bytes:
  return tf.train.Example(features=tf.train.Features(feature={
      'x': tf.train.Feature(bytes_list=tf.train.BytesList(
          value=[np.ascontiguousarray(features, np.uint8).tobytes()])),
      'pi': tf.train.Feature(bytes_list=tf.train.BytesList(
          value=[np.ascontiguousarray(pi, np.float32).tobytes()])),
      'outcome': tf.train.Feature(float_list=tf.train.FloatList(
          value=[float(outcome)])),
  })).SerializeToString()


def write(path: str, examples) -> int:
  """Writes (features, pi, outcome) triples to one file, whole or not at
  all (local or gs://); returns how many."""
  count = 0
  with staged_files.staged([path]) as [temporary]:
    with tf.io.TFRecordWriter(temporary, COMPRESSION) as writer:
      for features, pi, outcome in examples:
        writer.write(serialize(features, pi, outcome))
        count += 1
  return count


def parse(serialized, size: int, planes: int = 13) -> dict:
  """A serialized example -> {'x': [size, size, planes] uint8, 'pi':
  [size * size + 1] float32, 'outcome': float32}."""
  parsed = tf.io.parse_single_example(serialized, {
      'x': tf.io.FixedLenFeature([], tf.string),
      'pi': tf.io.FixedLenFeature([], tf.string),
      'outcome': tf.io.FixedLenFeature([], tf.float32)})
  x = tf.reshape(tf.io.decode_raw(parsed['x'], tf.uint8),
                 [size, size, planes])
  pi = tf.reshape(tf.io.decode_raw(parsed['pi'], tf.float32),
                  [size * size + 1])
  return {'x': x, 'pi': pi, 'outcome': parsed['outcome']}


def random_symmetry(example: dict, seed) -> dict:
  """The example under symmetry `seed`'s draw of 0..7 (stateless), as
  rotate_train_nhwc: features and the policy's board alike."""
  x, pi = example['x'], example['pi']
  size = x.shape[0]
  sym = tf.random.stateless_uniform([], seed, 0, 8, dtype=tf.int32)

  def rotate(t):
    t = tf.where(tf.bitwise.bitwise_and(sym, 1) > 0, tf.reverse(t, [0]), t)
    t = tf.where(tf.bitwise.bitwise_and(sym, 2) > 0, tf.reverse(t, [1]), t)
    return tf.where(tf.bitwise.bitwise_and(sym, 4) > 0,
                    tf.transpose(t, [1, 0, 2]), t)

  board = tf.reshape(pi[:-1], [size, size, 1])
  return dict(example, x=rotate(x), pi=tf.concat(
      [tf.reshape(rotate(board), [-1]), pi[-1:]], 0))


def dataset(files: list[str]) -> tf.data.Dataset:
  """The serialized examples of `files`, in order."""
  return tf.data.TFRecordDataset(files, compression_type=COMPRESSION)
