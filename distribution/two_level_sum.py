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

tf.distribute has no sub-group collectives (a second strategy over a subset
of devices collides with the first), so this uses TensorFlow's collective V2
ops directly, as tf.distribute does internally: one group key per row and
column, derived from the group's device names so that every worker computes
the same keys; instance keys numbered per group and device in this process,
in the order the program builds them (the same on every worker, which runs
the same program); and one ordering token per device, which orders the ops on a device
(without one, several V2 collectives in one tf.function can hang).
"""

import itertools
import zlib

import tensorflow as tf
# The V2 collective ops have no public API; tf.distribute uses these modules
# (a ResourceVariable made directly is a plain variable even inside a
# strategy's scope, where tf.Variable would make a mirrored one).
from tensorflow.python.ops import collective_ops  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.ops import resource_variable_ops  # pylint: disable=g-direct-tensorflow-import

from distribution import strategy as strategies

# Group keys above those tf.distribute and DTensor number themselves
# (distribution/strategy.py gives each MirroredStrategy a range of 100,000
# keys from 100,000; DTensor's are below).
_GROUP_KEY_BASE = 1 << 30

# Per process: the next instance key of each group on each device, and each
# device's ordering token.
_instance_keys: dict = {}
_ordering_tokens: dict = {}


def group_key(devices) -> int:
  """One key per device set (names from _job_devices), the same in every
  process of the job."""
  return _GROUP_KEY_BASE + zlib.crc32(','.join(devices).encode()) % (1 << 29)


def _next_instance_key(key: int, device: str) -> int:
  # Counted per device: the ops one collective joins on its devices share
  # an instance key, so each device counts its own ops of the group.
  counter = _instance_keys.setdefault((key, device), itertools.count(1))
  return next(counter)


def _make_ordering_token(device: str) -> None:
  # Made eagerly: a variable made while a replica function is traced would
  # be made by one replica thread only.
  if device not in _ordering_tokens:
    with tf.init_scope(), tf.device(device):
      _ordering_tokens[device] = resource_variable_ops.ResourceVariable(
          0.0, trainable=False, name='ordering_token')


def check_group_size(group_size: int, num_replicas: int) -> None:
  """Raises ValueError unless `group_size` makes a grid of the replicas."""
  if group_size < 2 or group_size >= num_replicas or num_replicas % group_size:
    divisors = [g for g in range(2, num_replicas) if num_replicas % g == 0]
    raise ValueError(
        f'Two-level summation groups of {group_size} replicas do not make a '
        f'grid of the {num_replicas} replicas: the group size must divide '
        f'{num_replicas} and lie strictly between 1 and {num_replicas} '
        f'(here: {divisors or "none"}).'
        ' Set training.step.GradientOptions.two_level_group_size to one of '
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
    local = list(strategy.extended.worker_devices)
    # Replica r runs on the r-th device of the job: workers in task order,
    # each worker's devices in order (MultiWorkerMirroredStrategy's order).
    offset = strategies.worker_id(strategy) * len(local)
    all_devices = self._job_devices(local, n)
    rows = [all_devices[g * group_size:(g + 1) * group_size]
            for g in range(n // group_size)]
    columns = [all_devices[c::group_size] for c in range(group_size)]
    self._implementation, self._bytes_per_pack = implementation, bytes_per_pack
    self._groups = {}  # device -> ((size, key) of its row, of its column)
    for r, device in enumerate(local, start=offset):
      row, column = rows[r // group_size], columns[r % group_size]
      name = tf.DeviceSpec.from_string(device).to_string()
      self._groups[name] = ((len(row), group_key(row)),
                            (len(column), group_key(column)))
      _make_ordering_token(name)
    self.group_size, self.num_replicas = group_size, n

  @staticmethod
  def _job_devices(local, n) -> list[str]:
    """Names of all N replicas' devices, in replica order, the same in every
    process: task index and device (job names differ between a chief and
    the workers, so they are left out)."""
    specs = [tf.DeviceSpec.from_string(d) for d in local]
    return [f'{task}/{spec.device_type}:{spec.device_index}'
            for task in range(n // len(local)) for spec in specs]

  def _replica_device(self) -> str:
    """The device of the replica being traced."""
    if len(self._groups) == 1:
      # One device a worker: no per-replica device in the replica context.
      return next(iter(self._groups))
    device = tf.distribute.get_replica_context().devices[0]
    if not isinstance(device, str):  # Mirrored strategies nest: [[device]].
      device = device[0]
    return tf.DeviceSpec.from_string(device).to_string()

  def _reduce(self, tensor, size, key, device):
    return collective_ops.all_reduce_v2(
        tensor, size, key, _next_instance_key(key, device),
        communication_hint=self._implementation,
        ordering_token=_ordering_tokens[device].handle)

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
    device = self._replica_device()
    (row_size, row_key), (col_size, col_key) = self._groups[device]
    out = [None] * len(tensors)
    with tf.device(device):
      for pack in self._packs(tensors):
        flat = tf.concat([tf.reshape(tensors[i], [-1]) for i in pack], axis=0)
        summed = self._reduce(self._reduce(flat, row_size, row_key, device),
                              col_size, col_key, device)
        parts = tf.split(summed, [tensors[i].shape.num_elements()
                                  for i in pack])
        for i, part in zip(pack, parts):
          out[i] = tf.reshape(part, tensors[i].shape)
    return out
