"""Beam search and greedy decoding on the device, with fixed shapes.

The MLPerf reference Transformer's beam search (tensor2tensor's, used by the
reference's `beam_search.py`): beam K keeps K alive and K finished
hypotheses per sentence. Each step extends every alive hypothesis by every
token, takes the 2K best by log probability, keeps the K best that did not
end (EOS) as alive and merges the ones that ended into the finished set,
scored by log probability / ((5 + length) / 6)^alpha (GNMT's length
penalty; length counts the tokens after the start id, EOS included). The
search stops when no alive hypothesis could still beat the worst finished
one (its best possible score is its log probability over the length
penalty of `max_length`), or after `max_length` steps. The answer is the
best finished hypothesis, or the best alive one if none finished.

Everything is a tf.while_loop over tensors of fixed shape ([batch, K,
max_length + 1] sequences, the model's cache reordered by gathers), so it
runs inside the eval step under any strategy and compiles for TPU.
"""

from typing import Callable

import tensorflow as tf

INF = 1e7  # The reference's stand-in for infinity.


def _length_penalty(length, alpha: float):
  return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def _gather_beams(nested, beam_indices, batch: int, beams: int):
  """Picks beams [batch, new] from tensors [batch * beams, ...] (or
  [batch, beams, ...] when `beams` is 0: already split)."""
  def pick(t):
    shaped = tf.reshape(t, [batch, beams, *t.shape[1:]]) if beams else t
    out = tf.gather(shaped, beam_indices, batch_dims=1)
    return tf.reshape(out, [-1, *out.shape[2:]]) if beams else out
  return tf.nest.map_structure(pick, nested)


def beam_search(step_fn: Callable, state, *, batch: int, beam_size: int,
                max_length: int, vocab_size: int, alpha: float = 0.6,
                eos_id: int = 1, start_id: int = 0):
  """Decodes `batch` sentences.

  Args:
    step_fn: (ids [batch * beam_size], step, state) -> (logits [batch *
      beam_size, vocab_size], new state); state tensors have batch *
      beam_size first, beams of a sentence adjacent.
    state: the initial state, already repeated for the beams.
    batch: sentences.
    beam_size: K.
    max_length: decoding steps at most.
    vocab_size: logits' width.
    alpha: length penalty exponent (MLPerf: 0.6).
    eos_id, start_id: the end id and the first decoder input.

  Returns:
    (ids [batch, max_length] int32 with EOS and zeros after it, the best
    hypotheses' scores [batch]).
  """
  k = beam_size
  seq = tf.fill([batch, k, max_length + 1], start_id)
  alive_log_probs = tf.tile(
      tf.constant([[0.0] + [-INF] * (k - 1)]), [batch, 1])
  finished_seq = tf.zeros_like(seq)
  finished_scores = tf.fill([batch, k], -INF)
  finished_flags = tf.zeros([batch, k], tf.bool)
  max_penalty = _length_penalty(max_length, alpha)

  def keep_going(i, alive_seq, alive_log_probs, finished_seq,
                 finished_scores, finished_flags, state):
    del alive_seq, finished_seq, state
    best_alive = alive_log_probs[:, 0] / max_penalty
    flags = tf.cast(finished_flags, tf.float32)
    lowest_finished = tf.reduce_min(finished_scores * flags, axis=1)
    lowest_finished += (1.0 - tf.reduce_max(flags, axis=1)) * -INF
    done = tf.reduce_all(lowest_finished > best_alive)
    return tf.logical_and(i < max_length, tf.logical_not(done))

  def body(i, alive_seq, alive_log_probs, finished_seq, finished_scores,
           finished_flags, state):
    ids = tf.reshape(alive_seq[:, :, i], [-1])
    logits, state = step_fn(ids, i, state)
    log_probs = tf.nn.log_softmax(tf.reshape(logits, [batch, k, vocab_size]))
    log_probs += alive_log_probs[:, :, None]
    top_log_probs, top_flat = tf.math.top_k(
        tf.reshape(log_probs, [batch, k * vocab_size]), k=2 * k)
    top_beams, top_ids = top_flat // vocab_size, top_flat % vocab_size
    top_seq = _gather_beams(alive_seq, top_beams, batch, 0)
    top_seq += top_ids[:, :, None] * tf.one_hot(
        i + 1, max_length + 1, dtype=tf.int32)[None, None, :]
    ended = tf.equal(top_ids, eos_id)

    # Alive: the K best that did not end.
    alive_scores = top_log_probs + tf.cast(ended, tf.float32) * -INF
    _, keep = tf.math.top_k(alive_scores, k=k)
    alive_seq = _gather_beams(top_seq, keep, batch, 0)
    alive_log_probs = _gather_beams(alive_scores, keep, batch, 0)
    state = _gather_beams(state, _gather_beams(top_beams, keep, batch, 0),
                          batch, k)

    # Finished: the K best of the finished so far and those that just ended.
    scores = top_log_probs / _length_penalty(i + 1, alpha)
    scores += (1.0 - tf.cast(ended, tf.float32)) * -INF
    all_seq = tf.concat([finished_seq, top_seq], axis=1)
    all_scores = tf.concat([finished_scores, scores], axis=1)
    all_flags = tf.concat([finished_flags, ended], axis=1)
    _, best = tf.math.top_k(all_scores, k=k)
    finished_seq = _gather_beams(all_seq, best, batch, 0)
    finished_scores = _gather_beams(all_scores, best, batch, 0)
    finished_flags = _gather_beams(all_flags, best, batch, 0)
    return (i + 1, alive_seq, alive_log_probs, finished_seq, finished_scores,
            finished_flags, state)

  loop_vars = (tf.constant(0), seq, alive_log_probs, finished_seq,
               finished_scores, finished_flags, state)
  (_, alive_seq, alive_log_probs, finished_seq, finished_scores,
   finished_flags, _) = tf.while_loop(
       keep_going, body, loop_vars, maximum_iterations=max_length)
  any_finished = tf.reduce_any(finished_flags, axis=1)
  best_seq = tf.where(any_finished[:, None], finished_seq[:, 0],
                      alive_seq[:, 0])
  best_scores = tf.where(any_finished, finished_scores[:, 0],
                         alive_log_probs[:, 0])
  return best_seq[:, 1:], best_scores


def greedy(step_fn: Callable, state, *, batch: int, max_length: int,
           eos_id: int = 1, start_id: int = 0):
  """The most likely token each step until every sentence has ended.

  Returns:
    ids [batch, max_length] int32 with EOS and zeros after it.
  """
  def keep_going(i, ids, done, state):
    del ids, state
    return tf.logical_and(i < max_length,
                          tf.logical_not(tf.reduce_all(done)))

  def body(i, ids, done, state):
    last = ids[:, i]
    logits, state = step_fn(last, i, state)
    token = tf.argmax(logits, axis=-1, output_type=tf.int32)
    token = tf.where(done, 0, token)
    ids += token[:, None] * tf.one_hot(i + 1, max_length + 1,
                                       dtype=tf.int32)[None, :]
    return i + 1, ids, tf.logical_or(done, tf.equal(token, eos_id)), state

  ids = tf.fill([batch, max_length + 1], start_id)
  _, ids, _, _ = tf.while_loop(
      keep_going, body,
      (tf.constant(0), ids, tf.zeros([batch], tf.bool), state),
      maximum_iterations=max_length)
  return ids[:, 1:]
