"""GNMT's beam search against a NumPy transcription of Google's v0.7
`_beam_search_step` and, with beams enough to keep every hypothesis, against
a brute-force search of the same score."""

import itertools
import math

import numpy as np
import pytest
import tensorflow as tf

from models.gnmt import beam_search as gnmt_beam_search

EOS = 1


class TableModel:
  """A toy decoder: the next-token logits and the attention are tables of
  (previous token, step), so every hypothesis's probability is known."""

  def __init__(self, vocab, steps, source, seed, eos_at=None):
    rng = np.random.default_rng(seed)
    self.logits = rng.normal(size=(vocab, steps, vocab)).astype(np.float32)
    if eos_at is not None:  # Everything ends at this step.
      self.logits[:, eos_at, EOS] += 60.0
    self.attention = rng.normal(size=(vocab, steps, source)).astype(
        np.float32)
    self.vocab, self.source = vocab, source

  def step_fn(self, ids, state):
    step = state
    logits = tf.gather(tf.gather(self.logits, ids), step[0], axis=1)
    # Alignments: a softmax over the source, as the attention's.
    alignments = tf.nn.softmax(tf.gather(tf.gather(self.attention, ids),
                                         step[0], axis=1))
    return logits, alignments, state + 1

  def numpy_step(self, ids, step):
    logits = self.logits[ids, step]
    a = self.attention[ids, step]
    a = np.exp(a - a.max(-1, keepdims=True))
    return logits, a / a.sum(-1, keepdims=True)


def log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


def their_search(model, batch, k, max_tgt, alpha, beta, start=0):
  """Their BeamSearchDecoder.step + _beam_search_step + dynamic_decode, in
  NumPy, every step of max_tgt (their loop never stops early)."""
  v = model.vocab
  log_probs = np.where(np.arange(k) == 0, 0.0, -np.inf)[None].repeat(batch, 0)
  finished = (np.arange(k) != 0)[None].repeat(batch, 0)
  lengths = np.zeros((batch, k), np.int64)
  acc = np.zeros((batch, k, model.source), np.float32)
  pred = np.full((batch, k, max_tgt), EOS)
  inputs = np.full((batch, k), start)
  min_value = np.finfo(np.float32).min
  for t in range(max_tgt):
    logits, align = model.numpy_step(inputs, t)
    step_lp = log_softmax(logits)
    finished_row = np.where(np.arange(v) == EOS, 0.0, min_value)
    step_lp = np.where(finished[:, :, None], finished_row, step_lp)
    total = log_probs[:, :, None] + step_lp
    add = np.where(np.arange(v) == EOS, 0, 1)[None, None] * (
        ~finished)[:, :, None]
    new_len = lengths[:, :, None] + add
    acc_new = acc + align * (~finished)[:, :, None]
    batch_finished = finished.all(1)
    penalty = ((5.0 + new_len) ** alpha) / (6.0 ** alpha)
    cov = np.log(np.minimum(np.where(acc_new == 0, 1.0, acc_new), 1.0)).sum(-1)
    normalized = total / penalty + beta * cov[:, :, None]
    scores = np.where(batch_finished[:, None, None], normalized, total)
    flat = scores.reshape(batch, -1).astype(np.float32)
    # create_make_unique + create_topk_unique.
    bits = math.ceil(math.log2(flat.shape[1]))
    as_int = flat.view(np.int32).copy()
    zero = (as_int & 0x7FFFFFFF) == 0
    as_int[zero] |= 1 << 23
    unique = ((as_int & ~((1 << bits) - 1)) |
              np.arange(flat.shape[1], dtype=np.int32)).view(np.float32)
    unique = np.where(np.isnan(unique), -np.inf, unique)
    chosen = np.argsort(-unique, axis=1, kind='stable')[:, :k]
    parents, words = chosen // v, chosen % v
    rows = np.arange(batch)[:, None]
    log_probs = total.reshape(batch, -1)[rows, chosen]
    prev = finished[rows, parents]
    finished = prev | (words == EOS)
    lengths = lengths[rows, parents] + (~prev)
    acc = acc_new[rows, parents]
    pred = pred[rows, parents]
    pred[:, :, t] = words
    inputs = words
  return pred[:, 0]


def ours(model, batch, k, max_tgt, alpha, beta):
  state = tf.zeros([batch * k], tf.int32)
  return gnmt_beam_search.beam_search(
      model.step_fn, state, batch=batch, beam_size=k, max_length=max_tgt,
      vocab_size=model.vocab, source_length=model.source,
      length_penalty=alpha, coverage_penalty=beta, eos_id=EOS).numpy()


@pytest.mark.parametrize('seed', [0, 1, 2])
def test_their_step_sequence(seed):
  model = TableModel(vocab=7, steps=9, source=4, seed=seed)
  # The start token varies the first step per sentence: rows of the table.
  got = ours(model, 3, 3, 9, 0.6, 0.1)
  want = their_search(model, 3, 3, 9, 0.6, 0.1)
  np.testing.assert_array_equal(got, want)


def test_make_unique_breaks_ties_by_position_as_theirs():
  scores = tf.constant([[-1.0, -1.0, 0.0, -np.inf, 2.0]])
  values, columns = gnmt_beam_search.top_k_unique(scores, 4)
  # Equal negatives: the lower column wins; 0 is a tiny positive; -inf last.
  np.testing.assert_array_equal(columns.numpy(), [[4, 2, 0, 1]])
  assert values.numpy()[0, 0] > 1.99


def brute_force(model, steps, alpha, beta):
  """The best hypothesis by the final score over every token sequence that
  ends (EOS) within `steps`: log p / ((5 + length) / 6)^alpha + beta x sum
  log(min(attention summed over its steps, 1))."""
  best, best_score, scores = None, -np.inf, []
  for length in range(1, steps + 1):
    for body in itertools.product(
        [w for w in range(model.vocab) if w != EOS], repeat=length - 1):
      seq = (*body, EOS)
      log_p, acc, prev = 0.0, np.zeros(model.source), 0
      for t, w in enumerate(seq):
        logits, align = model.numpy_step(np.array(prev), t)
        log_p += log_softmax(logits)[w]
        acc += align
        prev = w
      acc = np.where(acc == 0, 1.0, acc)
      score = log_p / (((5.0 + length) / 6.0) ** alpha) + beta * np.log(
          np.minimum(acc, 1.0)).sum()
      scores.append(score)
      if score > best_score:
        best, best_score = seq, score
  return best, sorted(scores)[-2:]


@pytest.mark.parametrize('seed', [18, 20, 25])
def test_enough_beams_find_the_brute_force_best(seed):
  # Vocab 3 (EOS and two words), every hypothesis ends by step 3 (the 4th):
  # 1 + 2 + 4 + 8 finished ones, so 15 beams keep them all and, full of
  # finished ones, sort them by the final score one step later. (A beam
  # more would keep a live hypothesis of probability e^-60, and the sort
  # never comes: theirs ranks by the final score only when all K ended.)
  model = TableModel(vocab=3, steps=5, source=3, seed=seed, eos_at=3)
  want, (second, first) = brute_force(model, 4, 0.6, 0.1)
  assert first - second > 0.05 * abs(first)  # Beyond their tie-breaking.
  # Tables where each penalty decides: without either, another best.
  assert brute_force(model, 4, 0.0, 0.1)[0] != want
  assert brute_force(model, 4, 0.6, 0.0)[0] != want
  got = ours(model, 1, 15, 5, 0.6, 0.1)[0]
  assert tuple(got[:len(want)]) == want and np.all(got[len(want):] == EOS)
