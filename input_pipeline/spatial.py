"""Feeds spatially partitioned training (models/spatial.py): each replica of
a group of P gets its own height slice of the group's images.

The analogue of the TPU input feed's `input_partition_dims`: the task's
pipeline makes batches for N/P data-parallel groups, and each batch becomes
P consecutive elements, slice q holding rows [q H/P, (q+1) H/P) of the
spatial feature (other features whole). tf.distribute hands a pipeline's
consecutive elements to consecutive replicas, so replica r gets slice r % P.
A group may also span hosts (P a multiple of the replicas a host feeds):
its hosts read the same images and each emits its own replicas' slices.
"""

from typing import Callable

import tensorflow as tf


def partitioned_dataset_fn(dataset_fn: Callable, *, partitions: int,
                           feature: str) -> Callable:
  """Wraps `dataset_fn(input_context)` for `partitions`-way height slices.

  Raises (when called):
    ValueError: if the feature's height does not divide by `partitions`,
      or `partitions` and the replicas of one pipeline do not divide one
      another.
  """

  def wrapped(ctx: tf.distribute.InputContext):
    local = ctx.num_replicas_in_sync // ctx.num_input_pipelines
    if local % partitions == 0:  # Whole groups on each host.
      share, first = 1, 0
    elif partitions % local == 0:
      # A group spans `share` hosts (one GPU or CPU a host): they read the
      # same images (a deterministic input) and each feeds its own slices.
      share = partitions // local
      first = (ctx.input_pipeline_id % share) * local
    else:
      raise ValueError(
          f'SPATIAL_PARTITIONS ({partitions}) and the replicas each host '
          f'feeds ({local}) must divide one another: a group shares its '
          'images.')
    groups = tf.distribute.InputContext(
        ctx.num_input_pipelines // share, ctx.input_pipeline_id // share,
        ctx.num_replicas_in_sync // partitions)
    dataset = dataset_fn(groups)
    mine = min(local, partitions)
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
      return tf.data.Dataset.range(first, first + mine).map(
          lambda q: {**batch, feature: tf.gather(split, q, axis=1)})

    return dataset.flat_map(slices)

  return wrapped
