"""The replica step and the device loops (train and eval) as tf.functions.

One call of a loop runs `num_steps` steps on the devices: the host talks to the
devices once per loop (TPUEstimator's iterations_per_loop, Orbit's
steps_per_loop). Calling a loop with 0 steps builds and compiles it without
changing any state, which is how the runtime compiles before run_start.
"""

import tensorflow as tf

from distribution import gradients as gradients_lib
from distribution import strategy as strategies
from distribution import weight_update_sharding as wus
from training import losses


def static_row_shapes(grads, variables) -> list:
  """The gradients, each IndexedSlices (an embedding lookup's rows) given
  its variable's static shape as its dense shape. A lookup inside a branch
  of control flow (GNMT's bucket switch_case) hands its gradient's dense
  shape out of the branch as a tensor XLA cannot fold, and densifying it
  (the clip's norm, a dense update) then needs a shape known when
  compiling: a TPU's compile and `jit_compile` refuse it otherwise."""
  return [tf.IndexedSlices(g.values, g.indices, tf.constant(
      v.shape.as_list(), tf.int64 if g.dense_shape is None
      else g.dense_shape.dtype))
          if isinstance(g, tf.IndexedSlices) and v.shape.is_fully_defined()
          else g for g, v in zip(grads, variables)]


def l2_loss(variables, decays) -> tf.Tensor:
  """0.5 * sum of squares over the variables that take weight decay."""
  terms = [tf.nn.l2_loss(v) for v, decay in zip(variables, decays) if decay]
  return tf.add_n(terms) if terms else tf.constant(0.0)


def make_train_loop(*, strategy, model, optimizer, learning_rate, task,
                    step: tf.Variable,
                    gradients: gradients_lib.GradientOptions = (
                        gradients_lib.GradientOptions()),
                    weight_update_sharding: bool = False,
                    replicas_in_batch: int = 1, local_variables=()):
  """Returns train_loop(iterator, num_steps) -> mean loss over the steps.

  The loss reported is the replicas' own mean losses averaged (share x
  replica_factor, averaged): the global mean for `share_of_global_mean`,
  the mean of replica means for the other two normalisations. With
  `weight_update_sharding` each replica updates its shard of every weight
  (distribution/weight_update_sharding.py; slots built with its make_slot).
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
  # (docs/benchmarks-history.md, "Start-up"). Their loops are tf.while_loop already.
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
    all_grads = static_row_shapes(
        tape.gradient(loss, variables + local_variables),
        variables + local_variables)
    grads = gradients_lib.all_reduce_gradients(all_grads[:len(variables)],
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

  # One replica's step, for tools that compile it alone (tools/predictor/cost.py:
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


