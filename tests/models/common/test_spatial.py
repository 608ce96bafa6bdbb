"""Spatial partitioning of ResNet: images split along their height over a
group of replicas give the whole images' logits and gradients."""

import numpy as np
import pytest
import tensorflow as tf

from distribution import strategy as strategies
from input_pipeline import spatial as spatial_input
from models.common.resnet import ResNet

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


def step(num_devices, partitions, height=32):
  """Logits of every replica and the summed gradients of one step."""
  devices = [d.name for d in tf.config.list_logical_devices('CPU')]
  strategy = strategies.mirrored(devices[:num_devices])
  with strategy.scope():
    # Statistics over the replicas that share images: the group, or each
    # replica alone without partitions.
    # Depth 10: every layer kind of a ResNet (stem, pool, strided and
    # projection blocks) in half of depth 18's tracing time.
    model = ResNet(depth=10, width_multiplier=0.25, num_classes=10,
                   bn_group_size=partitions, spatial_partitions=partitions,
                   spatial_height=height)
  dataset_fn = data(height)
  if partitions > 1:
    dataset_fn = spatial_input.partitioned_dataset_fn(
        dataset_fn, partitions=partitions, feature='image', row_multiple=1)
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


# Two groups of 2: halos and batch-norm statistics through group collectives
# (distribution/replica_groups.py), gradients included. One group of 4 on
# 30 rows: uneven slices of 8 (32, padded below) with 15, 8 and 4 valid rows
# after the stem, the pool and stage 2 (an odd height at the pool: SAME
# pads it 1 row above), then gathered. (Members with neighbours on both
# sides, even: SSD's test, tests/models/ssd/test_spatial.py; one group of 2
# across two processes: the slow test at the end.)
@pytest.mark.parametrize('num_devices,partitions,height', [(4, 2, 32),
                                                           (4, 4, 30)])
def test_partitioned_resnet_equals_whole_images(num_devices, partitions,
                                                height):
  groups = num_devices // partitions
  whole_logits, whole_grads, model = step(groups, 1, height)
  split_logits, split_grads, split_model = step(num_devices, partitions,
                                                height)
  assert split_model.spatial.padded == (height == 30)
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
  with pytest.raises(ValueError, match=r'SPATIAL_PARTITIONS \(4\) and the '
                     r'replicas each host feeds \(3\) must divide one another'):
    spatial_input.partitioned_dataset_fn(
        data(), partitions=4, feature='image')(
            tf.distribute.InputContext(2, 0, 6))
  with pytest.raises(ValueError, match=r'bn_group_size \(1\) must be 0 or a '
                     r'multiple of SPATIAL_PARTITIONS \(2\)'):
    ResNet(depth=18, width_multiplier=0.25, bn_group_size=1,
           spatial_partitions=2)


def test_each_member_of_a_group_takes_its_share_of_the_rows():
  from models.common import spatial as spatial_lib
  devices = [d.name for d in tf.config.list_logical_devices('CPU')]
  strategy = strategies.mirrored(devices[:4])
  group = spatial_lib.SpatialPartitioning(2)
  t = tf.reshape(tf.range(2 * 6 * 3), [2, 6, 3])

  def replica(rows):
    # rows: a dynamic row count (the mask head's RoIs off a TPU).
    dynamic = t[:, :rows]
    assert group.share(t).shape.as_list() == [2, 3, 3]  # Static stays so.
    assert group.share(dynamic).shape.as_list() == [2, None, 3]
    return group.share(t), group.share(dynamic)

  static, dynamic = strategy.run(
      tf.function(replica, autograph=False,
                  input_signature=[tf.TensorSpec([], tf.int32)]),
      args=(tf.constant(4),))
  static = strategy.experimental_local_results(static)
  dynamic = strategy.experimental_local_results(dynamic)
  # Replicas 0, 1 form one group and 2, 3 the other: position 0 takes the
  # first half of the rows, position 1 the second, in both groups.
  for replica_id in range(4):
    half = replica_id % 2
    np.testing.assert_array_equal(static[replica_id],
                                  t[:, 3 * half:3 * half + 3])
    np.testing.assert_array_equal(dynamic[replica_id],
                                  t[:, 2 * half:2 * half + 2])
  with pytest.raises(ValueError, match=r'5 rows do not divide into '
                     r'SPATIAL_PARTITIONS \(2\) equal shares'):
    strategy.run(lambda: group.share(t[:, :5]))


def test_uneven_slices_pad_the_image_below_and_count_valid_rows():
  from models.common import spatial as spatial_lib
  # Google's SSD pod split: 300 rows over 8 cores, slices a multiple of 8
  # rows (SSD's backbone stride), so the whole backbone runs on slices.
  assert spatial_input.slice_rows(300, 8, 8) == 40
  pod = spatial_lib.SpatialPartitioning(8, height=300, row_multiple=8)
  assert pod.padded
  assert [pod.valid_rows(r) for r in (40, 20, 10, 5)] == [300, 150, 75, 38]
  # Even splits stay as they were: no padding.
  assert spatial_input.slice_rows(32, 2) == 16
  assert not spatial_lib.SpatialPartitioning(2, height=32).padded
  assert not spatial_lib.SpatialPartitioning(1, height=150,
                                             row_multiple=8).padded
  whole = next(iter(data(30)(tf.distribute.InputContext(1, 0, 1))))
  slices = list(spatial_input.partitioned_dataset_fn(
      data(30), partitions=4, feature='image', row_multiple=1)(
          tf.distribute.InputContext(1, 0, 4)).take(4))
  stacked = np.concatenate([s['image'] for s in slices], axis=1)
  assert stacked.shape[1] == 32
  np.testing.assert_array_equal(stacked[:, :30], whole['image'])
  assert not stacked[:, 30:].any()


def test_a_group_across_two_hosts_reads_the_same_images_in_halves():
  # Two pipelines of one replica each form one group of 2.
  whole = next(iter(data()(tf.distribute.InputContext(1, 0, 1))))
  halves = [next(iter(spatial_input.partitioned_dataset_fn(
      data(), partitions=2, feature='image')(
          tf.distribute.InputContext(2, host, 2)))) for host in range(2)]
  for host, half in enumerate(halves):
    np.testing.assert_array_equal(
        half['image'], whole['image'][:, host * 16:(host + 1) * 16])
    np.testing.assert_array_equal(half['label'], whole['label'])


@pytest.mark.slow
def test_two_worker_processes_split_images_like_one_whole_replica(
    quickstart_data, tmp_path):
  from tests import helpers
  # One group of 2 across the 2 processes against whole images on one
  # replica: the same examples, batch-norm statistics and updates.
  helpers.run_worker_processes(
      ['tests.multi_worker_main', quickstart_data, str(tmp_path / 'split'),
       'gin/resnet_quickstart.gin', 'SPATIAL_PARTITIONS=2', 'TRAIN_STEPS=4',
       'EVAL_EVERY_STEPS=4'], tmp_path)
  whole = helpers.run_quick(quickstart_data, str(tmp_path / 'whole'),
                            TRAIN_STEPS=4, CHECKPOINT_EVERY_STEPS=2,
                            EVAL_BATCH_SIZE=50)
  expected = helpers.weights(whole.model)
  for i in range(2):
    split = np.load(tmp_path / f'w{i}.npz')
    for k, v in expected.items():
      np.testing.assert_allclose(split[k.replace('/', '.')], v, rtol=1e-4,
                                 atol=1e-5, err_msg=f'worker {i} {k}')
