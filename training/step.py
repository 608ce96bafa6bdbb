"""The replica step and the device loops (train and eval) as tf.functions.

One call of a loop runs `num_steps` steps on the devices: the host talks to the
devices once per loop (TPUEstimator's iterations_per_loop, Orbit's
steps_per_loop). Calling a loop with 0 steps builds and compiles it without
changing any state, which is how the runtime compiles before run_start.
"""

import dataclasses

import tensorflow as tf

from distribution import strategy as strategies
from distribution import two_level_sum
from training import losses
from training import weight_update_sharding as wus

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


def l2_loss(variables, decays) -> tf.Tensor:
  """0.5 * sum of squares over the variables that take weight decay."""
  terms = [tf.nn.l2_loss(v) for v, decay in zip(variables, decays) if decay]
  return tf.add_n(terms) if terms else tf.constant(0.0)


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


def make_train_loop(*, strategy, model, optimizer, learning_rate, task,
                    step: tf.Variable,
                    gradients: GradientOptions = GradientOptions(),
                    weight_update_sharding: bool = False,
                    replicas_in_batch: int = 1, local_variables=()):
  """Returns train_loop(iterator, num_steps) -> mean loss over the steps.

  The loss reported is the replicas' own mean losses averaged (share x
  replica_factor, averaged): the global mean for `share_of_global_mean`,
  the mean of replica means for the other two normalisations. With
  `weight_update_sharding` each replica updates its shard of every weight
  (training/weight_update_sharding.py; slots built with its make_slot).
  `replicas_in_batch` > 1: one replica's batch stacks that many
  data-parallel replicas' batches (a mesh's batch shards), each normalised
  as its own replica (training/losses.py). `local_variables`: variables
  each replica holds its own part of (sharded embedding tables:
  distribution/embedding_tables.py) whose gradient is complete on its
  replica; each replica applies it to its own copy, with no all-reduce.
  """
  variables = list(model.trainable_variables)
  local_variables = list(local_variables)
  slots = optimizer.slots_for(variables)
  decays = [optimizer.takes_decay(v) for v in variables]
  state_names = sorted(model.state)
  weight_decay = optimizer.loss_weight_decay()
  summation = gradients.summation(strategy)

  def assign(distribution, targets, values):
    for var, value in zip(targets, values):
      distribution.extended.update(var, lambda v, x: v.assign(x),
                                   args=(value,), group=False)

  def apply_updates(distribution, grads, state_values):
    lr = learning_rate(step)
    for var, var_slots, grad, decay in zip(variables, slots, grads, decays):
      rule = (optimizer.update_sparse if isinstance(grad, tf.IndexedSlices)
              else optimizer.update)
      distribution.extended.update(var, rule,
                                   args=(grad, var_slots, lr, step),
                                   kwargs={'decay': decay}, group=False)
    assign(distribution, [model.state[n] for n in state_names], state_values)
    step.assign_add(1)

  def assign_updates(distribution, new_values, state_values):
    # Weight-update sharding: every replica holds the gathered new weights.
    assign(distribution, variables, new_values)
    assign(distribution, [model.state[n] for n in state_names], state_values)
    step.assign_add(1)

  # Traced as the Python it is: AutoGraph converts only the loops below, not
  # every function a step calls (the task's model, loss and eval, the
  # optimizer, the all-reduce), which cost more than the rest of tracing
  # (docs/benchmarks.md, "Start-up"). Their loops are tf.while_loop already.
  @tf.autograph.experimental.do_not_convert
  def replica_step(batch):
    ctx = tf.distribute.get_replica_context()
    with tf.GradientTape() as tape:
      if local_variables:
        tape.watch(local_variables)
      with losses.replicas_in_batch(replicas_in_batch):
        share, state_updates = task.loss_share(model, batch)
      loss = share.value
      if weight_decay:
        loss += (weight_decay * l2_loss(variables, decays) /
                 ctx.num_replicas_in_sync)
    all_grads = tape.gradient(loss, variables + local_variables)
    grads = all_reduce_gradients(all_grads[:len(variables)],
                                 options=gradients,
                                 replica_factor=share.replica_factor,
                                 summation=summation)
    lr = learning_rate(step)
    for var, grad in zip(local_variables, all_grads[len(variables):]):
      # A replica's own copy (its shard): its rows, for every replica's batch.
      optimizer.update_sparse(var, grad, (), lr, step, decay=False)
    state_values = [state_updates[n] for n in state_names]
    if state_values:
      state_values = ctx.all_reduce(tf.distribute.ReduceOp.MEAN, state_values)
    if weight_update_sharding:
      # Each replica updates a slice of every weight: dense gradients.
      grads = [tf.convert_to_tensor(g) for g in grads]
      new_values = wus.sharded_updates(
          strategy=strategy, optimizer=optimizer, variables=variables,
          slots=slots, grads=grads, decays=decays, lr=learning_rate(step),
          step=step)
      ctx.merge_call(assign_updates, args=(new_values, state_values))
    else:
      ctx.merge_call(apply_updates, args=(grads, state_values))
    return share.value * share.replica_factor / ctx.num_replicas_in_sync

  @tf.function
  def train_loop(iterator, num_steps):
    total = tf.constant(0.0)
    for _ in tf.range(num_steps):
      per_replica = strategy.run(replica_step, args=(next(iterator),))
      total += strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica,
                               axis=None)
    return total / tf.maximum(tf.cast(num_steps, tf.float32), 1.0)

  # One replica's step, for tools that compile it alone (tools/ttt/cost.py:
  # XLA's cost analysis of the program a replica runs).
  train_loop.replica_step = replica_step
  return train_loop


def make_eval_loop(*, strategy, model, task, local_outputs: bool = False):
  """Returns eval_loop(iterator, num_steps) -> (sums, outputs).

  `sums`: the task's eval sums reduced over all replicas and steps. `outputs`:
  the task's per-example eval outputs of every replica on every host,
  gathered on the device (all-gather, so every host holds them), stacked as
  [num_steps * global batch, ...] in step then replica order; empty when the
  task has no host metric. With `local_outputs`, only this host's replicas'
  outputs, in step then local replica order, and nothing crosses hosts (a
  per-host metric: training.task.PerHostMetric).
  """
  output_dtypes = dict(task.eval_output_dtypes)
  output_names = tuple(output_dtypes)

  @tf.autograph.experimental.do_not_convert  # As replica_step.
  def replica_eval(batch):
    sums = task.eval_sums(model, batch)
    if not output_names:
      return sums, {}
    outputs = task.eval_outputs(model, batch)
    if local_outputs:
      return sums, {k: outputs[k] for k in output_names}
    ctx = tf.distribute.get_replica_context()
    return sums, {k: ctx.all_gather(strategies.placed(strategy, outputs[k]),
                                    axis=0)
                  for k in output_names}

  def host_rows(per_replica):
    values = strategy.experimental_local_results(per_replica)
    if local_outputs:
      return tf.concat(values, axis=0)
    return values[0]  # Every replica holds the same gathered copy.

  @tf.function
  def eval_loop(iterator, num_steps):
    sums = {k: tf.constant(0.0) for k in task.eval_sum_names}
    arrays = {k: tf.TensorArray(output_dtypes[k], size=0, dynamic_size=True,
                                infer_shape=False) for k in output_names}
    for i in tf.range(num_steps):
      per_replica_sums, gathered = strategy.run(replica_eval,
                                                args=(next(iterator),))
      sums = {k: sums[k] + strategy.reduce(tf.distribute.ReduceOp.SUM,
                                           per_replica_sums[k], axis=None)
              for k in sums}
      arrays = {k: arrays[k].write(tf.cast(i, tf.int32),
                                   host_rows(gathered[k]))
                for k in output_names}
    # Concatenating an empty list needs a known element shape: the 0-step
    # call that compiles the loop returns empty outputs instead.
    outputs = {k: tf.cond(num_steps > 0, arrays[k].concat,
                          lambda k=k: tf.zeros([0], output_dtypes[k]))
               for k in output_names}
    return sums, outputs

  eval_loop.replica_eval = replica_eval  # As train_loop.replica_step.
  return eval_loop


