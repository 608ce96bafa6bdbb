"""The MLPerf Transformer translation task: packed training, BLEU in the loop.

Loss (Google's v0.7, Lingvo `_FPropFastSoftmax`): label-smoothed
cross-entropy over the real target tokens, the smoothed target putting
1 - u on the label and u / (vocab - 1) on every other piece, less that
target's own entropy (a constant: the loss reaches 0). Each replica takes
its own mean over its tokens and the optimizer receives the replicas'
average gradient (Lingvo scales each core's loss by 1 / cores and sums:
training/losses.py `share_of_replica_mean`); `token_mean='global'` instead
divides by the tokens of the whole global batch (`share_of_global_mean`).

Quality: BLEU (models/common/bleu.py) of the beam-search translations (models/
beam_search.py, on the device inside the eval step) of every eval pair,
gathered from every replica and host and scored on the chief.
"""

import functools
from typing import Callable

import numpy as np
import tensorflow as tf

from input_pipeline import subwords
from input_pipeline.translation import TranslationInput
from models.transformer import beam_search
from models.transformer.model import Transformer
from models.common.translation_task import BleuTranslation
from training import losses


def smoothed_cross_entropy(logits, labels, uncertainty: float):
  """Per-token cross-entropy against the uniformly smoothed label, less the
  smoothed label's entropy (Lingvo's `xent - normalizing`).

  Computed as -(on - off) log p[label] - off sum(log p) without building the
  [tokens, vocab] target.
  """
  vocab = logits.shape[-1]
  log_probs = tf.nn.log_softmax(logits)
  on = 1.0 - uncertainty
  off = uncertainty / (vocab - 1)
  picked = tf.gather(log_probs, labels, batch_dims=labels.shape.rank)
  xent = -(on - off) * picked - off * tf.reduce_sum(log_probs, axis=-1)
  normalizing = -(on * np.log(on) + (vocab - 1) * off * np.log(off + 1e-20)
                  ) if uncertainty else 0.0
  return xent - normalizing


class TransformerTask(BleuTranslation):
  """MLPerf Transformer (WMT English-German). Implements training.task.Task."""

  mlperf_benchmark = 'transformer'
  # No MLPerf Inference benchmark: v0.5 GNMT's settings and BLEU, so the
  # two translation models compare on one harness.
  inference_model = 'transformer'

  def __init__(self, *, model: Callable[..., Transformer],
               data: TranslationInput, target_bleu: float = 0.25,
               label_smoothing: float = 0.1, token_mean: str = 'replica',
               decoder: str = 'beam', beam_size: int = 4,
               length_penalty: float = 0.6, extra_decode_length: int = 50,
               decode_shapes: str = 'auto', metric_processes: int = 0):
    """Args:
      model: builds the Transformer (gin:
      `@models.transformer.model.Transformer`,
        no call); its vocab_size comes from the data.
      data: the input pipeline.
      target_bleu: BLEU (a fraction, as MLPerf logs it) that ends the run:
        0.25 in MLPerf.
      label_smoothing: the smoothed label's uncertainty (v0.7: 0.1).
      token_mean: 'replica' (each replica's own token mean, gradients
        averaged: Google's v0.7) or 'global' (the mean over the global
        batch's tokens).
      decoder: 'beam' (MLPerf's) or 'greedy'.
      beam_size: hypotheses kept a sentence (MLPerf: 4).
      length_penalty: alpha of ((5 + length) / 6)^alpha (MLPerf: 0.6).
      extra_decode_length: decoding may run this many steps past the eval
        sources' padded length (the reference's max decode length: input
        length + 50).
      decode_shapes: 'fixed' (every sentence of a batch decoded until the
        last one stops, each step attending to and reordering a cache of
        source length + extra_decode_length positions: one shape, as TPUs
        compile), 'dynamic' (a sentence leaves the batch when its search
        stops, and the cache holds the positions decoded so far: the cost
        follows the real lengths; the same translations; models/
        beam_search.py), or 'auto' ('fixed' on a TPU or a DTensor mesh, else
        'dynamic').
      metric_processes: count BLEU's statistics in this many host
        processes (models/common/bleu.py; 0: in the metric's host thread).
    """
    if token_mean not in ('replica', 'global'):
      raise ValueError("`token_mean` must be 'replica' or 'global', got "
                       f'{token_mean!r}.')
    if decoder not in ('beam', 'greedy'):
      raise ValueError(f"`decoder` must be 'beam' or 'greedy', got "
                       f'{decoder!r}.')
    if decode_shapes not in ('auto', 'fixed', 'dynamic'):
      raise ValueError("`decode_shapes` must be 'auto', 'fixed' or "
                       f"'dynamic', got {decode_shapes!r}.")
    self._build_model, self.data = model, data
    self.target_quality = target_bleu
    self.label_smoothing, self.token_mean = label_smoothing, token_mean
    self.decoder, self.beam_size = decoder, beam_size
    self.length_penalty = length_penalty
    self.extra_decode_length = extra_decode_length
    self.decode_shapes = decode_shapes
    self.metric_processes = metric_processes

  def build_model(self) -> Transformer:
    return self._build_model(vocab_size=self.data.metadata['vocab_size'])

  # -- Training -------------------------------------------------------------------

  def loss_share(self, model, batch):
    logits = model(batch, training=True)
    xent = smoothed_cross_entropy(logits, batch['targets'],
                                  self.label_smoothing)
    weights = tf.cast(batch['targets_segmentation'] > 0, tf.float32)
    share = (losses.share_of_replica_mean if self.token_mean == 'replica'
             else losses.share_of_global_mean)
    return share(xent, weights), {}

  # -- Evaluation -----------------------------------------------------------------

  def translate(self, model, inputs):
    """Decoded ids [batch, source length + extra_decode_length] of sources
    [batch, source length] (EOS-terminated, zero-padded)."""
    batch = inputs.shape[0] or tf.shape(inputs)[0]  # None when serving.
    max_length = inputs.shape[1] + self.extra_decode_length
    dynamic = self.decode_shapes == 'dynamic' or (
        self.decode_shapes == 'auto' and not beam_search.needs_fixed_shapes())
    source, cache = model.start_decoding(inputs,
                                         0 if dynamic else max_length)
    if self.decoder == 'beam':
      source, cache = tf.nest.map_structure(
          lambda t: tf.repeat(t, self.beam_size, axis=0), (source, cache))
    common = dict(
        max_length=max_length, eos_id=subwords.EOS_ID,
        start_id=subwords.PAD_ID, source=source, dynamic=dynamic,
        state_invariants=model.growing_cache_shapes(cache) if dynamic else None)
    step = functools.partial(model.decode_step, growing=dynamic)
    if self.decoder == 'greedy':
      return beam_search.greedy(step, cache, batch=batch, **common)
    ids, _ = beam_search.beam_search(
        step, cache, batch=batch, beam_size=self.beam_size,
        vocab_size=model.vocab_size, alpha=self.length_penalty, **common)
    return ids

  def eval_search_step(self, model, batch):
    """One iteration of the eval's search loop, for the time-to-train
    model's count (tools/predictor/cost.py: XLA counts a loop's body once):
    the fixed-shape decoder step at this batch (x beam), its arguments
    and the most steps the search runs (source length + extra)."""
    inputs = batch['inputs']
    max_length = inputs.shape[1] + self.extra_decode_length
    source, cache = model.start_decoding(inputs, max_length)
    if self.decoder == 'beam':
      source, cache = tf.nest.map_structure(
          lambda t: tf.repeat(t, self.beam_size, axis=0), (source, cache))
    ids = tf.zeros([cache[next(iter(cache))].shape[0]], tf.int32)
    def step(ids, position, cache, source):
      return model.decode_step(ids, position, cache, source, growing=False)

    return step, (ids, tf.constant(0), cache, source), max_length
