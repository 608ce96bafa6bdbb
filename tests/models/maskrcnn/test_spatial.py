"""Spatial partitioning of Mask R-CNN: the flat image's pixel axis split
over a group of replicas (bands of rows in either orientation) gives the
whole images' losses and gradients. The backbone runs on the slices while
they can be strided, each stage's map is gathered whole for the FPN, every
member computes the RPN and the RoIs, and each computes the second stage
on its share of them (models/maskrcnn/task.py)."""

import numpy as np
import pytest
import tensorflow as tf

from distribution import strategy as strategies
from input_pipeline import fpn_anchors
from input_pipeline import maskrcnn as input_lib
from input_pipeline import spatial as spatial_input
from models.maskrcnn import model as maskrcnn_lib
from models.maskrcnn import task as maskrcnn_task

GEOMETRY = input_lib.Geometry(
    image_size=(64, 128), short_side=64, long_side_max=128, gt_mask_size=12,
    max_instances=4, anchors=fpn_anchors.AnchorConfig(anchor_scale=4.0))
SETTINGS = maskrcnn_task.Settings(rpn_pre_nms_topn=100, rpn_post_nms_topn=50,
                                  batch_size_per_im=32)


def examples(batch, landscape):
  """Prepared training examples of random images and boxes."""
  rng = np.random.default_rng(1)
  anchors = (GEOMETRY.anchors_for(True), GEOMETRY.anchors_for(False))
  shape = (48, 96) if landscape else (96, 48)
  out = []
  for i in range(batch):
    yx = rng.uniform(0, 0.6, (3, 2))
    boxes = np.concatenate([yx, yx + rng.uniform(0.1, 0.4, (3, 2))], 1)
    out.append(input_lib.train_example(
        tf.constant(rng.integers(0, 256, shape + (3,), np.uint8)),
        tf.constant(boxes, tf.float32), tf.constant([1, 2, 3]),
        tf.constant((rng.uniform(size=(3,) + shape) > 0.5), tf.float32),
        tf.constant([5, i], tf.int64), geometry=GEOMETRY, anchors=anchors))
  return {k: np.stack([e[k].numpy() for e in out]) for k in out[0]}


def step(num_devices, partitions, batch, landscape):
  """Each replica's loss share and the gradients summed over replicas."""
  devices = [d.name for d in tf.config.list_logical_devices('CPU')]
  strategy = strategies.mirrored(devices[:num_devices])
  data = input_lib.MaskRcnnInput(geometry=GEOMETRY, synthetic=True)
  task = maskrcnn_task.MaskRcnnTask(
      model=lambda **kw: maskrcnn_lib.MaskRCNN(
          depth=10, width_multiplier=0.125, fpn_channels=16, mlp_head_dim=32,
          frozen=(), frozen_batch_norm=False, bn_group_size=partitions,
          spatial_partitions=partitions, seed=3, **kw),
      data=data, settings=SETTINGS, metric_processes=0)
  with strategy.scope():
    model = task.build_model()
  element = examples(batch, landscape)

  def dataset_fn(ctx):
    return tf.data.Dataset.from_tensor_slices(element).batch(
        ctx.get_per_replica_batch_size(batch), drop_remainder=True)
  if partitions > 1:
    dataset_fn = spatial_input.partitioned_dataset_fn(
        dataset_fn, partitions=partitions, feature='image')
  inputs = next(iter(strategy.distribute_datasets_from_function(dataset_fn)))

  def replica(b):
    ctx = tf.distribute.get_replica_context()
    with tf.GradientTape() as tape:
      share, _ = task.loss_share(model, b)
    grads = tape.gradient(share.value, model.trainable_variables)
    return share.value, ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)

  shares, grads = tf.function(
      lambda b: strategy.run(replica, args=(b,)), autograph=False)(inputs)
  shares = strategy.experimental_local_results(shares)
  grads = [strategy.experimental_local_results(g)[0] for g in grads]
  return [float(s) for s in shares], [g.numpy() for g in grads]


# Slow (about 85 s alone on 2 cores): four traces of Mask R-CNN's training
# graph, the whole image's and the partitioned one's, each of both
# orientations.
@pytest.mark.slow
def test_partitioned_images_give_the_whole_images_loss_and_gradients():
  # Portrait images: under MirroredStrategy both orientations' graphs run
  # (collectives cannot sit in a tf.cond) and the second is selected.
  whole_shares, whole_grads = step(1, 1, 2, landscape=False)
  shares, grads = step(2, 2, 2, landscape=False)
  # Both members of the group compute the first stage of the same images
  # and each the second stage of its half of the RoIs: the shares add up to
  # the one replica's and differ (the RoI dimension is sharded).
  np.testing.assert_allclose(sum(shares), whole_shares[0], rtol=2e-5)
  assert abs(shares[0] - shares[1]) > 1e-3 * whole_shares[0]
  assert len(grads) == len(whole_grads)
  # Each gradient within 1% of its norm: the halo exchange sums in another
  # order, and at random initialisation RPN scores nearly tie, so a
  # proposal may rank otherwise and move a RoI (0.5% on a few entries seen).
  # A wrong halo or a slice counted twice is off by far more.
  for got, want in zip(grads, whole_grads):
    assert np.linalg.norm(got - want) <= 1e-2 * np.linalg.norm(want) + 1e-6


def test_a_partition_count_that_does_not_divide_the_height_is_named():
  data = input_lib.MaskRcnnInput(geometry=GEOMETRY, synthetic=True)
  task = maskrcnn_task.MaskRcnnTask(
      model=lambda **kw: maskrcnn_lib.MaskRCNN(
          depth=10, width_multiplier=0.125, fpn_channels=16, mlp_head_dim=32,
          spatial_partitions=3, bn_group_size=3, **kw),
      data=data, metric_processes=0)
  with pytest.raises(ValueError, match=r'SPATIAL_PARTITIONS 3 does not '
                     r'divide the Mask R-CNN input height 64'):
    task.build_model()
