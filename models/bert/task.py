"""The BERT pretraining task: masked LM + next-sentence prediction.

Loss as the reference computes it on each replica: the masked-LM loss averaged
over that replica's prediction weights, plus the mean NSP loss. By default
the optimizer receives the sum of the replicas' gradients of that loss, as
Google's v0.7 TPU code does (training/losses.py `replica_mean_summed`). Quality is
MLPerf's: masked-LM accuracy = sum(correct x weight) / sum(weight) over all
replicas and the first num_eval_samples eval samples.
"""

from typing import Callable

import numpy as np
import tensorflow as tf

from input_pipeline import records
from input_pipeline.bert import BertPretrainingInput
from models.bert import checkpoint as bert_checkpoint
from models.bert.model import Bert
from training import losses
from training.task import SumsOnly


class BertPretrainingTask(SumsOnly):  # Accuracy: a ratio of sums.
  """MLPerf BERT. Implements training.task.Task."""

  mlperf_benchmark = 'bert'
  quality_name = 'masked-LM accuracy'
  quality_tag = 'mlm_accuracy'
  eval_sum_names = ('correct', 'weight', 'examples')
  higher_is_better = True

  def __init__(self, *, model: Callable[[], Bert], data: BertPretrainingInput,
               init_checkpoint: str = '', vocab_file: str = '',
               target_accuracy: float = 0.712,
               sum_replica_gradients: bool = True,
               epoch_num_unit: str = 'samples',
               logged_accumulation_steps: int = 1):
    """Args:
      model: builds the Bert (gin: `@models.bert.model.Bert`, no call).
      data: the input pipeline.
      init_checkpoint: TF1 reference checkpoint to start from ('' = random).
      vocab_file: if set, the model's vocab_size is this file's line count.
      target_accuracy: masked-LM accuracy that ends the run (0.712 in v0.7,
        0.720 from v1.0).
      sum_replica_gradients: LAMB receives the sum of the replicas' own-mean
        gradients (Google's v0.7: `tf.tpu.cross_replica_sum`, no division);
        False gives their average (this suite before 2026-11-30; epsilon then
        weighs num_replicas times more).
      epoch_num_unit: what MLPerf's epoch_num counts: 'steps' (ruleset
        0.7.0, as Google's v0.7 logs do) or 'samples' (later rulesets).
      logged_accumulation_steps: the `opt_gradient_accumulation_steps` the
        log states for a run without accumulation: 1, or 0 as Google's
        TF1 pod code logs it (its flag's "none"; their TF2 v3-32 logs 1).
    """
    if epoch_num_unit not in ('steps', 'samples'):
      raise ValueError("`epoch_num_unit` must be 'steps' or 'samples', got "
                       f'{epoch_num_unit!r}.')
    self.epoch_num_unit = epoch_num_unit
    self.logged_accumulation_steps = logged_accumulation_steps
    self._build_model = model
    self.data = data
    self.init_checkpoint, self.vocab_file = init_checkpoint, vocab_file
    self.target_quality = target_accuracy
    self._share = (losses.replica_mean_summed if sum_replica_gradients else
                   losses.share_of_replica_mean)

  def build_model(self) -> Bert:
    if self.vocab_file:
      with tf.io.gfile.GFile(self.vocab_file) as f:
        vocab_size = sum(1 for _ in f)
      model = self._build_model(vocab_size=vocab_size)
    else:
      model = self._build_model()
    if self.data.max_seq_length > model.max_position_embeddings:
      raise ValueError(
          f'max_seq_length ({self.data.max_seq_length}) exceeds the model\'s '
          f'max_position_embeddings ({model.max_position_embeddings}).')
    if self.init_checkpoint:
      bert_checkpoint.load_tf1_checkpoint(model, self.init_checkpoint)
    return model

  def loss_share(self, model, batch):
    mlm_logits, nsp_logits = model(batch, training=True)
    weights = batch['masked_lm_weights']
    mlm = tf.nn.sparse_softmax_cross_entropy_with_logits(
        batch['masked_lm_ids'], mlm_logits)
    nsp = tf.nn.sparse_softmax_cross_entropy_with_logits(
        batch['next_sentence_labels'][:, 0], nsp_logits)
    # The reference: sum(loss x weight) / (sum(weight) + 1e-5) per replica.
    return self._share(mlm, weights, epsilon=1e-5) + self._share(nsp), {}

  def eval_sums(self, model, batch) -> dict:
    mlm_logits, _ = model(batch, training=False)
    weights = batch['masked_lm_weights']
    correct = tf.cast(tf.equal(tf.argmax(mlm_logits, -1, output_type=tf.int32),
                               batch['masked_lm_ids']), tf.float32)
    return {'correct': tf.reduce_sum(correct * weights),
            'weight': tf.reduce_sum(weights),
            'examples': tf.reduce_sum(batch['mask'])}

  def serving_fn(self, model):
    """Token features -> masked-LM predicted ids and NSP logits."""
    seq = self.data.max_seq_length
    preds = self.data.max_predictions_per_seq
    names = ('input_ids', 'input_mask', 'segment_ids')

    @tf.function(autograph=False, input_signature=[
        *(tf.TensorSpec([None, seq], tf.int32, name=n) for n in names),
        tf.TensorSpec([None, preds], tf.int32, name='masked_lm_positions')])
    def serve(input_ids, input_mask, segment_ids, masked_lm_positions):
      mlm, nsp = model({'input_ids': input_ids, 'input_mask': input_mask,
                        'segment_ids': segment_ids,
                        'masked_lm_positions': masked_lm_positions},
                       training=False)
      return {'masked_lm_predictions': tf.argmax(mlm, -1,
                                                 output_type=tf.int32),
              'next_sentence_logits': nsp}

    return serve

  # Inference: responses carry the int32 predicted id of each MLM slot.
  inference_model = 'bert'
  inference_output = ('masked_lm_predictions', 'int32')
  inference_references = ('masked_lm_ids', 'masked_lm_weights')
  inference_performance_samples = 10833  # MLPerf Inference's for bert.
  inference_settings = {}  # LoadGen's mlperf.conf has the model.

  @staticmethod
  def inference_inputs(batch: dict) -> dict:
    return {k: batch[k] for k in ('input_ids', 'input_mask', 'segment_ids',
                                  'masked_lm_positions')}

  @staticmethod
  def inference_quality(responses: dict, references: dict) -> float:
    """Weighted masked-LM accuracy over the answered samples."""
    correct = weight = 0.0
    for i, predicted in responses.items():
      w = references['masked_lm_weights'][i]
      correct += float(np.sum(w * (predicted == references['masked_lm_ids'][i])))
      weight += float(np.sum(w))
    return correct / max(weight, 1e-9)

  @staticmethod
  def quality(metrics: dict) -> float:
    return float(metrics['correct']) / max(float(metrics['weight']), 1e-9)

  def mlperf_params(self, *, per_replica_batch_size: int,
                    num_replicas: int) -> dict:
    del per_replica_batch_size, num_replicas
    return {'max_sequence_length': self.data.max_seq_length,
            'max_predictions_per_seq': self.data.max_predictions_per_seq,
            'opt_gradient_accumulation_steps': self.logged_accumulation_steps}

  def mlperf_epoch_num(self, step: int, global_batch_size: int) -> int:
    return step if self.epoch_num_unit == 'steps' else step * global_batch_size

  def explain_input_error(self, error: Exception) -> str | None:
    # Wrong features fail in check(); a damaged record is named here.
    return records.explain_data_loss(
        error, (self.data.train_files, self.data.eval_files))
