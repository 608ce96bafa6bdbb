"""Beam search and greedy decoding on the device.

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

The step function reads two nests of per-hypothesis tensors [batch * K,
...], the beams of a sentence adjacent: `state`, which it returns changed
and which the search reorders when hypotheses change parents (the
self-attention cache), and `source`, which no step changes and which is the
same for every hypothesis of a sentence (the source's keys and values), so
it is never reordered.

Two forms of one search, with the same answers:
- fixed shapes (`dynamic=False`): one tf.while_loop over [batch, K,
  max_length + 1] sequences and a state of constant shape; every sentence
  is computed until the batch's last one stops. This compiles for TPUs and
  runs in a DTensor mesh.
- dynamic (`dynamic=True`; CPUs and GPUs): a sentence leaves the loop as
  soon as its own stop test holds, so a step costs what the sentences still
  searching cost, and the state may grow (`state_invariants`: a cache of
  the positions decoded so far). Leaving early changes no answer: after a
  sentence's test holds, every candidate it could still make scores below
  its worst finished hypothesis (an alive log probability only falls, and
  the bound divides it by the largest penalty), so its best finished one
  stays the best.
`needs_fixed_shapes()` tells which a trace is for.
"""

from typing import Callable

import tensorflow as tf
from tensorflow.experimental import dtensor

INF = 1e7  # The reference's stand-in for infinity.


def needs_fixed_shapes() -> bool:
  """Whether the decoder being traced must keep fixed shapes: on a TPU (XLA
  compiles the loop once) or in a DTensor mesh program (never tried with a
  loop whose shapes change)."""
  return bool(dtensor.get_default_mesh() is not None or
              tf.config.list_logical_devices('TPU'))


def _length_penalty(length, alpha: float):
  return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def _rest_of_shape(t):
  """t's shape after the first axis: each size static where known, else a
  scalar tensor."""
  return [size if size is not None else tf.shape(t)[axis]
          for axis, size in enumerate(t.shape[1:], start=1)]


def _gather_beams(nested, beam_indices, batch, beams: int):
  """Picks beams [batch, new] from tensors [batch * beams, ...] (or
  [batch, beams, ...] when `beams` is 0: already split)."""
  def pick(t):
    rest = _rest_of_shape(t) if beams else None
    shaped = tf.reshape(t, [batch, beams, *rest]) if beams else t
    out = tf.gather(shaped, beam_indices, batch_dims=1)
    return tf.reshape(out, [batch * beams, *rest]) if beams else out
  return tf.nest.map_structure(pick, nested)


def _any_first_axis(shapes):
  """The same shapes with the first axis (sentences or hypotheses) free."""
  return tf.nest.map_structure(
      lambda s: tf.TensorShape([None, *s[1:]]), shapes)


def _shapes(nested):
  return tf.nest.map_structure(lambda t: t.shape, nested)


def _keep(nested, rows):
  """The entries of the rows where `rows` is True (first axis)."""
  return tf.nest.map_structure(lambda t: tf.boolean_mask(t, rows), nested)


def _rows_left(i, rows, *rest):
  """A dynamic loop's condition: some sentence is still searching."""
  del i, rest
  return tf.size(rows) > 0


def _drop_done(done, per_row, per_hypothesis=(), beams: int = 1):
  """(per_row, per_hypothesis) without the sentences that are `done` (and
  their `beams` hypotheses each); unchanged when none is."""
  going = tf.logical_not(done)
  # Not tf.repeat: its output shape, computed from the input's, came out as
  # the first iteration's inside a while loop (TF 2.21).
  hypotheses = tf.reshape(tf.tile(going[:, None], [1, beams]), [-1])
  return tf.cond(
      tf.reduce_any(done),
      lambda: (_keep(per_row, going), _keep(per_hypothesis, hypotheses)),
      lambda: (per_row, per_hypothesis))


class _Search:
  """The per-sentence tensors of a beam search: [sentences, K, ...]."""

  FIELDS = ('alive_seq', 'alive_log_probs', 'finished_seq',
            'finished_scores', 'finished_flags')

  @staticmethod
  def start(batch, k: int, max_length: int, start_id: int):
    seq = tf.fill([batch, k, max_length + 1], start_id)
    return (seq, tf.tile(tf.constant([[0.0] + [-INF] * (k - 1)]), [batch, 1]),
            tf.zeros_like(seq), tf.fill([batch, k], -INF),
            tf.zeros([batch, k], tf.bool))

  @staticmethod
  def stopped(search, max_penalty):
    """[sentences] bool: no alive hypothesis can beat the worst finished."""
    _, alive_log_probs, _, finished_scores, finished_flags = search
    best_alive = alive_log_probs[:, 0] / max_penalty
    flags = tf.cast(finished_flags, tf.float32)
    lowest_finished = tf.reduce_min(finished_scores * flags, axis=1)
    lowest_finished += (1.0 - tf.reduce_max(flags, axis=1)) * -INF
    return lowest_finished > best_alive

  @staticmethod
  def answers(search):
    """(ids [sentences, max_length], scores [sentences]): the best finished
    hypothesis, or the best alive one where none finished."""
    alive_seq, alive_log_probs, finished_seq, finished_scores, flags = search
    any_finished = tf.reduce_any(flags, axis=1)
    best_seq = tf.where(any_finished[:, None], finished_seq[:, 0],
                        alive_seq[:, 0])
    best_scores = tf.where(any_finished, finished_scores[:, 0],
                           alive_log_probs[:, 0])
    return best_seq[:, 1:], best_scores

  @staticmethod
  def extend(i, search, logits, *, batch, k: int, max_length: int,
             vocab_size: int, alpha: float, eos_id: int):
    """Step i given the alive hypotheses' next-token logits [batch * k,
    vocab]: (the new search, each new alive hypothesis's parent beam)."""
    alive_seq, alive_log_probs, finished_seq, finished_scores, \
        finished_flags = search
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
    parents = _gather_beams(top_beams, keep, batch, 0)

    # Finished: the K best of the finished so far and those that just ended.
    scores = top_log_probs / _length_penalty(i + 1, alpha)
    scores += (1.0 - tf.cast(ended, tf.float32)) * -INF
    all_seq = tf.concat([finished_seq, top_seq], axis=1)
    all_scores = tf.concat([finished_scores, scores], axis=1)
    all_flags = tf.concat([finished_flags, ended], axis=1)
    _, best = tf.math.top_k(all_scores, k=k)
    return (alive_seq, alive_log_probs,
            *_gather_beams((all_seq, all_scores, all_flags), best, batch, 0)
            ), parents


def beam_search(step_fn: Callable, state, *, batch, beam_size: int,
                max_length: int, vocab_size: int, alpha: float = 0.6,
                eos_id: int = 1, start_id: int = 0, source=(),
                dynamic: bool = False, state_invariants=None):
  """Decodes `batch` sentences.

  Args:
    step_fn: (ids [n], step, state, source) -> (logits [n, vocab_size], new
      state), n = sentences searching x beam_size.
    state: the initial state, already repeated for the beams.
    batch: sentences (an int, or a scalar tensor when serving).
    beam_size: K.
    max_length: decoding steps at most.
    vocab_size: logits' width.
    alpha: length penalty exponent (MLPerf: 0.6).
    eos_id, start_id: the end id and the first decoder input.
    source: what the steps read and never change, repeated for the beams.
    dynamic: sentences leave the loop when their search stops (CPUs, GPUs);
      False: fixed shapes (TPUs, DTensor).
    state_invariants: the state's shapes as tf.while_loop may see them
      change (None on a growing axis); None: the state keeps its shapes.

  Returns:
    (ids [batch, max_length] int32 with EOS and zeros after it, the best
    hypotheses' scores [batch]).
  """
  k = beam_size
  max_penalty = _length_penalty(max_length, alpha)
  extend = dict(k=k, max_length=max_length, vocab_size=vocab_size,
                alpha=alpha, eos_id=eos_id)

  def step(i, search, state, source, sentences):
    ids = tf.reshape(search[0][:, :, i], [-1])
    logits, state = step_fn(ids, i, state, source)
    search, parents = _Search.extend(i, search, logits, batch=sentences,
                                     **extend)
    return search, _gather_beams(state, parents, sentences, k)

  search = _Search.start(batch, k, max_length, start_id)
  state_shapes = _shapes(state) if state_invariants is None else \
      state_invariants
  if not dynamic:
    def keep_going(i, search, state):
      del state
      return tf.logical_and(
          i < max_length,
          tf.logical_not(tf.reduce_all(_Search.stopped(search, max_penalty))))

    def body(i, search, state):
      return (i + 1, *step(i, search, state, source, batch))

    loop_vars = (tf.constant(0), search, state)
    _, search, _ = tf.while_loop(
        keep_going, body, loop_vars, maximum_iterations=max_length,
        shape_invariants=(tf.TensorShape([]), _shapes(search), state_shapes))
    return _Search.answers(search)

  def dynamic_body(i, rows, search, state, source, ids, scores):
    search, state = step(i, search, state, source, tf.size(rows))
    done = tf.logical_or(_Search.stopped(search, max_penalty),
                         i + 1 >= max_length)
    done_ids, done_scores = _Search.answers(_keep(search, done))
    where = tf.boolean_mask(rows, done)[:, None]
    ids = tf.tensor_scatter_nd_update(ids, where, done_ids)
    scores = tf.tensor_scatter_nd_update(scores, where, done_scores)
    (rows, search), (state, source) = _drop_done(
        done, (rows, search), (state, source), beams=k)
    return i + 1, rows, search, state, source, ids, scores

  loop_vars = (tf.constant(0), tf.range(batch), search, state, source,
               tf.zeros([batch, max_length], tf.int32), tf.zeros([batch]))
  invariants = (tf.TensorShape([]), tf.TensorShape([None]),
                _any_first_axis(_shapes(search)),
                _any_first_axis(state_shapes),
                _any_first_axis(_shapes(source)),
                loop_vars[5].shape, loop_vars[6].shape)
  *_, ids, scores = tf.while_loop(
      _rows_left, dynamic_body, loop_vars, maximum_iterations=max_length,
      shape_invariants=invariants)
  return ids, scores


def greedy(step_fn: Callable, state, *, batch, max_length: int,
           eos_id: int = 1, start_id: int = 0, source=(),
           dynamic: bool = False, state_invariants=None):
  """The most likely token each step until every sentence has ended
  (arguments as beam_search's; `dynamic`: an ended sentence leaves the
  loop).

  Returns:
    ids [batch, max_length] int32 with EOS and zeros after it.
  """
  state_shapes = _shapes(state) if state_invariants is None else \
      state_invariants

  def step(i, ids, done, state, source):
    logits, state = step_fn(ids[:, i], i, state, source)
    token = tf.argmax(logits, axis=-1, output_type=tf.int32)
    token = tf.where(done, 0, token)
    ids += token[:, None] * tf.one_hot(i + 1, max_length + 1,
                                       dtype=tf.int32)[None, :]
    return ids, tf.logical_or(done, tf.equal(token, eos_id)), state

  ids = tf.fill([batch, max_length + 1], start_id)
  done = tf.zeros([batch], tf.bool)
  if not dynamic:
    def keep_going(i, ids, done, state):
      del ids, state
      return tf.logical_and(i < max_length,
                            tf.logical_not(tf.reduce_all(done)))

    def body(i, ids, done, state):
      return (i + 1, *step(i, ids, done, state, source))

    _, ids, _, _ = tf.while_loop(
        keep_going, body, (tf.constant(0), ids, done, state),
        maximum_iterations=max_length,
        shape_invariants=(tf.TensorShape([]), ids.shape, done.shape,
                          state_shapes))
    return ids[:, 1:]

  def dynamic_body(i, rows, ids, done, state, source, out):
    ids, done, state = step(i, ids, done, state, source)
    done = tf.logical_or(done, i + 1 >= max_length)
    out = tf.tensor_scatter_nd_update(out, tf.boolean_mask(rows, done)[:, None],
                                      tf.boolean_mask(ids[:, 1:], done))
    (rows, ids, done, state, source), _ = _drop_done(
        done, (rows, ids, done, state, source))
    return i + 1, rows, ids, done, state, source, out

  loop_vars = (tf.constant(0), tf.range(batch), ids, done, state, source,
               tf.zeros([batch, max_length], tf.int32))
  invariants = (tf.TensorShape([]), tf.TensorShape([None]),
                *_any_first_axis((ids.shape, done.shape, state_shapes,
                                  _shapes(source))),
                loop_vars[6].shape)
  *_, out = tf.while_loop(_rows_left, dynamic_body, loop_vars,
                          maximum_iterations=max_length,
                          shape_invariants=invariants)
  return out
