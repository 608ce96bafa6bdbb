"""GNMT's beam search as Google's v0.7 TPU code runs it.

Their `beam_search_decoder.py` (tf.contrib.seq2seq's BeamSearchDecoder, cut for
TPUs; mlcommons/training_results_v0.7, Google/benchmarks/gnmt/
implementations/gnmt-research-TF-tpu-*), which differs from the Transformer's
search (models/transformer/beam_search.py) in what it keeps and when it scores:

- K hypotheses a sentence, no separate finished set: a hypothesis that
  emitted EOS stays in the beam and may only emit EOS again (log
  probability 0), so it competes with the live ones on its log probability.
  At the start only hypothesis 0 is live (the others are finished with log
  probability -inf).
- Candidates (K x vocab) are ranked by their summed log probability while
  any hypothesis of the sentence is live; once all K are finished, by
  log p / ((5 + length) / 6)^alpha + beta x sum over source positions of
  log(min(accumulated attention, 1)) (zeros counted as 1): the length and
  coverage penalties, which thus only re-rank the finished set. The
  length in a score is the tokens emitted before this step (a finished
  hypothesis's includes its EOS); the attention accumulates the
  alignments of every step a hypothesis was live at.
- The top K of a sentence's candidates are taken by their `top_k_with_
  unique`: each score's low ceil(log2(K x vocab)) mantissa bits replaced by
  the candidate's index, so ties and near ties (at vocab 32k and K 5, 18
  of float32's 23 bits) are broken by position. `top_k_unique` does the
  same.
- Their loop runs the maximum length (160) every time; the answer is
  hypothesis 0. Here the loop stops once every sentence's hypotheses were
  all finished at the start of a step (that step sorts them by the final
  score; later steps change nothing), so the answer is the same.

One difference, on purpose: their scores are in the activation dtype
(bfloat16 in the v0.7 runs); ours are float32 whatever the model's.
"""

import math
from typing import Callable

import numpy as np
import tensorflow as tf


def make_unique(scores):
  """Their `create_make_unique`: each float's low bits (as many as the
  index of the last column needs) replaced by its column; a zero becomes
  the smallest normal number of its sign first. -inf becomes NaN."""
  width = scores.shape[1]
  bits = int(math.ceil(math.log2(width))) if width > 1 else 0
  as_int = tf.bitcast(tf.cast(scores, tf.float32), tf.int32)
  is_zero = tf.equal(tf.bitwise.bitwise_and(as_int, ~(1 << 31)), 0)
  as_int = tf.where(is_zero, tf.bitwise.bitwise_or(as_int, 1 << 23), as_int)
  iota = tf.range(width, dtype=tf.int32)[None, :]
  unique = tf.bitwise.bitwise_or(
      tf.bitwise.bitwise_and(as_int, ~((1 << bits) - 1)), iota)
  return tf.bitcast(unique, tf.float32)


def top_k_unique(scores, k: int):
  """Their `top_k_with_unique`: (the k largest made-unique scores, their
  columns) of each row; NaN (from -inf) ranks lowest."""
  unique = make_unique(scores)
  unique = tf.where(tf.math.is_nan(unique), -np.inf, unique)
  values, columns = tf.math.top_k(unique, k=k)
  return values, columns


def _length_penalty(lengths, alpha: float):
  if alpha == 0:
    return 1.0
  return ((5.0 + tf.cast(lengths, tf.float32)) ** alpha) / (6.0 ** alpha)


def _coverage(accumulated):
  ones = tf.where(tf.equal(accumulated, 0.0), tf.ones_like(accumulated),
                  accumulated)
  return tf.reduce_sum(tf.math.log(tf.minimum(ones, 1.0)), -1)


def _gather(t, parents, batch, beams):
  """Rows [batch * beams, ...] picked by parent beam [batch, beams]."""
  shaped = tf.reshape(t, [batch, beams, *t.shape[1:]])
  return tf.reshape(tf.gather(shaped, parents, batch_dims=1), tf.shape(t))


def beam_search(step_fn: Callable, state, *, batch: int, beam_size: int,
                max_length: int, vocab_size: int, source_length: int,
                length_penalty: float = 0.6, coverage_penalty: float = 0.1,
                eos_id: int = 1, start_id: int = 0):
  """Decodes `batch` sentences with fixed shapes.

  Args:
    step_fn: (ids [n], state) -> (logits [n, vocab_size], alignments [n,
      source_length], new state), n = batch x beam_size, a sentence's
      hypotheses adjacent; the state's tensors have n rows.
    state: the initial state, already repeated for the beams.
    batch, beam_size: sentences (a tensor when not static: serving) and K
      (MLPerf: 5).
    max_length: decoding steps at most (MLPerf: 160).
    vocab_size: logits' width.
    source_length: the alignments' width.
    length_penalty, coverage_penalty: alpha and beta (MLPerf: 0.6, 0.1).
    eos_id, start_id: the end token and the first decoder input.

  Returns:
    ids [batch, max_length] int32: hypothesis 0's tokens, EOS from its end
    on (their pred_ids start filled with EOS).
  """
  k, v = beam_size, vocab_size
  not_eos = tf.constant(np.arange(v) != eos_id)[None, None, :]
  finished_row = tf.where(not_eos, tf.float32.min, 0.0)

  def step(t, log_probs, finished, lengths, attention, ids, cell_state,
           inputs, settled):
    del settled
    logits, alignments, cell_state = step_fn(inputs, cell_state)
    step_log_probs = tf.nn.log_softmax(tf.reshape(logits, [batch, k, v]))
    step_log_probs = tf.where(finished[:, :, None], finished_row,
                              step_log_probs)
    total = log_probs[:, :, None] + step_log_probs
    live = tf.logical_not(finished)
    new_lengths = lengths[:, :, None] + tf.cast(
        tf.logical_and(live[:, :, None], not_eos), tf.int32)
    attention += tf.reshape(alignments, [batch, k, -1]) * tf.cast(
        live, tf.float32)[:, :, None]
    all_finished = tf.reduce_all(finished, axis=1)
    scores = total / _length_penalty(new_lengths, length_penalty)
    if coverage_penalty:
      scores += coverage_penalty * _coverage(attention)[:, :, None]
    scores = tf.where(all_finished[:, None, None], scores, total)
    _, chosen = top_k_unique(tf.reshape(scores, [batch, k * v]), k)
    parents, words = chosen // v, chosen % v
    log_probs = tf.gather(tf.reshape(total, [batch, k * v]), chosen,
                          batch_dims=1)
    was_finished = tf.gather(finished, parents, batch_dims=1)
    finished = tf.logical_or(was_finished, tf.equal(words, eos_id))
    lengths = tf.gather(lengths, parents, batch_dims=1) + tf.cast(
        tf.logical_not(was_finished), tf.int32)
    attention = tf.gather(attention, parents, batch_dims=1)
    ids = tf.gather(ids, parents, batch_dims=1)
    ids = tf.where(tf.equal(tf.range(max_length), t)[None, None, :],
                   words[:, :, None], ids)
    cell_state = tf.nest.map_structure(
        lambda s: _gather(s, parents, batch, k), cell_state)
    return (t + 1, log_probs, finished, lengths, attention, ids, cell_state,
            tf.reshape(words, [-1]), all_finished)

  def keep_going(t, *rest):
    return tf.logical_and(t < max_length,
                          tf.logical_not(tf.reduce_all(rest[-1])))

  first = tf.one_hot(tf.zeros([batch], tf.int32), k)
  loop_vars = (
      tf.constant(0),
      tf.where(first > 0, 0.0, -np.inf),              # log_probs
      first < 1,                                      # finished
      tf.zeros([batch, k], tf.int32),                 # lengths
      tf.zeros([batch, k, source_length]),            # attention
      tf.fill([batch, k, max_length], eos_id),        # ids
      state,
      tf.fill([batch * k], start_id),                 # inputs
      tf.zeros([batch], tf.bool))                     # settled
  out = tf.while_loop(keep_going, lambda *a: step(*a), loop_vars,
                      maximum_iterations=max_length)
  return out[5][:, 0]
