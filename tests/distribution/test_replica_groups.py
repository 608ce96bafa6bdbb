"""Sums and gathers within groups of replicas (4 logical CPUs): exact, one
collective a replica, and nothing from outside the group."""

import numpy as np
import pytest
import tensorflow as tf

from distribution import replica_groups
from distribution import strategy as strategies
from benchmarks import common

REPLICAS = 4


@pytest.fixture(scope='module')
def strategy():
  return strategies.make_strategy(kind='mirrored', num_cpu_devices=REPLICAS)


def on_replicas(strategy, fn):
  """fn(replica id as float) on every replica; (results as NumPy, the
  traced graph's collective op count)."""
  def replica():
    ctx = tf.distribute.get_replica_context()
    return fn(tf.cast(ctx.replica_id_in_sync_group, tf.float32))

  @tf.function
  def run():
    return strategy.experimental_local_results(strategy.run(replica))

  ops = common.collective_ops(run.get_concrete_function().graph)
  return [np.asarray(x) for x in run()], ops


@pytest.mark.parametrize('groups, expected', [
    ([[0, 1], [2, 3]], [3, 3, 7, 7]),     # Consecutive pairs.
    ([[0, 2], [1, 3]], [4, 6, 4, 6]),     # Strided: the columns of a grid.
    ([[0, 1, 2, 3]], [10, 10, 10, 10]),   # Everyone: the strategy's own.
    ([[0], [1], [2], [3]], [1, 2, 3, 4]),  # Alone: no collective.
])
def test_group_sums_count_each_member_once(strategy, groups, expected):
  grouping = replica_groups.ReplicaGroups(strategy, groups)
  sums, ops = on_replicas(strategy, lambda r: grouping.sum(
      tf.fill([2, 3], r + 1.0)))
  for total, want in zip(sums, expected):
    np.testing.assert_array_equal(total, np.full([2, 3], float(want)))
  assert ops == (0 if len(groups[0]) == 1 else REPLICAS)


@pytest.mark.parametrize('groups', [[[0, 1], [2, 3]], [[0, 2], [1, 3]]])
def test_gradients_flow_back_through_the_group(strategy, groups):
  # loss_r = c_r . sum over r's group of x_m: d loss / d x_r, summed over
  # replicas, is the group's sum of the c_m.
  grouping = replica_groups.ReplicaGroups(strategy, groups)

  def grads(r):
    x = tf.fill([3], r + 1.0)
    with tf.GradientTape() as tape:
      tape.watch(x)
      loss = tf.reduce_sum(grouping.sum(x) * (10.0 ** r))
    return tape.gradient(loss, x)

  result, _ = on_replicas(strategy, grads)
  for r, g in enumerate(result):
    group = next(m for m in groups if r in m)
    np.testing.assert_array_equal(g, np.full(3, sum(10.0 ** m
                                                    for m in group)))


def test_a_group_gather_holds_the_members_in_order(strategy):
  pairs = replica_groups.consecutive(strategy, 2)
  assert replica_groups.consecutive(strategy, 2) is pairs  # Built once.
  # -inf and large values come through exactly (placed, not multiplied).
  gathered, ops = on_replicas(strategy, lambda r: pairs.gather(
      tf.stack([r, -np.inf, 2.0**100 * (r + 1)])))
  for r, rows in enumerate(gathered):
    first = r - r % 2
    np.testing.assert_array_equal(rows, np.float32(
        [[m, -np.inf, 2.0**100 * (m + 1)] for m in (first, first + 1)]))
  assert ops == REPLICAS


def test_groups_that_do_not_cover_the_replicas_are_named(strategy):
  with pytest.raises(ValueError, match=r'must hold each of the 4 replicas '
                     'once, in groups of one size'):
    replica_groups.ReplicaGroups(strategy, [[0, 1], [1, 2, 3]])
  with pytest.raises(ValueError, match='Groups of 3 replicas do not divide '
                     'the 4 replicas'):
    replica_groups.consecutive(strategy, 3)
