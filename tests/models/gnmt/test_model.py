"""GNMT's cells against NumPy versions of Google's v0.7 sequence (model.py:
lstm_cell_gate + lstm_cell_split, attention, softmax_cross_entropy)."""

import numpy as np
import tensorflow as tf

from models.gnmt import model as gnmt


def sigmoid(x):
  return 1 / (1 + np.exp(-x))


def test_lstm_step_is_their_cell_with_forget_bias_zero_and_padding():
  rng = np.random.default_rng(0)
  batch, units = 3, 4
  x_w = rng.normal(size=(batch, 4 * units)).astype(np.float32)
  h, c = (rng.normal(size=(batch, units)).astype(np.float32) for _ in '12')
  kernel = rng.normal(size=(units, 4 * units)).astype(np.float32)
  bias = rng.normal(size=4 * units).astype(np.float32)
  padding = np.array([1, 0, 1], np.float32)
  got_h, got_c = gnmt.lstm_step(x_w, h, c, kernel, bias, padding)
  # Theirs: gates = h W + x W_x + b; i, j, f, o = split; no forget bias.
  gates = h @ kernel + x_w + bias
  i, j, f, o = np.split(gates, 4, axis=1)
  want_c = (c * sigmoid(f) + sigmoid(i) * np.tanh(j)) * padding[:, None]
  want_h = np.tanh(c * sigmoid(f) + sigmoid(i) * np.tanh(j)) * sigmoid(o)
  want_h *= padding[:, None]
  np.testing.assert_allclose(got_c, want_c, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(got_h, want_h, rtol=1e-5, atol=1e-6)
  assert not np.any(got_h.numpy()[1]) and not np.any(got_c.numpy()[1])


def test_normalized_bahdanau_is_their_attention():
  rng = np.random.default_rng(1)
  time, batch, units = 5, 2, 3
  h = rng.normal(size=(batch, units)).astype(np.float32)
  keys = rng.normal(size=(time, batch, units)).astype(np.float32)
  values = rng.normal(size=(time, batch, units)).astype(np.float32)
  mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.float32)
  query_kernel = rng.normal(size=(units, units)).astype(np.float32)
  v = rng.normal(size=units).astype(np.float32)
  b = rng.normal(size=units).astype(np.float32)
  g = np.float32(np.sqrt(1 / units))  # Their initial value.
  context, alignments = gnmt.normalized_bahdanau(
      h, keys, values, mask, query_kernel, gnmt.normed_score_vector(v, g), b)
  normed_v = g * v / np.sqrt(np.sum(v**2))
  score = np.sum(normed_v * np.tanh(keys + (h @ query_kernel)[None] + b),
                 2).T
  score = np.where(mask > 0.5, score, -np.inf)
  want = np.exp(score - score.max(1, keepdims=True))
  want /= want.sum(1, keepdims=True)
  np.testing.assert_allclose(alignments, want, rtol=1e-5, atol=1e-7)
  assert np.all(alignments.numpy()[0, 3:] == 0)  # Past the source: none.
  np.testing.assert_allclose(
      context, np.einsum('bt,tbu->bu', want, values), rtol=1e-5, atol=1e-6)


def test_label_smoothed_sum_is_their_loss_padding_included():
  rng = np.random.default_rng(2)
  vocab, smoothing = 7, 0.1
  logits = rng.normal(size=(4, vocab)).astype(np.float32)
  logits[3] = 0.0  # A padded position: its output was zeroed.
  targets = np.array([1, 6, 0, 0])
  labels = np.full((4, vocab), smoothing / (vocab - 1), np.float32)
  labels[np.arange(4), targets] = 1 - smoothing
  want = np.sum(np.log(np.exp(logits).sum(1)) - (logits * labels).sum(1))
  np.testing.assert_allclose(
      gnmt.label_smoothed_sum(tf.constant(logits), targets, smoothing), want,
      rtol=1e-6)
  # A padded position adds the constant log V (theirs: a zeroed output
  # times W, so nothing of it reaches W's gradient).
  padded = gnmt.label_smoothed_sum(tf.zeros([1, vocab]), [0], smoothing)
  np.testing.assert_allclose(padded, np.log(vocab), rtol=1e-6)


def their_build_rnn(x_w, kernel, bias, max_length, padding, reverse):
  """Their build_rnn's forward loop over lstm_cell, in NumPy."""
  time, batch, _ = x_w.shape
  units = kernel.shape[0]
  h, c = np.zeros((batch, units), np.float32), np.zeros((batch, units),
                                                         np.float32)
  out = np.zeros((time, batch, units), np.float32)
  order = range(max_length - 1, -1, -1) if reverse else range(max_length)
  for i in order:
    # Their lstm_cell_gate, then lstm_cell_split with the step's padding.
    gates = h @ kernel + x_w[i] + bias
    gi, gj, gf, go = np.split(gates, 4, axis=1)
    c = c * sigmoid(gf) + sigmoid(gi) * np.tanh(gj)
    h = np.tanh(c) * sigmoid(go)
    if padding is not None:
      c, h = c * padding[i][:, None], h * padding[i][:, None]
    out[i] = h
  return out


def _layer_case(seed=3):
  rng = np.random.default_rng(seed)
  time, batch, features, units = 6, 3, 5, 2
  x = rng.normal(size=(time, batch, features)).astype(np.float32)
  input_kernel = rng.normal(size=(features, 4 * units)).astype(np.float32)
  kernel = rng.normal(size=(units, 4 * units)).astype(np.float32)
  bias = rng.normal(size=4 * units).astype(np.float32)
  lengths = np.array([4, 2, 3])
  padding = (np.arange(time)[:, None] < lengths[None]).astype(np.float32)
  return x, (input_kernel, kernel, bias), padding, int(lengths.max())


def test_lstm_layer_runs_their_loop_forward_and_backward():
  x, (input_kernel, kernel, bias), padding, max_length = _layer_case()
  x_w = np.einsum('tbf,fd->tbd', x, input_kernel)
  for reverse, pad in ((False, None), (True, padding), (True, None)):
    got = gnmt.lstm_layer(x, input_kernel, kernel, bias, max_length, pad,
                          reverse)
    want = their_build_rnn(x_w, kernel, bias, max_length, pad, reverse)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert not np.any(got.numpy()[max_length:])  # Past the longest: zero.
  # Backward with padding: each sequence starts at its own last token, so
  # the short one's state equals a run over its tokens alone.
  alone = their_build_rnn(x_w[:2, 1:2], kernel, bias, 2, None, True)
  got = gnmt.lstm_layer(x, input_kernel, kernel, bias, max_length, padding,
                        True)
  np.testing.assert_allclose(got.numpy()[:2, 1:2], alone, rtol=1e-5,
                             atol=1e-6)


def _differentiated_loop(x, input_kernel, kernel, bias, max_length, padding,
                         reverse):
  """Their loop over `lstm_step` in Python, for automatic differentiation."""
  time, batch, _ = x.shape
  h = c = tf.zeros([batch, kernel.shape[0]])
  out = [tf.zeros_like(h)] * time
  for t in (range(max_length - 1, -1, -1) if reverse else range(max_length)):
    pad = None if padding is None else padding[t]
    h, c = gnmt.lstm_step(tf.matmul(x[t], input_kernel), h, c, kernel, bias,
                          pad)
    out[t] = h
  return tf.stack(out)


def test_lstm_layer_gradients_are_automatic_differentiations():
  """The layer's written-out gradient against TensorFlow's of the same
  loop, for the input, both kernels and the bias, forward, backward and
  masked, the longest shorter than the time axis and equal to it, eager
  and traced."""
  x, weights, padding, max_length = _layer_case(seed=4)
  args = [tf.constant(a) for a in (x, *weights)]
  upstream = tf.constant(np.random.default_rng(5).normal(
      size=(x.shape[0], x.shape[1], weights[1].shape[0])).astype(np.float32))

  def gradients(layer, *rest):
    with tf.GradientTape() as tape:
      tape.watch(args)
      loss = tf.reduce_sum(layer(*args, *rest) * upstream)
    return tape.gradient(loss, args)

  traced = tf.function(lambda *a: gradients(gnmt.lstm_layer, *a))
  for longest in (max_length, x.shape[0]):
    for reverse, pad in ((False, None), (True, padding), (True, None),
                         (False, padding)):
      want = gradients(_differentiated_loop, longest, pad, reverse)
      for got in (gradients(gnmt.lstm_layer, longest, pad, reverse),
                  traced(tf.constant(longest), pad, reverse)):
        for g, w in zip(got, want):
          np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def their_attention_rnn(x_w, a, keys, values, seq_mask, max_length):
  """Their build_rnn over attention_cell (input feeding), in NumPy: the h
  and the attention context of every step."""
  time, batch, _ = x_w.shape
  units = a['kernel'].shape[0]
  h, c, context = (np.zeros((batch, units), np.float32) for _ in '123')
  hs = np.zeros((time, batch, units), np.float32)
  contexts = np.zeros((time, batch, units), np.float32)
  normed_v = a['g'] * a['v'] / np.sqrt(np.sum(a['v']**2))
  for i in range(max_length):
    gates = h @ a['kernel'] + x_w[i] + context @ a['attention_kernel']
    gi, gj, gf, go = np.split(gates + a['bias'], 4, axis=1)
    c = c * sigmoid(gf) + sigmoid(gi) * np.tanh(gj)
    h = np.tanh(c) * sigmoid(go)
    score = np.sum(normed_v * np.tanh(keys + (h @ a['query_kernel'])[None] +
                                      a['b']), 2).T
    score = np.where(seq_mask > 0.5, score, -np.inf)
    align = np.exp(score - score.max(1, keepdims=True))
    align /= align.sum(1, keepdims=True)
    context = np.einsum('bt,tbu->bu', align, values)
    hs[i], contexts[i] = h, context
  return hs, contexts


def weights(rng, shapes):
  return tuple(rng.normal(size=s).astype(np.float32) * 0.5 for s in shapes)


def test_encoder_and_decoder_are_their_sequence():
  rng = np.random.default_rng(4)
  src_time, tgt_time, batch, u = 5, 4, 2, 3
  src_len, tgt_len = np.array([5, 3]), np.array([2, 4])
  src_mask = (np.arange(src_time)[:, None] < src_len).astype(np.float32)
  tgt_mask = (np.arange(tgt_time)[:, None] < tgt_len).astype(np.float32)
  src_emb, tgt_emb = weights(rng, [(src_time, batch, u),
                                   (tgt_time, batch, u)])
  lstm = lambda n_in: weights(rng, [(n_in, 4 * u), (u, 4 * u), (4 * u,)])
  enc_w = {'fw': lstm(u), 'bw': lstm(u),
           'uni': [lstm(2 * u), lstm(u), lstm(u)]}
  a = dict(zip(('input_kernel', 'kernel', 'attention_kernel', 'bias',
                'memory_kernel', 'query_kernel', 'v', 'b'),
               weights(rng, [(u, 4 * u), (u, 4 * u), (u, 4 * u), (4 * u,),
                             (u, u), (u, u), (u,), (u,)])))
  a['g'] = np.float32(np.sqrt(1 / u))
  dec_w = {'attention': a, 'layers': [lstm(2 * u) for _ in range(3)]}

  enc = gnmt.encoder(tf.constant(src_emb), src_mask, enc_w)
  # Their _build_encoder, in NumPy.
  proj = lambda x, k: np.einsum('tbf,fd->tbd', x, k)
  longest = int(src_len.max())
  fw = their_build_rnn(proj(src_emb, enc_w['fw'][0]), *enc_w['fw'][1:],
                       longest, None, False)
  bw = their_build_rnn(proj(src_emb, enc_w['bw'][0]), *enc_w['bw'][1:],
                       longest, src_mask, True)
  want = np.concatenate([fw, bw], -1) * src_mask[..., None]
  for i, (wx, k, b) in enumerate(enc_w['uni']):
    o = their_build_rnn(proj(want, wx), k, b, longest, None, False)
    want = o + want if i > 0 else o
  want = want * src_mask[..., None]
  np.testing.assert_allclose(enc, want, rtol=1e-4, atol=1e-5)

  dec = gnmt.decoder(tf.constant(tgt_emb), tgt_mask, enc, src_mask, dec_w)
  # Their _build_decoder's training branch, in NumPy.
  longest = int(tgt_len.max())
  o, context = their_attention_rnn(
      proj(tgt_emb, a['input_kernel']), a, proj(want, a['memory_kernel']),
      want, src_mask.T, longest)
  for i, (wx, k, b) in enumerate(dec_w['layers'], start=1):
    out = their_build_rnn(proj(np.concatenate([o, context], -1), wx), k, b,
                          longest, None, False)
    o = out + o if i > 1 else out
  np.testing.assert_allclose(dec, o * tgt_mask[..., None], rtol=1e-4,
                             atol=1e-5)
  assert not np.any(dec.numpy()[2:, 0])  # Past the first target: zero.


def test_one_step_decoding_is_the_teacher_forced_model():
  model = gnmt.GNMT(vocab_size=13, units=8, seed=3)
  source = tf.constant([[3, 4, 5, 1, 0, 0], [6, 7, 1, 0, 0, 0]])
  target = np.array([[3, 4, 9, 1, 0], [5, 1, 0, 0, 0]], np.int32)
  batch = {'source': source, 'source_length': tf.constant([4, 3]),
           'target_output': target,
           'target_input': np.pad(target[:, :-1], [[0, 0], [1, 0]]),
           'target_length': tf.constant([4, 2])}
  logits, _ = model(batch, 5, training=False)
  logits = tf.reshape(logits, [5, 2, 13]).numpy()
  state, attend = model.start_decoding(source, batch['source_length'], 1)
  ids = tf.zeros([2], tf.int32)
  for t in range(5):
    step_logits, alignments, state = model.decode_step(ids, state, attend)
    inside = t < np.array([4, 2])
    np.testing.assert_allclose(step_logits.numpy()[inside], logits[t][inside],
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(alignments.numpy().sum(1), 1, rtol=1e-6)
    assert not alignments.numpy()[1, 3:].any()  # Past the source.
    ids = tf.constant(target[:, t])


def test_no_addn_of_more_than_two_in_the_gradient():
  """Grappler's memory optimizer turns an AddN of three or more into a
  TemporaryVariable; inside a time loop's gradient that temporary outlived
  a device call under TensorFlow 2.20 (docs/gnmt.md). The model's graph
  keeps every AddN, loops' bodies included, at two inputs."""
  model = gnmt.GNMT(vocab_size=11, units=4, seed=1)
  length = 5
  batch = {'source': tf.ones([2, length], tf.int32),
           'source_length': tf.constant([5, 3]),
           'target_input': tf.ones([2, length], tf.int32),
           'target_output': tf.ones([2, length], tf.int32),
           'target_length': tf.constant([4, 2])}

  @tf.function
  def gradient():
    with tf.GradientTape() as tape:
      logits, targets = model(batch, length, training=True)
      loss = gnmt.label_smoothed_sum(logits, targets, 0.1)
    return tape.gradient(loss, model.trainable_variables)

  graph = gradient.get_concrete_function().graph.as_graph_def()
  bodies = [f for f in graph.library.function if 'grad' in f.signature.name]
  assert any('while' in f.signature.name for f in bodies)  # Loops seen.
  wide = [(f.signature.name, n.name) for f in graph.library.function
          for n in f.node_def if n.op == 'AddN' and n.attr['N'].i > 2]
  wide += [('outer', n.name) for n in graph.node
           if n.op == 'AddN' and n.attr['N'].i > 2]
  assert not wide


def test_unrolled_time_loops_give_the_same_loss_and_gradients():
  """TIME_LOOPS='unrolled' (how tools.predict counts a step: XLA counts a
  while loop's body once) runs every step of the bucket instead of the
  steps below the batch's longest sequence, and writes them out: the
  later steps are masked before they reach an earlier one or the loss, so
  the loss and every gradient equal the loops'; and the graph holds no
  loop."""
  length = 6
  batch = {'source': tf.constant([[3, 4, 5, 1, 0, 0], [6, 7, 1, 0, 0, 0]]),
           'source_length': tf.constant([4, 3]),
           'target_input': tf.constant([[0, 3, 4, 9, 0, 0], [0, 5, 0, 0, 0,
                                                             0]]),
           'target_output': tf.constant([[3, 4, 9, 1, 0, 0], [5, 1, 0, 0, 0,
                                                              0]]),
           'target_length': tf.constant([4, 2])}

  def run(time_loops):
    model = gnmt.GNMT(vocab_size=13, units=4, seed=2, dropout_rate=0.0,
                      time_loops=time_loops)

    @tf.function
    def step():
      with tf.GradientTape() as tape:
        loss = gnmt.label_smoothed_sum(*model(batch, length), 0.1)
      return loss, tape.gradient(loss, model.trainable_variables)

    graph = step.get_concrete_function().graph.as_graph_def()
    loops = [n.name for f in graph.library.function for n in f.node_def
             if n.op in ('While', 'StatelessWhile')] + [
                 n.name for n in graph.node
                 if n.op in ('While', 'StatelessWhile')]
    return step(), loops

  (loss, grads), loops = run('while')
  (unrolled_loss, unrolled_grads), unrolled_loops = run('unrolled')
  assert loops and not unrolled_loops
  np.testing.assert_allclose(unrolled_loss, loss, rtol=1e-6)
  for got, want in zip(unrolled_grads, grads):
    np.testing.assert_allclose(tf.convert_to_tensor(got),
                               tf.convert_to_tensor(want), rtol=1e-5,
                               atol=1e-6)
  with np.testing.assert_raises_regex(ValueError, 'TIME_LOOPS'):
    gnmt.GNMT(vocab_size=13, units=4, time_loops='scan')
