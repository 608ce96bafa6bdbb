"""What the translation tasks share: BLEU of beam-search translations
scored on the host, and MLPerf's translation keys.

A mixin for models/transformer_task.py and models/gnmt_task.py; the task
provides `translate(model, inputs)` (ids [batch, length], EOS-terminated),
`data` (a TranslationInput) and `metric_processes`.
"""

import tensorflow as tf

from input_pipeline import records
from models import bleu
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
