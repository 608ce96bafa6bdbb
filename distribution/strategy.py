"""One factory for every tf.distribute strategy the suite runs under.

The TPU path is kept thin on purpose: it differs from the others only in how
the cluster is found and initialised; the training loop is the same code.
"""

import dataclasses
import json
import os
from typing import Protocol

import numpy as np
import tensorflow as tf

from distribution import tpu as tpu_lib
from distribution import tpu_slices

KINDS = ('tpu', 'multi_worker', 'mirrored', 'one_device', 'default')

# One MirroredStrategy per device set and process. Every MirroredStrategy
# numbers its collective groups and instances from 1, so two of them (or one
# and a DTensor mesh) in one
# process abort each other's collectives ("Collective instance N expected
# type ...", "joining a group with size 4, but that group has size 2"): that
# bites a notebook or test process that trains twice.
_MIRRORED = {}
_KEY_SPACING = 100000


def mirrored(devices) -> tf.distribute.MirroredStrategy:
  """The process's MirroredStrategy over `devices`."""
  key = tuple(devices)
  if key not in _MIRRORED:
    # No public API gives a strategy its own collective key range; TF's own
    # tests set this class attribute before construction for the same reason.
    # The first range is left to DTensor (distribution/mesh.py), whose
    # collectives number their groups from 1 too.
    tf.distribute.MirroredStrategy._collective_key_base = (  # pylint: disable=protected-access
        _KEY_SPACING * (len(_MIRRORED) + 1))
    _MIRRORED[key] = tf.distribute.MirroredStrategy(devices=list(key))
  return _MIRRORED[key]


def split_cpu(num_devices: int) -> None:
  """Splits the host CPU into `num_devices` logical devices.

  Must run before TensorFlow initialises its devices (before the first op).

  Args:
    num_devices: how many logical CPU devices to expose.

  Raises:
    RuntimeError: if TensorFlow has already initialised its devices.
  """
  cpus = tf.config.list_physical_devices('CPU')
  current = tf.config.get_logical_device_configuration(cpus[0])
  if current is not None and len(current) == num_devices:
    return
  try:
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration()] * num_devices)
  except RuntimeError as e:
    raise RuntimeError(
        f'Cannot split the CPU into {num_devices} logical devices: TensorFlow '
        'is already initialised. Set num_cpu_devices before any TensorFlow op '
        f'runs. ({e})') from e


def make_strategy(*, kind: str = 'default', tpu: str | None = None,
                  num_cpu_devices: int = 0, collective: str = 'auto',
                  tpu_flags: tuple[str, ...] = ()) -> tf.distribute.Strategy:
  """Builds the strategy a run trains under.

  Args:
    kind: one of 'tpu', 'multi_worker', 'mirrored', 'one_device', 'default'.
    tpu: TPU name, grpc address or 'local' (kind 'tpu' only); None:
      tpu_lib.default_target() ($TPU_NAME, else 'local').
    num_cpu_devices: for 'mirrored' without GPUs, split the CPU into this many
      logical devices (0 keeps one device per GPU, or the single CPU).
    collective: 'auto', 'ring' or 'nccl' for multi_worker all-reduce.
    tpu_flags: TPU compiler flags (`--name=value`), applied for kind 'tpu'
      only (distribution/tpu.py).

  Returns:
    The strategy.

  Raises:
    ValueError: on an unknown kind or a missing TF_CONFIG.
  """
  if kind not in KINDS:
    raise ValueError(f'Unknown strategy kind {kind!r}; choose one of {KINDS}.')
  if kind == 'tpu':
    tpu = tpu or tpu_lib.default_target()
    tpu_lib.apply_flags(tpu_flags)
    resolver = tpu_lib.resolve(tpu)
    try:
      tf.config.experimental_connect_to_cluster(resolver)
      tf.tpu.experimental.initialize_tpu_system(resolver)
    except (tf.errors.OpError, ValueError, RuntimeError) as e:
      first_line = (str(e).strip().splitlines() or [type(e).__name__])[0]
      raise tpu_lib.TpuUnavailable(
          f'Cannot reach or initialise the TPU --tpu={tpu}: {first_line} '
          '(check that this VM can reach it and that its TPU environment is '
          f'built: {tpu_lib.BUILD_ENVIRONMENT}). {tpu_lib.HINT}') from e
    return tf.distribute.TPUStrategy(resolver)
  if tpu_flags:
    print(f'TPU flags not applied (strategy {kind!r}, no TPU): '
          f'{" ".join(tpu_flags)}', flush=True)
  if kind == 'multi_worker':
    if 'TF_CONFIG' not in os.environ:
      raise ValueError("Strategy 'multi_worker' reads the cluster from the "
                       'TF_CONFIG environment variable, which is not set.')
    json.loads(os.environ['TF_CONFIG'])  # A malformed TF_CONFIG fails here.
    implementation = {
        'auto': tf.distribute.experimental.CommunicationImplementation.AUTO,
        'ring': tf.distribute.experimental.CommunicationImplementation.RING,
        'nccl': tf.distribute.experimental.CommunicationImplementation.NCCL,
    }[collective]
    return tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=implementation))
  if kind == 'mirrored':
    gpus = tf.config.list_physical_devices('GPU')
    if gpus:
      return mirrored([d.name for d in tf.config.list_logical_devices('GPU')])
    cpus = tf.config.list_physical_devices('CPU')
    configured = len(tf.config.get_logical_device_configuration(cpus[0]) or
                     [None])
    # A process split into enough devices already (a notebook, a test
    # process) keeps its split and uses the first N: splitting again would
    # take devices away from strategies built before or after this one.
    if num_cpu_devices and configured < num_cpu_devices:
      try:
        split_cpu(num_cpu_devices)
      except RuntimeError:
        # Already initialised (a notebook, a test process): use the first N
        # logical devices if there are enough.
        if len(tf.config.list_logical_devices('CPU')) < num_cpu_devices:
          raise
    devices = [d.name for d in tf.config.list_logical_devices('CPU')]
    if num_cpu_devices:
      devices = devices[:num_cpu_devices]
    return mirrored(devices)
  if kind == 'one_device':
    device = '/gpu:0' if tf.config.list_physical_devices('GPU') else '/cpu:0'
    return tf.distribute.OneDeviceStrategy(device)
  return tf.distribute.get_strategy()


@dataclasses.dataclass(frozen=True)
class StrategyConfig:
  """Which strategy a run trains under (gin:
  `distribution.plan.PlanOptions.distribution`, set by the hardware gin
  files; `--tpu` sets `tpu`).

  Attributes:
    kind: 'tpu', 'multi_worker', 'mirrored', 'one_device' or 'default'.
    tpu: TPU name, grpc address or 'local' (kind 'tpu').
    num_cpu_devices: logical CPU devices for a CPU 'mirrored' run.
    collective: multi_worker all-reduce: 'auto', 'ring' or 'nccl'.
    tpu_flags: TPU compiler flags (`--name=value`, e.g. collective and
      sharding flags), passed to libtpu for kind 'tpu' only and never
      exported on CPU, where an unknown XLA flag aborts the process.
    accelerator: the Cloud TPU slice the experiment is for (gcloud's type,
      e.g. 'v3-32'; gin macro ACCELERATOR of the TPU hardware files); ''
      for any slice. The run checks its replica count against it, and
      tools.launch refuses another slice.

  Raises:
    ValueError: a TPU (`tpu`, i.e. --tpu) with a hardware kind other than
      'tpu', or an unknown accelerator: the flag would do nothing.
  """
  kind: str = 'default'
  tpu: str = ''
  num_cpu_devices: int = 0
  collective: str = 'auto'
  tpu_flags: tuple[str, ...] = ()
  accelerator: str = ''

  def __post_init__(self):
    if self.tpu and self.kind != 'tpu':
      raise ValueError(
          f'--tpu={self.tpu} asks for a TPU, but the experiment\'s hardware '
          f'file trains on {self.kind!r} (CPU/GPU). To train it on the TPU, '
          'add --gin_file=gin/hardware/tpu.gin after the experiment (its '
          'batch sizes must divide by the TPU\'s replicas); else drop --tpu.')
    if self.accelerator:
      tpu_slices.parse(self.accelerator, public=False)

  @property
  def platform(self) -> str:
    """MLPerf's submission_platform for this hardware: the TPU slice
    (`tpu-v3-32`), 'tpu' for any slice, else the strategy kind."""
    if self.kind == 'tpu':
      return f'tpu-{self.accelerator}' if self.accelerator else 'tpu'
    return self.kind

  def check_replicas(self, replicas: int) -> None:
    """The slice the experiment is for must be the one the run got.

    Raises:
      ValueError: naming both.
    """
    if self.kind != 'tpu' or not self.accelerator:
      return
    want = tpu_slices.parse(self.accelerator, public=False).replicas
    if replicas != want:
      raise ValueError(
          f'The experiment is for a {self.accelerator} slice ({want} '
          f'replicas), but the TPU has {replicas}: launch it on a '
          f'{self.accelerator}, or set ACCELERATOR (and the batch sizes) for '
          'this slice.')

  def check_tpu_present(self) -> None:
    """Before anything else of a run: a TPU experiment on a machine without
    the TPU it would use locally stops here, in one line (exit 4), not
    after the data and model are configured.

    Raises:
      tpu_lib.TpuUnavailable: kind 'tpu', the TPU this VM's own
        ('local': --tpu=local, or no --tpu and no $TPU_NAME) and no TPU
        devices.
    """
    if self.kind != 'tpu':
      return
    if (self.tpu or tpu_lib.default_target()) != 'local':
      return
    problem = tpu_lib.local_tpu_problem(asked=(
        '--tpu=local' if self.tpu else
        'this experiment trains on a TPU (its hardware file is a TPU one) '
        'and, without --tpu or $TPU_NAME, uses this VM\'s own'))
    if problem:
      raise tpu_lib.TpuUnavailable(problem)

  def make(self) -> tf.distribute.Strategy:
    return make_strategy(kind=self.kind, tpu=self.tpu or None,
                         num_cpu_devices=self.num_cpu_devices,
                         collective=self.collective,
                         tpu_flags=tuple(self.tpu_flags))


def num_workers(strategy: tf.distribute.Strategy) -> int:
  """Processes that each run this program (1 outside multi-worker runs; a
  TPU pod is driven by one process)."""
  resolver = getattr(strategy, 'cluster_resolver', None)
  if not (isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) and
          resolver is not None):
    return 1
  spec = resolver.cluster_spec().as_dict()
  return max(1, sum(len(spec.get(kind, [])) for kind in ('chief', 'worker')))


def worker_id(strategy: tf.distribute.Strategy) -> int:
  """This worker's index (0 outside multi-worker runs)."""
  resolver = getattr(strategy, 'cluster_resolver', None)
  return getattr(resolver, 'task_id', 0) or 0


def per_replica_batch_size(global_batch_size: int, num_replicas: int,
                           what: str = 'global_batch_size') -> int:
  """Splits a global batch evenly over replicas.

  Raises:
    ValueError: if the batch does not divide by the replica count.
  """
  if global_batch_size % num_replicas:
    raise ValueError(
        f'`{what}` ({global_batch_size}) must be divisible by the number of '
        f'replicas ({num_replicas}); pick a multiple of {num_replicas}.')
  return global_batch_size // num_replicas


def is_chief(strategy: tf.distribute.Strategy) -> bool:
  """True on the worker that writes logs, summaries and checkpoints."""
  resolver = getattr(strategy, 'cluster_resolver', None)
  if resolver is None or not isinstance(
      strategy, tf.distribute.MultiWorkerMirroredStrategy):
    return True
  task_type, task_id = resolver.task_type, resolver.task_id
  return task_type in (None, 'chief') or (task_type == 'worker' and
                                          task_id == 0)


def placed(strategy, tensor: tf.Tensor) -> tf.Tensor:
  """`tensor` with a device, which collectives in a replica context need.

  Under MultiWorkerMirroredStrategy with one device a worker, ops inside a
  tf.function carry no device, and all_gather (or an all_reduce of a
  function argument) fails with "destinations can not be empty" (TF 2.21);
  pin such a tensor to the worker's one device. The default strategy (one
  device, no replicas to gather from) needs nothing.
  """
  if not tf.distribute.has_strategy():
    return tensor
  devices = strategy.extended.worker_devices
  if tensor.device or len(devices) != 1:
    return tensor
  with tf.device(devices[0]):
    return tf.identity(tensor)


class WorkerSum(Protocol):
  """Sums a host value over the processes of a run.

  Every worker passes its own host value (a Python float, or a 1-D NumPy
  array of the same length on every worker); the result, the same on every
  worker, is their sum (a float, or an array), or with `first_replica_only`
  the value the chief passed. With one worker (one process drives all
  replicas, TPU pods included) the value comes back as is. Every worker must
  call it the same number of times, in the same order (it is a collective).
  """

  def __call__(self, value, first_replica_only: bool = False):
    ...


def make_worker_sum(strategy, dtype=tf.float32) -> WorkerSum:
  """The WorkerSum of a tf.distribute strategy's workers: a one-value
  all-reduce over its replicas (only global replica 0 contributes, with
  `first_replica_only`)."""
  if num_workers(strategy) == 1:
    return lambda value, first_replica_only=False: value

  def replica_fn(value, first_only):
    ctx = tf.distribute.get_replica_context()
    if first_only:
      value = tf.where(tf.equal(ctx.replica_id_in_sync_group, 0), value,
                       tf.zeros_like(value))
    return ctx.all_reduce(tf.distribute.ReduceOp.SUM, placed(strategy, value))

  @tf.function
  def worker_sum(value, first_only):
    out = strategy.run(replica_fn, args=(value, first_only))
    return strategy.experimental_local_results(out)[0]

  def summed(value, first_replica_only=False):
    out = worker_sum(tf.constant(value, dtype),
                     tf.constant(first_replica_only))
    return float(out) if np.ndim(value) == 0 else out.numpy()

  return summed
