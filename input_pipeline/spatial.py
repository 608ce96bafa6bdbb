"""Feeds spatially partitioned training (models/common/spatial.py): each replica
of a group of P gets its own height slice of the group's images.

The analogue of the TPU input feed's `input_partition_dims`: the task's pipeline
makes batches for N/P data-parallel groups, and each batch becomes P consecutive
elements, slice q holding rows [q h, (q+1) h) of the spatial feature (other
features whole), h = slice_rows(H, P, m). When P h > H the image is padded below
with zero rows (uneven partitioning, what XLA's partitioner does for a height
that does not divide: the model masks those rows, models/common/spatial.py);
only a task that declares `spatial_row_multiple` accepts that padding.
tf.distribute hands a pipeline's consecutive elements to consecutive replicas,
so replica r gets slice r % P. A group may also span hosts (P a multiple of the
replicas a host feeds): its hosts read the same images and each emits its own
replicas' slices.
"""

from typing import Callable

import tensorflow as tf

from input_pipeline import records


def slice_rows(height: int, partitions: int, row_multiple: int = 1) -> int:
  """Rows of each partition's slice: ceil(height / partitions) rounded up to
  a multiple of `row_multiple` (the strides a model wants to run on slices:
  SSD's backbone, 8). Equal to height / partitions when that divides and is
  a multiple already; otherwise the slices cover more than the image."""
  rows = -(-height // partitions)
  return -(-rows // row_multiple) * row_multiple


def partitioned_dataset_fn(dataset_fn: Callable, *, partitions: int,
                           feature: str,
                           row_multiple: int | None = None) -> Callable:
  """Wraps `dataset_fn(input_context)` for `partitions`-way height slices.

  Args:
    row_multiple: None: the height must divide by `partitions` (a model that
      cannot mask padding rows); else the slices have slice_rows(height,
      partitions, row_multiple) rows and the image is padded below with zero
      rows to cover them.

  Raises (when called):
    ValueError: if the feature's height does not divide by `partitions` and
      `row_multiple` is None, or `partitions` and the replicas of one
      pipeline do not divide one another.
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
    if height is None or (height % partitions and row_multiple is None):
      raise ValueError(
          f'SPATIAL_PARTITIONS ({partitions}) must divide the height of '
          f'{feature!r} ({height}, shape {spec.shape}): choose a partition '
          'count that divides the image size.')
    rows = slice_rows(height, partitions, row_multiple or 1)
    padding = partitions * rows - height

    @records.no_autograph
    def slices(batch):
      image = batch[feature]
      if padding:
        image = tf.pad(image, [[0, 0], [0, padding]] +
                       [[0, 0]] * (len(image.shape) - 2))
      split = tf.reshape(image, [-1, partitions, rows, *image.shape[2:]])
      return tf.data.Dataset.range(first, first + mine).map(
          records.no_autograph(
              lambda q: {**batch, feature: tf.gather(split, q, axis=1)}))

    return dataset.flat_map(slices)

  return wrapped
