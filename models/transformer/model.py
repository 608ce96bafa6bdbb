"""Transformer encoder-decoder as Google's MLPerf v0.7 Transformer (Lingvo).

What `lingvo/tasks/mt/params/mlperf.py` (WmtEnDeMlPerf) configures, read
line by line:

- pre-layer-norm blocks with un-normalised residuals (`add_unnormalized_
  residuals=True`): x + Dropout(Sublayer(LayerNorm(x))), and a final layer
  norm after each stack; layer norm epsilon 1e-6;
- one embedding matrix [vocab, d] shared by the encoder, the decoder and the
  softmax (`SharedSoftmaxLayer`, Gaussian init with stddev d^-0.5,
  `scale_sqrt_depth`: looked-up rows times sqrt(d)); logits x W^T, no bias;
- sinusoidal positions (sin half then cos half, timescales 1 to 1e4) at the
  packed segment positions;
- attention: queries times (d / heads)^-0.5 (`enable_per_dim_scale=False`),
  no biases in any projection (`use_bias=False`); ReLU feed-forward;
- dropout 0.1 on the embeddings, the sublayer outputs, the attention
  probabilities and the ReLU output;
- packing: attention only within a segment (Lingvo's SegmentMask), the
  decoder's also causal; padding (segment 0) is never attended to;
- the decoder input is the target row shifted right by one with the start
  id 0 in front (Lingvo's MlPerfInput shifts the whole packed row, so a
  segment after the first starts from the previous segment's EOS).

Weights are Glorot-uniform (Lingvo's Xavier(1.0)); layer norms are gamma/
beta (Lingvo's 1 + scale, the same function and gradients). Variables are
named for sharding rules (`sharding_rules()`). `compute_dtype='bfloat16'`
runs matmuls and activations in bfloat16 (layer norms, softmax and the
logits' cross-entropy in float32), as Google's `use_bf16_activations`.
"""

import math

import numpy as np
import tensorflow as tf

from models.common import layers

SIZES = {  # (layers, model dim, heads, feed-forward dim)
    'tiny': (2, 128, 4, 512),
    'small': (3, 256, 4, 1024),
    'base': (6, 512, 8, 2048),
    'big': (6, 1024, 16, 4096),
}
_MASKED = -1e9


def sharding_rules() -> tuple:
  """Tensor-parallel layouts for distribution/mesh.py (gin: MeshConfig.rules).

  Google's v0.7 4-way split (`xla_num_partitions=4`): attention heads
  (query/key/value columns, output rows) and the feed-forward inner
  dimension over `model`; the shared embedding on its model dimension (a
  gather cannot read a vocabulary-split table), which also splits the
  softmax's contraction. Layer norms are replicated.
  """
  return (
      ('attention/(query|key|value)/kernel$', (None, 'model')),
      ('attention/output/kernel$', ('model', None)),
      ('feed_forward/inner/kernel$', (None, 'model')),
      ('feed_forward/outer/kernel$', ('model', None)),
      ('shared_embedding$', (None, 'model')),
  )


def model_dim(size: str = 'big', override: int = 0) -> int:
  """The model dimension of a size (gin: the schedule's d^-0.5 follows the
  model's SIZE)."""
  return override or SIZES[size][1]


def layer_norm(x, gamma, beta):
  """Over the last axis in float32, epsilon 1e-6 (Lingvo's LayerNorm)."""
  xf = tf.cast(x, tf.float32)
  mean, var = tf.nn.moments(xf, axes=[-1], keepdims=True)
  return tf.cast((xf - mean) * tf.math.rsqrt(var + 1e-6) * gamma + beta,
                 x.dtype)


def positions_signal(positions, dim: int):
  """Sinusoids [..., dim] at float `positions` (Lingvo's
  PositionalEmbeddingLayer: sin of every timescale, then cos)."""
  half = dim // 2
  increment = math.log(1e4) / max(half - 1, 1)
  inv_timescales = np.exp(np.arange(half, dtype=np.float32) * -increment)
  # Both halves elementwise from one full-width constant: a concat of the
  # halves is laid out wrongly by DTensor when the sum it feeds is split
  # over the model dimension.
  scaled = tf.cast(positions, tf.float32)[..., None] * tf.constant(
      np.tile(inv_timescales, 2))
  return tf.where(tf.constant(np.arange(dim) < half), tf.sin(scaled),
                  tf.cos(scaled))


def attention_bias(query_segments, key_segments, causal: bool = False):
  """Additive bias [batch, 1, queries, keys]: 0 where a query may attend
  (same segment, key not padding, and for `causal` not later), else -1e9."""
  allowed = tf.logical_and(
      tf.equal(query_segments[:, :, None], key_segments[:, None, :]),
      (key_segments > 0)[:, None, :])
  if causal:
    q, k = tf.shape(query_segments)[1], tf.shape(key_segments)[1]
    allowed = tf.logical_and(
        allowed, tf.range(k)[None, None, :] <= tf.range(q)[None, :, None])
  # expand_dims, not [:, None]: DTensor (TF 2.21) crashes on the latter here.
  return tf.expand_dims(tf.where(allowed, 0.0, _MASKED), 1)


def shift_right(targets):
  """The decoder input of a target row: start id 0, then all but the last."""
  return tf.pad(targets, [[0, 0], [1, 0]])[:, :-1]


class Transformer(tf.Module):
  """Encoder-decoder with a shared embedding and softmax."""

  def __init__(self, *, size: str = 'big', vocab_size: int = 33708,
               num_layers: int = 0, model_dim: int = 0, num_heads: int = 0,
               ff_dim: int = 0, dropout_rate: float = 0.1,
               compute_dtype: str = 'float32', seed: int = 0):
    """Args:
      size: 'tiny', 'small', 'base' (6 x 512, 8 heads, 2048) or 'big' (6 x
        1024, 16 heads, 4096: MLPerf's).
      vocab_size: pieces of the shared vocabulary (MLPerf: 33,708).
      num_layers, model_dim, num_heads, ff_dim: override `size` when > 0.
      dropout_rate: every dropout (Google's v0.7: 0.1).
      compute_dtype: 'float32' or 'bfloat16'.
      seed: initialisation seed.
    """
    super().__init__(name='transformer')
    self.num_layers, self.model_dim, self.num_heads, self.ff_dim = (
        layers.stack_size('Transformer', SIZES, size,
                          (num_layers, model_dim, num_heads, ff_dim)))
    if self.model_dim % self.num_heads or self.model_dim % 2:
      raise ValueError(f'model_dim ({self.model_dim}) must be even and a '
                       f'multiple of num_heads ({self.num_heads}).')
    self.vocab_size, self.dropout_rate = vocab_size, dropout_rate
    self._drop = layers.Dropout(dropout_rate, seed)
    self.dtype = layers.compute_dtype(compute_dtype)
    self._seed, self._counter = seed, 0
    self.params = {}
    self.state = {}  # No non-trainable state.

    d, ff = self.model_dim, self.ff_dim
    self._counter += 1
    self._add('shared_embedding', tf.random.stateless_normal(
        [vocab_size, d], seed=[seed, self._counter], stddev=d**-0.5))
    for stack, blocks in (('encoder', ('self_attention',)),
                          ('decoder', ('self_attention', 'cross_attention'))):
      for i in range(self.num_layers):
        p = f'{stack}/layer_{i}'
        for block in blocks:
          for part in ('query', 'key', 'value', 'output'):
            self._glorot(f'{p}/{block}/attention/{part}/kernel', d, d)
          self._layer_norm(f'{p}/{block}/LayerNorm', d)
        self._glorot(f'{p}/feed_forward/inner/kernel', d, ff)
        self._glorot(f'{p}/feed_forward/outer/kernel', ff, d)
        self._layer_norm(f'{p}/feed_forward/LayerNorm', d)
      self._layer_norm(f'{stack}/LayerNorm', d)

  # -- Variables ----------------------------------------------------------------

  def _add(self, name, value):
    self.params[name] = tf.Variable(value, name=name)

  def _glorot(self, name, fan_in, fan_out):
    self._counter += 1
    self._add(name, layers.glorot_uniform(
        [fan_in, fan_out], [self._seed, self._counter], fan_in, fan_out))

  def _layer_norm(self, name, width):
    self._add(f'{name}/gamma', tf.ones([width]))
    self._add(f'{name}/beta', tf.zeros([width]))

  def _weights(self):
    """Kernels and the embedding in the compute dtype; the rest float32."""
    return {k: (tf.cast(v, self.dtype) if k.endswith('kernel') or
                k == 'shared_embedding' else v)
            for k, v in self.params.items()}

  # -- Pieces -------------------------------------------------------------------

  def _embed(self, w, ids, positions, training):
    x = tf.gather(w['shared_embedding'], ids) * tf.cast(
        math.sqrt(self.model_dim), self.dtype)
    x += tf.cast(positions_signal(positions, self.model_dim), self.dtype)
    return self._drop(x, training)

  # Static lengths and -1 for the batch: DTensor reshapes a batch-sharded
  # tensor wrongly when given its (global) dynamic shape.
  def _split(self, t):  # [b, s, d] -> [b, heads, s, d / heads]
    return tf.transpose(tf.reshape(
        t, [-1, t.shape[1], self.num_heads, self.model_dim // self.num_heads]),
                        [0, 2, 1, 3])

  def _merge(self, t):  # [b, heads, s, dh] -> [b, s, d]
    return tf.reshape(tf.transpose(t, [0, 2, 1, 3]),
                      [-1, t.shape[2], self.model_dim])

  def _attend(self, w, prefix, q, k, v, bias, training):
    """Heads q, k, v [b, heads, *, dh] -> the output projection [b, t, d]."""
    scores = tf.matmul(q, k, transpose_b=True)
    probs = tf.nn.softmax(tf.cast(scores, tf.float32) + bias)
    probs = tf.cast(self._drop(probs, training), self.dtype)
    return layers.project(self._merge(tf.matmul(probs, v)),
                   w[f'{prefix}/attention/output/kernel'])

  def _query(self, w, prefix, x):
    scale = tf.cast((self.model_dim // self.num_heads)**-0.5, self.dtype)
    return self._split(layers.project(
        x, w[f'{prefix}/attention/query/kernel'])) * scale

  def _keys_values(self, w, prefix, x):
    return (
        self._split(layers.project(x, w[f'{prefix}/attention/key/kernel'])),
        self._split(layers.project(x, w[f'{prefix}/attention/value/kernel'])))

  def _attention_block(self, w, prefix, x, source, bias, training):
    """x + Dropout(Attention(LayerNorm(x), source or itself))."""
    y = layer_norm(x, w[f'{prefix}/LayerNorm/gamma'],
                   w[f'{prefix}/LayerNorm/beta'])
    k, v = self._keys_values(w, prefix, y if source is None else source)
    out = self._attend(w, prefix, self._query(w, prefix, y), k, v, bias,
                       training)
    return x + self._drop(out, training)

  def _feed_forward(self, w, prefix, x, training):
    p = f'{prefix}/feed_forward'
    y = layer_norm(x, w[f'{p}/LayerNorm/gamma'], w[f'{p}/LayerNorm/beta'])
    inner = self._drop(
        tf.nn.relu(layers.project(y, w[f'{p}/inner/kernel'])), training)
    return x + self._drop(layers.project(inner, w[f'{p}/outer/kernel']),
                          training)

  # -- Forward ------------------------------------------------------------------

  def encode(self, inputs, segments, positions, *, training: bool):
    """Encoder output [batch, source, d] (compute dtype)."""
    w = self._weights()
    x = self._embed(w, inputs, positions, training)
    bias = attention_bias(segments, segments)
    for i in range(self.num_layers):
      p = f'encoder/layer_{i}'
      x = self._attention_block(w, f'{p}/self_attention', x, None, bias,
                                training)
      x = self._feed_forward(w, p, x, training)
    return layer_norm(x, w['encoder/LayerNorm/gamma'],
                      w['encoder/LayerNorm/beta'])

  def logits(self, w, x):
    """Softmax logits (float32) of decoder outputs x [..., d]."""
    return tf.cast(
        layers.project(x, w['shared_embedding'], transpose_kernel=True),
        tf.float32)

  def decode(self, decoder_inputs, segments, positions, encoded,
             source_segments, *, training: bool):
    """Logits [batch, target, vocab] (float32), teacher-forced."""
    w = self._weights()
    x = self._embed(w, decoder_inputs, positions, training)
    self_bias = attention_bias(segments, segments, causal=True)
    cross_bias = attention_bias(segments, source_segments)
    for i in range(self.num_layers):
      p = f'decoder/layer_{i}'
      x = self._attention_block(w, f'{p}/self_attention', x, None, self_bias,
                                training)
      x = self._attention_block(w, f'{p}/cross_attention', x, encoded,
                                cross_bias, training)
      x = self._feed_forward(w, p, x, training)
    x = layer_norm(x, w['decoder/LayerNorm/gamma'], w['decoder/LayerNorm/beta'])
    return self.logits(w, x)

  def __call__(self, batch, *, training: bool):
    """Logits [batch, target, vocab] of a packed batch (packing.FEATURES)."""
    encoded = self.encode(batch['inputs'], batch['inputs_segmentation'],
                          batch['inputs_position'], training=training)
    return self.decode(shift_right(batch['targets']),
                       batch['targets_segmentation'],
                       batch['targets_position'], encoded,
                       batch['inputs_segmentation'], training=training)

  # -- Incremental decoding -----------------------------------------------------

  def start_decoding(self, inputs, max_length: int = 0):
    """(source, cache) that `decode_step` starts from, for unpacked sources
    [b, s].

    `source`: what every step reads and none changes (each layer's
    cross-attention keys and values, the source's padding bias), the same
    for every hypothesis of a sentence, so a beam search need not reorder
    it. `cache`: each layer's self-attention keys and values, [b, heads,
    positions, d / heads]: `max_length` zero positions written one a step
    (a fixed shape, as TPUs compile), or with `max_length` 0 none yet, one
    appended a step (`decode_step(growing=True)`; a step's cost follows the
    positions decoded so far; shape invariants: `growing_cache_shapes`).
    """
    segments = tf.cast(inputs > 0, tf.int32)
    positions = tf.broadcast_to(tf.range(tf.shape(inputs)[1]),
                                tf.shape(inputs))
    encoded = self.encode(inputs, segments, positions, training=False)
    w = self._weights()
    b = tf.shape(inputs)[0]
    heads, dh = self.num_heads, self.model_dim // self.num_heads
    source = {'source_bias': tf.where(segments > 0, 0.0, _MASKED)[:, None,
                                                                    None]}
    cache = {}
    for i in range(self.num_layers):
      p = f'decoder/layer_{i}'
      k, v = self._keys_values(w, f'{p}/cross_attention', encoded)
      source[f'{p}/cross_k'], source[f'{p}/cross_v'] = k, v
      zeros = tf.zeros([b, heads, max_length, dh], self.dtype)
      cache[f'{p}/self_k'], cache[f'{p}/self_v'] = zeros, zeros
    return source, cache

  @staticmethod
  def growing_cache_shapes(cache):
    """The shapes a growing cache takes in a decoding loop: any number of
    positions (tf.while_loop's shape_invariants)."""
    return tf.nest.map_structure(
        lambda t: tf.TensorShape([t.shape[0], t.shape[1], None, t.shape[3]]),
        cache)

  def decode_step(self, ids, step, cache, source, *, growing: bool = False):
    """Logits [n, vocab] (float32) for the next token after `ids` [n] at
    position `step`, and the cache with this position in it (written at
    `step`, or `growing`: appended)."""
    w = self._weights()
    x = self._embed(w, ids[:, None], tf.reshape(step, [1, 1]), False)
    cache = dict(cache)
    if growing:
      self_bias = tf.zeros([1])  # Every cached position is at or before step.
    else:
      max_length = cache['decoder/layer_0/self_k'].shape[2]
      here = tf.one_hot(step, max_length, dtype=self.dtype)[None, None, :,
                                                             None]
      self_bias = tf.where(tf.range(max_length) <= step, 0.0, _MASKED)
    for i in range(self.num_layers):
      p = f'decoder/layer_{i}'
      a = f'{p}/self_attention'
      y = layer_norm(x, w[f'{a}/LayerNorm/gamma'], w[f'{a}/LayerNorm/beta'])
      k, v = self._keys_values(w, a, y)
      for name, new in (('self_k', k), ('self_v', v)):
        old = cache[f'{p}/{name}']
        cache[f'{p}/{name}'] = (tf.concat([old, new], axis=2) if growing
                                else old + here * new)
      x += self._attend(w, a, self._query(w, a, y), cache[f'{p}/self_k'],
                        cache[f'{p}/self_v'], self_bias, False)
      c = f'{p}/cross_attention'
      y = layer_norm(x, w[f'{c}/LayerNorm/gamma'], w[f'{c}/LayerNorm/beta'])
      x += self._attend(w, c, self._query(w, c, y), source[f'{p}/cross_k'],
                        source[f'{p}/cross_v'], source['source_bias'], False)
      x = self._feed_forward(w, p, x, False)
    x = layer_norm(x, w['decoder/LayerNorm/gamma'], w['decoder/LayerNorm/beta'])
    return self.logits(w, x[:, 0]), cache

  def forward_flops(self, source_length: int, target_length: int) -> int:
    """Matmul FLOPs (2 per multiply-add) of one packed row's forward pass."""
    d, ff, s, t = self.model_dim, self.ff_dim, source_length, target_length
    # Multiply-adds: projections, attention scores and sums, the softmax.
    encoder_layer = s * (4 * d * d + 2 * d * ff) + 2 * s * s * d
    decoder_layer = (t * (4 * d * d + 2 * d * ff) + 2 * t * t * d +
                     t * 2 * d * d + s * 2 * d * d + 2 * t * s * d)
    return 2 * (self.num_layers * (encoder_layer + decoder_layer) +
                t * d * self.vocab_size)
