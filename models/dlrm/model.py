"""DLRM (Naumov et al. 2019) as Google's MLPerf v0.7 submission builds it.

Google's `dlrm.py` (dlrm-research-TF-tpu-v4-128) read line by line:

- Bottom MLP over the dense features: ReLU layers (512-256-128), kernels
  Glorot-normal, biases N(0, sqrt(1 / fan_out)).
- One embedding table per categorical feature, rows initialised
  U(-1/sqrt(rows), 1/sqrt(rows)) (the MLPerf reference's), dimension equal
  to the bottom MLP's last width (128).
- Dot interactions: the bottom MLP's output and the 26 embeddings stacked
  as [b, 27, d], every pairwise dot product, the strictly lower triangle
  (351 values), concatenated after the bottom MLP's output. Google's TPU
  code keeps the whole 27 x 27 matrix with the upper triangle and the
  diagonal zeroed (`opt_skip_gather`) and widens the top MLP's first kernel
  to match; those extra inputs are always 0, so their weights never change
  the output and, under SGD without weight decay, never move. This model
  keeps only the 351, the reference's layout.
- Top MLP (1024-1024-512-256-1): ReLU, then a sigmoid; kernels
  N(0, sqrt(2 / (fan_in + fan_out))) with the first layer's fan-in the
  reference's 351 + 128, biases N(0, sqrt(1 / fan_out)).
- Loss: binary cross-entropy of the click. Google's is Keras's on the
  sigmoid's output (probabilities clipped to [1e-7, 1 - 1e-7]); here it is
  computed from the logit (the same value where the probability is not
  within 1e-7 of 0 or 1, and finite where it is).

The tables and the lookup are the run's plan's (distribution/
embedding_tables.py): plain gathers from whole tables by default, or rows
sharded over the replicas (EMBEDDING_SHARDING), without this file changing.
"""

import math
from typing import Sequence

import tensorflow as tf

from distribution import embedding_tables
from models.common import layers


def dot_interactions(features: tf.Tensor) -> tf.Tensor:
  """[b, n, d] stacked features -> [b, n (n - 1) / 2] pairwise dot products
  (row i > column j, row-major), the reference's order.

  The lower triangle is picked by a 0/1 matrix product, not a gather: the
  same values (each output is one product times 1 plus zeros), and its
  gradient is a matrix product too instead of a scatter (docs/benchmarks-history.md,
  "DLRM")."""
  n = features.shape[1]
  products = tf.matmul(features, features, transpose_b=True)
  pairs = [i * n + j for i in range(n) for j in range(i)]
  select = tf.one_hot(pairs, n * n, axis=0, dtype=products.dtype)
  return tf.matmul(tf.reshape(products, [-1, n * n]), select)


class Dlrm(tf.Module):
  """Embedding tables, bottom and top MLPs, dot interactions. Implements
  training.task.Model (no non-trainable state)."""

  def __init__(self, *, vocab_sizes: Sequence[int], num_dense: int,
               embedding_dim: int = 128,
               bottom_mlp: Sequence[int] = (512, 256, 128),
               top_mlp: Sequence[int] = (1024, 1024, 512, 256, 1),
               compute_dtype: str = 'float32', seed: int = 0,
               embeddings=None):
    """Args:
      vocab_sizes: rows of each categorical feature's table, in feature
        order.
      num_dense: dense features (Criteo: 13).
      embedding_dim: each table's width; the bottom MLP's last width.
      bottom_mlp, top_mlp: layer widths; the top's last must be 1.
      compute_dtype: 'float32' or 'bfloat16' (the MLPs and interactions;
        tables and weights stay float32).
      seed: initial weights.
      embeddings: makes and looks up the tables (default: the enclosing
        plan's, distribution.embedding_tables.current()).

    Raises:
      ValueError: widths that do not fit together, named.
    """
    super().__init__(name='dlrm')
    if not vocab_sizes or min(vocab_sizes) < 1:
      raise ValueError(f'Every table needs at least one row; vocab_sizes '
                       f'{list(vocab_sizes)}.')
    if bottom_mlp[-1] != embedding_dim:
      raise ValueError(
          f'The bottom MLP\'s last width ({bottom_mlp[-1]}) must equal '
          f'embedding_dim ({embedding_dim}): its output is one of the '
          'vectors the interactions multiply.')
    if top_mlp[-1] != 1:
      raise ValueError(f'The top MLP ends in one logit; top_mlp is '
                       f'{tuple(top_mlp)}.')
    self.vocab_sizes = tuple(int(v) for v in vocab_sizes)
    self.num_dense, self.embedding_dim = num_dense, embedding_dim
    self.dtype = layers.compute_dtype(compute_dtype)
    self.state = {}
    self.embeddings = embeddings or embedding_tables.current()
    # Every weight by its name, the only tracked attribute: checkpoints
    # read and write them so, whichever plan made the tables.
    self.params = dict(self.embeddings.make_tables(
        self.vocab_sizes, embedding_dim, seed=seed))
    self._num_bottom, self._num_top = len(bottom_mlp), len(top_mlp)
    num_features = len(self.vocab_sizes) + 1
    top_in = num_features * (num_features - 1) // 2 + embedding_dim
    self.params.update(self._mlp('bottom', num_dense, bottom_mlp, seed,
                                 top=False))
    self.params.update(self._mlp('top', top_in, top_mlp, seed + 1, top=True))

  @property
  def tables(self) -> list:
    return [self.params[embedding_tables.table_name(t)]
            for t in range(len(self.vocab_sizes))]

  @property
  def bottom(self) -> list:
    return [(self.params[f'bottom/layer{i}/kernel'],
             self.params[f'bottom/layer{i}/bias'])
            for i in range(self._num_bottom)]

  @property
  def top(self) -> list:
    return [(self.params[f'top/layer{i}/kernel'],
             self.params[f'top/layer{i}/bias'])
            for i in range(self._num_top)]

  @staticmethod
  def _mlp(name: str, fan_in: int, widths, seed: int, *, top: bool) -> dict:
    weights = {}
    for i, width in enumerate(widths):
      layer_seed = (seed * 1009 + i, 1 + top)
      if top:  # RandomNormal(sqrt(2 / (fan_in + fan_out))).
        kernel = tf.random.stateless_normal(
            [fan_in, width], seed=layer_seed,
            stddev=math.sqrt(2.0 / (fan_in + width)))
      else:  # GlorotNormal: truncated at 2 sigma, rescaled.
        kernel = tf.random.stateless_truncated_normal(
            [fan_in, width], seed=layer_seed,
            stddev=math.sqrt(2.0 / (fan_in + width)) / 0.87962566)
      bias = tf.random.stateless_normal(
          [width], seed=(layer_seed[0], 10 + top),
          stddev=math.sqrt(1.0 / width))
      for part, value in (('kernel', kernel), ('bias', bias)):
        weights[f'{name}/layer{i}/{part}'] = tf.Variable(
            value, name=f'{name}/layer{i}/{part}')
      fan_in = width
    return weights

  def _apply_mlp(self, weights, x, *, last_linear: bool):
    for i, (kernel, bias) in enumerate(weights):
      x = tf.matmul(x, tf.cast(kernel, self.dtype)) + tf.cast(bias, self.dtype)
      if not (last_linear and i == len(weights) - 1):
        x = tf.nn.relu(x)
    return x

  def __call__(self, dense: tf.Tensor, sparse: tf.Tensor) -> tf.Tensor:
    """Click logits [b] (float32) of dense [b, num_dense] features and
    sparse [b, tables] row ids (int32 or int64)."""
    bottom = self._apply_mlp(self.bottom, tf.cast(dense, self.dtype),
                             last_linear=False)
    vectors = self.embeddings.lookup(self.tables, sparse)  # [b, T, d]
    stacked = tf.concat([bottom[:, None, :], tf.cast(vectors, self.dtype)],
                        axis=1)
    top_in = tf.concat([bottom, dot_interactions(stacked)], axis=1)
    logits = self._apply_mlp(self.top, top_in, last_linear=True)
    return tf.cast(logits[:, 0], tf.float32)
