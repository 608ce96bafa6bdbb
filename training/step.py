"""The replica step and the host loops (train and eval) as tf.functions.

One call of a loop runs `num_steps` steps on the devices: the host talks to the
devices once per loop (TPUEstimator's iterations_per_loop, Orbit's
steps_per_loop). Calling a loop with 0 steps builds and compiles it without
changing any state, which is how the runtime compiles before run_start.
"""

import tensorflow as tf



def l2_loss(variables, decays) -> tf.Tensor:
  """0.5 * sum of squares over the variables that take weight decay."""
  terms = [tf.nn.l2_loss(v) for v, decay in zip(variables, decays) if decay]
  return tf.add_n(terms) if terms else tf.constant(0.0)


ALLREDUCE_DTYPES = {'float32': tf.float32, 'bfloat16': tf.bfloat16}


def all_reduce_gradients(grads, *, clip_norm: float, clip_before: bool,
                         dtype: tf.DType):
  """Sums gradients over replicas, clipping by global norm before or after.

  Each replica's gradients carry a 1/num_replicas share of the mean (the loss
  is divided by the global batch), so clipping before the all-reduce scales
  them up to a replica's own mean first, as the TPU reference clips per core.
  """
  ctx = tf.distribute.get_replica_context()
  n = ctx.num_replicas_in_sync
  # Embedding lookups give IndexedSlices; the updates here are dense.
  grads = [tf.convert_to_tensor(g) for g in grads]
  if clip_norm and clip_before:
    grads, _ = tf.clip_by_global_norm([g * n for g in grads], clip_norm)
    grads = [g / n for g in grads]
  if dtype != tf.float32:
    grads = [tf.cast(g, tf.float32) for g in ctx.all_reduce(
        tf.distribute.ReduceOp.SUM, [tf.cast(g, dtype) for g in grads])]
  else:
    grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
  if clip_norm and not clip_before:
    grads, _ = tf.clip_by_global_norm(grads, clip_norm)
  return grads


def make_train_loop(*, strategy, model, optimizer, task,
                    global_batch_size: int, step: tf.Variable,
                    clip_norm: float = 0.0, clip_before_allreduce: bool = False,
                    allreduce_dtype: str = 'float32'):
  """Returns train_loop(iterator, num_steps) -> mean loss over the steps."""
  if allreduce_dtype not in ALLREDUCE_DTYPES:
    raise ValueError(f'`allreduce_dtype` must be one of '
                     f'{sorted(ALLREDUCE_DTYPES)}, got {allreduce_dtype!r}.')
  variables = list(model.trainable_variables)
  slots = optimizer.slots_for(variables)
  decays = [optimizer.takes_decay(v) for v in variables]
  state_names = sorted(model.state)
  weight_decay = optimizer.loss_weight_decay()

  def apply_updates(distribution, grads, state_values):
    lr = optimizer.schedule(step)
    for var, var_slots, grad, decay in zip(variables, slots, grads, decays):
      distribution.extended.update(var, optimizer.update,
                                   args=(grad, var_slots, lr, step),
                                   kwargs={'decay': decay}, group=False)
    for name, value in zip(state_names, state_values):
      distribution.extended.update(model.state[name], lambda v, x: v.assign(x),
                                   args=(value,), group=False)
    step.assign_add(1)

  def replica_step(batch):
    ctx = tf.distribute.get_replica_context()
    with tf.GradientTape() as tape:
      losses, state_updates = task.per_example_loss(model, batch)
      data_loss = tf.reduce_sum(losses) / global_batch_size
      loss = data_loss
      if weight_decay:
        loss += (weight_decay * l2_loss(variables, decays) /
                 ctx.num_replicas_in_sync)
    grads = all_reduce_gradients(
        tape.gradient(loss, variables), clip_norm=clip_norm,
        clip_before=clip_before_allreduce,
        dtype=ALLREDUCE_DTYPES[allreduce_dtype])
    state_values = [state_updates[n] for n in state_names]
    if state_values:
      state_values = ctx.all_reduce(tf.distribute.ReduceOp.MEAN, state_values)
    ctx.merge_call(apply_updates, args=(grads, state_values))
    return data_loss

  @tf.function
  def train_loop(iterator, num_steps):
    total = tf.constant(0.0)
    for _ in tf.range(num_steps):
      per_replica = strategy.run(replica_step, args=(next(iterator),))
      total += strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica,
                               axis=None)
    return total / tf.maximum(tf.cast(num_steps, tf.float32), 1.0)

  return train_loop


def make_eval_loop(*, strategy, model, task):
  """Returns eval_loop(iterator, num_steps) -> dict of sums over all replicas."""

  @tf.function
  def eval_loop(iterator, num_steps):
    sums = {k: tf.constant(0.0) for k in task.eval_sum_names}
    for _ in tf.range(num_steps):
      per_replica = strategy.run(task.eval_sums, args=(model, next(iterator)))
      sums = {k: sums[k] + strategy.reduce(tf.distribute.ReduceOp.SUM,
                                           per_replica[k], axis=None)
              for k in sums}
    return sums

  return eval_loop
