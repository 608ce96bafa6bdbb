"""Embedding tables, whole on every replica or sharded over the replicas.

A model makes its tables and looks up a batch's rows through an
`EmbeddingTables` object; the run's parallelism plan chooses which
(`tables_scope`, entered by the plan's scope; `current()` outside any plan
is `ReplicatedTables`), so the model is the same under every plan.

`ShardedTables` splits each large table's rows over the N replicas of a
tf.distribute strategy, as TPUEmbedding does on a TPU:
- `mod`: row r lives on replica r mod N at local row r div N (TPUEmbedding's
  partition_strategy="mod", Google's v0.7 DLRM); `div`: replica r holds
  rows [r x ceil(rows / N), (r + 1) x ceil(rows / N)).
- A shard is a replica-local variable (SyncOnRead: each replica's copy holds
  its own ceil(rows / N) rows), so a replica keeps 1/N of the table plus at
  most one padding row.
- The lookup: every replica's ids of the sharded tables are all-gathered
  (N x batch ids), each replica gathers the rows it owns (zeros for the
  rest), and one all-reduce sums them, after which each replica keeps its
  own batch's vectors. TensorFlow's replica context on CPU and GPU has no
  all-to-all; this moves N x batch x tables x dim values a replica instead
  of an all-to-all's batch x tables x dim, and neither depends on the
  tables' sizes.
- The backward pass is the same collectives reversed (the all-reduce's
  gradient is an all-reduce), so each replica ends with the gradient of its
  own rows for every replica's batch, complete: rows the step touched, as
  tf.IndexedSlices, applied on their owner with no further all-reduce
  (`local_variables`; Optimizer.update_sparse).
- Checkpoints hold every table whole, under the unsharded model's names
  (`checkpoint_view`), so a checkpoint moves between sharded and unsharded
  runs.
Tables with fewer rows than the largest `sharded` (Google: the 13 largest
of 26) stay whole on every replica, looked up with plain gathers.

On a TPU, Google's runs use tf.tpu.experimental.embedding.TPUEmbedding,
which places the shards in the TPU's embedding memory; nothing of that has
run here (docs/dlrm.md).
"""

import contextlib
import math
from typing import Protocol, Sequence

import tensorflow as tf

from distribution import strategy as strategies

PARTITIONS = ('mod', 'div')


class EmbeddingTables(Protocol):
  """Makes a model's tables and looks up a batch's rows in them."""

  def make_tables(self, vocab_sizes: Sequence[int], dim: int, *,
                  seed: int) -> dict:
    """name -> table variable, one a feature (`embedding/table<t>`, rows
    U(-1/sqrt(rows), 1/sqrt(rows)) as the MLPerf reference); called under
    the plan's scope."""

  def lookup(self, tables: Sequence, ids: tf.Tensor) -> tf.Tensor:
    """ids [b, T] (row of table t in column t) -> vectors [b, T, dim]."""


# Rows of a table drawn together: a table's initial value is its blocks'
# draws, so any replica can make its own rows without the whole table.
INIT_BLOCK_ROWS = 8192


def initial_value(rows: int, dim: int, seed: int, t: int, keep=None):
  """Table t's initial rows, U(-1/sqrt(rows), 1/sqrt(rows)) as the MLPerf
  reference's, drawn in blocks of INIT_BLOCK_ROWS rows from (seed, t,
  block); `keep(start, block)` -> the rows of the block starting at row
  `start` to keep (default all), so a shard holds exactly the whole table's
  values of its rows."""
  limit = 1.0 / math.sqrt(rows)
  parts = []
  for block, start in enumerate(range(0, rows, INIT_BLOCK_ROWS)):
    values = tf.random.stateless_uniform(
        [min(INIT_BLOCK_ROWS, rows - start), dim],
        seed=[seed * 1000 + t, block], minval=-limit, maxval=limit)
    parts.append(keep(start, values) if keep else values)
  return tf.concat(parts, axis=0)


TABLE_PREFIX = 'embedding/table'


def table_name(t: int) -> str:
  return f'{TABLE_PREFIX}{t}'


def table_index(variable_name: str) -> int | None:
  """t of a variable named table_name(t) (under any scope), else None."""
  _, prefix, index = variable_name.split(':')[0].rpartition(TABLE_PREFIX)
  return int(index) if prefix and index.isdigit() else None


class ReplicatedTables:
  """Whole tables on every replica; lookups are gathers. Implements
  EmbeddingTables."""

  def make_tables(self, vocab_sizes, dim, *, seed):
    return {table_name(t): tf.Variable(initial_value(rows, dim, seed, t),
                                       name=table_name(t))
            for t, rows in enumerate(vocab_sizes)}

  def lookup(self, tables, ids):
    return tf.stack([tf.gather(table, ids[:, t])
                     for t, table in enumerate(tables)], axis=1)


_current: list = []


@contextlib.contextmanager
def tables_scope(tables: EmbeddingTables):
  """Models built inside use `tables` (a plan's scope enters it)."""
  _current.append(tables)
  try:
    yield tables
  finally:
    _current.pop()


def current() -> EmbeddingTables:
  """The tables of the enclosing plan, else ReplicatedTables."""
  return _current[-1] if _current else ReplicatedTables()


def shard_rows(rows: int, shards: int) -> int:
  return -(-rows // shards)


def sharded_indices(vocab_sizes: Sequence[int], sharded: int) -> list[int]:
  """The tables ShardedTables splits, in table order: the `sharded`
  largest (0: all; the first of equal ones first)."""
  count = len(vocab_sizes) if not sharded else min(sharded, len(vocab_sizes))
  largest = sorted(range(len(vocab_sizes)), key=lambda t: -vocab_sizes[t])
  return sorted(largest[:count])


class ShardedTables:
  """The largest tables' rows split over a strategy's replicas. Implements
  EmbeddingTables."""

  def __init__(self, *, strategy: tf.distribute.Strategy,
               partition: str = 'mod', sharded: int = 0):
    """Args:
      strategy: the replicas that hold the shards.
      partition: 'mod' (row r on replica r mod N) or 'div' (consecutive
        blocks of rows).
      sharded: how many of the largest tables to shard (0: all).

    Raises:
      ValueError: an unknown partition, named.
    """
    if partition not in PARTITIONS:
      raise ValueError(f'EMBEDDING_SHARDING must be one of {PARTITIONS} (or '
                       f"'none'), got {partition!r}.")
    self.strategy, self.partition, self.sharded = strategy, partition, sharded
    self.shards = strategy.num_replicas_in_sync
    self.rows = {}  # Sharded table name -> its full rows.
    self.dim = 0
    self._order = []  # Indices of the sharded tables, in feature order.
    self.traced_collective_elements = None  # (ids, vectors) a replica.
    self._shard_vars = {}

  def make_tables(self, vocab_sizes, dim, *, seed):
    self._order = sharded_indices(vocab_sizes, self.sharded)
    self.dim, self._seed = dim, seed
    tables = {}
    for t, rows in enumerate(vocab_sizes):
      name = table_name(t)
      if t not in self._order:
        tables[name] = tf.Variable(initial_value(rows, dim, seed, t),
                                   name=name)
        continue
      # Each replica's copy is its own shard; `initialize` fills them.
      tables[name] = tf.Variable(
          tf.zeros([shard_rows(rows, self.shards), dim]), trainable=False,
          name=name, synchronization=tf.VariableSynchronization.ON_READ,
          aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
      self.rows[name] = rows
      self._shard_vars[name] = tables[name]
    return tables

  def local_variables(self) -> list:
    """The shards: each replica updates its own copy from its own complete
    gradient (no all-reduce)."""
    return [self._shard_vars[n] for n in sorted(self._shard_vars)]

  def _rows_of(self, name: str, replica):
    """The full-table rows replica `replica`'s shard holds, in order."""
    per = shard_rows(self.rows[name], self.shards)
    local = tf.range(per, dtype=tf.int64)
    replica = tf.cast(replica, tf.int64)
    if self.partition == 'mod':
      return replica + local * self.shards
    return replica * per + local

  def initialize(self) -> None:
    """Fills every local replica's shards with the whole table's initial
    values of its rows (the unsharded model's, drawn block by block)."""
    local = len(self.strategy.extended.worker_devices)
    first = strategies.worker_id(self.strategy) * local
    n = self.shards
    for name, shard in self._shard_vars.items():
      t, rows = int(name[len('embedding/table'):]), self.rows[name]
      per = shard_rows(rows, n)
      for replica, copy in zip(range(first, first + local),
                               self.strategy.experimental_local_results(shard)):
        if self.partition == 'mod':
          keep = lambda start, block, r=replica: block[(r - start) % n::n]
        else:
          keep = lambda start, block, r=replica: block[
              max(r * per - start, 0):max((r + 1) * per - start, 0)]
        with tf.device(copy.device):
          value = initial_value(rows, self.dim, self._seed, t, keep)
          copy.assign(tf.pad(value, [[0, per - value.shape[0]], [0, 0]]))

  def lookup(self, tables, ids):
    tables = list(tables)
    ctx = tf.distribute.get_replica_context()
    columns = [None] * len(tables)
    for t, table in enumerate(tables):
      if t not in self._order:
        columns[t] = tf.gather(table, ids[:, t])
    if self._order:
      sharded = self._lookup_sharded(ctx, [tables[t] for t in self._order],
                                     tf.gather(ids, self._order, axis=1))
      for k, t in enumerate(self._order):
        columns[t] = sharded[:, k]
    return tf.stack(columns, axis=1)

  def _lookup_sharded(self, ctx, shards, ids):
    """ids [b, S] of the sharded tables -> vectors [b, S, dim]."""
    n = self.shards
    replica = tf.cast(ctx.replica_id_in_sync_group, tf.int64)
    ids = tf.cast(ids, tf.int64)
    every = ctx.all_gather(strategies.placed(self.strategy, ids), axis=0)
    # Every replica's batch has this one's size (the static shape the
    # all-gather does not give).
    every = tf.ensure_shape(every, [None if ids.shape[0] is None else
                                    n * ids.shape[0], ids.shape[1]])
    vectors = []
    for k, shard in enumerate(shards):
      column = every[:, k]
      if self.partition == 'mod':
        owner, row = column % n, column // n
      else:
        per = shard.shape[0]
        owner, row = column // per, column % per
      mine = tf.equal(owner, replica)
      found = tf.gather(shard, tf.where(mine, row, 0))
      vectors.append(found * tf.cast(mine, found.dtype)[:, None])
    vectors = tf.stack(vectors, axis=1)
    # What enters the two collectives, per replica, as traced (TensorFlow's
    # collectives carry no static shapes to read back from the graph).
    self.traced_collective_elements = (ids.shape.num_elements(),
                                       vectors.shape.num_elements())
    total = ctx.all_reduce(tf.distribute.ReduceOp.SUM, vectors)
    batch = tf.shape(ids)[0]
    return tf.reshape(total, [n, batch, len(shards), self.dim])[
        tf.cast(replica, tf.int32)]

  def checkpoint_view(self, params: dict) -> dict:
    """`params` with every sharded table replaced by its whole-table
    checkpoint value (FullTable), and the call that gathers them before a
    save."""
    view = dict(params)
    gathered = {}
    local = len(self.strategy.extended.worker_devices)
    first = strategies.worker_id(self.strategy) * local
    for name, shard in self._shard_vars.items():
      view[name] = FullTable(
          shards=self.strategy.experimental_local_results(shard),
          replicas=range(first, first + local), rows=self.rows[name],
          owner=self, full=lambda name=name: gathered.get(name))
    names = sorted(self._shard_vars)

    def gather_one_replica():
      ctx = tf.distribute.get_replica_context()
      out = []
      for name in names:
        parts = ctx.all_gather(strategies.placed(
            self.strategy, tf.identity(self._shard_vars[name])[None]), axis=0)
        out.append(self.assemble(parts, self.rows[name]))
      return out

    @tf.function(autograph=False)
    def gather_all():
      values = self.strategy.run(gather_one_replica)
      return [self.strategy.experimental_local_results(v)[0] for v in values]

    def before_save():
      gathered.update(zip(names, gather_all()))

    return view, before_save

  def assemble(self, parts, rows: int):
    """[N, per, dim] shards -> the [rows, dim] table."""
    if self.partition == 'mod':  # Row r = shard r mod N, local row r div N.
      parts = tf.transpose(parts, [1, 0, 2])
    return tf.reshape(parts, [-1, self.dim])[:rows]

  def shard_of(self, full, replica: int, rows: int):
    """Replica `replica`'s shard of a whole [rows, dim] table."""
    per = shard_rows(rows, self.shards)
    padded = tf.pad(full, [[0, per * self.shards - rows], [0, 0]])
    if self.partition == 'mod':
      return padded[replica::self.shards]
    return padded[replica * per:(replica + 1) * per]


class FullTable(tf.__internal__.tracking.Trackable):
  """Checkpoints one sharded table whole, under the key an unsharded table
  variable has (`.../.ATTRIBUTES/VARIABLE_VALUE`), as weight-update
  sharding's _FullSlot does for slots (TensorFlow has no public hook for a
  custom checkpoint value; `_serialize_to_tensors` is the one variables
  use)."""

  def __init__(self, *, shards, replicas, rows, owner: ShardedTables, full):
    self._shards, self._replicas, self._rows = shards, replicas, rows
    self._owner, self._full = owner, full

  def _serialize_to_tensors(self):
    full = self._full()
    if full is None:  # Restoring asks for a value of the right shape.
      full = tf.zeros([self._rows, self._owner.dim])
    return {'VARIABLE_VALUE': full}

  def _restore_from_tensors(self, restored_tensors):
    full = restored_tensors['VARIABLE_VALUE']
    return tf.group([
        copy.assign(self._owner.shard_of(full, r, self._rows))
        for r, copy in zip(self._replicas, self._shards)])
