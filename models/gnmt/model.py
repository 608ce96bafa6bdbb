"""GNMT (MLPerf Training v0.7's recurrent translation model): its cells,
encoder and decoder.

The pieces of Google's v0.7 TPU implementation
(mlcommons/training_results_v0.7, Google/benchmarks/gnmt/implementations/
gnmt-research-TF-tpu-*/model.py), written as plain functions of tensors so
the model (issue 46, next) composes them and the tests check each against
a NumPy version of their sequence:
- `lstm_step`: their `lstm_cell_gate` + `lstm_cell_split`: the gates of
  x W_x + h W_h + b split as (i, j, f, o), forget bias 0, both state
  halves multiplied by the step's padding mask;
- `lstm_layer` (models/gnmt/lstm.py, its gradient written out): their
  `build_rnn` over `lstm_cell`: the steps below the batch's longest
  sequence, forward or backward from its last step, every later step's
  output zero;
- `normalized_bahdanau`: their `attention` (GNMT v2's normalized
  Bahdanau): score = sum(g v / |v| tanh(keys + h W_q + b)), -inf past the
  source length, softmax over source positions, context = alignments x
  encoder outputs;
- `encoder`, `decoder`: their `_build_encoder` and the training branch of
  `_build_decoder`, over weights given as arrays;
- `label_smoothed_sum`: their `softmax_cross_entropy` on one-hot labels of
  1 - s and s / (V - 1), summed over every position (padding included:
  a padded position's output is zeroed before the projection, so its loss
  is the constant log V and its gradient zero), not divided by tokens.
Time-major as theirs: [time, batch, ...].
"""

import numpy as np
import tensorflow as tf

from models.common import layers
from models.gnmt.lstm import lstm_layer


def lstm_step(gate_inputs, h, c, kernel, bias, padding=None):
  """One LSTM step given the input's share of the gates (x W_x, computed
  for all steps at once).

  Args:
    gate_inputs: [batch, 4 units], x W_x for this step.
    h, c: [batch, units], the previous state.
    kernel: [units, 4 units], W_h; bias: [4 units].
    padding: [batch], 1 where this step is inside the sequence, else 0
      (the state is zeroed there, as theirs).

  Returns:
    (h', c').
  """
  gates = tf.nn.bias_add(tf.matmul(h, kernel) + gate_inputs, bias)
  i, j, f, o = tf.split(gates, 4, axis=1)
  new_c = c * tf.sigmoid(f) + tf.sigmoid(i) * tf.tanh(j)
  new_h = tf.tanh(new_c) * tf.sigmoid(o)
  if padding is not None:
    mask = tf.expand_dims(tf.cast(padding, new_c.dtype), 1)
    new_c, new_h = new_c * mask, new_h * mask
  return new_h, new_c


def _over_time(cell, inputs, state, outputs, longest, unrolled=False):
  """Their `build_rnn`'s loop: `cell(state, x)` -> state at the steps
  below `longest`; at the later steps the state is kept and the outputs are
  zero. Every step runs (static shapes). (The decoder's attention layer's
  loop; the other layers' is models/gnmt/lstm.py.)

  The loop carries the state alone and the outputs are picked from the
  stacked states after it: in the loop's gradient no tensor of a step has
  more than two consumers, so grappler's memory optimizer has no AddN of
  three to turn into an AccumulateNV2 temporary (under TensorFlow 2.20 that
  temporary outlived a device call and the next one stopped on it; see
  docs/gnmt.md).

  Args:
    cell: (state tuple, step's inputs tuple) -> state tuple.
    inputs: a tuple of [time, ...] tensors.
    state: a tuple of initial tensors.
    outputs: the indices in the state of the outputs wanted.
    longest: the batch's longest sequence.
    unrolled: every step written out over the static time instead of
      `tf.scan`'s loop (the same steps and values): for counting a step's
      cost (models/gnmt/lstm.py says why).

  Returns:
    The outputs of every step, each [time, ...].
  """

  def step(carry, elems):
    *x, t = elems
    return tuple(tf.where(t < longest, n, o)
                 for n, o in zip(cell(carry, tuple(x)), carry))

  if unrolled:
    carry, every = state, []
    for t in range(inputs[0].shape[0]):
      carry = step(carry, (*(x[t] for x in inputs), t))
      every.append(carry)
    states = tuple(tf.stack(s) for s in zip(*every))
    steps = tf.range(inputs[0].shape[0])
  else:
    steps = tf.range(tf.shape(inputs[0])[0])
    states = tf.scan(step, (*inputs, steps), initializer=state)
  run = tf.reshape(steps < longest, [-1, 1, 1])
  return tuple(tf.where(run, states[i], tf.zeros_like(states[i]))
               for i in outputs)


def normed_score_vector(v, g):
  """Their normalized Bahdanau's score vector: g v / |v|."""
  return g * v * tf.math.rsqrt(tf.reduce_sum(tf.square(v)))


def normalized_bahdanau(h, keys, values, source_mask, query_kernel, normed_v,
                        b):
  """Attention of the decoder's first layer over the encoder outputs.

  Args:
    h: [batch, units], the attention LSTM's new output.
    keys: [source time, batch, units], encoder outputs x memory kernel.
    values: [source time, batch, units], the encoder outputs.
    source_mask: [batch, source time], 1 inside the source.
    query_kernel: [units, units]; normed_v: [units], `normed_score_vector`
      (computed once, outside the time loop); b: [units].

  Returns:
    (context [batch, units], alignments [batch, source time]).
  """
  query = tf.expand_dims(tf.matmul(h, query_kernel), 0)
  score = tf.transpose(tf.reduce_sum(normed_v * tf.tanh(keys + query + b), 2))
  score = tf.where(source_mask > 0.5, score,
                   tf.fill(tf.shape(score), tf.constant(-float('inf'),
                                                        score.dtype)))
  alignments = tf.nn.softmax(score)
  context = tf.reduce_sum(
      tf.expand_dims(tf.transpose(alignments), 2) * values, 0)
  return context, alignments


def _project(x, kernel):
  return tf.einsum('tbf,fd->tbd', x, kernel)


def _longest(mask):
  return tf.cast(tf.reduce_max(tf.reduce_sum(mask, 0)), tf.int32)


def encoder(emb, source_mask, weights, drop=None, unrolled=False):
  """Their GNMT encoder: a bidirectional layer, then three layers, residual
  from the second of them on.

  Args:
    emb: [source time, batch, embedding], the source's embeddings.
    source_mask: [source time, batch], 1 inside each source.
    weights: {'fw', 'bw': (input_kernel, kernel, bias), 'uni': three of
      them}; the first uni layer's input kernel takes 2 units.
    drop: their dropout, applied to the embeddings and every uni layer's
      input in training (None: none).
    unrolled: the time loops written out (models/gnmt/lstm.py).

  Returns:
    [source time, batch, units], zero past each source.
  """
  drop = drop or (lambda x: x)
  mask = tf.expand_dims(tf.cast(source_mask, emb.dtype), 2)
  longest = _longest(source_mask)
  emb = drop(emb)
  (fw_x, fw_k, fw_b), (bw_x, bw_k, bw_b) = weights['fw'], weights['bw']
  forward = lstm_layer(emb, fw_x, fw_k, fw_b, longest, unrolled=unrolled)
  backward = lstm_layer(emb, bw_x, bw_k, bw_b, longest, source_mask,
                        reverse=True, unrolled=unrolled)
  out = tf.concat([forward, backward], -1) * mask
  for i, (input_kernel, kernel, bias) in enumerate(weights['uni']):
    below = out
    out = lstm_layer(drop(out), input_kernel, kernel, bias, longest,
                     unrolled=unrolled)
    if i > 0:
      out += below
  return out * mask


def decoder(emb, target_mask, encoder_out, source_mask, weights, drop=None,
            unrolled=False):
  """Their GNMT decoder in training (teacher forcing): an attention layer
  with input feeding, then three layers on [h, context], residual from the
  second of them on.

  Args:
    emb: [target time, batch, embedding], the shifted targets' embeddings.
    target_mask: [target time, batch], 1 inside each target.
    encoder_out: [source time, batch, units].
    source_mask: [source time, batch].
    weights: {'attention': dict(input_kernel, kernel, attention_kernel,
      bias, memory_kernel, query_kernel, v, g, b), 'layers': three
      (input_kernel, kernel, bias), each input kernel taking 2 units}.
    drop: their dropout on the embeddings and the layers' inputs.
    unrolled: the time loops written out (models/gnmt/lstm.py).

  Returns:
    [target time, batch, units], zero past each target.
  """
  drop = drop or (lambda x: x)
  a = attention_weights(weights['attention'])
  mask = tf.expand_dims(tf.cast(target_mask, emb.dtype), 2)
  longest = _longest(target_mask)
  keys = _project(encoder_out, a['memory_kernel'])
  attend = tf.transpose(tf.cast(source_mask, emb.dtype))
  gates_x = _project(drop(emb), a['input_kernel'])
  batch = emb.shape[1] or tf.shape(emb)[1]  # None when serving.
  units = a['kernel'].shape[0]

  def cell(state, x):
    return attention_step(x[0], state, a, keys, encoder_out, attend)[0]

  zeros = tf.zeros([batch, units], emb.dtype)
  out, context = _over_time(cell, (gates_x,), (zeros,) * 3, (0, 2), longest,
                            unrolled)
  # Each layer reads the context through one broadcast: three direct reads
  # would sum their gradients in an AddN of three (see `_over_time`).
  count = len(weights['layers'])
  contexts = tf.unstack(tf.broadcast_to(
      context, tf.concat([[count], tf.shape(context)], 0)), num=count)
  for i, (input_kernel, kernel, bias) in enumerate(weights['layers']):
    below = out
    inputs = drop(tf.concat([out, contexts[i]], -1))
    out = lstm_layer(inputs, input_kernel, kernel, bias, longest,
                     unrolled=unrolled)
    if i > 0:
      out += below
  return out * mask


def label_smoothed_sum(logits, targets, smoothing: float):
  """Their training loss: label-smoothed cross-entropy summed over every
  position.

  Args:
    logits: [positions, vocabulary].
    targets: [positions] integer ids.
    smoothing: the label smoothing (MLPerf GNMT: 0.1).
  """
  vocab = logits.shape[-1]
  labels = tf.one_hot(tf.cast(targets, tf.int32), vocab, 1.0 - smoothing,
                      smoothing / (vocab - 1), dtype=logits.dtype)
  # Theirs is log(sum(exp(logits))), which overflows past logits of ~88 in
  # float32; the max-shifted form is the same value where theirs is finite.
  log_sum_exp = tf.reduce_logsumexp(logits, -1)
  return tf.reduce_sum(log_sum_exp - tf.reduce_sum(logits * labels, -1))


def attention_weights(a):
  """The attention layer's weights as `attention_step` takes them: v and g
  replaced by `normed_score_vector` (once a sequence, not once a step: in
  the time loop's gradient, v would be a tensor of three consumers, the
  AddN grappler's memory optimizer rewrites, see `_over_time`)."""
  a = dict(a)
  a['normed_v'] = normed_score_vector(a.pop('v'), a.pop('g'))
  return a


def attention_step(gates_x, state, a, keys, values, attend):
  """One step of the decoder's attention layer: input feeding (the previous
  context x attention_kernel added to the gates), the LSTM, then the
  attention over the source with the new h.

  Args:
    gates_x: [batch, 4 units], the step's input x input_kernel.
    state: (h, c, context).
    a: the attention layer's weights by `attention_weights`.
    keys, values: [source time, batch, units]; attend: [batch, source time].

  Returns:
    ((h, c, context), alignments [batch, source time]).
  """
  h, c, context = state
  gates = gates_x + tf.matmul(context, a['attention_kernel'])
  h, c = lstm_step(gates, h, c, a['kernel'], a['bias'])
  context, alignments = normalized_bahdanau(
      h, keys, values, attend, a['query_kernel'], a['normed_v'], a['b'])
  return (h, c, context), alignments


def _weights_in(weights, dtype):
  return tf.nest.map_structure(lambda w: tf.cast(w, dtype), weights)


class GNMT(tf.Module):
  """Google's v0.7 GNMT as variables and the functions above.

  Four layers each side, as their model.py hard-codes: a bidirectional
  encoder layer then three (residual from the third on), and a decoder of
  the attention layer then three on [h, context] (residual from the third
  on). Separate source and target embeddings of `units` columns; the output
  projection [units, vocab] without a bias, in float32. Every weight is
  uniform in +-init_weight (0.1) but the attention's g (sqrt(1 / units)) and
  b (zeros), as their initializers.
  """

  def __init__(self, *, vocab_size: int, units: int = 1024,
               dropout_rate: float = 0.2, init_weight: float = 0.1,
               compute_dtype: str = 'float32', seed: int = 0,
               time_loops: str = 'while'):
    """Args:
      vocab_size: the shared vocabulary (MLPerf: 32,317 BPE tokens).
      units: LSTM, attention and embedding width (MLPerf: 1024).
      dropout_rate: on embeddings and every layer's input (MLPerf: 0.2).
      init_weight: the uniform initialisation's bound (MLPerf: 0.1).
      compute_dtype: 'float32' or 'bfloat16' (Google's activation_dtype):
        weights are kept in float32 and cast for the cells; the projection
        and the loss stay float32.
      seed: initialisation and dropout seed.
      time_loops: 'while' (Google's: loops over the steps below the
        batch's longest sequence) or 'unrolled' (every step of the static
        length written out, the same loss and gradients: how the
        time-to-train model counts a step, tools/predictor/cost.py).
    """
    super().__init__(name='gnmt')
    if units <= 0 or vocab_size <= 1:
      raise ValueError(f'GNMT needs units > 0 and vocab_size > 1, got '
                       f'units={units}, vocab_size={vocab_size}.')
    if time_loops not in ('while', 'unrolled'):
      raise ValueError(f"GNMT.time_loops must be 'while' or 'unrolled', got "
                       f'{time_loops!r} (gin: TIME_LOOPS).')
    self._unrolled = time_loops == 'unrolled'
    self.vocab_size, self.units = vocab_size, units
    self.dtype = layers.compute_dtype(compute_dtype)
    self._drop = layers.Dropout(dropout_rate, seed)
    self._seed = seed
    self._count = 0
    u = units
    lstm = lambda name, inputs: tuple(  # noqa: E731
        self._uniform(f'{name}/{part}', shape, init_weight)
        for part, shape in (('input_kernel', [inputs, 4 * u]),
                            ('kernel', [u, 4 * u]), ('bias', [4 * u])))
    self.source_embedding = self._uniform('encoder/embedding', [vocab_size, u],
                                          init_weight)
    self.target_embedding = self._uniform('decoder/embedding', [vocab_size, u],
                                          init_weight)
    self.encoder_weights = {
        'fw': lstm('encoder/bidirectional/fw', u),
        'bw': lstm('encoder/bidirectional/bw', u),
        'uni': [lstm(f'encoder/uni_{i}', 2 * u if i == 0 else u)
                for i in range(3)]}
    attention = dict(zip(('input_kernel', 'kernel', 'bias'),
                         lstm('decoder/attention', u)))
    for name, shape in (('attention_kernel', [u, 4 * u]),
                        ('memory_kernel', [u, u]), ('query_kernel', [u, u]),
                        ('v', [u])):
      attention[name] = self._uniform(f'decoder/attention/{name}', shape,
                                      init_weight)
    attention['g'] = tf.Variable(np.sqrt(1.0 / u).astype(np.float32),
                                 name='decoder/attention/g')
    attention['b'] = tf.Variable(tf.zeros([u]), name='decoder/attention/b')
    self.decoder_weights = {
        'attention': attention,
        'layers': [lstm(f'decoder/layer_{i}', 2 * u) for i in range(1, 4)]}
    self.output_projection = self._uniform('decoder/output_projection',
                                           [u, vocab_size], init_weight)
    self.state = {}

  def _uniform(self, name, shape, bound):
    self._count += 1
    return tf.Variable(tf.random.stateless_uniform(
        shape, [self._seed, self._count], -bound, bound), name=name)

  def _dropout(self, training):
    return (lambda x: self._drop(x, True)) if training else None

  def _embed(self, table, ids):
    """ids [batch, time] -> [time, batch, units] in the compute dtype."""
    return tf.cast(tf.gather(table, tf.transpose(ids)), self.dtype)

  def encode(self, source, source_length, training: bool = False):
    """(encoder outputs [time, batch, units], source mask [time, batch])."""
    mask = tf.transpose(tf.sequence_mask(source_length, source.shape[1],
                                         self.dtype))
    out = encoder(self._embed(self.source_embedding, source), mask,
                  _weights_in(self.encoder_weights, self.dtype),
                  self._dropout(training), self._unrolled)
    return out, mask

  def __call__(self, batch, length: int, training: bool = True):
    """Teacher-forced logits over the batch's first `length` positions, as
    their training graph of that bucket computes them.

    Args:
      batch: 'source', 'target_input', 'target_output' [batch, >= length]
        and their lengths 'source_length', 'target_length' [batch]; every
        length at most `length`.
      length: the bucket's static length.
      training: dropout on.

    Returns:
      (logits [length * batch, vocab] float32, time-major, zero rows' logits
      past each target (its output is zeroed), their targets [length *
      batch]).
    """
    source = batch['source'][:, :length]
    encoded, source_mask = self.encode(source, batch['source_length'],
                                       training)
    target_mask = tf.transpose(tf.sequence_mask(
        batch['target_length'], length, self.dtype))
    out = decoder(self._embed(self.target_embedding,
                              batch['target_input'][:, :length]),
                  target_mask, encoded, source_mask,
                  _weights_in(self.decoder_weights, self.dtype),
                  self._dropout(training), self._unrolled)
    logits = tf.matmul(tf.reshape(tf.cast(out, tf.float32), [-1, self.units]),
                       self.output_projection)
    targets = tf.reshape(tf.transpose(batch['target_output'][:, :length]),
                         [-1])
    return logits, targets

  # -- Decoding, one step at a time (beam search) ---------------------------------

  def start_decoding(self, source, source_length, beams: int):
    """The decoder's first state and the source it attends to, each
    hypothesis of a sentence adjacent ([batch * beams, ...]).

    Returns:
      (state: (h, c, context) of the attention layer then (h, c) of each
      layer, batch-major; source: (keys, values [time, batch * beams,
      units], attend [batch * beams, time])).
    """
    encoded, mask = self.encode(source, source_length)
    repeat = lambda t: tf.repeat(t, beams, axis=1)  # noqa: E731
    a = _weights_in(self.decoder_weights['attention'], self.dtype)
    values = repeat(encoded)
    keys = _project(values, a['memory_kernel'])
    attend = tf.transpose(repeat(mask))
    zeros = tf.zeros([tf.shape(attend)[0], self.units], self.dtype)
    state = ((zeros,) * 3,) + ((zeros, zeros),) * 3
    return state, (keys, values, attend)

  def decode_step(self, ids, state, source):
    """(logits [n, vocab] float32, alignments [n, source time], new state)
    for the previous tokens `ids` [n]."""
    weights = _weights_in(self.decoder_weights, self.dtype)
    a = attention_weights(weights['attention'])
    emb = tf.cast(tf.gather(self.target_embedding, ids), self.dtype)
    (h, c, context), alignments = attention_step(
        tf.matmul(emb, a['input_kernel']), state[0], a, *source)
    new_state, out = [(h, c, context)], h
    for i, (input_kernel, kernel, bias) in enumerate(weights['layers']):
      x = tf.matmul(tf.concat([out, context], -1), input_kernel)
      h, c = lstm_step(x, *state[i + 1], kernel, bias)
      new_state.append((h, c))
      out = h + out if i > 0 else h
    logits = tf.matmul(tf.cast(out, tf.float32), self.output_projection)
    return logits, tf.cast(alignments, tf.float32), tuple(new_state)
