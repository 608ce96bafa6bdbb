"""Spatial partitioning of SSD: images split along their height over a
group of replicas give the whole images' predictions, loss and gradients.

The slices go through the network while they can be strided, then the
group gathers the map and every member computes the rest
(models/common/spatial.py). At 300x300 that is the stem with 2 partitions (150
rows) and the stem, max pool and first stage with 3 (100, 50, 25 rows). The
test uses the quickstart's 160x160 images (five maps, 20 to 1), where 2
partitions run the whole backbone on slices (80, 40, 20, 10 rows), and
150x150 images over 4 partitions: uneven slices of 40 rows (160, padded
below), 150, 75, 38 and 19 of them valid at each stride, as 300x300 over 8
(slices of 40, 300 valid) in Google's pod runs."""

import functools

import numpy as np
import pytest
import tensorflow as tf

from distribution import strategy as strategies
from input_pipeline import spatial as spatial_input
from input_pipeline import ssd_boxes
from models.ssd import model as ssd_lib
from models.ssd import features as ssd_features
from models.ssd import task as ssd_task
from training import losses

RESNET10 = functools.partial(ssd_features.ResNetFeatures, depth=10)


def geometry(size):
  return ssd_boxes.Geometry(image_size=size, feature_sizes=(-(-size // 8),),
                            steps=(8,), scales=(16, 32), aspect_ratios=((2,),))


def data(batch, size):
  rng = np.random.default_rng(0)
  anchors = ssd_boxes.default_boxes(geometry(size))
  images = rng.uniform(0, 1, (batch, size, size, 3)).astype(np.float32)
  targets = []
  for i in range(batch):
    yx = rng.uniform(0, 0.6, (2, 2))
    gt = np.concatenate([yx, yx + rng.uniform(0.1, 0.4, (2, 2))], 1)
    targets.append([t.numpy() for t in ssd_boxes.assign_targets(
        tf.constant(gt, tf.float32), tf.constant([1 + i % 4, 2], tf.int32),
        tf.constant(anchors))])
  classes, boxes, matched = (np.stack(t) for t in zip(*targets))

  def dataset_fn(ctx):
    return tf.data.Dataset.from_tensor_slices(
        {'image': images, 'classes': classes, 'boxes': boxes,
         'num_matched': matched}).batch(ctx.get_per_replica_batch_size(batch))
  return dataset_fn


def step(num_devices, partitions, batch, size):
  """Every replica's class logits, its loss share, and the summed
  gradients of one step."""
  devices = [d.name for d in tf.config.list_logical_devices('CPU')]
  strategy = strategies.mirrored(devices[:num_devices])
  with strategy.scope():
    model = ssd_lib.SSD(num_classes=5, width_multiplier=0.125,
                        features=RESNET10, geometry=geometry(size),
                        bn_group_size=partitions,
                        spatial_partitions=partitions, seed=4)
  dataset_fn = data(batch, size)
  if partitions > 1:
    dataset_fn = spatial_input.partitioned_dataset_fn(
        dataset_fn, partitions=partitions, feature='image',
        row_multiple=model.spatial.row_multiple)
  inputs = next(iter(strategy.distribute_datasets_from_function(dataset_fn)))

  def replica(b):
    ctx = tf.distribute.get_replica_context()
    with tf.GradientTape() as tape:
      logits, codes, _ = model(model.normalize(b['image']), training=True)
      per_image = ssd_task.detection_loss(logits, codes, b['classes'],
                                          b['boxes'], b['num_matched'])
      share = losses.share_of_global_mean(per_image)
    grads = tape.gradient(share.value, model.trainable_variables)
    return logits, share.value, ctx.all_reduce(tf.distribute.ReduceOp.SUM,
                                               grads)

  logits, shares, grads = tf.function(
      lambda b: strategy.run(replica, args=(b,)), autograph=False)(inputs)
  local = strategy.experimental_local_results
  return ([t.numpy() for t in local(logits)],
          sum(float(s) for s in local(shares)),
          [local(g)[0].numpy() for g in grads], model)


# One group of 2, even; one group of 4 (members with neighbours on both
# sides), uneven. (Two groups over 4 replicas, halos and batch norm through
# group collectives: ResNet's test, tests/models/common/test_spatial.py.) A
# ResNet-10 backbone: the same strides and maps as ResNet-34's, a quarter of
# the layers to trace. Slow (15 and 25 s alone: SSD traced for every
# replica and for the whole images).
@pytest.mark.slow
@pytest.mark.parametrize('num_devices,partitions,size', [(2, 2, 160),
                                                         (4, 4, 150)])
def test_partitioned_ssd_equals_whole_images(num_devices, partitions, size):
  groups = num_devices // partitions
  batch = 2 * groups
  whole_logits, whole_loss, whole_grads, model = step(groups, 1, batch, size)
  split_logits, split_loss, split_grads, split_model = step(
      num_devices, partitions, batch, size)
  assert split_model.spatial.padded == (size == 150)
  for r, logits in enumerate(split_logits):  # Every member: its group's.
    np.testing.assert_allclose(logits, whole_logits[r // partitions],
                               rtol=1e-4, atol=1e-4)
  # The global mean over images, each image counted once.
  np.testing.assert_allclose(split_loss, whole_loss, rtol=1e-5)
  for var, whole, split in zip(model.trainable_variables, whole_grads,
                               split_grads):
    scale = np.abs(whole).max()
    # Sums over slices, halos and 8,732 boxes run in another order:
    # float32 round-off.
    np.testing.assert_allclose(split, whole, rtol=1e-3, atol=5e-4 * scale,
                               err_msg=var.name)
