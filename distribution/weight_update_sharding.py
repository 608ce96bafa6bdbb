"""Weight-update sharding: each replica updates 1/N of every weight.

Data parallelism repeats the optimizer's work and state on every replica.
Sharding the update (Xu et al. 2020, "Automatic cross-replica sharding of
weight update in data-parallel training"; the v0.7 pod runs' WUS) splits it:
after the gradient all-reduce every replica holds the summed gradient; replica
r takes shard r of each flattened (zero-padded) weight and gradient, keeps
only shard r of each optimizer slot, applies the optimizer's rule
(`Optimizer.apply`) to its shards, and the new weight shards are all-gathered
into the full weights. Layer-wise norms (LARS's trust ratio, LAMB's) are sums
of squares over the shards: one all-reduce for all of them, and one
all-gather for all the new shards.

On CPU and GPU this is TF's all-reduce, then a slice, then an all-gather; the
slots are SyncOnRead variables whose per-replica copies hold one shard each,
so optimizer memory per replica is 1/N (plus at most one element of padding
per variable). The arithmetic is the unsharded rule's elementwise; only the
norms add their squares in another order (float32 round-off).
"""

from typing import Callable

import tensorflow as tf

from distribution import strategy as strategies


def shard_size(size: int, num_shards: int) -> int:
  """Elements of each shard of a tensor of `size` elements (last padded)."""
  return -(-size // num_shards)


def make_slot_factory(num_shards: int) -> Callable:
  """`Optimizer.build(make_slot=...)`: per-replica slot shards (call under
  the strategy scope)."""

  def make_slot(variable, name):
    size = variable.shape.num_elements()
    return tf.Variable(
        tf.zeros([shard_size(size, num_shards)], variable.dtype),
        trainable=False, name=name,
        synchronization=tf.VariableSynchronization.ON_READ,
        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

  return make_slot


def shard_of(value, replica, num_shards: int):
  """Shard `replica` (a scalar tensor) of `value`, flattened and padded."""
  flat = tf.reshape(value, [-1])
  size = flat.shape.num_elements()
  per = shard_size(size, num_shards)
  rows = tf.reshape(tf.pad(flat, [[0, per * num_shards - size]]),
                    [num_shards, per])
  return tf.gather(rows, replica)


def sharded_updates(*, strategy, optimizer, variables, slots, grads, decays,
                    lr, step) -> list:
  """In a replica context: updates this replica's slot shards and returns
  the full new value of every variable (the all-gathered shards).

  Two collectives a step, whatever the number of variables: one all-reduce
  of every layer-wise norm's partial sum of squares, one all-gather of every
  new shard. The rule runs twice for that: once to learn which tensors it
  takes norms of (their values never depend on a norm, see
  training.task.Optimizer), once with the summed norms; TensorFlow's graph
  optimiser merges the computations the two runs share.
  """
  ctx = tf.distribute.get_replica_context()
  replica, n = ctx.replica_id_in_sync_group, ctx.num_replicas_in_sync
  shards = [(shard_of(var, replica, n), shard_of(grad, replica, n),
             [tf.identity(s) for s in var_slots])
            for var, var_slots, grad in zip(variables, slots, grads)]

  partial_sums = []

  def record(tensor):
    partial_sums.append(tf.reduce_sum(tf.square(tensor)))
    return tf.ones([], tensor.dtype)

  for (w, g, s), decay in zip(shards, decays):
    optimizer.apply(w, g, s, lr, step, decay=decay, norm=record)
  norms = []
  if partial_sums:
    norms = tf.unstack(tf.sqrt(ctx.all_reduce(
        tf.distribute.ReduceOp.SUM,
        strategies.placed(strategy, tf.stack(partial_sums)))))
  remaining = list(reversed(norms))

  def summed_norm(tensor):
    del tensor
    if not remaining:
      raise ValueError(
          f'{type(optimizer).__name__}.apply took more norms with the norms '
          'known than without: a norm may not depend on another norm\'s '
          'value under weight-update sharding.')
    return remaining.pop()

  new_shards = []
  for (w, g, s), var_slots, decay in zip(shards, slots, decays):
    new_shard, new_slots = optimizer.apply(w, g, s, lr, step, decay=decay,
                                           norm=summed_norm)
    for slot, value in zip(var_slots, new_slots):
      slot.assign(value)
    new_shards.append(new_shard)
  if remaining:
    raise ValueError(f'{type(optimizer).__name__}.apply took fewer norms with '
                     'the norms known than without; see training.task.'
                     'Optimizer.apply.')
  return gather_shards(strategy, new_shards, variables)


def gather_shards(strategy, shards, variables) -> list:
  """In a replica context: every replica's shard of each variable, assembled
  into the variables' full values with one all-gather per dtype."""
  ctx = tf.distribute.get_replica_context()
  n = ctx.num_replicas_in_sync
  full = [None] * len(variables)
  by_dtype = {}
  for i, shard in enumerate(shards):
    by_dtype.setdefault(shard.dtype, []).append(i)
  for indices in by_dtype.values():
    packed = tf.concat([shards[i] for i in indices], axis=0)
    rows = tf.reshape(ctx.all_gather(strategies.placed(strategy, packed),
                                     axis=0), [n, -1])
    offset = 0
    for i in indices:
      per = shards[i].shape.num_elements()
      var = variables[i]
      column = tf.reshape(rows[:, offset:offset + per], [-1])
      full[i] = tf.reshape(column[:var.shape.num_elements()], var.shape)
      offset += per
  return full


class _FullSlot(tf.__internal__.tracking.Trackable):
  """Checkpoints one sharded slot in the unsharded layout.

  TensorFlow has no public hook for a custom checkpoint value; a Trackable's
  `_serialize_to_tensors` / `_restore_from_tensors` are that hook (what
  variables themselves use). The value is written under the same key an
  unsharded slot variable has (`.../.ATTRIBUTES/VARIABLE_VALUE`), so
  checkpoints move freely between sharded and unsharded runs.
  """

  def __init__(self, shards, shape, replica_ids, num_shards, full):
    self._shards, self._shape = shards, shape
    self._replica_ids, self._num_shards = replica_ids, num_shards
    self._full = full  # () -> the gathered full value, or None.

  def _serialize_to_tensors(self):
    # Restoring asks for the value too, for its shape and dtype only: before
    # any gather, zeros of the full shape stand for it.
    full = self._full()
    if full is None:
      full = tf.zeros(self._shape, self._shards[0].dtype)
    return {'VARIABLE_VALUE': full}

  def _restore_from_tensors(self, restored_tensors):
    full = restored_tensors['VARIABLE_VALUE']
    return tf.group([copy.assign(shard_of(full, r, self._num_shards))
                     for r, copy in zip(self._replica_ids, self._shards)])


class ShardedSlots:
  """The checkpoint view of sharded slots: `views` maps each slot's name to
  its full-layout Trackable; `gather()` collects every replica's shards
  (one all-gather, run by every worker before a save)."""

  def __init__(self, *, strategy, slots: dict, shapes: dict):
    """Args:
      strategy: the run's strategy.
      slots: name -> sharded slot variable (Optimizer.slots).
      shapes: name -> the full slot's shape (its variable's).
    """
    self.strategy, self.names = strategy, sorted(slots)
    self._slots, self._gathered = slots, {}
    local = len(strategy.extended.worker_devices)
    first = strategies.worker_id(strategy) * local
    n = strategy.num_replicas_in_sync
    self.views = {
        name: _FullSlot(strategy.experimental_local_results(slots[name]),
                        shapes[name], range(first, first + local), n,
                        lambda name=name: self._gathered.get(name))
        for name in self.names}

    def gather_one_replica():
      ctx = tf.distribute.get_replica_context()
      return [tf.reshape(ctx.all_gather(
          strategies.placed(strategy, tf.identity(slots[name])), axis=0)[
              :shapes[name].num_elements()], shapes[name])
              for name in self.names]

    @tf.function
    def gather_all():
      gathered = strategy.run(gather_one_replica)
      return [strategy.experimental_local_results(g)[0] for g in gathered]

    self._gather_all = gather_all

  @classmethod
  def for_optimizer(cls, *, strategy, optimizer, variables) -> 'ShardedSlots':
    """The view of a sharded optimizer's slots (built with make_slot)."""
    shape_of = {}
    for variable, slots in zip(variables, optimizer.slots_for(variables)):
      for slot in slots:
        shape_of[id(slot)] = variable.shape
    return cls(strategy=strategy, slots=optimizer.slots,
               shapes={name: shape_of[id(slot)]
                       for name, slot in optimizer.slots.items()})

  def gather(self) -> None:
    """Every replica's shards, assembled for the next save."""
    self._gathered = dict(zip(self.names, self._gather_all()))
