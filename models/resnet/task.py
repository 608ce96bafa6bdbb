"""The ResNet image-classification task: model, inputs, loss, eval metric, target.

The runtime (training/) calls only the methods here; it knows nothing about
images or ResNet.
"""

import math
from typing import Callable

import numpy as np
import tensorflow as tf

from input_pipeline import records
from input_pipeline import image_preprocessing
from input_pipeline.imagenet import ImageNetInput
from models.common.resnet import ResNet
from training import losses
from training.task import SumsOnly


class ResNetTask(SumsOnly):  # Top-1 is a sum: no host metric.
  """ImageNet-style classification with a ResNet and top-1 accuracy.

  Implements training.task.Task.
  """

  mlperf_benchmark = 'resnet'
  spatial_feature = 'image'  # Split by SPATIAL_PARTITIONS.
  quality_name = 'top-1 accuracy'
  quality_tag = 'top1_accuracy'
  eval_sum_names = ('correct', 'examples', 'loss')
  higher_is_better = True

  def __init__(self, *, model: Callable[[], ResNet], data: ImageNetInput,
               label_smoothing: float = 0.1,
               target_accuracy: float = 0.759,
               whole_epoch_nums: bool = False):
    """Args:
      model: builds the ResNet (gin: `@models.common.resnet.ResNet`, no call).
      data: the input pipeline (it knows the epoch size).
      label_smoothing: label smoothing of the cross-entropy.
      target_accuracy: top-1 accuracy that ends the run (MLPerf: 0.759).
      whole_epoch_nums: log epoch_num as whole epochs, floor(step /
        steps_per_epoch), as Google's v0.7 resnet_main.py does
        (`cur_step // steps_per_epoch`); else the exact fraction (4 places).
    """
    self._build_model = model
    self.data = data
    self.whole_epoch_nums = whole_epoch_nums
    self.label_smoothing = label_smoothing
    self.target_quality = target_accuracy
    self._bn_group_size = None

  # [0, 255] pixels -> the network's input (on the device).
  normalize = staticmethod(image_preprocessing.normalize)

  def build_model(self) -> ResNet:
    model = self._build_model()
    if model.num_classes != self.data.num_classes:
      raise ValueError(
          f'The model predicts {model.num_classes} classes but the data has '
          f'{self.data.num_classes}: set both num_classes bindings alike.')
    self._bn_group_size = model.bn_sync.group_size
    return model

  def loss_share(self, model, batch):
    """Label-smoothed cross-entropy as a share of the global batch mean
    (the TPU reference's loss), and the new batch-norm state."""
    logits, state_updates = model(self.normalize(batch['image']),
                                  training=True)
    labels = tf.one_hot(batch['label'], model.num_classes)
    if self.label_smoothing:
      labels = (labels * (1.0 - self.label_smoothing) +
                self.label_smoothing / model.num_classes)
    per_example = tf.nn.softmax_cross_entropy_with_logits(labels, logits)
    return losses.share_of_global_mean(per_example), state_updates

  def eval_sums(self, model, batch) -> dict:
    """Masked counts summed over a replica's batch, and the masked
    cross-entropy (unsmoothed) summed."""
    logits, _ = model(self.normalize(batch['image']), training=False)
    correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32),
                               batch['label']), tf.float32)
    loss = tf.nn.sparse_softmax_cross_entropy_with_logits(
        batch['label'], tf.cast(logits, tf.float32))
    return {'correct': tf.reduce_sum(correct * batch['mask']),
            'examples': tf.reduce_sum(batch['mask']),
            'loss': tf.reduce_sum(loss * batch['mask'])}

  def explain_input_error(self, error: Exception) -> str | None:
    """Names the damaged record or the undecodable images behind an input
    error, if that was it."""
    damaged = records.explain_data_loss(
        error, (self.data.train_files, self.data.eval_files))
    if damaged:
      return damaged
    text = str(error).lower()
    if 'jpeg' not in text and 'decode' not in text:
      return None
    bad = self.data.find_undecodable()
    if not bad:
      return None
    return ('Undecodable images in the input: ' + '; '.join(bad) + '. Fix or '
            'remove them, or set input_pipeline.imagenet.ImageNetInput.'
            "on_bad_image = 'skip' to drop and count them.")

  def serving_fn(self, model):
    """Batch of eval-pipeline images ([0, 255] floats) -> logits, classes."""
    size = self.data.image_size

    @tf.function(autograph=False, input_signature=[
        tf.TensorSpec([None, size, size, 3], tf.float32, name='images')])
    def serve(images):
      logits, _ = model(self.normalize(images), training=False)
      return {'logits': logits,
              'classes': tf.argmax(logits, -1, output_type=tf.int32)}

    return serve

  # Inference: LoadGen responses carry the int32 class of each sample.
  inference_model = 'resnet50'
  inference_output = ('classes', 'int32')
  inference_references = ('label',)
  inference_performance_samples = 1024  # MLPerf Inference's for resnet50.
  inference_settings = {}  # LoadGen's mlperf.conf has the model.

  @staticmethod
  def inference_inputs(batch: dict) -> dict:
    return {'images': batch['image']}

  @staticmethod
  def inference_quality(responses: dict, references: dict) -> float:
    """Top-1 over the answered samples."""
    labels = references['label']
    return float(np.mean([int(responses[i][0]) == int(labels[i])
                          for i in responses]))

  @staticmethod
  def quality(metrics: dict) -> float:
    return float(metrics['correct']) / max(float(metrics['examples']), 1.0)

  def mlperf_epoch_num(self, step: int, global_batch_size: int) -> float:
    epochs = step / self.data.steps_per_epoch(global_batch_size)
    return float(math.floor(epochs)) if self.whole_epoch_nums else round(
        epochs, 4)

  def mlperf_params(self, *, per_replica_batch_size: int,
                    num_replicas: int) -> dict:
    group = self._bn_group_size or num_replicas
    return {'model_bn_span': per_replica_batch_size * min(group, num_replicas)}
