"""How a step's gradients are summed over the replicas: clipping before or
after the sum, the all-reduce's precision and packing, and the two-level sum
(distribution/two_level_sum.py). Sparse embedding gradients stay sparse.
"""

import dataclasses

import tensorflow as tf

from distribution import two_level_sum

ALLREDUCE_DTYPES = {'float32': tf.float32, 'bfloat16': tf.bfloat16}


@dataclasses.dataclass(frozen=True)
class GradientOptions:
  """How gradients are clipped and all-reduced (gin:
  `distribution.plan.PlanOptions.gradients`).

  Attributes:
    clip_norm: clip to this global norm (0: no clipping).
    clip_before_allreduce: clip each replica's own gradients before the
      all-reduce (MLPerf BERT v0.7 clips per core) instead of the reduced ones
      (later rules).
    allreduce_dtype: 'float32' or 'bfloat16' gradients in the all-reduce.
    bytes_per_pack: all-reduce the gradients in packs of about this many
      bytes (0: TensorFlow's default, which on MirroredStrategy is one pack
      for all of them).
    two_level_group_size: sum the gradients in two phases, within groups of
      this many consecutive replicas (a host's devices, a torus row), then
      across the groups (distribution/two_level_sum.py); 0: one all-reduce
      over all replicas.
  """
  clip_norm: float = 0.0
  clip_before_allreduce: bool = False
  allreduce_dtype: str = 'float32'
  bytes_per_pack: int = 0
  two_level_group_size: int = 0

  def __post_init__(self):
    if self.allreduce_dtype not in ALLREDUCE_DTYPES:
      raise ValueError(f'`allreduce_dtype` must be one of '
                       f'{sorted(ALLREDUCE_DTYPES)}, got '
                       f'{self.allreduce_dtype!r}.')
    if self.clip_norm < 0:
      raise ValueError(f'`clip_norm` must be >= 0, got {self.clip_norm}.')
    if self.bytes_per_pack < 0:
      raise ValueError(f'`bytes_per_pack` must be >= 0, got '
                       f'{self.bytes_per_pack}.')
    if self.two_level_group_size < 0:
      raise ValueError(f'`two_level_group_size` must be >= 0, got '
                       f'{self.two_level_group_size}.')

  def summation(self, strategy):
    """The two-level sum over `strategy`'s replicas, or None for one
    all-reduce; raises ValueError for a group size that makes no grid."""
    if not self.two_level_group_size:
      return None
    return two_level_sum.TwoLevelSum(strategy, self.two_level_group_size,
                                     bytes_per_pack=self.bytes_per_pack)


def all_reduce_gradients(grads, *, options: GradientOptions,
                         replica_factor: float, summation=None):
  """Sums gradients of the loss shares over replicas, clipping before or after.

  Args:
    grads: this replica's gradients of its loss share.
    options: clipping and all-reduce precision.
    replica_factor: share x replica_factor is the replica's own mean loss
      (training/losses.py); clipping before the all-reduce clips that.
    summation: a two-level sum (options.summation) instead of the strategy's
      all-reduce.
  """
  ctx = tf.distribute.get_replica_context()
  sparse = [isinstance(g, tf.IndexedSlices) for g in grads]
  if options.clip_norm or not any(sparse):
    # Embedding lookups give IndexedSlices (the rows a batch touched). A
    # clip's norm needs their repeats summed: clipped gradients are dense.
    return _all_reduce_dense([tf.convert_to_tensor(g) for g in grads],
                             options=options, replica_factor=replica_factor,
                             summation=summation)
  # Sparse gradients stay sparse: their all-reduce gathers every replica's
  # rows and values (bytes in proportion to batch x width, not to the
  # table), and the optimizer updates those rows (Optimizer.update_sparse).
  dense = _all_reduce_dense([g for g, s in zip(grads, sparse) if not s],
                            options=options, replica_factor=replica_factor,
                            summation=summation) if not all(sparse) else []
  dtype = ALLREDUCE_DTYPES[options.allreduce_dtype]
  rows = [tf.IndexedSlices(tf.cast(g.values, dtype), g.indices, g.dense_shape)
          for g, s in zip(grads, sparse) if s]
  if ctx.num_replicas_in_sync > 1:
    rows = ctx.all_reduce(tf.distribute.ReduceOp.SUM, rows)
  rows = [tf.IndexedSlices(tf.cast(g.values, tf.float32), g.indices,
                           g.dense_shape) for g in rows]
  dense, rows = iter(dense), iter(rows)
  return [next(rows) if s else next(dense) for s in sparse]


def _all_reduce_dense(grads, *, options, replica_factor, summation):
  if not grads:
    return []
  ctx = tf.distribute.get_replica_context()
  if options.clip_norm and options.clip_before_allreduce:
    grads, _ = tf.clip_by_global_norm([g * replica_factor for g in grads],
                                      options.clip_norm)
    grads = [g / replica_factor for g in grads]
  dtype = ALLREDUCE_DTYPES[options.allreduce_dtype]
  packing = tf.distribute.experimental.CommunicationOptions(
      bytes_per_pack=options.bytes_per_pack)

  def total(values):
    if summation is not None:
      return summation(values)
    if ctx.num_replicas_in_sync == 1:  # Nothing to sum (and no merge call).
      return values
    return ctx.all_reduce(tf.distribute.ReduceOp.SUM, values, options=packing)

  if dtype != tf.float32:
    grads = [tf.cast(g, tf.float32)
             for g in total([tf.cast(g, dtype) for g in grads])]
  else:
    grads = total(grads)
  if options.clip_norm and not options.clip_before_allreduce:
    grads, _ = tf.clip_by_global_norm(grads, options.clip_norm)
  return grads
