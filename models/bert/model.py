"""BERT (post-LN transformer encoder) with masked-LM and NSP heads, as tf.Module.

Variables carry google-research/bert's names (`bert/encoder/layer_0/attention/
self/query/kernel`, `cls/predictions/output_bias`, ...), so the TF1 reference
checkpoint maps onto them one to one (models/bert/checkpoint.py) and sharding
rules can match them. `compute_dtype='bfloat16'` runs the matmuls and
activations in bfloat16; weights, layer norms, softmax and the losses stay
float32.
"""

import math

import tensorflow as tf

from models.common import layers

SIZES = {  # (layers, hidden, heads, intermediate)
    'tiny': (2, 128, 2, 512),
    'mini': (4, 256, 4, 1024),
    'small': (4, 512, 8, 2048),
    'base': (12, 768, 12, 3072),
    'large': (24, 1024, 16, 4096),
}


def exclude_from_weight_decay(name: str) -> bool:
  """The reference's rule: no weight decay on LayerNorm and any bias
  (Google's v0.7 patterns: "LayerNorm", "layer_norm", "bias")."""
  return 'LayerNorm' in name or 'layer_norm' in name or 'bias' in name


def sharding_rules() -> tuple:
  """Tensor-parallel layouts for distribution/mesh.py (gin: MeshConfig.rules).

  Megatron-LM's layout: attention heads (query/key/value columns, output
  rows) and the feed-forward inner dimension split over `model`; the
  embeddings split on the hidden dimension (a gather cannot read a
  vocabulary-split table, and DTensor needs all three alike), which also
  splits the tied output projection's contraction. Everything else is
  replicated; optimizer slots follow their variables.
  """
  return (
      ('attention/self/(query|key|value)/kernel$', (None, 'model')),
      ('attention/self/(query|key|value)/bias$', ('model',)),
      ('attention/output/dense/kernel$', ('model', None)),
      ('intermediate/dense/kernel$', (None, 'model')),
      ('intermediate/dense/bias$', ('model',)),
      ('layer_[0-9]+/output/dense/kernel$', ('model', None)),
      ('embeddings/(word|token_type|position)_embeddings$', (None, 'model')),
  )


def gelu(x):
  """The tanh approximation google-research/bert uses."""
  return 0.5 * x * (1.0 + tf.tanh(math.sqrt(2 / math.pi) *
                                  (x + 0.044715 * x * x * x)))


def layer_norm(x, gamma, beta, epsilon=1e-12):
  """Layer norm over the last axis, computed in float32."""
  xf = tf.cast(x, tf.float32)
  mean, var = tf.nn.moments(xf, axes=[-1], keepdims=True)
  y = (xf - mean) * tf.math.rsqrt(var + epsilon) * gamma + beta
  return tf.cast(y, x.dtype)


class Bert(tf.Module):
  """BERT encoder plus pretraining heads."""

  def __init__(self, *, size: str = 'base', vocab_size: int = 30522,
               max_position_embeddings: int = 512, type_vocab_size: int = 2,
               num_layers: int = 0, hidden_size: int = 0, num_heads: int = 0,
               intermediate_size: int = 0, dropout_rate: float = 0.1,
               initializer_range: float = 0.02,
               compute_dtype: str = 'float32', float32_heads: bool = True,
               seed: int = 0):
    """Args:
      size: 'tiny', 'mini', 'small', 'base' or 'large' (BERT-large: 24 x 1024,
        16 heads, intermediate 4096).
      vocab_size: word-piece vocabulary size.
      max_position_embeddings: longest sequence.
      type_vocab_size: segment types.
      num_layers, hidden_size, num_heads, intermediate_size: override `size`
        when > 0.
      dropout_rate: hidden and attention dropout in training.
      initializer_range: stddev of the truncated-normal initialisers.
      compute_dtype: 'float32' or 'bfloat16'.
      float32_heads: run the masked-LM head (transform, GELU, LayerNorm, the
        tied projection) on a float32 copy of the sequence output, as
        Google's v0.7 run_pretraining.py does (`tf.cast(model.
        get_sequence_output(), tf.float32)`); False runs it in compute_dtype
        (cheaper, rounds the logits to bfloat16).
      seed: initialisation seed.
    """
    super().__init__(name='bert')
    (self.num_layers, self.hidden_size, self.num_heads,
     self.intermediate_size) = layers.stack_size(
         'BERT', SIZES, size,
         (num_layers, hidden_size, num_heads, intermediate_size))
    if self.hidden_size % self.num_heads:
      raise ValueError(f'hidden_size ({self.hidden_size}) must be a multiple '
                       f'of num_heads ({self.num_heads}).')
    self.vocab_size = vocab_size
    self.max_position_embeddings = max_position_embeddings
    self.dropout_rate = dropout_rate
    self._drop = layers.Dropout(dropout_rate, seed)
    self.dtype = layers.compute_dtype(compute_dtype)
    self.head_dtype = tf.float32 if float32_heads else self.dtype
    self._seed, self._counter, self._range = seed, 0, initializer_range
    self.params = {}
    self.state = {}  # No non-trainable state: the runtime's contract.

    hs, it = self.hidden_size, self.intermediate_size
    self._dense_init('bert/embeddings/word_embeddings', [vocab_size, hs])
    self._dense_init('bert/embeddings/token_type_embeddings',
                     [type_vocab_size, hs])
    self._dense_init('bert/embeddings/position_embeddings',
                     [max_position_embeddings, hs])
    self._layer_norm('bert/embeddings/LayerNorm', hs)
    for i in range(self.num_layers):
      p = f'bert/encoder/layer_{i}'
      for part in ('query', 'key', 'value'):
        self._dense(f'{p}/attention/self/{part}', hs, hs)
      self._dense(f'{p}/attention/output/dense', hs, hs)
      self._layer_norm(f'{p}/attention/output/LayerNorm', hs)
      self._dense(f'{p}/intermediate/dense', hs, it)
      self._dense(f'{p}/output/dense', it, hs)
      self._layer_norm(f'{p}/output/LayerNorm', hs)
    self._dense('bert/pooler/dense', hs, hs)
    self._dense('cls/predictions/transform/dense', hs, hs)
    self._layer_norm('cls/predictions/transform/LayerNorm', hs)
    self._zeros('cls/predictions/output_bias', [vocab_size])
    self._dense_init('cls/seq_relationship/output_weights', [2, hs])
    self._zeros('cls/seq_relationship/output_bias', [2])

  # -- Variables ----------------------------------------------------------------

  def _add(self, name, value):
    self.params[name] = tf.Variable(value, name=name)

  def _dense_init(self, name, shape):
    self._counter += 1
    self._add(name, tf.random.stateless_truncated_normal(
        shape, seed=[self._seed, self._counter], stddev=self._range))

  def _zeros(self, name, shape):
    self._add(name, tf.zeros(shape))

  def _dense(self, name, fan_in, fan_out):
    self._dense_init(f'{name}/kernel', [fan_in, fan_out])
    self._zeros(f'{name}/bias', [fan_out])

  def _layer_norm(self, name, width):
    self._add(f'{name}/gamma', tf.ones([width]))
    self._add(f'{name}/beta', tf.zeros([width]))

  # -- Forward ------------------------------------------------------------------

  def encode(self, input_ids, input_mask, segment_ids, *, training: bool):
    """Sequence output [batch, seq, hidden] (compute dtype) and pooled output."""
    w = {k: tf.cast(v, self.dtype) if k.endswith('/kernel') else v
         for k, v in self.params.items()}
    seq_len = input_ids.shape[1]
    x = (tf.gather(w['bert/embeddings/word_embeddings'], input_ids) +
         tf.gather(w['bert/embeddings/token_type_embeddings'], segment_ids) +
         w['bert/embeddings/position_embeddings'][:seq_len])
    x = layer_norm(x, w['bert/embeddings/LayerNorm/gamma'],
                   w['bert/embeddings/LayerNorm/beta'])
    x = tf.cast(self._drop(x, training), self.dtype)
    # Additive mask, [batch, 1, 1, seq]: -10000 on padding, as the reference.
    mask = (1.0 - tf.cast(input_mask, tf.float32)[:, None, None, :]) * -10000.0
    heads, head_size = self.num_heads, self.hidden_size // self.num_heads

    def dense(t, name):
      return layers.project(t, w[f'{name}/kernel'], w[f'{name}/bias'])

    def split(t):  # [b, s, h] -> [b, heads, s, d]
      return tf.transpose(tf.reshape(t, [-1, seq_len, heads, head_size]),
                          [0, 2, 1, 3])

    for i in range(self.num_layers):
      p = f'bert/encoder/layer_{i}'
      q = split(dense(x, f'{p}/attention/self/query'))
      k = split(dense(x, f'{p}/attention/self/key'))
      v = split(dense(x, f'{p}/attention/self/value'))
      scores = tf.matmul(q, k, transpose_b=True) * (1.0 / math.sqrt(head_size))
      probs = tf.nn.softmax(tf.cast(scores, tf.float32) + mask)
      probs = tf.cast(self._drop(probs, training), self.dtype)
      context = tf.reshape(tf.transpose(tf.matmul(probs, v), [0, 2, 1, 3]),
                           [-1, seq_len, self.hidden_size])
      attention = self._drop(dense(context, f'{p}/attention/output/dense'),
                                training)
      x = layer_norm(x + attention, w[f'{p}/attention/output/LayerNorm/gamma'],
                     w[f'{p}/attention/output/LayerNorm/beta'])
      inner = gelu(dense(x, f'{p}/intermediate/dense'))
      out = self._drop(dense(inner, f'{p}/output/dense'), training)
      x = layer_norm(x + out, w[f'{p}/output/LayerNorm/gamma'],
                     w[f'{p}/output/LayerNorm/beta'])
    pooled = tf.tanh(dense(x[:, 0], 'bert/pooler/dense'))
    return x, pooled

  def __call__(self, batch, *, training: bool):
    """Masked-LM logits [batch, predictions, vocab] and NSP logits [batch, 2].

    Args:
      batch: dict with input_ids, input_mask, segment_ids (int [batch, seq])
        and masked_lm_positions (int [batch, predictions]).
      training: dropout on.

    Returns:
      (mlm_logits, nsp_logits), float32.
    """
    sequence, pooled = self.encode(batch['input_ids'], batch['input_mask'],
                                   batch['segment_ids'], training=training)
    w = self.params
    dtype = self.head_dtype
    picked = tf.cast(tf.gather(sequence, batch['masked_lm_positions'],
                               batch_dims=1), dtype)
    t = gelu(layers.project(picked,
                     tf.cast(w['cls/predictions/transform/dense/kernel'],
                             dtype),
                     w['cls/predictions/transform/dense/bias']))
    t = layer_norm(t, w['cls/predictions/transform/LayerNorm/gamma'],
                   w['cls/predictions/transform/LayerNorm/beta'])
    # The output projection is tied to the word embeddings.
    mlm = layers.project(
        t, tf.cast(w['bert/embeddings/word_embeddings'], dtype),
        transpose_kernel=True)
    mlm = tf.cast(mlm, tf.float32) + w['cls/predictions/output_bias']
    nsp = tf.matmul(tf.cast(pooled, tf.float32),
                    w['cls/seq_relationship/output_weights'], transpose_b=True)
    return mlm, nsp + w['cls/seq_relationship/output_bias']

  def forward_flops(self, seq_len: int, predictions: int) -> int:
    """Matmul FLOPs (2 per multiply-add) of one example's forward pass."""
    h, it, s = self.hidden_size, self.intermediate_size, seq_len
    per_layer = 2 * s * h * h * 4 + 2 * s * h * it * 2 + 2 * 2 * s * s * h
    heads = 2 * predictions * h * h + 2 * predictions * h * self.vocab_size
    return self.num_layers * per_layer + 2 * h * h + heads
