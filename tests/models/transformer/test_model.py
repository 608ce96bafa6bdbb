"""Transformer: packing masks, incremental decoding, beam search against a
step-by-step Python beam search, the loss, Google's schedule and Adam."""

import math

import numpy as np
import pytest
import tensorflow as tf

from models.transformer import beam_search
from models.transformer import model as transformer_lib
from models.transformer import task as transformer_task
from training import optimizers
from training import schedules

VOCAB = 23


def tiny(**kwargs):
  return transformer_lib.Transformer(
      size='tiny', vocab_size=VOCAB, num_layers=2, model_dim=32, num_heads=4,
      ff_dim=64, seed=3, **kwargs)


def test_big_has_the_mlperf_shape():
  model = transformer_lib.Transformer(size='big', vocab_size=33708)
  assert (model.num_layers, model.model_dim, model.num_heads,
          model.ff_dim) == (6, 1024, 16, 4096)
  assert model.params['shared_embedding'].shape == (33708, 1024)
  # One shared embedding, no biases: 6 encoder layers of 4 d^2 + 2 d ff,
  # 6 decoder layers of 8 d^2 + 2 d ff, and layer norms.
  d, ff = 1024, 4096
  weights = 6 * (4 * d * d + 2 * d * ff) + 6 * (8 * d * d + 2 * d * ff)
  norms = 2 * d * (6 * 2 + 6 * 3 + 2)
  assert sum(int(np.prod(v.shape)) for v in model.params.values()) == (
      33708 * d + weights + norms)


def test_every_kernel_has_a_sharding_rule_or_is_a_layer_norm():
  import re
  rules = transformer_lib.sharding_rules()
  for name in tiny().params:
    matched = any(re.search(pattern, name) for pattern, _ in rules)
    assert matched == (not name.endswith(('gamma', 'beta'))), name


def packed_row(pairs, length):
  from input_pipeline import packing
  rows = list(packing.pack(pairs, length))
  assert len(rows) == 1
  return {k: tf.constant(v[None], tf.int32) for k, v in rows[0].items()}


def test_packed_pairs_attend_only_within_their_segment():
  """A row of three pairs encodes and decodes each pair as if it were alone
  (Lingvo's decoder input for a later pair starts from the previous EOS)."""
  model = tiny()
  rng = np.random.default_rng(0)
  pairs = [(np.r_[rng.integers(3, VOCAB, n), 1], np.r_[rng.integers(
      3, VOCAB, m), 1]) for n, m in ((4, 6), (7, 3), (2, 5))]
  row = packed_row(pairs, 24)
  encoded = model.encode(row['inputs'], row['inputs_segmentation'],
                         row['inputs_position'], training=False)
  logits = model(row, training=False).numpy()[0]
  start_s = start_t = 0
  for k, (source, target) in enumerate(pairs):
    s = tf.constant(source[None], tf.int32)
    ones_s = tf.ones_like(s)
    alone = model.encode(s, ones_s, tf.range(len(source))[None],
                         training=False)
    np.testing.assert_allclose(
        encoded[0, start_s:start_s + len(source)], alone[0], atol=2e-5)
    first = 0 if k == 0 else 1  # Start id, or the previous pair's EOS.
    decoder_in = tf.constant([[first, *target[:-1]]], tf.int32)
    alone_logits = model.decode(
        decoder_in, tf.ones_like(decoder_in), tf.range(len(target))[None],
        alone, ones_s, training=False)
    np.testing.assert_allclose(logits[start_t:start_t + len(target)],
                               alone_logits[0], atol=2e-4)
    start_s += len(source)
    start_t += len(target)


def test_incremental_decoding_matches_teacher_forcing():
  model = tiny()
  source = tf.constant([[5, 9, 4, 7, 1, 0, 0], [8, 3, 1, 0, 0, 0, 0]])
  target_in = tf.constant([[0, 6, 11, 3, 17], [0, 4, 4, 9, 2]])
  segments = tf.cast(source > 0, tf.int32)
  encoded = model.encode(source, segments,
                         tf.broadcast_to(tf.range(7), [2, 7]), training=False)
  full = model.decode(target_in, tf.ones_like(target_in),
                      tf.broadcast_to(tf.range(5), [2, 5]), encoded, segments,
                      training=False)
  for growing in (False, True):
    source_state, cache = model.start_decoding(
        source, max_length=0 if growing else 9)
    for i in range(5):
      logits, cache = model.decode_step(target_in[:, i], tf.constant(i),
                                        cache, source_state, growing=growing)
      np.testing.assert_allclose(logits, full[:, i], atol=2e-5)
    assert cache['decoder/layer_0/self_k'].shape[2] == (5 if growing else 9)


INF = 1e7


def python_beam_search(next_log_probs, *, beam: int, alpha: float,
                       max_length: int, eos: int = 1, start: int = 0):
  """The reference algorithm for one sentence, step by step in Python lists,
  with `next_log_probs(prefix)` from a full (uncached) decoder pass."""
  def penalty(length):
    return ((5.0 + length) / 6.0)**alpha

  alive = [(0.0, [start])] + [(-INF, [start])] * (beam - 1)
  finished = [(-INF, None, False)] * beam
  for i in range(max_length):
    real = [s for s, _, flag in finished if flag]
    if real and min(real) > alive[0][0] / penalty(max_length):
      break
    candidates = []
    for b, (log_prob, seq) in enumerate(alive):
      step = next_log_probs(seq)
      for v in range(len(step)):
        candidates.append((log_prob + step[v], b * len(step) + v, seq + [v]))
    candidates.sort(key=lambda c: (-c[0], c[1]))
    top = candidates[:2 * beam]
    scored = [(lp - INF if seq[-1] == eos else lp, seq) for lp, _, seq in top]
    order = sorted(range(len(scored)), key=lambda j: (-scored[j][0], j))
    alive = [scored[j] for j in order[:beam]]
    grown = [(lp / penalty(i + 1) + (0.0 if seq[-1] == eos else -INF), seq,
              seq[-1] == eos) for lp, _, seq in top]
    merged = finished + grown
    order = sorted(range(len(merged)), key=lambda j: (-merged[j][0], j))
    finished = [merged[j] for j in order[:beam]]
  best = finished[0][1] if any(f for _, _, f in finished) else alive[0][1]
  return best[1:] + [0] * (max_length + 1 - len(best))


def full_pass_log_probs(model, source):
  """prefix -> next-token log-probabilities (float64) without a cache."""
  s = tf.constant(source[None], tf.int32)
  segments = tf.cast(s > 0, tf.int32)
  encoded = model.encode(s, segments, tf.range(s.shape[1])[None],
                         training=False)

  def next_log_probs(prefix):
    p = tf.constant([prefix], tf.int32)
    logits = model.decode(p, tf.ones_like(p), tf.range(len(prefix))[None],
                          encoded, segments, training=False)
    return tf.nn.log_softmax(tf.cast(logits[0, -1], tf.float64)).numpy()

  return next_log_probs


def varied_tiny():
  """A tiny model whose answers vary: larger weights (less repetition) and
  EOS likelier, so hypotheses end at different lengths."""
  model = tiny()
  for name, v in model.params.items():
    if name.endswith('kernel'):
      v.assign(v * 3.0)
  model.params['shared_embedding'][1].assign(
      model.params['shared_embedding'][1] * 2.0)
  return model


@pytest.mark.parametrize('decode_shapes', ['fixed', 'dynamic'])
@pytest.mark.parametrize('alpha', [0.6, 0.0])
def test_beam_search_matches_the_step_by_step_reference(alpha, decode_shapes):
  model = varied_tiny()
  rng = np.random.default_rng(1)
  sources = np.zeros([3, 6], np.int32)
  for row, n in zip(sources, (5, 3, 4)):
    row[:n] = rng.integers(3, VOCAB, n)
    row[n] = 1
  task = transformer_task.TransformerTask(
      model=None, data=None, beam_size=4, length_penalty=alpha,
      extra_decode_length=2, decode_shapes=decode_shapes)
  ids = tf.function(task.translate)(model, tf.constant(sources)).numpy()
  assert ids.shape == (3, 8)
  for source, got in zip(sources, ids):
    want = python_beam_search(full_pass_log_probs(model, source), beam=4,
                              alpha=alpha, max_length=8)
    assert got.tolist() == want[:8]
  greedy = transformer_task.TransformerTask(
      model=None, data=None, decoder='greedy', extra_decode_length=2)
  assert ids.tolist() != greedy.translate(model, tf.constant(sources)).numpy(
  ).tolist()  # The beams matter here.


@pytest.mark.parametrize('decode_shapes', ['fixed', 'dynamic'])
def test_greedy_takes_the_most_likely_token_until_eos(decode_shapes):
  model = varied_tiny()
  sources = np.array([[7, 3, 9, 1, 0], [4, 1, 0, 0, 0]], np.int32)
  task = transformer_task.TransformerTask(
      model=None, data=None, decoder='greedy', extra_decode_length=3,
      decode_shapes=decode_shapes)
  ids = tf.function(task.translate)(model, tf.constant(sources)).numpy()
  for source, got in zip(sources, ids):
    next_log_probs = full_pass_log_probs(model, source)
    prefix, want = [0], []
    while len(want) < 8:
      token = int(np.argmax(next_log_probs(prefix)))
      want.append(token)
      prefix.append(token)
      if token == 1:
        break
    assert got.tolist() == want + [0] * (8 - len(want))


def test_smoothed_cross_entropy_is_lingvos():
  rng = np.random.default_rng(0)
  logits = rng.standard_normal([2, 3, 11]).astype(np.float32)
  labels = rng.integers(0, 11, [2, 3])
  got = transformer_task.smoothed_cross_entropy(
      tf.constant(logits), tf.constant(labels, tf.int32), 0.1).numpy()
  # Lingvo: one-hot on 0.9, off 0.1 / 10; softmax xent; less the target's
  # entropy.
  on, off = 0.9, 0.1 / 10
  soft = np.full([2, 3, 11], off)
  np.put_along_axis(soft, labels[..., None], on, axis=-1)
  log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  normalizing = -(on * np.log(on) + 10 * off * np.log(off + 1e-20))
  want = -(soft * log_p).sum(-1) - normalizing
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_schedule_is_lingvos_transformer_mlperf_schedule():
  lr = schedules.TransformerMlperf(base=1.875, model_dim=1024,
                                   warmup_steps=831)
  for step in (0, 1, 400, 830, 831, 832, 5000):
    want = (1.875 * 1024**-0.5 * min(1.0, step / 831) /
            math.sqrt(max(step, 831)))
    assert float(lr(step)) == pytest.approx(want, rel=1e-6)


def test_adam_epsilon_hat_follows_tf1_adam_optimizer():
  """Three updates against tf.compat.v1.train.AdamOptimizer's sequence in
  NumPy: lr_t = lr sqrt(1 - b2^t) / (1 - b1^t); w -= lr_t m / (sqrt(v) + eps)."""
  adam = optimizers.Adam(beta_1=0.88, beta_2=0.92, epsilon=1e-3,
                         epsilon_hat=True)
  rng = np.random.default_rng(0)
  w = rng.standard_normal(5).astype(np.float32)
  m = np.zeros(5)
  v = np.zeros(5)
  want = w.astype(np.float64)
  got = tf.constant(w)
  slots = [tf.zeros(5), tf.zeros(5)]
  for t in range(1, 4):
    g = rng.standard_normal(5).astype(np.float32)
    got, slots = adam.apply(got, tf.constant(g), slots, 0.1, t - 1,
                            decay=False)
    m = 0.88 * m + 0.12 * g
    v = 0.92 * v + 0.08 * g * g
    lr_t = 0.1 * math.sqrt(1 - 0.92**t) / (1 - 0.88**t)
    want = want - lr_t * m / (np.sqrt(v) + 1e-3)
  np.testing.assert_allclose(got.numpy(), want, rtol=1e-5)


class TableLanguageModel:
  """Next-token logits from a random table indexed by a hash of the prefix
  (and of a per-sentence seed): hypotheses end at many different lengths."""

  def __init__(self, vocab=9, rows=997, seed=0):
    rng = np.random.default_rng(seed)
    self.table = rng.standard_normal([rows, vocab]) * 2.0
    self.table[:, 1] += 0.5  # EOS
    self.rows, self.vocab = rows, vocab

  def step_fn(self, ids, step, state, source):
    del step, source
    h = (state * 31 + ids + 1) % self.rows
    return tf.gather(tf.constant(self.table, tf.float32), h), h

  def log_probs_after(self, sentence_seed):
    def next_log_probs(prefix):
      h = sentence_seed
      for token in prefix:
        h = (h * 31 + token + 1) % self.rows
      logits = self.table[h].astype(np.float32).astype(np.float64)
      return logits - np.log(np.exp(logits).sum())
    return next_log_probs


def test_beam_search_algorithm_on_a_table_language_model():
  lm = TableLanguageModel()
  batch, beam, length = 30, 4, 12
  seeds = np.arange(batch) * 7 + 1
  state = tf.constant(np.repeat(seeds, beam), tf.int32)
  got = {}
  for alpha in (0.6, 0.0):
    ids, _ = beam_search.beam_search(
        lm.step_fn, state, batch=batch, beam_size=beam, max_length=length,
        vocab_size=lm.vocab, alpha=alpha)
    got[alpha] = ids.numpy().tolist()
    for seed, row in zip(seeds, got[alpha]):
      assert row == python_beam_search(
          lm.log_probs_after(int(seed)), beam=beam, alpha=alpha,
          max_length=length)[:length]
  greedy = beam_search.greedy(lm.step_fn, tf.constant(seeds, tf.int32),
                              batch=batch, max_length=length).numpy().tolist()
  # The cases differ: the length penalty and the beam change answers, and
  # answers end at different lengths.
  assert got[0.6] != got[0.0] and got[0.6] != greedy
  lengths = {row.index(1) if 1 in row else length for row in got[0.6]}
  assert len(lengths) >= 4


class CountingLanguageModel(TableLanguageModel):
  """The table model, counting the hypotheses its steps compute."""

  def __init__(self):
    super().__init__()
    self.computed = tf.Variable(0)

  def step_fn(self, ids, step, state, source):
    self.computed.assign_add(tf.size(ids))
    return super().step_fn(ids, step, state, source)


@pytest.mark.parametrize('alpha', [0.6, 0.0])
def test_dynamic_search_drops_stopped_sentences_with_the_same_answers(alpha):
  """Dynamic shapes: a sentence leaves when its own search stops, so fewer
  hypotheses are computed (the fixed form runs every sentence until the
  batch's last one stops); the answers and scores are the fixed form's."""
  lm = CountingLanguageModel()
  batch, beam, length = 30, 4, 40
  seeds = np.arange(batch) * 7 + 1
  state = tf.constant(np.repeat(seeds, beam), tf.int32)
  out, computed = {}, {}
  for dynamic in (False, True):
    lm.computed.assign(0)
    search = tf.function(lambda s, dynamic=dynamic: beam_search.beam_search(
        lm.step_fn, s, batch=batch, beam_size=beam, max_length=length,
        vocab_size=lm.vocab, alpha=alpha, dynamic=dynamic))
    out[dynamic] = [t.numpy() for t in search(state)]
    computed[dynamic] = int(lm.computed.numpy())
  np.testing.assert_array_equal(out[True][0], out[False][0])
  np.testing.assert_array_equal(out[True][1], out[False][1])
  assert computed[True] < 0.8 * computed[False], computed
  greedy = {}
  for dynamic in (False, True):
    lm.computed.assign(0)
    greedy[dynamic] = tf.function(lambda s, dynamic=dynamic: beam_search.greedy(
        lm.step_fn, s, batch=batch, max_length=length, dynamic=dynamic))(
            tf.constant(seeds, tf.int32)).numpy()
    computed[dynamic] = int(lm.computed.numpy())
  np.testing.assert_array_equal(greedy[True], greedy[False])
  assert computed[True] < computed[False], computed


def test_fixed_shapes_in_a_mesh_and_the_choice_is_checked():
  from tensorflow.experimental import dtensor
  assert not beam_search.needs_fixed_shapes()  # A CPU, no mesh.
  mesh = dtensor.create_mesh([('batch', 1)], devices=['CPU:0'])
  with dtensor.default_mesh(mesh):
    assert beam_search.needs_fixed_shapes()
  with pytest.raises(ValueError, match="`decode_shapes` must be 'auto', "
                     "'fixed' or 'dynamic', got 'growing'"):
    transformer_task.TransformerTask(model=None, data=None,
                                     decode_shapes='growing')


def test_exported_translator_decodes_as_the_task_does(tmp_path):
  import types
  from training import export
  model = varied_tiny()
  task = transformer_task.TransformerTask(
      model=None, data=types.SimpleNamespace(eval_length=6),
      extra_decode_length=2)
  export.save_serving(model, task, str(tmp_path / 'mt'))
  serve = tf.saved_model.load(str(tmp_path / 'mt')).signatures[
      'serving_default']
  sources = tf.constant([[7, 3, 9, 1, 0, 0], [4, 1, 0, 0, 0, 0],
                         [5, 6, 8, 2, 1, 0]], tf.int32)
  want = task.translate(model, sources).numpy()
  np.testing.assert_array_equal(serve(inputs=sources)['ids'], want)
  # Any batch size: the signature's batch dimension is dynamic.
  np.testing.assert_array_equal(serve(inputs=sources[1:2])['ids'], want[1:2])
