"""Spatial partitioning: each image split along its height over a group of
replicas, with halo rows exchanged before every window that crosses a cut.

The v0.7 pod runs split SSD's and Mask R-CNN's large images over 2-8 TPU
cores (the TPU input feed's `input_partition_dims`, XLA's spatial
partitioning). Here the same arithmetic is written out in the replica
context, so it runs on any tf.distribute strategy: groups of P consecutive
replicas share a set of images, replica q of a group holds rows
[q H/P, (q+1) H/P) of each, and before a k x k convolution or pooling window
each replica receives the rows its window reaches from its neighbours (the
halo), taken from a gather of the edge rows within its group (one
collective of P members, distribution/replica_groups.py, whatever the
replica count); outside the image the rows are the layer's own padding (zeros for a convolution, -inf for
max pooling), exactly what the whole image's padding gives. Batch-norm
statistics must span the group (bn_group_size a multiple of P). When a slice
can no longer be strided (its height is not a multiple of the stride), the
group gathers its slices into whole maps and continues unpartitioned: every
member then computes the same values (and the loss share counts each image
once per member, which share_of_global_mean's division by the group batch
makes right).

Uneven partitioning (a height P does not divide, or slices that should stay
strided deeper than an even split allows: 300 rows over 8 SSD partitions):
built with the image `height` and a `row_multiple`, each member holds h =
input_pipeline.spatial.slice_rows(height, P, row_multiple) rows of the
image padded below with zeros, P h >= height. At a map whose slices have r
rows the whole map has ceil(height r / h) valid rows (every stride so far
divided the slices evenly, and ceil(ceil(a / b) / c) = ceil(a / bc)); the
rows past them are masked to zero after every layer that could make them
non-zero (the whole image's padding for the next window), batch-norm
statistics count valid rows only, and gather_whole drops them. This is
what XLA's partitioner does with uneven shards, written out.
"""

import tensorflow as tf

from distribution import replica_groups
from input_pipeline import spatial as spatial_input
from models.common import layers


class SpatialPartitioning:
  """Halo exchange and group reductions for P-way height partitioning."""

  def __init__(self, partitions: int = 1, *, height: int = 0,
               row_multiple: int = 1):
    """Args:
      partitions: P, the members of a group.
      height: the whole image's height (0: the slices split it evenly, no
        padding rows).
      row_multiple: the input's slice rows are a multiple of this
        (input_pipeline.spatial.slice_rows).
    """
    if partitions < 1:
      raise ValueError(f'`spatial_partitions` must be >= 1, got {partitions}.')
    if row_multiple < 1:
      raise ValueError(f'`row_multiple` must be >= 1, got {row_multiple}.')
    self.partitions = partitions
    self.height, self.row_multiple = height, row_multiple
    self.slice_rows = (spatial_input.slice_rows(height, partitions,
                                                row_multiple)
                       if height and partitions > 1 else 0)
    # Whether the slices cover more rows than the image: masks needed.
    self.padded = (self.slice_rows > 0 and
                   partitions * self.slice_rows != height)

  def valid_rows(self, rows: int) -> int:
    """The whole map's valid rows where each slice has `rows` rows."""
    if not self.padded:
      return rows * self.partitions
    return -(-self.height * rows // self.slice_rows)

  def valid_fraction(self, rows: int) -> float:
    """Valid rows over all the group's rows, at slices of `rows` rows."""
    return self.valid_rows(rows) / (rows * self.partitions)

  def mask(self, x):
    """[1, rows, 1, 1] in x's dtype: 1 on this member's valid rows, 0 on the
    padding (None when nothing is padded)."""
    if not self.padded:
      return None
    _, _, position = self._context()
    rows = x.shape[1]
    first = tf.cast(position, tf.int32) * rows
    valid = first + tf.range(rows) < self.valid_rows(rows)
    return tf.reshape(tf.cast(valid, x.dtype), [1, rows, 1, 1])

  def masked(self, x):
    """x with its padding rows set to zero."""
    mask = self.mask(x)
    return x if mask is None else x * mask

  def _context(self):
    ctx = tf.distribute.get_replica_context()
    n = ctx.num_replicas_in_sync
    if n % self.partitions:
      raise ValueError(
          f'SPATIAL_PARTITIONS ({self.partitions}) must divide the number of '
          f'replicas ({n}).')
    replica = ctx.replica_id_in_sync_group
    return ctx, replica, replica % self.partitions

  def _members(self) -> replica_groups.ReplicaGroups:
    return replica_groups.consecutive(tf.distribute.get_strategy(),
                                      self.partitions)

  def halo(self, x, before: int, after: int, pad_value: float):
    """x [b, h, w, c] with `before` rows of the previous member and `after`
    rows of the next one (pad_value rows at the image's own edges)."""
    if not (before or after):
      return x
    _, _, position = self._context()
    # One gather a window: this member's bottom rows (for the next one)
    # and top rows (for the previous one) travel together.
    edges = self._members().gather(
        tf.concat([x[:, x.shape[1] - before:], x[:, :after]], axis=1))
    parts = [x]
    if before:
      rows = tf.gather(edges, tf.maximum(position - 1, 0))[:, :before]
      rows = tf.where(position > 0, rows,
                      tf.fill(tf.shape(rows), tf.cast(pad_value, x.dtype)))
      parts.insert(0, rows)
    if after:
      rows = tf.gather(edges, tf.minimum(position + 1,
                                         self.partitions - 1))[:, before:]
      rows = tf.where(position < self.partitions - 1, rows,
                      tf.fill(tf.shape(rows), tf.cast(pad_value, x.dtype)))
      parts.append(rows)
    return tf.concat(parts, axis=1)

  def can_split(self, x, stride: int) -> bool:
    """Whether x's slices can go through a window of this stride."""
    return x.shape[1] % stride == 0 and x.shape[1] >= stride

  def _group(self, t):
    """[P, ...]: `t` of every member of this replica's group, in order."""
    self._context()
    return self._members().gather(t)

  def gather_whole(self, x):
    """The group's slices stacked into whole maps (same on every member),
    without padding rows."""
    whole = tf.concat(tf.unstack(self._group(x), num=self.partitions), axis=1)
    return whole[:, :self.valid_rows(x.shape[1])] if self.padded else whole

  def window(self, x, k: int, stride: int, pad_beg: int, pad_value: float):
    """x with the halo a k-row window of this stride needs, to be applied
    with VALID padding in height: `pad_beg` rows before (the whole image's
    padding above row 0), and after as many as the last output row reaches
    past the slice."""
    after = max(0, k - 1 - pad_beg - (stride - 1))
    if max(pad_beg, after) > x.shape[1]:
      raise ValueError(
          f'A {k}x{k} window needs {max(pad_beg, after)} halo rows but the '
          f'slices have {x.shape[1]}: use fewer SPATIAL_PARTITIONS '
          f'({self.partitions}) or larger images.')
    return self.halo(x, pad_beg, after, pad_value)

  def share(self, t):
    """This member's share of [B, K, ...] t's K rows (K a multiple of P,
    static or not): member q takes rows [q K / P, (q + 1) K / P). The
    group's members hold the same t and each computes on its share: the
    stage-2 RoI dimension sharded over the group, as Google's `use_spmd`
    runs have XLA's partitioner do (models/maskrcnn/task.py)."""
    if self.partitions == 1:
      return t
    _, _, position = self._context()
    rows = t.shape[1]
    if rows is None:
      rows = tf.shape(t)[1]
    elif rows % self.partitions:
      raise ValueError(f'{rows} rows do not divide into SPATIAL_PARTITIONS '
                       f'({self.partitions}) equal shares.')
    dims = [d if d is not None else tf.shape(t)[i]
            for i, d in enumerate(t.shape)]
    parts = tf.reshape(t, [dims[0], self.partitions, rows // self.partitions,
                           *dims[2:]])
    return tf.gather(parts, position, axis=1)

  def group_sum(self, t):
    """t summed over the group (one all-reduce: every member receives the
    same sum)."""
    self._context()
    return self._members().sum(t)


def conv2d(x, kernel, stride: int, spatial: SpatialPartitioning):
  """models.common.layers.conv2d on a height slice: the same output rows as the
  whole image's convolution, for this slice."""
  k = kernel.shape[0]
  pad_beg = (k - 1) // 2
  pad_end = k - 1 - pad_beg
  x = spatial.window(x, k, stride, pad_beg, 0.0)
  if (k == 1 and stride > 1 and  # As models.common.layers.conv2d (oneDNN).
      kernel.shape[2] < layers.ONEDNN_STRIDED_1X1_SAFE):
    return tf.nn.conv2d(x[:, ::stride, ::stride, :], kernel, 1, 'VALID')
  x = tf.pad(x, [[0, 0], [0, 0], [pad_beg, pad_end], [0, 0]])
  return tf.nn.conv2d(x, kernel, stride, 'VALID')


def max_pool(x, k: int, stride: int, spatial: SpatialPartitioning):
  """tf.nn.max_pool2d(x, k, stride, 'SAME') on a height slice (slice height
  a multiple of the stride). SAME pads by the whole map's height, whose
  parity may differ from the slices' under uneven partitioning. Padding
  rows inside the slices count as zeros, which equals the -inf of SAME only
  for inputs >= 0 (after a ReLU, as in ResNet) whenever a window holds a
  valid row (always: output row i's window holds input row i x stride,
  valid for every valid output row)."""
  height = spatial.valid_rows(x.shape[1])
  pad_total = max((-(-height // stride) - 1) * stride + k - height, 0)
  pad_beg = pad_total // 2
  x = spatial.window(x, k, stride, pad_beg, float('-inf'))
  width = x.shape[2]
  w_total = max((-(-width // stride) - 1) * stride + k - width, 0)
  w_beg = w_total // 2
  x = tf.pad(x, [[0, 0], [0, 0], [w_beg, w_total - w_beg], [0, 0]],
             constant_values=float('-inf'))
  return tf.nn.max_pool2d(x, k, stride, 'VALID')
