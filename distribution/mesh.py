"""Tensor model parallelism: a device mesh and layouts from name rules.

With a mesh (gin: `distribution.plan.PlanOptions.mesh`, macro MESH_SHAPE;
distribution/plan.py's `Mesh`), the run is one DTensor program over a
`batch x model` grid of devices instead of a
tf.distribute strategy's replicas: the batch is split over `batch`, and each
variable whose name matches a rule is split as the rule says, e.g. attention
heads and the feed-forward inner dimension over `model` (Megatron's layout,
the v0.7 pod runs' tensor partitioning of the Transformer). DTensor inserts
the collectives; the model's maths do not change, and the train and eval
loops are the same code as under a strategy (one logical replica).

Rules are (regular expression, layout) pairs, matched with `re.search` on
the variable's name, in the spirit of T5X's logical axis rules: a layout
names, per dimension, a mesh axis or None (not split). Variables no rule
matches are replicated; an optimizer slot takes its variable's layout. A
rule that matches no variable, or a variable two rules match, is an error.

A mesh may span processes (distribution kind 'multi_worker'): TF_CONFIG's
cluster becomes one multi-client DTensor job (client i is TF_CONFIG's i-th
task, chief first), each process drives its share of the mesh's devices, and
the processes of one batch shard read the same input. Checkpoints are then
written by every process together (DTensor's save is collective).
"""

import contextlib
import dataclasses
import json
import math
import os
import re

import tensorflow as tf
from tensorflow.experimental import dtensor

from distribution import strategy as strategies

BATCH_AXIS = 'batch'


@dataclasses.dataclass(frozen=True)
class MeshConfig:
  """A device mesh for tensor parallelism (gin:
  `distribution.plan.PlanOptions.mesh`).

  Attributes:
    shape: devices along each axis, e.g. (2, 2); () for no mesh (the run
      uses `distribution.plan.PlanOptions.distribution`'s strategy).
    axis_names: one name per axis; the first splits the batch.
    rules: ((pattern, layout), ...): variables whose name matches `pattern`
      are split as `layout` says (one mesh axis name or None a dimension).
  """
  shape: tuple[int, ...] = ()
  axis_names: tuple[str, ...] = (BATCH_AXIS, 'model')
  rules: tuple = ()

  def make(self, multi_client: bool = False,
           tpu: str = '') -> 'Partitioner | None':
    """The partitioner, or None without a mesh.

    Args:
      multi_client: the mesh spans the processes TF_CONFIG names (which
        must run this before any TensorFlow op); else it uses this
        process's devices.
      tpu: --tpu of a TPU hardware file: the mesh spans the TPU slice's
        cores, one DTensor client a host (distribution/tpu_mesh.py).

    Raises:
      ValueError: for a mesh that does not match the devices, rules that
        name axes the mesh does not have, or a missing or bad TF_CONFIG.
    """
    if not self.shape:
      return None
    return Partitioner(self, multi_client=multi_client, tpu=tpu)


def dtensor_environment(tf_config: dict) -> dict[str, str]:
  """The DTENSOR_* variables that make TF_CONFIG's cluster one multi-client
  DTensor job: client i is the i-th task, the chief (if any) first.

  Raises:
    ValueError: if TF_CONFIG names no chief or worker tasks, or this task
      is not one of them.
  """
  cluster, task = tf_config.get('cluster', {}), tf_config.get('task', {})
  chiefs, workers = cluster.get('chief', []), cluster.get('worker', [])
  kind, index = task.get('type'), int(task.get('index', 0))
  listed = {'chief': chiefs, 'worker': workers}.get(kind, [])
  if index >= len(listed):
    raise ValueError(
        f'TF_CONFIG task {kind!r} {index} is not in its cluster\'s chief and '
        f'worker lists ({len(chiefs)} chief, {len(workers)} worker): a mesh '
        'over processes runs one program on each of those tasks.')
  client = index + (len(chiefs) if kind == 'worker' else 0)
  return {'DTENSOR_JOBS': ','.join(chiefs + workers),
          'DTENSOR_CLIENT_ID': str(client),
          'DTENSOR_NUM_CLIENTS': str(len(chiefs) + len(workers)),
          'DTENSOR_JOB_NAME': 'worker'}


def _connect(shape: tuple[int, ...], names: tuple[str, ...]
             ) -> dtensor.Mesh:
  """Joins TF_CONFIG's processes into one DTensor job; the mesh over all of
  their devices, this process's share of it local."""
  if 'TF_CONFIG' not in os.environ:
    raise ValueError('A mesh over processes (distribution kind '
                     "'multi_worker') reads the cluster from the TF_CONFIG "
                     'environment variable, which is not set.')
  environment = dtensor_environment(json.loads(os.environ['TF_CONFIG']))
  clients, total = int(environment['DTENSOR_NUM_CLIENTS']), math.prod(shape)
  if total % clients:
    raise ValueError(
        f'MESH_SHAPE {shape} has {total} devices, which the {clients} '
        'processes of TF_CONFIG cannot share evenly: choose a shape whose '
        f'product is a multiple of {clients}.')
  os.environ.update(environment)
  kind = 'GPU' if tf.config.list_physical_devices('GPU') else 'CPU'
  try:
    dtensor.initialize_accelerator_system(
        kind, num_logical_cpu_devices=(total // clients if kind == 'CPU'
                                       else None))
  except ValueError as e:
    raise RuntimeError(
        'A mesh over processes must be set up before any TensorFlow op runs '
        f'in the process ({str(e).splitlines()[0]}).') from e
  try:
    return dtensor.create_distributed_mesh(list(zip(names, shape)),
                                           device_type=kind)
  except ValueError as e:
    raise ValueError(
        f'MESH_SHAPE {shape} over {clients} processes: '
        f'{str(e).splitlines()[0]}') from e


def _devices(count: int) -> list[str]:
  """The mesh's devices: accelerators if any, else `count` logical CPUs."""
  for kind in ('TPU', 'GPU'):
    # Physical first: listing logical devices initialises TensorFlow, after
    # which the CPU can no longer be split.
    if tf.config.list_physical_devices(kind):
      return [d.name for d in tf.config.list_logical_devices(kind)]
  try:
    strategies.split_cpu(count)
  except RuntimeError:
    pass  # Already split (a notebook, a test process): use what there is.
  return [d.name for d in tf.config.list_logical_devices('CPU')]


def _local_mesh(shape: tuple[int, ...], names: tuple[str, ...]
                ) -> dtensor.Mesh:
  devices = _devices(math.prod(shape))
  on_cpu = 'CPU' in devices[0]
  # A process already split into more logical CPUs (a notebook, a test
  # process) uses the first ones; accelerators must match exactly.
  if len(devices) < math.prod(shape) or (
      len(devices) > math.prod(shape) and not on_cpu):
    raise ValueError(
        f'MESH_SHAPE {shape} needs {math.prod(shape)} devices; this process '
        f'has {len(devices)} ({devices[0].split("/")[-1]} ...). Choose a '
        f'shape whose product is {len(devices)}.')
  return dtensor.create_mesh(list(zip(names, shape)),
                             devices=devices[:math.prod(shape)])


@tf.function
def _sum(split):
  return tf.reduce_sum(split)


class Partitioner:
  """Builds variables with their layouts and runs the loops on the mesh."""

  def __init__(self, config: MeshConfig, multi_client: bool = False,
               tpu: str = ''):
    shape, names = tuple(config.shape), tuple(config.axis_names)
    if len(shape) != len(names) or any(int(s) < 1 for s in shape):
      raise ValueError(
          f'MESH_SHAPE {shape} must give a positive size for each mesh axis '
          f'{names}.')
    if BATCH_AXIS not in names:
      raise ValueError(f'The mesh axes {names} need one named '
                       f'{BATCH_AXIS!r}: the batch is split over it.')
    self.rules = []
    for pattern, layout in config.rules:
      unknown = [a for a in layout if a is not None and a not in names]
      if unknown:
        raise ValueError(
            f'Sharding rule {pattern!r} -> {tuple(layout)} names mesh axes '
            f'{unknown}; the mesh has {names}.')
      self.rules.append((pattern, tuple(layout)))
    if tpu:
      from distribution import tpu_mesh
      self.mesh = tpu_mesh.make_mesh(shape, names, tpu)
    else:
      self.mesh = (_connect(shape, names) if multi_client
                   else _local_mesh(shape, names))
    self.num_clients = dtensor.num_clients()
    self.client_id = dtensor.client_id()
    if self.num_clients > 1:
      self._check_shards_are_local()
    self.matches = {pattern: [] for pattern, _ in self.rules}
    self.layouts = {}  # variable name -> the layout it was made with.

  # -- Variables ----------------------------------------------------------------

  def layout_for(self, name: str, rank: int) -> dtensor.Layout:
    """The layout the rules give variable `name` of rank `rank`.

    Raises:
      ValueError: if two rules match, or the rule's layout has another rank.
    """
    hits = [(p, l) for p, l in self.rules if re.search(p, name)]
    if len(hits) > 1:
      raise ValueError(
          f'Variable {name} matches two sharding rules, {hits[0][0]!r} and '
          f'{hits[1][0]!r}: make the patterns exclusive.')
    if not hits:
      return dtensor.Layout.replicated(self.mesh, rank)
    pattern, layout = hits[0]
    if len(layout) != rank:
      raise ValueError(
          f'Sharding rule {pattern!r} -> {layout} gives {len(layout)} '
          f'dimensions to variable {name}, which has {rank}.')
    self.matches[pattern].append(name)
    return dtensor.Layout([a or dtensor.UNSHARDED for a in layout], self.mesh)

  def _create(self, next_creator, **kwargs):
    del next_creator  # DVariables replace the default variable.
    value = kwargs['initial_value']
    # The dtype asked for, not the Python value's: tf.Variable(0,
    # dtype=tf.int64) is the global step, and a checkpoint's int64 step
    # must restore under and without a mesh alike.
    value = tf.convert_to_tensor(value() if callable(value) else value,
                                 dtype=kwargs.get('dtype'))
    name = kwargs.get('name') or ''
    if not dtensor.is_dtensor(value):  # A slot's zeros keep their layout.
      layout = self.layout_for(name, value.shape.rank)
      value = dtensor.relayout(dtensor.copy_to_mesh(
          value, dtensor.Layout.replicated(self.mesh, value.shape.rank)),
                               layout)
    self.layouts[name] = dtensor.fetch_layout(value)
    return dtensor.DVariable(value, trainable=kwargs.get('trainable', True),
                             name=name)

  @contextlib.contextmanager
  def scope(self):
    """Variables made inside are DVariables laid out by the rules.

    Not under the default mesh: initial values must be plain tensors, so
    that a DTensor initial value can only be a slot's (zeros like its
    variable, in its layout).
    """
    with tf.variable_creator_scope(self._create):
      yield

  def check_rules_used(self) -> None:
    """Raises ValueError naming each rule that matched no variable."""
    unused = [p for p, names in self.matches.items() if not names]
    if unused:
      examples = ', '.join(sorted(self.layouts)[:3])
      raise ValueError(
          f'Sharding rules {unused} match no variable (names look like '
          f'{examples}, ...): fix or remove them.')

  # -- Processes ----------------------------------------------------------------

  @property
  def chief(self) -> bool:
    """Whether this process writes logs and keeps the checkpoints' books."""
    return self.client_id == 0

  @property
  def data_replicas(self) -> int:
    """How many ways the batch is split (the batch axis's size)."""
    return self.mesh.dim_size(BATCH_AXIS)

  def worker_sum(self, value: float, first_replica_only: bool = False
                 ) -> float:
    """distribution.strategy.WorkerSum over the mesh's processes: each puts
    its value on its first device of a tensor split over every device, and
    DTensor sums it."""
    if self.num_clients == 1:
      return value
    if first_replica_only and not self.chief:
      value = 0.0
    local = len(self.mesh.local_devices())
    parts = [tf.fill([1] * len(self.mesh.dim_names), tf.constant(
        value if i == 0 else 0.0, tf.float64)) for i in range(local)]
    split = dtensor.pack(parts, dtensor.Layout(self.mesh.dim_names,
                                               self.mesh))
    with dtensor.default_mesh(self.mesh):
      total = _sum(split)
    return float(dtensor.unpack(total)[0].numpy())

  def _check_shards_are_local(self):
    """Each batch shard's devices must be in one process: DTensorDataset
    (without tf.data service) would feed a shard split over processes each
    batch once per process."""
    shards = {loc[BATCH_AXIS] for loc in self.mesh.local_device_locations()}
    per_shard = self.mesh.num_local_devices() // len(shards)
    needed = self.mesh.size // self.data_replicas
    if per_shard != needed:
      raise ValueError(
          f'MESH_SHAPE {tuple(self.mesh.shape())} over {self.num_clients} '
          f'processes splits each batch shard ({needed} devices) over '
          'processes: keep the model axes within one process (their '
          f'product at most {self.mesh.num_local_devices()}) and split the '
          'batch across processes.')

  def input_context(self) -> tf.distribute.InputContext:
    """This process's input pipeline: one for each group of processes that
    holds the same batch shards (each reads its own part of the data)."""
    shards = sorted({loc[BATCH_AXIS]
                     for loc in self.mesh.local_device_locations()})
    pipelines = self.data_replicas // len(shards)
    # As many "replicas" as pipelines: the task then batches this process's
    # share of the global batch, which DTensorDataset splits further.
    return tf.distribute.InputContext(
        num_input_pipelines=pipelines,
        input_pipeline_id=shards[0] // len(shards),
        num_replicas_in_sync=pipelines)

  # -- Data and loops -----------------------------------------------------------

  def distribute_datasets_from_function(self, dataset_fn, global_batch_size):
    """The task's batches as DTensors split over the batch axis."""
    context = self.input_context()
    # DTensorDataset runs one copy of this process's pipeline per local
    # device and auto-shards the copies over its local batch shards; by
    # files that would split 3 eval files 2:1. By data, in one
    # deterministic order, each batch shard keeps its own examples and the
    # devices of one shard read the same ones (train.py requires
    # DETERMINISTIC for that order).
    options = tf.data.Options()
    options.deterministic = True
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA)
    dataset = dataset_fn(context).unbatch().with_options(options)
    # Each element is one example here; layouts count the batch dimension.
    layouts = tf.nest.map_structure(
        lambda spec: dtensor.Layout.batch_sharded(
            self.mesh, BATCH_AXIS, spec.shape.rank + 1),
        dataset.element_spec)
    return dtensor.DTensorDataset(
        dataset, mesh=self.mesh, layouts=layouts,
        global_batch_size=global_batch_size, batch_dim=BATCH_AXIS)

  def to_host(self, value):
    """A loop's output as plain tensors (every host holds all of it)."""
    def one(t):
      if not dtensor.is_dtensor(t):
        return t
      replicated = dtensor.relayout(
          t, dtensor.Layout.replicated(self.mesh, t.shape.rank))
      return dtensor.unpack(replicated)[0]
    return tf.nest.map_structure(one, value)

  def wrap_loop(self, loop):
    """`loop(iterator, num_steps)` run on the mesh, outputs on the host."""
    def run(iterator, num_steps):
      with dtensor.default_mesh(self.mesh):
        return self.to_host(loop(iterator, num_steps))
    run.get_concrete_function = loop.get_concrete_function
    return run
