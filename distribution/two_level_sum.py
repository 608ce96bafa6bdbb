"""Hierarchical (2-D) summation: sum within groups of replicas, then across.

A TPU pod sums gradients over its 2-D torus in two phases (Kumar et al. 2020,
"Exploring the limits of concurrency in ML training on Google TPUs", sec. 4):
along one dimension, then along the other, so each phase's ring is short and
the phases use different links. The same shape on a cluster of hosts is a sum
within each host, then across hosts.

Replicas 0..N-1 form a grid of N/G rows of G: phase one sums each row
(replicas gG .. gG+G-1, consecutive, so a row is one host when G is the
devices a host has), phase two each column (replicas with the same position
in their row). Every replica ends with the full sum.

Each phase is a sum within fixed groups of replicas
(distribution/replica_groups.py: TensorFlow's collective V2 ops on
MirroredStrategy and MultiWorkerMirroredStrategy).
"""

import tensorflow as tf

from distribution import replica_groups


def check_group_size(group_size: int, num_replicas: int) -> None:
  """Raises ValueError unless `group_size` makes a grid of the replicas."""
  if group_size < 2 or group_size >= num_replicas or num_replicas % group_size:
    divisors = [g for g in range(2, num_replicas) if num_replicas % g == 0]
    raise ValueError(
        f'Two-level summation groups of {group_size} replicas do not make a '
        f'grid of the {num_replicas} replicas: the group size must divide '
        f'{num_replicas} and lie strictly between 1 and {num_replicas} '
        f'(here: {divisors or "none"}).'
        ' Set distribution.gradients.GradientOptions.two_level_group_size to one of '
        'them, or to 0 for one all-reduce over all replicas.')


class TwoLevelSum:
  """Sums tensors over all replicas in two phases (rows, then columns).

  Build it outside the step (it validates the grid before any compute), call
  it in a replica context inside a tf.function.
  """

  def __init__(self, strategy: tf.distribute.Strategy, group_size: int, *,
               bytes_per_pack: int = 0, implementation: str = 'auto'):
    """Args:
      strategy: a MirroredStrategy or MultiWorkerMirroredStrategy.
      group_size: replicas in a row (phase one); divides the replica count.
      bytes_per_pack: send the tensors in packs of about this many bytes
        (0: one pack).
      implementation: collective implementation hint ('auto', 'ring').

    Raises:
      ValueError: if the group size does not make a grid of the replicas.
    """
    n = strategy.num_replicas_in_sync
    check_group_size(group_size, n)
    self._rows = replica_groups.ReplicaGroups(
        strategy, [range(g * group_size, (g + 1) * group_size)
                   for g in range(n // group_size)],
        implementation=implementation)
    self._columns = replica_groups.ReplicaGroups(
        strategy, [range(c, n, group_size) for c in range(group_size)],
        implementation=implementation)
    self._bytes_per_pack = bytes_per_pack
    self.group_size, self.num_replicas = group_size, n

  def _packs(self, tensors) -> list[list[int]]:
    """Indices of the tensors in each pack, in order."""
    packs, size = [[]], 0
    for i, t in enumerate(tensors):
      if packs[-1] and self._bytes_per_pack and size >= self._bytes_per_pack:
        packs.append([])
        size = 0
      packs[-1].append(i)
      size += t.shape.num_elements() * t.dtype.size
    return packs

  def __call__(self, tensors: list) -> list:
    """In a replica context: each tensor summed over all replicas.

    The tensors (one dtype) travel as packed vectors, one a pack and phase.
    """
    out = [None] * len(tensors)
    for pack in self._packs(tensors):
      flat = tf.concat([tf.reshape(tensors[i], [-1]) for i in pack], axis=0)
      summed = self._columns.sum(self._rows.sum(flat))
      parts = tf.split(summed, [tensors[i].shape.num_elements() for i in pack])
      for i, part in zip(pack, parts):
        out[i] = tf.reshape(part, tensors[i].shape)
    return out
