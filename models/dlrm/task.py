"""The DLRM click-through task: Criteo (or any click records), binary
cross-entropy, ROC AUC over every eval example (MLPerf v0.7: 0.8025).

Google's v0.7 `dlrm_main.py` and `dlrm.py`: the loss is the mean binary
cross-entropy over the global batch (their `reduce_mean` per replica and
CrossShardOptimizer's mean over replicas: the share of the global mean);
the eval keeps each example's click probability and label, and the AUC is
computed on the host over all eval examples (here per host, exactly:
models/dlrm/roc_auc.py). Their log numbers each evaluation (eval k has
`epoch_num` k, every `steps_between_evals` steps) rather than counting
epochs: `mlperf_epoch_num` does the same from EVAL_EVERY_STEPS.
"""

import numpy as np
import tensorflow as tf

from input_pipeline import clicks
from input_pipeline import records
from models.dlrm import model as dlrm_lib
from models.dlrm import roc_auc
from training import losses


def check_table_sizes(table_sizes, vocab_sizes, feature_names) -> list[int]:
  """The tables' rows: `table_sizes` when given (each at least its
  feature's vocabulary: ids are never hashed here), else the data's
  vocabularies."""
  if not table_sizes:
    return list(vocab_sizes)
  if len(table_sizes) != len(vocab_sizes):
    raise ValueError(
        f'DlrmTask.table_sizes has {len(table_sizes)} tables; the data has '
        f'{len(vocab_sizes)} sparse features ({", ".join(feature_names)}).')
  for name, rows, vocab in zip(feature_names, table_sizes, vocab_sizes):
    if rows < vocab:
      raise ValueError(
          f'DlrmTask.table_sizes gives feature {name!r} {rows} rows, but its '
          f'vocabulary has {vocab}: ids would fall outside the table. '
          'Raise the size or convert the data with a smaller vocabulary '
          '(python -m tools.convert_criteo --vocab=hash --table_sizes=...).')
  return list(table_sizes)


class DlrmTask:
  """Click-through prediction with DLRM, judged by ROC AUC. Implements
  training.task.Task."""

  mlperf_benchmark = 'dlrm'
  quality_name = 'ROC AUC'
  quality_tag = 'auc'
  eval_sum_names = ('examples', 'loss')
  eval_output_dtypes = {'score': tf.float32, 'label': tf.float32,
                        'mask': tf.float32}
  higher_is_better = True

  def __init__(self, *, model, data: clicks.ClickInput,
               target_auc: float = 0.8025, table_sizes: tuple = (),
               eval_every_steps: int = 0):
    """Args:
      model: builds the DLRM (gin: `@models.dlrm.model.Dlrm`, no call); its
        tables and dense width come from the data.
      data: the click-record pipeline.
      target_auc: ROC AUC that ends the run (MLPerf: 0.8025).
      table_sizes: rows of each table (() = the data's vocabularies;
        Google's v0.7 sizes in gin/models/dlrm.gin's pod experiment).
      eval_every_steps: the run's evaluation interval, for the log's
        epoch_num (the evaluation's number, as Google's log counts).
    """
    self._build_model = model
    self.data = data
    self.target_quality = target_auc
    self.table_sizes = tuple(table_sizes)
    self.eval_every_steps = eval_every_steps
    self._metric = None

  def build_model(self) -> dlrm_lib.Dlrm:
    sizes = check_table_sizes(self.table_sizes, self.data.vocab_sizes,
                              self.data.metadata['sparse_features'])
    return self._build_model(vocab_sizes=sizes, num_dense=self.data.num_dense)

  @staticmethod
  def _cross_entropy(model, batch):
    logits = model(batch['dense'], batch['sparse'])
    return logits, tf.nn.sigmoid_cross_entropy_with_logits(
        labels=batch['label'], logits=logits)

  def loss_share(self, model, batch):
    _, per_example = self._cross_entropy(model, batch)
    return losses.share_of_global_mean(per_example), {}

  def eval_sums(self, model, batch) -> dict:
    _, per_example = self._cross_entropy(model, batch)
    return {'examples': tf.reduce_sum(batch['mask']),
            'loss': tf.reduce_sum(per_example * batch['mask'])}

  def eval_outputs(self, model, batch) -> dict:
    logits = model(batch['dense'], batch['sparse'])
    return {'score': tf.sigmoid(logits), 'label': batch['label'],
            'mask': batch['mask']}

  def host_metric(self) -> roc_auc.RocAucMetric:
    if self._metric is None:
      self._metric = roc_auc.RocAucMetric(
          expected_examples=self.data.num_eval_examples)
    return self._metric

  @staticmethod
  def quality(metrics: dict) -> float:
    return float(metrics['auc'])

  def mlperf_params(self, *, per_replica_batch_size: int,
                    num_replicas: int) -> dict:
    del per_replica_batch_size, num_replicas
    return {}

  def mlperf_epoch_num(self, step: int, global_batch_size: int) -> float:
    """The evaluation's number (Google: cur_step // steps_between_evals +
    1 for the evaluation after that block), else epochs."""
    if self.eval_every_steps:
      return float(max(step, 0) // self.eval_every_steps)
    return step * global_batch_size / self.data.num_train_examples

  def explain_input_error(self, error: Exception) -> str | None:
    return records.explain_data_loss(
        error, (self.data.train_files, self.data.eval_files))

  def serving_fn(self, model):
    """dense [b, num_dense] float32 and sparse [b, tables] int64 ->
    `score` [b], the click probability."""
    num_dense, tables = self.data.num_dense, len(self.data.vocab_sizes)

    @tf.function(autograph=False, input_signature=[
        tf.TensorSpec([None, num_dense], tf.float32, name='dense'),
        tf.TensorSpec([None, tables], tf.int64, name='sparse')])
    def serve(dense, sparse):
      return {'score': tf.sigmoid(model(dense, sparse))}

    return serve

  # Inference (inference/): one sample is one impression; the response is
  # its click probability, scored with AUC as MLPerf Inference's DLRM
  # accuracy script does.
  inference_model = 'dlrm'
  inference_output = ('score', 'float32')
  inference_references = ('label',)
  inference_performance_samples = 204800  # MLPerf Inference DLRM's.
  inference_settings = {}  # LoadGen's mlperf.conf has the model.

  @staticmethod
  def inference_inputs(batch: dict) -> dict:
    return {'dense': batch['dense'], 'sparse': batch['sparse']}

  @staticmethod
  def inference_quality(responses: dict, references: dict) -> float:
    indices = sorted(responses)
    scores = np.asarray([float(np.asarray(responses[i]).reshape(-1)[0])
                         for i in indices], np.float32)
    labels = np.asarray(references['label'])[indices]
    return roc_auc.auc_of(roc_auc.histogram(scores, labels))
