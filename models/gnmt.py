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
- `lstm_layer`: their `build_rnn` over `lstm_cell`: the steps below the
  batch's longest sequence, forward or backward from its last step, every
  later step's output zero;
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

import tensorflow as tf


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


def _over_time(cell, inputs, state, outputs, longest, reverse=False):
  """Their `build_rnn`'s loop: `cell(state, x)` -> (state, outputs) at
  the steps below `longest` (forward, or backward from longest - 1); at
  the later steps the state is kept and the outputs are zero. Every step
  runs (static shapes), so a backward loop's state is still the initial
  one when it reaches longest - 1, where theirs starts.

  Args:
    cell: (state tuple, step's inputs tuple) -> (state, outputs) tuples.
    inputs: a tuple of [time, ...] tensors.
    state, outputs: tuples of initial tensors (outputs: their shapes).
    longest: the batch's longest sequence.

  Returns:
    The outputs of every step, each [time, ...].
  """
  count = len(state)

  def step(carry, elems):
    *x, t = elems
    new_state, new_out = cell(carry[:count], tuple(x))
    run = t < longest
    return (tuple(tf.where(run, n, o) for n, o in zip(new_state,
                                                       carry[:count])) +
            tuple(tf.where(run, n, tf.zeros_like(n)) for n in new_out))

  steps = tf.range(tf.shape(inputs[0])[0])
  return tf.scan(step, (*inputs, steps), initializer=state + outputs,
                 reverse=reverse)[count:]


def lstm_layer(gate_inputs, kernel, bias, max_length, padding=None,
               reverse: bool = False):
  """An LSTM over time from a zero state, as their `build_rnn` drives it.

  Args:
    gate_inputs: [time, batch, 4 units], x W_x for every step.
    kernel: [units, 4 units]; bias: [4 units].
    max_length: the batch's longest sequence: steps from it on are not
      run (their outputs are zero), and a backward layer starts at
      max_length - 1.
    padding: [time, batch], 1 inside each sequence (their backward encoder
      layer passes it, so each sequence's backward state starts at its own
      last token); None: no mask.
    reverse: run from the last step to the first.

  Returns:
    h of every step, [time, batch, units].
  """
  batch, dtype = gate_inputs.shape[1], gate_inputs.dtype
  if padding is None:
    padding = tf.ones(tf.shape(gate_inputs)[:2], dtype)

  def cell(state, x):
    h, c = lstm_step(x[0], *state, kernel, bias, x[1])
    return (h, c), (h,)

  zeros = tf.zeros([batch, kernel.shape[0]], dtype)
  return _over_time(cell, (gate_inputs, tf.cast(padding, dtype)),
                    (zeros, zeros), (zeros,), max_length, reverse)[0]


def normalized_bahdanau(h, keys, values, source_mask, query_kernel, v, g, b):
  """Attention of the decoder's first layer over the encoder outputs.

  Args:
    h: [batch, units], the attention LSTM's new output.
    keys: [source time, batch, units], encoder outputs x memory kernel.
    values: [source time, batch, units], the encoder outputs.
    source_mask: [batch, source time], 1 inside the source.
    query_kernel: [units, units]; v: [units]; g: a scalar; b: [units].

  Returns:
    (context [batch, units], alignments [batch, source time]).
  """
  query = tf.expand_dims(tf.matmul(h, query_kernel), 0)
  normed_v = g * v * tf.math.rsqrt(tf.reduce_sum(tf.square(v)))
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


def encoder(emb, source_mask, weights, drop=None):
  """Their GNMT encoder: a bidirectional layer, then three layers, residual
  from the second of them on.

  Args:
    emb: [source time, batch, embedding], the source's embeddings.
    source_mask: [source time, batch], 1 inside each source.
    weights: {'fw', 'bw': (input_kernel, kernel, bias), 'uni': three of
      them}; the first uni layer's input kernel takes 2 units.
    drop: their dropout, applied to the embeddings and every uni layer's
      input in training (None: none).

  Returns:
    [source time, batch, units], zero past each source.
  """
  drop = drop or (lambda x: x)
  mask = tf.expand_dims(tf.cast(source_mask, emb.dtype), 2)
  longest = _longest(source_mask)
  emb = drop(emb)
  (fw_x, fw_k, fw_b), (bw_x, bw_k, bw_b) = weights['fw'], weights['bw']
  forward = lstm_layer(_project(emb, fw_x), fw_k, fw_b, longest)
  backward = lstm_layer(_project(emb, bw_x), bw_k, bw_b, longest,
                        source_mask, reverse=True)
  out = tf.concat([forward, backward], -1) * mask
  for i, (input_kernel, kernel, bias) in enumerate(weights['uni']):
    below = out
    out = lstm_layer(_project(drop(out), input_kernel), kernel, bias,
                     longest)
    if i > 0:
      out += below
  return out * mask


def decoder(emb, target_mask, encoder_out, source_mask, weights, drop=None):
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

  Returns:
    [target time, batch, units], zero past each target.
  """
  drop = drop or (lambda x: x)
  a = weights['attention']
  mask = tf.expand_dims(tf.cast(target_mask, emb.dtype), 2)
  longest = _longest(target_mask)
  keys = _project(encoder_out, a['memory_kernel'])
  attend = tf.transpose(tf.cast(source_mask, emb.dtype))
  gates_x = _project(drop(emb), a['input_kernel'])
  batch, units = emb.shape[1], a['kernel'].shape[0]

  def cell(state, x):
    h, c, context = state
    gates = x[0] + tf.matmul(context, a['attention_kernel'])  # Input feeding.
    h, c = lstm_step(gates, h, c, a['kernel'], a['bias'])
    context, _ = normalized_bahdanau(h, keys, encoder_out, attend,
                                     a['query_kernel'], a['v'], a['g'],
                                     a['b'])
    return (h, c, context), (h, context)

  zeros = tf.zeros([batch, units], emb.dtype)
  out, context = _over_time(cell, (gates_x,), (zeros,) * 3, (zeros,) * 2,
                            longest)
  for i, (input_kernel, kernel, bias) in enumerate(weights['layers']):
    below = out
    inputs = drop(tf.concat([out, context], -1))
    out = lstm_layer(_project(inputs, input_kernel), kernel, bias, longest)
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
