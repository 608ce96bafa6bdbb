"""Our SSD300-ResNet34 training step, for the benchmarks.

`ours(dtype, batch, steps)` builds the runtime's train loop (training/
step.py) for the full-size model (width 1, 300x300, 81 classes) with
Google's optimizer (momentum SGD, weight decay on every weight) and
synthetic images whose targets and colour jitter factors were drawn once
(in a real run the host pipeline draws them; the step applies the jitter, as
the task does).
"""

import numpy as np
import tensorflow as tf

from input_pipeline import coco
from input_pipeline import ssd_boxes
from models.ssd import model as ssd_lib
from models.ssd import task as ssd_task
from training import losses
from training import optimizers
from training import schedules
from training import step as step_lib

NUM_CLASSES = 81
OBJECTS_PER_IMAGE = 7  # COCO train2017 averages 7.3 boxes an image.


class _Task:
  """The SSD task's loss without file inputs."""
  eval_sum_names = ()

  def loss_share(self, model, batch):
    images = coco.apply_jitter(batch['image'], batch['jitter'])
    logits, codes, updates = model(model.normalize(images), training=True)
    return losses.share_of_global_mean(ssd_task.detection_loss(
        logits, codes, batch['classes'], batch['boxes'],
        batch['num_matched'])), updates


def synthetic_objects(batch: int, seed: int = 0):
  """Images in [0, 1] and per image OBJECTS_PER_IMAGE corner boxes and
  labels 1..80 (the same ones the torchvision worker builds)."""
  rng = np.random.default_rng(seed)
  images = rng.uniform(0, 1, (batch, 300, 300, 3)).astype(np.float32)
  yx = rng.uniform(0, 0.7, (batch, OBJECTS_PER_IMAGE, 2))
  hw = rng.uniform(0.05, 0.3, (batch, OBJECTS_PER_IMAGE, 2))
  boxes = np.concatenate([yx, yx + hw], -1).astype(np.float32)
  labels = rng.integers(1, NUM_CLASSES, (batch, OBJECTS_PER_IMAGE))
  return images, boxes, labels


def synthetic_batch(batch: int) -> dict:
  images, boxes, labels = synthetic_objects(batch)
  anchors = tf.constant(ssd_boxes.default_boxes())
  encoded = [ssd_boxes.assign_targets(tf.constant(b), tf.constant(l, tf.int32),
                                      anchors) for b, l in zip(boxes, labels)]
  classes, targets, matched = (tf.stack(t) for t in zip(*encoded))
  jitter = tf.stack([coco.jitter_factors(image, [0, i])
                     for i, image in enumerate(images)])
  return {'image': tf.constant(images), 'jitter': jitter, 'classes': classes,
          'boxes': targets, 'num_matched': matched}


def ours(dtype: str, batch: int, steps: int):
  """A callable running `steps` steps of our train loop; and the model."""
  strategy = tf.distribute.get_strategy()
  model = ssd_lib.SSD(num_classes=NUM_CLASSES, compute_dtype=dtype)
  opt = optimizers.SgdMomentum(exclude=ssd_lib.no_decay_exemption,
                               weight_decay=5e-4, mlperf_keys='ssd')
  opt.build(model.trainable_variables)
  step = tf.Variable(0, dtype=tf.int64)
  ds = tf.data.Dataset.from_tensors(synthetic_batch(batch)).repeat()
  iterator = iter(strategy.experimental_distribute_dataset(ds))
  loop = step_lib.make_train_loop(
      strategy=strategy, model=model, optimizer=opt,
      learning_rate=schedules.GoogleSsdV07(
          base=1e-3, warmup_epochs=1.0, boundary_epochs=(40, 50),
          global_batch_size=batch, steps_per_epoch=100, total_steps=10**6),
      task=_Task(), step=step)
  n = tf.constant(steps)
  return (lambda: float(loop(iterator, n))), model


def forward_flops(model, batch: int) -> int:
  """2 x multiply-adds of every convolution (the network is convolutions:
  the heads and extra layers included), from the traced shapes."""
  graph = tf.function(lambda x: model(x, training=False)).get_concrete_function(
      tf.TensorSpec([batch, 300, 300, 3], tf.float32)).graph
  total = 0
  for op in graph.get_operations():
    if op.type == 'Conv2D':
      out = op.outputs[0].shape
      kernel = op.inputs[1].shape
      total += 2 * out[0] * out[1] * out[2] * kernel[0] * kernel[1] * (
          kernel[2] * kernel[3])
  return total
