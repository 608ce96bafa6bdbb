"""Feeds spatially partitioned training (models/spatial.py): each replica of
a group of P gets its own height slice of the group's images.

The analogue of the TPU input feed's `input_partition_dims`: the task's
pipeline makes batches for N/P data-parallel groups, and each batch becomes
P consecutive elements, slice q holding rows [q H/P, (q+1) H/P) of the
spatial feature (other features whole). tf.distribute hands a pipeline's
consecutive elements to consecutive replicas, so replica r gets slice r % P.
"""

from typing import Callable

import tensorflow as tf


def partitioned_dataset_fn(dataset_fn: Callable, *, partitions: int,
                           feature: str) -> Callable:
  """Wraps `dataset_fn(input_context)` for `partitions`-way height slices.

  Raises (when called):
    ValueError: if the feature's height does not divide by `partitions`,
      or the replicas of one pipeline do not make whole groups.
  """

  def wrapped(ctx: tf.distribute.InputContext):
    local = ctx.num_replicas_in_sync // ctx.num_input_pipelines
    if local % partitions:
      raise ValueError(
          f'SPATIAL_PARTITIONS ({partitions}) must divide the replicas each '
          f'host feeds ({local}): a group shares its images.')
    groups = tf.distribute.InputContext(
        ctx.num_input_pipelines, ctx.input_pipeline_id,
        ctx.num_replicas_in_sync // partitions)
    dataset = dataset_fn(groups)
    spec = dataset.element_spec[feature]
    height = spec.shape[1]
    if height is None or height % partitions:
      raise ValueError(
          f'SPATIAL_PARTITIONS ({partitions}) must divide the height of '
          f'{feature!r} ({height}, shape {spec.shape}): choose a partition '
          'count that divides the image size.')
    rows = height // partitions

    def slices(batch):
      image = batch[feature]
      split = tf.reshape(image, [-1, partitions, rows, *image.shape[2:]])
      return tf.data.Dataset.range(partitions).map(
          lambda q: {**batch, feature: tf.gather(split, q, axis=1)})

    return dataset.flat_map(slices)

  return wrapped
