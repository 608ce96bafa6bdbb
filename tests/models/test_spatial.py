"""Spatial partitioning of ResNet: images split along their height over a
group of replicas give the whole images' logits and gradients."""

import numpy as np
import pytest
import tensorflow as tf

from distribution import strategy as strategies
from input_pipeline import spatial as spatial_input
from models.resnet import ResNet

BATCH = 8


def data(height=32):
  rng = np.random.default_rng(0)
  images = rng.standard_normal((BATCH, height, height, 3)).astype(np.float32)
  labels = rng.integers(0, 10, BATCH).astype(np.int32)

  def dataset_fn(ctx):
    return tf.data.Dataset.from_tensor_slices(
        {'image': images, 'label': labels}).batch(
            ctx.get_per_replica_batch_size(BATCH))
  return dataset_fn


def step(num_devices, partitions):
  """Logits of every replica and the summed gradients of one step."""
  devices = [d.name for d in tf.config.list_logical_devices('CPU')]
  strategy = strategies.mirrored(devices[:num_devices])
  with strategy.scope():
    # Statistics over the replicas that share images: the group, or each
    # replica alone without partitions.
    model = ResNet(depth=18, width_multiplier=0.25, num_classes=10,
                   bn_group_size=partitions, spatial_partitions=partitions)
  dataset_fn = data()
  if partitions > 1:
    dataset_fn = spatial_input.partitioned_dataset_fn(
        dataset_fn, partitions=partitions, feature='image')
  batch = next(iter(strategy.distribute_datasets_from_function(dataset_fn)))

  def replica(batch):
    ctx = tf.distribute.get_replica_context()
    with tf.GradientTape() as tape:
      logits, _ = model(batch['image'], training=True)
      # Each group member computes its group's loss: count it once.
      loss = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(
          labels=batch['label'], logits=logits)) / BATCH / partitions
    grads = tape.gradient(loss, model.trainable_variables)
    return logits, ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)

  logits, grads = tf.function(lambda b: strategy.run(replica, args=(b,)))(
      batch)
  return ([t.numpy() for t in strategy.experimental_local_results(logits)],
          [strategy.experimental_local_results(g)[0].numpy() for g in grads],
          model)


@pytest.mark.parametrize('num_devices,partitions', [
    pytest.param(4, 2, marks=pytest.mark.slow),  # Two groups of two.
    (4, 4),  # One group: members with neighbours on both sides.
])
def test_partitioned_resnet_equals_whole_images(num_devices, partitions):
  groups = num_devices // partitions
  whole_logits, whole_grads, model = step(groups, 1)
  split_logits, split_grads, _ = step(num_devices, partitions)
  for r, logits in enumerate(split_logits):  # Every member: its group's.
    np.testing.assert_allclose(logits, whole_logits[r // partitions],
                               rtol=1e-5, atol=1e-5)
  for var, whole, split in zip(model.trainable_variables, whole_grads,
                               split_grads):
    # Sums over slices and halos run in another order: float32 round-off.
    scale = np.abs(whole).max()
    np.testing.assert_allclose(split, whole, rtol=1e-3, atol=1e-4 * scale,
                               err_msg=var.name)


def test_bad_partition_counts_are_named():
  with pytest.raises(ValueError, match=r"SPATIAL_PARTITIONS \(4\) must divide "
                     r"the height of 'image' \(30"):
    spatial_input.partitioned_dataset_fn(
        data(30), partitions=4, feature='image')(
            tf.distribute.InputContext(1, 0, 4))
  with pytest.raises(ValueError, match=r'must divide the replicas each host '
                     r'feeds \(2\)'):
    spatial_input.partitioned_dataset_fn(
        data(), partitions=4, feature='image')(
            tf.distribute.InputContext(2, 0, 4))
  with pytest.raises(ValueError, match=r'bn_group_size \(1\) must be 0 or a '
                     r'multiple of SPATIAL_PARTITIONS \(2\)'):
    ResNet(depth=18, width_multiplier=0.25, bn_group_size=1,
           spatial_partitions=2)
