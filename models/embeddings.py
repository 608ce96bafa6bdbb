"""Embedding tables: how they are made and how a batch's rows are looked up.

A model asks an `EmbeddingTables` object for its tables and for the lookup,
so that the same model runs with whole tables on every replica (this
file's `ReplicatedTables`: plain gathers) and with tables sharded over the
replicas (a parallelism plan's, distribution/plan.py).

The gradient of a gather is the rows the batch touched (tf.IndexedSlices);
the train step keeps it sparse and the optimizer updates only those rows
(training/task.py, Optimizer.update_sparse).
"""

import math
from typing import Protocol, Sequence

import tensorflow as tf


class EmbeddingTables(Protocol):
  """Makes a model's tables and looks up a batch's rows in them."""

  def make_tables(self, vocab_sizes: Sequence[int], dim: int, *,
                  seed: int) -> list:
    """One table per feature ([rows, dim], the reference's uniform
    initialisation); called under the plan's scope."""

  def lookup(self, tables: list, ids: tf.Tensor) -> tf.Tensor:
    """ids [b, T] (row of table t in column t) -> vectors [b, T, dim]."""


def initial_value(rows: int, dim: int, seed: tuple, shape=None):
  """A table's initial rows, U(-1/sqrt(rows), 1/sqrt(rows)) as the MLPerf
  reference's (shape: a shard's [rows, dim], default the whole table)."""
  limit = 1.0 / math.sqrt(rows)
  return tf.random.stateless_uniform(shape or [rows, dim], seed=seed,
                                     minval=-limit, maxval=limit)


def table_seed(seed: int, table: int) -> tuple:
  return (seed * 1000 + table, 77)


class ReplicatedTables:
  """Whole tables on every replica; lookups are gathers. Implements
  EmbeddingTables."""

  def make_tables(self, vocab_sizes, dim, *, seed):
    return [tf.Variable(initial_value(rows, dim, table_seed(seed, t)),
                        name=f'embedding/table{t}')
            for t, rows in enumerate(vocab_sizes)]

  def lookup(self, tables, ids):
    return tf.stack([tf.gather(table, ids[:, t])
                     for t, table in enumerate(tables)], axis=1)

