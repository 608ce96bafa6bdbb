"""The MLPerf GNMT translation task: length buckets, Google's summed loss,
beam search with both penalties, sacreBLEU in the loop.

Training (Google's v0.7 model.py): each step's batch is one length bucket
(input_pipeline/length_buckets.py); `tf.switch_case` on the bucket runs the
graph built for that static length, so each length compiles once. The loss is
the label-smoothed cross-entropy summed over every position of the bucket,
padding included (`models.gnmt.model.label_smoothed_sum`), not divided by
anything; the runtime clips each replica's gradients of that sum to global norm
5 and sums them over replicas in bfloat16 (gin: GradientOptions), then Adam
(training/losses.replica_sum_summed).

Quality: sacreBLEU (`-lc --tokenize intl`, models/common/bleu.py: MLPerf GNMT's
metric, as the Transformer's) of the beam-search translations (models/
gnmt_beam_search.py, fixed shapes, on the device inside the eval step) of
every eval pair, scored on the host and logged as a fraction (target 0.24).
"""

from typing import Callable

import tensorflow as tf

from input_pipeline import subwords
from input_pipeline.length_buckets import LengthBucketInput
from models.gnmt import model as gnmt
from models.gnmt import beam_search as gnmt_beam_search
from models.common.translation_task import BleuTranslation
from training import losses


class GnmtTask(BleuTranslation):
  """MLPerf GNMT (WMT16 English-German). Implements training.task.Task."""

  mlperf_benchmark = 'gnmt'
  inference_model = 'gnmt'  # MLPerf Inference v0.5's name.

  def __init__(self, *, model: Callable[..., gnmt.GNMT],
               data: LengthBucketInput, target_bleu: float = 0.24,
               label_smoothing: float = 0.1, beam_size: int = 5,
               length_penalty: float = 0.6, coverage_penalty: float = 0.1,
               max_decode_length: int = 160, metric_processes: int = 0):
    """Args:
      model: builds the GNMT (gin: `@models.gnmt.model.GNMT`, no call); its
        vocab_size comes from the data.
      data: the input pipeline.
      target_bleu: BLEU (a fraction, as MLPerf logs it) that ends the run:
        0.24 in MLPerf v0.7.
      label_smoothing: 0.1 in MLPerf.
      beam_size, length_penalty, coverage_penalty: MLPerf's 5, 0.6, 0.1.
      max_decode_length: decoding steps (Google's tgt_max_len_infer: 160).
      metric_processes: count BLEU's statistics in this many host
        processes (models/common/bleu.py; 0: in the metric's host thread).
    """
    if beam_size < 1 or max_decode_length < 1:
      raise ValueError(f'`beam_size` ({beam_size}) and `max_decode_length` '
                       f'({max_decode_length}) must be at least 1.')
    self._build_model, self.data = model, data
    self.target_quality = target_bleu
    self.label_smoothing = label_smoothing
    self.beam_size = beam_size
    self.length_penalty, self.coverage_penalty = (length_penalty,
                                                  coverage_penalty)
    self.max_decode_length = max_decode_length
    self.metric_processes = metric_processes

  def build_model(self) -> gnmt.GNMT:
    return self._build_model(vocab_size=self.data.metadata['vocab_size'])

  # -- Training -------------------------------------------------------------------

  def loss_share(self, model, batch):
    """The bucket's graph, chosen on the device: their switch_case."""

    def branch(length):
      return lambda: gnmt.label_smoothed_sum(
          *model(batch, length, training=True), self.label_smoothing)

    # A bucket without pairs never comes: no graph traced (or compiled).
    total = tf.switch_case(batch['bucket'][0], [
        branch(length) if pairs else (lambda: tf.constant(0.0))
        for length, pairs in self.data.buckets])
    return losses.replica_sum_summed(total), {}

  # -- Evaluation -----------------------------------------------------------------

  def translate(self, model, inputs):
    """Decoded ids [batch, max_decode_length] of sources [batch, eval
    length] (EOS-terminated, zero-padded)."""
    batch = inputs.shape[0] or tf.shape(inputs)[0]  # None when serving.
    lengths = tf.reduce_sum(tf.cast(inputs > 0, tf.int32), 1)
    state, source = model.start_decoding(inputs, lengths, self.beam_size)
    return gnmt_beam_search.beam_search(
        lambda ids, state: model.decode_step(ids, state, source), state,
        batch=batch, beam_size=self.beam_size,
        max_length=self.max_decode_length, vocab_size=model.vocab_size,
        source_length=inputs.shape[1], length_penalty=self.length_penalty,
        coverage_penalty=self.coverage_penalty, eos_id=subwords.EOS_ID,
        start_id=subwords.PAD_ID)

  def eval_search_step(self, model, batch):
    """One iteration of the eval's beam search, for the time-to-train
    model's count (tools.predictor.cost.SearchingEval: XLA counts a loop's
    body once): the decoder's step at this batch x beam, its arguments and
    the most steps the search runs (max_decode_length)."""
    inputs = batch['inputs']
    lengths = tf.reduce_sum(tf.cast(inputs > 0, tf.int32), 1)
    state, source = model.start_decoding(inputs, lengths, self.beam_size)
    ids = tf.zeros([inputs.shape[0] * self.beam_size], tf.int32)
    return model.decode_step, (ids, state, source), self.max_decode_length
