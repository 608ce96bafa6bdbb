"""Sums over groups of replicas: the collectives of a sub-group.

Several techniques reduce over a group of replicas rather than all of them:
grouped batch norm (statistics over G consecutive replicas), spatial
partitioning (halos and sums within the P replicas that share an image), the
rows and columns of a two-level gradient sum. Over all replicas a gather or
reduce moves N times what the group needs, which a pod of 1024 replicas
cannot afford in every layer.

tf.distribute has no sub-group collectives in its public API, so this uses
what each backend has:
- TPUStrategy: `cross_replica_sum` with a group assignment (as Google's v0.7
  batch norm does).
- MirroredStrategy and MultiWorkerMirroredStrategy: TensorFlow's collective
  V2 ops, as tf.distribute uses internally: one group key per group,
  derived from the group's device names so that every worker computes the
  same keys; instance keys numbered per group and device in this process,
  in the order the program builds them (the same on every worker, which
  runs the same program); and one ordering token per device, which orders
  the ops on a device (without one, several V2 collectives in one
  tf.function can hang).
- A group of every replica uses the strategy's own all-reduce.

A gather within a group is a sum of each member's tensor placed in its slot
of zeros: exact (x + 0 = x), P times the bytes of the tensor, with P small.
"""

import itertools
import threading
import zlib

import tensorflow as tf
# The V2 collective ops have no public API; tf.distribute uses these modules
# (a ResourceVariable made directly is a plain variable even inside a
# strategy's scope, where tf.Variable would make a mirrored one).
from tensorflow.python.ops import collective_ops  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.ops import resource_variable_ops  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.tpu.ops import tpu_ops  # pylint: disable=g-direct-tensorflow-import

from distribution import strategy as strategies

# Group keys above those tf.distribute and DTensor number themselves
# (distribution/strategy.py gives each MirroredStrategy a range of 100,000
# keys from 100,000; DTensor's are below).
_GROUP_KEY_BASE = 1 << 30

# Per process: the next instance key of each group on each device, each
# device's ordering token, and the groupings built by `consecutive`.
_instance_keys: dict = {}
_ordering_tokens: dict = {}
_consecutive: dict = {}
_lock = threading.Lock()  # Replica functions are traced on threads.


def group_key(devices) -> int:
  """One key per device set (names from _job_devices), the same in every
  process of the job."""
  return _GROUP_KEY_BASE + zlib.crc32(','.join(devices).encode()) % (1 << 29)


def _next_instance_key(key: int, device: str) -> int:
  # Counted per device: the ops one collective joins on its devices share
  # an instance key, so each device counts its own ops of the group.
  with _lock:
    counter = _instance_keys.setdefault((key, device), itertools.count(1))
    return next(counter)


def _make_ordering_token(device: str) -> None:
  # Made eagerly: a variable made while a replica function is traced would
  # be made by one replica thread only.
  if device not in _ordering_tokens:
    with tf.init_scope(), tf.device(device):
      _ordering_tokens[device] = resource_variable_ops.ResourceVariable(
          0.0, trainable=False, name='ordering_token')


def _job_devices(local, n) -> list[str]:
  """Names of all N replicas' devices, in replica order, the same in every
  process: task index and device (job names differ between a chief and the
  workers, so they are left out). Replica r runs on the r-th device of the
  job: workers in task order, each worker's devices in order
  (MultiWorkerMirroredStrategy's order)."""
  specs = [tf.DeviceSpec.from_string(d) for d in local]
  return [f'{task}/{spec.device_type}:{spec.device_index}'
          for task in range(n // len(local)) for spec in specs]


def _is_tpu(strategy) -> bool:
  return isinstance(strategy, (tf.distribute.TPUStrategy,
                               tf.distribute.experimental.TPUStrategy))


class ReplicaGroups:
  """Sums within fixed groups of a strategy's replicas.

  Build it outside the step or while tracing; call `sum` or `gather` in a
  replica context inside a tf.function.
  """

  def __init__(self, strategy: tf.distribute.Strategy, groups, *,
               implementation: str = 'auto'):
    """Args:
      strategy: the strategy whose replicas are grouped.
      groups: lists of global replica ids, each replica in exactly one, all
        of one size.
      implementation: collective implementation hint ('auto', 'ring').

    Raises:
      ValueError: if the groups do not cover each replica once in groups of
        one size.
    """
    n = strategy.num_replicas_in_sync
    groups = [list(g) for g in groups]
    if (sorted(r for g in groups for r in g) != list(range(n)) or
        len({len(g) for g in groups}) != 1):
      raise ValueError(f'Replica groups {groups} must hold each of the {n} '
                       'replicas once, in groups of one size.')
    self.strategy, self.groups = strategy, groups
    self.size = len(groups[0])
    self._position = {r: (g, groups[g].index(r))
                      for g in range(len(groups)) for r in groups[g]}
    self._implementation = implementation
    self._keys = {}  # device -> the group key of its replica's group.
    if _is_tpu(strategy) or self.size == n or self.size == 1:
      return
    local = list(strategy.extended.worker_devices)
    offset = strategies.worker_id(strategy) * len(local)
    names = _job_devices(local, n)
    with _lock:
      for r, device in enumerate(local, start=offset):
        name = tf.DeviceSpec.from_string(device).to_string()
        group = groups[self._position[r][0]]
        self._keys[name] = group_key([names[m] for m in group])
        _make_ordering_token(name)

  def _replica_device(self) -> str:
    """The device of the replica being traced."""
    if len(self._keys) == 1:
      # One device a worker: no per-replica device in the replica context.
      return next(iter(self._keys))
    device = tf.distribute.get_replica_context().devices[0]
    if not isinstance(device, str):  # Mirrored strategies nest: [[device]].
      device = device[0]
    return tf.DeviceSpec.from_string(device).to_string()

  def sum(self, tensor: tf.Tensor) -> tf.Tensor:
    """In a replica context: `tensor` summed over this replica's group."""
    if self.size == 1:
      return tensor
    ctx = tf.distribute.get_replica_context()
    if _is_tpu(self.strategy):
      return tpu_ops.cross_replica_sum(tensor, group_assignment=self.groups)
    if self.size == ctx.num_replicas_in_sync:
      return ctx.all_reduce(tf.distribute.ReduceOp.SUM,
                            strategies.placed(self.strategy, tensor))
    device = self._replica_device()
    key = self._keys[device]

    def reduce(t):
      with tf.device(device):
        return collective_ops.all_reduce_v2(
            t, self.size, key, _next_instance_key(key, device),
            communication_hint=self._implementation,
            ordering_token=_ordering_tokens[device].handle)

    # TensorFlow registers no gradient for the V2 op. A sum over the group
    # is its own adjoint: each member's gradient is the group's sum of the
    # members' upstream gradients.
    @tf.custom_gradient
    def group_sum(t):
      return reduce(t), reduce
    return group_sum(tensor)

  def position(self) -> tf.Tensor:
    """In a replica context: this replica's index within its group."""
    replica = tf.distribute.get_replica_context().replica_id_in_sync_group
    lookup = [self._position[r][1] for r in range(len(self._position))]
    return tf.gather(lookup, replica)

  def gather(self, tensor: tf.Tensor) -> tf.Tensor:
    """In a replica context: [size, ...], the group members' `tensor` in
    group order (the same on every member)."""
    dims = [d if d is not None else tf.shape(tensor)[i]
            for i, d in enumerate(tensor.shape.as_list())]
    placed = tf.scatter_nd([[self.position()]], tensor[tf.newaxis],
                           tf.stack([self.size, *dims]))
    return self.sum(placed)


def consecutive(strategy: tf.distribute.Strategy, size: int) -> ReplicaGroups:
  """Groups of `size` consecutive replicas (0..size-1, size..2 size-1, ...),
  one grouping per strategy and size for the process.

  Raises:
    ValueError: if `size` does not divide the replica count.
  """
  n = strategy.num_replicas_in_sync
  if size < 1 or n % size:
    raise ValueError(f'Groups of {size} replicas do not divide the {n} '
                     'replicas.')
  key = (id(strategy), size)
  with _lock:
    found = _consecutive.get(key)
  if found is None:
    found = ReplicaGroups(strategy, [range(g * size, (g + 1) * size)
                                     for g in range(n // size)])
    with _lock:
      found = _consecutive.setdefault(key, found)
  return found
