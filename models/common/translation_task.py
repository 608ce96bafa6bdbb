"""What the translation tasks share: BLEU of beam-search translations
scored on the host, MLPerf's translation keys, the serving signature and
MLPerf Inference's translation benchmark.

A mixin for models/transformer/task.py and models/gnmt/task.py; the task
provides `translate(model, inputs)` (ids [batch, length], EOS-terminated;
the batch may be unknown when serving), `data` (a TranslationInput),
`metric_processes` and `inference_model`.
"""

import numpy as np
import tensorflow as tf

from input_pipeline import records
from models.common import bleu
from models.common import inference_v05
from models.common import tokenized_bleu
from training import mlperf_log


class BleuTranslation:
  """The eval and MLPerf members of training.task.Task for a translation
  task scored by BLEU (MLPerf's sacreBLEU, a fraction)."""

  quality_name = 'BLEU'
  quality_tag = 'bleu'
  eval_sum_names = ('examples',)
  eval_output_dtypes = {'ids': tf.int32, 'index': tf.int32,
                        'mask': tf.float32}
  higher_is_better = True

  def eval_sums(self, model, batch) -> dict:
    del model
    return {'examples': tf.reduce_sum(batch['mask'])}

  def eval_outputs(self, model, batch) -> dict:
    return {'ids': self.translate(model, batch['inputs']),
            'index': batch['index'], 'mask': batch['mask']}

  def host_metric(self) -> bleu.BleuMetric:
    return bleu.BleuMetric(
        vocab=self.data.vocab, references=self.data.references(),
        processes=self.metric_processes)

  @staticmethod
  def quality(metrics: dict) -> float:
    return float(metrics['bleu'])

  def mlperf_params(self, *, per_replica_batch_size: int,
                    num_replicas: int) -> dict:
    del per_replica_batch_size, num_replicas
    return {'max_sequence_length': mlperf_log.Logged(
        self.data.max_length, {'method': 'discard'})}

  def mlperf_epoch_num(self, step: int, global_batch_size: int) -> float:
    """Epochs of a whole number of steps, as Google's v0.7 logs count them
    (Transformer: 566,340 rows / 2048 = 276.5, an epoch is 277 steps; GNMT:
    the bucket plan's 3,442,299 // 8192 = 420): eval after the first logs
    epoch_num 1."""
    steps = max(1, round(self.data.steps_per_epoch(global_batch_size)))
    return round(step / steps, 4)

  def explain_input_error(self, error: Exception) -> str | None:
    """Names the record file behind a data-loss error (`train-*` holds the
    packed rows and the length buckets' `train-L<length>-*` both)."""
    return records.explain_data_loss(
        error, (self.data.train_files, self.data.eval_files))

  # -- Export ---------------------------------------------------------------------

  def serving_fn(self, model):
    """Source ids [batch, eval length] -> translated ids."""
    length = self.data.eval_length

    @tf.function(autograph=False, input_signature=[
        tf.TensorSpec([None, length], tf.int32, name='inputs')])
    def serve(inputs):
      return {'ids': self.translate(model, inputs)}

    return serve

  # -- Inference (inference/): MLPerf Inference v0.5's translation ------------------
  # LoadGen's responses carry each sample's decoded ids; accuracy mode
  # detokenises them on the host and scores v0.5's tokenized BLEU
  # (models/common/tokenized_bleu.py) against the eval references.

  inference_output = ('ids', 'int32')
  inference_references = ('index',)
  # MLPerf Inference v0.5's GNMT settings (LoadGen 6's mlperf.conf has no
  # GNMT). The QSL here is the eval set, and LoadGen holds min(eval set,
  # 3,003) of it, as r0.5's loadgen_gnmt.py does, not v0.5's 3,903,900
  # (newstest2014 repeated 1,300 times).
  inference_performance_samples = 3003
  inference_settings = inference_v05.settings('gnmt')

  @staticmethod
  def inference_inputs(batch: dict) -> dict:
    return {'inputs': batch['inputs']}

  def inference_quality(self, responses: dict, references: dict) -> float:
    """v0.5's tokenized BLEU (a fraction) of the answered samples."""
    texts = self.data.references()
    answered = sorted(responses)
    translations = [self.data.vocab.decode(np.asarray(responses[i]))
                    for i in answered]
    wanted = [texts[int(references['index'][i])] for i in answered]
    return tokenized_bleu.inference_bleu(translations, wanted)
